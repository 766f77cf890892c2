//! The backup step of a reconcile pass: keeps the backup volume, the CronJob and the on-demand
//! Jobs as the spec says, and reads the Jobs back for the status.
//!
//! - With backups configured: the PVC `<name>-backups` (owned by the cluster only with
//!   `pvcRetention: Delete`, so by default it survives the cluster) and, with a schedule, the
//!   CronJob `<name>-backup`; without a schedule any CronJob is deleted. Without backups at all,
//!   a CronJob is deleted and the volume is left alone (it may hold backups someone needs).
//! - On demand: when the annotation `databases.madmmas.dev/backup-now` holds a token other than
//!   `status.backups.lastOnDemandToken`, one Job named after the token is created (a retried pass
//!   finds it by name: `409` is success) and the token is recorded with the rest of the status.
//! - The Jobs are read from the Job informer by the `databases.madmmas.dev/cluster` label (CronJob
//!   Jobs are controlled by the CronJob, on-demand ones by the cluster), and each Job's pod from the
//!   pod informer by its controller ownerReference, for the termination message.
//! - Restore ([`ensure_restore`]): the gate before the StatefulSet (see [`crate::databasecluster::backup::restore`]).

use std::sync::Arc;

use k8s_openapi::api::batch::v1::{CronJob, Job};
use kube::Api;
use kube::api::{DeleteParams, PostParams};

use crate::databasecluster::api::backup::RestoredFrom;
use crate::databasecluster::api::recovery::validate_recovery;
use crate::databasecluster::api::types::{DatabaseCluster, PvcRetention};
use crate::databasecluster::api::validation::ValidSpec;
use crate::databasecluster::backup::jobs::{
    BACKUP_NOW_ANNOTATION, CLUSTER_LABEL, build_backup_pvc, build_cronjob, build_on_demand_job, cronjob_name,
    keep_immutable_pvc_fields,
};
use crate::databasecluster::backup::restore::{
    build_restore_job, first_data_claim, resolve_backup, restore_job_name,
};
use crate::databasecluster::backup::status::{JobOutcome, JobView, job_view};
use crate::databasecluster::cache::forms::{Forms, PodForm};
use crate::databasecluster::controller::context::{Context, Error};
use crate::databasecluster::controller::events::{EventNote, EventType};
use crate::databasecluster::controller::steps::child::{
    child_error, create_job_once, decode_cached, ensure_child, report,
};
use crate::databasecluster::objectstore::recovery_job::build_recovery_job;
use crate::databasecluster::specs::resources::{FIELD_MANAGER, Owner, build_statefulset, statefulset_name};
use crate::runtime::ObjectKey;
use crate::runtime::cache::controller_uid;
use crate::runtime::controller::writes::{Verb, recorded_as};

/// What the backup step found, for the status.
#[derive(Debug)]
pub struct BackupsObserved {
    /// Every backup Job of the cluster, with its pod's message.
    pub jobs: Vec<JobView>,
    /// The on-demand token handled in this pass (to record), if any.
    pub token: Option<String>,
}

