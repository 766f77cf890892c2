//! Promoting a standby (the I/O of a failover decided in [`crate::databasecluster::failover`]), in an order that
//! an operator stopped at any point finishes from what it observes, and that never yields two
//! primaries:
//! 1. Event `FailingOver`; the old primary's role label becomes `replica`, so `<name>-rw` can no
//!    longer reach it even if it comes back before it reads the record.
//! 2. The record (`primary` in the `<name>-scripts` ConfigMap) names the new primary. From here
//!    on the old primary, when it starts or while it runs, fences itself and rejoins as a standby
//!    (the instance program); a restarted operator sees the recorded instance in recovery with no
//!    primary and resumes at step 3 ([`crate::databasecluster::failover`] rule 2).
//! 3. `POST /promote` to the new primary's instance manager (`pg_promote()`), waiting until it
//!    accepts writes.
//! 4. Its role label becomes `primary` (`<name>-rw` follows); Event `FailedOver`, saying what was
//!    guaranteed ([`crate::databasecluster::failover::outcome`]).
//!
//! A failing step is logged and the pass goes on; the next pass decides again.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::databasecluster::specs::config::{build_config_map, config_map_name};
use jiff::Timestamp;

use crate::databasecluster::api::types::{DatabaseCluster, FailoverRecord};
use crate::databasecluster::api::validation::ValidSpec;
use crate::databasecluster::cache::forms::Forms;
use crate::databasecluster::controller::context::Context;
use crate::databasecluster::failover::{failed_over, failing_over, outcome};
use crate::databasecluster::instances::Target;
use crate::databasecluster::instances::client::promote;
use crate::databasecluster::specs::resources::{FIELD_MANAGER, Owner};
use crate::databasecluster::specs::services::{ROLE_PRIMARY, ROLE_REPLICA, role_labels};
use crate::runtime::controller::writes::{Verb, recorded_as};

/// One failover to carry out.
#[derive(Debug)]
pub struct Promotion<'a> {
    /// The primary being replaced (the record before the failover).
    pub old: &'a str,
    /// The standby to promote.
    pub new: &'a str,
    /// The record already names `new` (steps 1 and 2 were done by an earlier pass).
    pub resume: bool,
    /// How long `old` has been not ready.
    pub down_for: Duration,
    /// How far `new` was behind `old` when last observed.
    pub lag_bytes: Option<i64>,
    /// How far `new` had received WAL when observed this pass.
    pub received_lsn: Option<i64>,
    /// `new`'s instance manager.
    pub target: Target,
}

/// Carries out `promotion` (see the module docs); once `new` accepts writes, the failover's record.
pub async fn fail_over<F: Forms>(
    ctx: &Context<F>,
    cluster: &DatabaseCluster,
    owner: &Owner,
    spec: &ValidSpec,
    promotion: &Promotion<'_>,
) -> Option<FailoverRecord> {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), owner.namespace());
    let Promotion { old, new, .. } = *promotion;
    if !promotion.resume {
        tracing::warn!(%old, %new, down_for = ?promotion.down_for, "failover: promoting a standby");
        ctx.events.publish(cluster, &failing_over(old, new, promotion.down_for, promotion.lag_bytes)).await;
        set_role_label(&pods, old, ROLE_REPLICA).await;
        if let Err(error) = write_record(ctx, owner, spec, new, None).await {
            tracing::warn!(%new, %error, "failover: could not record the new primary; retrying on the next pass");
            return None;
        }
        tracing::info!(%new, "failover: the record names the new primary");
    }
    match promote(&promotion.target).await {
        Ok(true) => {}
        Ok(false) => {
            tracing::warn!(%new, "failover: the promotion did not finish in time; retrying on the next pass");
            return None;
        }
        Err(error) => {
            tracing::warn!(%new, %error, "failover: could not promote; retrying on the next pass");
            return None;
        }
    }
    let record = outcome(old, new, promotion.received_lsn, spec.synchronous_replicas, Timestamp::now());
    Some(finish(ctx, cluster, &pods, &record).await)
}

/// The last step of a failover (`record`), also what finishes one a stopped operator left
/// unreported: `new`'s role label becomes `primary` and Event `FailedOver` is published.
pub async fn finish<F: Forms>(
    ctx: &Context<F>,
    cluster: &DatabaseCluster,
    pods: &Api<Pod>,
    record: &FailoverRecord,
) -> FailoverRecord {
    set_role_label(pods, &record.to, ROLE_PRIMARY).await;
    tracing::info!(old = %record.from, new = %record.to, possible_loss = record.possible_loss, "failover: done");
    ctx.events.publish(cluster, &failed_over(record)).await;
    record.clone()
}

/// Writes the record: `primary` names the instance that must accept writes, `demoting` the old
/// primary of a switchover under way (the ConfigMap, applied as a whole).
pub async fn write_record<F: Forms>(
    ctx: &Context<F>,
    owner: &Owner,
    spec: &ValidSpec,
    primary: &str,
    demoting: Option<&str>,
) -> Result<(), kube::Error> {
    let record = build_config_map(owner, spec, primary, demoting);
    let configmaps: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), owner.namespace());
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let written = configmaps.patch(&config_map_name(owner.name()), &params, &Patch::Apply(&record)).await?;
    // Recorded, so the key's next pass reads a cache that holds the record (read-your-writes):
    // a pass that still saw the old record would redo the step it records, Event included.
    recorded_as(Verb::Apply, written);
    Ok(())
}

/// Sets `pod`'s role label (a merge patch of that one label); failures are logged.
pub async fn set_role_label(pods: &Api<Pod>, pod: &str, role: &str) {
    let patch = json!({"metadata": {"labels": role_labels(role)}});
    let params = PatchParams { field_manager: Some(FIELD_MANAGER.to_owned()), ..PatchParams::default() };
    match pods.patch(pod, &params, &Patch::Merge(&patch)).await {
        Ok(patched) => {
            recorded_as(Verb::Patch, patched);
            tracing::info!(%pod, role, "role label set");
        }
        Err(kube::Error::Api(status)) if status.is_not_found() => {}
        Err(error) => tracing::warn!(%pod, %error, "could not set the role label"),
    }
}