/// Brings the backup children to the spec and observes the Jobs (see the module docs).
pub async fn ensure_backups<F: Forms>(
    ctx: &Context<F>,
    cluster: &DatabaseCluster,
    owner: &Owner,
    spec: &ValidSpec,
) -> Result<BackupsObserved, Error> {
    let cron_key = ObjectKey::new(Some(owner.namespace()), &cronjob_name(owner.name()));
    let cached_cron = ctx.cronjobs.get(&cron_key);
    let Some(backup) = spec.backup.as_ref() else {
        if cached_cron.is_some() {
            delete_cronjob(ctx, owner, cron_key.name()).await?;
        }
        // A request that cannot be carried out says so, once per token (recorded as handled).
        let token = new_token(cluster);
        if let Some(token) = &token {
            let note = format!(
                "{BACKUP_NOW_ANNOTATION}={token} asks for a backup, but the cluster has no spec.backup: add spec.backup (where backups go, and a schedule if you want one) and set a new token"
            );
            ctx.events
                .publish(cluster, &EventNote::new(EventType::Warning, "BackupNotConfigured", "Backup", note))
                .await;
        }
        return Ok(BackupsObserved { jobs: backup_jobs(ctx, owner), token });
    };

    // With an object store the base backups go there; the volume is kept only when asked for
    // (`storageSize` set), e.g. for the backups taken before the store.
    let volume_asked = cluster.spec.backup.as_ref().is_some_and(|b| b.storage_size.is_some());
    if backup.object_store.is_none() || volume_asked {
        ensure_backup_volume(ctx, cluster, owner, spec, backup).await?;
    }

    match build_cronjob(owner, spec) {
        Some(desired) => {
            let (_, outcome) =
                ensure_child(ctx, owner, "CronJob", cached_cron, |_| Ok(desired.clone())).await?;
            report(ctx, cluster, "CronJob", &cron_key, &outcome, None).await;
        }
        None if cached_cron.is_some() => delete_cronjob(ctx, owner, cron_key.name()).await?,
        None => {}
    }

    let token = match new_token(cluster) {
        Some(token) => {
            start_on_demand(ctx, owner, &build_on_demand_job(owner, spec, backup, &token)).await?;
            Some(token)
        }
        _ => None,
    };
    Ok(BackupsObserved { jobs: backup_jobs(ctx, owner), token })
}

async fn ensure_backup_volume<F: Forms>(
    ctx: &Context<F>,
    cluster: &DatabaseCluster,
    owner: &Owner,
    spec: &ValidSpec,
    backup: &crate::databasecluster::api::backup::ValidBackup,
) -> Result<(), Error> {
    let owned = spec.pvc_retention == PvcRetention::Delete;
    let pvc_key = ObjectKey::new(
        Some(owner.namespace()),
        &crate::databasecluster::backup::jobs::backup_pvc_name(owner.name()),
    );
    let cached = ctx.volumes.get(&pvc_key);
    let (_, outcome) = ensure_child(ctx, owner, "PersistentVolumeClaim", cached, |live| {
        let mut desired = build_backup_pvc(owner, backup, owned);
        if let Some(live) = live {
            keep_immutable_pvc_fields(&mut desired, live);
        }
        Ok(desired)
    })
    .await?;
    report(ctx, cluster, "PersistentVolumeClaim", &pvc_key, &outcome, None).await;
    Ok(())
}

/// The cluster's `backup-now` token when it is one not handled yet (not the status's
/// `lastOnDemandToken`, not empty).
fn new_token(cluster: &DatabaseCluster) -> Option<String> {
    let handled = cluster
        .status
        .as_ref()
        .and_then(|s| s.backups.as_ref())
        .and_then(|b| b.last_on_demand_token.as_deref());
    let requested = cluster.metadata.annotations.as_ref().and_then(|a| a.get(BACKUP_NOW_ANNOTATION))?;
    (!requested.is_empty() && Some(requested.as_str()) != handled).then(|| requested.clone())
}

async fn start_on_demand<F: Forms>(ctx: &Context<F>, owner: &Owner, job: &Job) -> Result<(), Error> {
    create_job_once(ctx, owner, job, "on-demand backup started").await
}

async fn delete_cronjob<F: Forms>(ctx: &Context<F>, owner: &Owner, name: &str) -> Result<(), Error> {
    let api: Api<CronJob> = Api::namespaced(ctx.client.clone(), owner.namespace());
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => {
            tracing::info!(cronjob = %name, "scheduled backups are no longer asked for: CronJob deleted");
            Ok(())
        }
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(source) => Err(child_error("deleting", "CronJob", name, source)),
    }
}

/// The cluster's backup Jobs from the cache, each with its pod's termination message.
fn backup_jobs<F: Forms>(ctx: &Context<F>, owner: &Owner) -> Vec<JobView> {
    let restore_job = restore_job_name(owner.name());
    ctx.jobs
        .list_labelled(owner.namespace(), CLUSTER_LABEL, owner.name())
        .iter()
        .filter(|job| job.metadata.name.as_deref() != Some(restore_job.as_str()))
        .filter(|job| !crate::databasecluster::upgrade::job::is_upgrade_job(job))
        .map(|job| {
            let uid = job.metadata.uid.as_deref().unwrap_or_default();
            let pods = ctx.pods.children_of(uid);
            let pod =
                pods.iter().filter(|p| controller_uid(p.as_ref()) == Some(uid)).max_by_key(|p| p.created());
            job_view(job, pod.map(Arc::as_ref))
        })
        .collect()
}

/// The cluster a backup Job (or CronJob) belongs to, from its label: the Job informer's mapper.
pub fn cluster_of_backup_object<K: kube::Resource>(object: &K) -> Option<ObjectKey> {
    let meta = object.meta();
    let name = meta.labels.as_ref()?.get(CLUSTER_LABEL)?;
    Some(ObjectKey::new(meta.namespace.as_deref(), name))
}

/// Whether the StatefulSet may be created yet.
#[derive(Debug, PartialEq, Eq)]
pub enum RestoreGate {
    /// No restore is pending: create or keep the StatefulSet; with the backup restored, when
    /// this pass is the first to see the restore complete.
    Open(Option<RestoredFrom>),
    /// The restore Job is running: no StatefulSet yet.
    Closed,
    /// The restore Job failed (reported once, by a Warning Event): no StatefulSet, and nothing
    /// to retry until the user changes something.
    Failed,
}

/// Runs `spec.bootstrap.fromBackup` or `spec.bootstrap.recovery` (a Job running `instance
/// recover`, [`crate::databasecluster::objectstore::recovery_job`]) before the StatefulSet exists (see [`crate::databasecluster::backup::restore`]):
/// creates instance 0's data volume and the restore Job, and opens the gate, with the backup it
/// restored, once the Job has succeeded. A failed restore is a Warning Event `RestoreFailed`; the
/// gate stays shut (the cluster stays Provisioning).
pub async fn ensure_restore<F: Forms>(
    ctx: &Context<F>,
    cluster: &DatabaseCluster,
    owner: &Owner,
    spec: &ValidSpec,
) -> Result<RestoreGate, Error> {
    let Some(bootstrap) = cluster.spec.bootstrap.as_ref() else { return Ok(RestoreGate::Open(None)) };
    if cluster.status.as_ref().is_some_and(|s| s.restored_from.is_some()) {
        return Ok(RestoreGate::Open(None));
    }
    let sts_exists = ctx
        .statefulsets
        .get(&ObjectKey::new(Some(owner.namespace()), &statefulset_name(owner.name())))
        .is_some();
    let source = match (&bootstrap.from_backup, &bootstrap.recovery) {
        (Some(from), _) => from.cluster.clone(),
        (None, Some(recovery)) => recovery.object_store.destination.clone(),
        (None, None) => return Ok(RestoreGate::Open(None)),
    };
    let job_key = ObjectKey::new(Some(owner.namespace()), &restore_job_name(owner.name()));
    let Some(job) = ctx.jobs.get(&job_key) else {
        if sts_exists {
            return Ok(RestoreGate::Open(None));
        }
        // The claim the StatefulSet will mount first, made ahead of it (built only on this path).
        let Some(claim) = first_data_claim(owner, &build_statefulset(owner, spec)) else {
            return Ok(RestoreGate::Closed);
        };
        create_once(ctx, owner, &claim).await?;
        let claim_name = claim.metadata.name.clone().unwrap_or_default();
        let Some(job) = restore_job(ctx, cluster, owner, spec, &claim_name)? else {
            return Ok(RestoreGate::Failed);
        };
        create_once(ctx, owner, &job).await?;
        tracing::info!(%source, "restore started");
        return Ok(RestoreGate::Closed);
    };
    let uid = job.metadata.uid.as_deref().unwrap_or_default();
    let pods = ctx.pods.children_of(uid);
    let pod = pods.iter().filter(|p| controller_uid(p.as_ref()) == Some(uid)).max_by_key(|p| p.created());
    let view = job_view(&job, pod.map(Arc::as_ref));
    match view.outcome {
        JobOutcome::Succeeded => {
            // The restore program reports the backup it restored (the one `latest` chose).
            let backup = view
                .message
                .clone()
                .filter(|m| m.len() < 64 && !m.contains(char::is_whitespace))
                .or_else(|| restored_backup_name(&job))
                .unwrap_or_else(|| "latest".to_owned());
            tracing::info!(%source, %backup, "restore complete; creating the StatefulSet");
            Ok(RestoreGate::Open(Some(RestoredFrom { cluster: source, backup })))
        }
        _ if sts_exists => Ok(RestoreGate::Open(None)),
        JobOutcome::Failed { reason, message } => {
            let detail = view.message.clone().unwrap_or(message);
            let note = EventNote::new(
                EventType::Warning,
                "RestoreFailed",
                "Restore",
                format!("Restore Job {} failed ({reason}): {detail}", view.name),
            );
            ctx.events.publish(cluster, &note).await;
            Ok(RestoreGate::Failed)
        }
        JobOutcome::Running => Ok(RestoreGate::Closed),
    }
}

/// The restore Job for the cluster's bootstrap into `claim`: from a backup volume, or from an
/// object store to a point in time; `None` when the recovery settings are invalid (the spec's
/// validation reports them).
fn restore_job<F: Forms>(
    ctx: &Context<F>,
    cluster: &DatabaseCluster,
    owner: &Owner,
    spec: &ValidSpec,
    claim: &str,
) -> Result<Option<Job>, Error> {
    let Some(bootstrap) = cluster.spec.bootstrap.as_ref() else { return Ok(None) };
    if let Some(from) = &bootstrap.from_backup {
        let source = ctx.clusters.get(&ObjectKey::new(Some(owner.namespace()), &from.cluster));
        let source = source
            .map(|source| decode_cached::<DatabaseCluster, _>(&*source, "DatabaseCluster"))
            .transpose()?;
        let backup = resolve_backup(from, source.as_ref());
        return Ok(Some(build_restore_job(owner, spec, from, &backup, claim)));
    }
    let Some(recovery) = &bootstrap.recovery else { return Ok(None) };
    let own = cluster.spec.backup.as_ref().and_then(|b| b.object_store.as_ref());
    match validate_recovery(recovery, own) {
        Ok(valid) => Ok(Some(build_recovery_job(owner, spec, &valid, claim))),
        Err(error) => {
            tracing::warn!(%error, "spec.bootstrap.recovery is invalid");
            Ok(None)
        }
    }
}

/// The backup the restore Job was told to restore (its resolved `DBC_RESTORE_BACKUP`).
fn restored_backup_name(job: &Job) -> Option<String> {
    let containers = &job.spec.as_ref()?.template.spec.as_ref()?.containers;
    containers
        .iter()
        .flat_map(|c| c.env.iter().flatten())
        .find(|e| e.name == "DBC_RESTORE_BACKUP")?
        .value
        .clone()
}

/// Creates `object` unless it exists (`409` is success).
async fn create_once<F: Forms, K>(ctx: &Context<F>, owner: &Owner, object: &K) -> Result<(), Error>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::Serialize
        + serde::de::DeserializeOwned,
{
    let name = object.meta().name.clone().unwrap_or_default();
    let api: Api<K> = Api::namespaced(ctx.client.clone(), owner.namespace());
    let params = PostParams { field_manager: Some(FIELD_MANAGER.to_owned()), ..PostParams::default() };
    match api.create(&params, object).await {
        Ok(created) => {
            recorded_as(Verb::Create, created);
            Ok(())
        }
        Err(kube::Error::Api(status)) if status.is_already_exists() => Ok(()),
        Err(source) => Err(child_error("creating", "restore object", &name, source)),
    }
}
