//! A pass's shared vocabulary, imported by every step and by nothing it imports: the
//! [`Context`] a pass reads the caches through, the [`enum@Error`]s a pass returns, and the requeue
//! delays.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret};
use kube::Client;
use thiserror::Error;

use crate::databasecluster::api::validation::SpecError;
use crate::databasecluster::cache::forms::{CompactForms, Forms, Listing, Lookup};
use crate::databasecluster::controller::events::EventPublisher;
use crate::databasecluster::controller::failures::FailureCounts;
use crate::databasecluster::specs::names::OwnerError;
use crate::runtime::client;
use crate::runtime::controller::ReconcileError;
/// How long to wait before looking again while replicas are not ready, even without an event.
pub const CONVERGING_REQUEUE: Duration = Duration::from_secs(10);
/// How long a settled cluster with instances waits before its next pass: how old its instances'
/// facts in the status may grow. One `GET /status` per instance per period.
pub const SETTLED_REQUEUE: Duration = Duration::from_secs(30);
/// How soon to look again while a failover is due or under way.
pub(crate) const FAILOVER_REQUEUE: Duration = Duration::from_secs(1);

/// What every reconcile pass shares: the client for writes, the caches for reads, the Event
/// publisher.
pub struct Context<F: Forms = CompactForms> {
    /// The client every write goes through.
    pub client: Client,
    /// The DatabaseClusters, as the primary informer holds them.
    pub clusters: Arc<dyn Lookup<F::Cluster>>,
    /// The operator's StatefulSets.
    pub statefulsets: Arc<dyn Lookup<F::StatefulSet>>,
    /// The operator's Services (headless and client).
    pub services: Arc<dyn Lookup<F::Service>>,
    /// The operator's login Secrets.
    pub secrets: Arc<dyn Lookup<F::Secret>>,
    /// The users' own app Secrets (`spec.appSecretName`) once labelled ([`crate::databasecluster::specs::app_secret`]).
    pub app_secrets: Arc<dyn Lookup<Secret>>,
    /// The operator's ConfigMaps.
    pub configmaps: Arc<dyn Lookup<F::ConfigMap>>,
    /// The operator's PodDisruptionBudgets.
    pub pdbs: Arc<dyn Lookup<F::Pdb>>,
    /// The clusters' pods (labelled managed-by the operator through the pod template).
    pub pods: Arc<dyn Listing<F::Pod>>,
    /// The operator's backup and restore Jobs (scheduled and on-demand).
    pub jobs: Arc<dyn Listing<Job>>,
    /// The operator's backup CronJobs.
    pub cronjobs: Arc<dyn Lookup<CronJob>>,
    /// The backup volumes (the instances' data claims are not cached).
    pub volumes: Arc<dyn Lookup<PersistentVolumeClaim>>,
    /// Where Events go.
    pub events: EventPublisher,
    /// Consecutive failed passes per cluster, to make a lasting error visible in its status.
    pub failures: FailureCounts,
    /// How long the certificates the operator issues live.
    pub certificates: crate::databasecluster::tls::renew::Lifetimes,
}

impl<F: Forms> Debug for Context<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context").field("events", &self.events).finish_non_exhaustive()
    }
}

/// Why a pass failed.
#[derive(Debug, Error)]
pub enum Error {
    /// The spec cannot be acted on; only a change to it helps (terminal).
    #[error("invalid spec: {0}")]
    InvalidSpec(#[from] SpecError),
    /// The cluster lacks server-assigned metadata, so it cannot own children (terminal).
    #[error(transparent)]
    Owner(#[from] OwnerError),
    /// A child with the operator's name is controlled by something else; retried, since the
    /// other object may go away.
    #[error("{kind} {name} already exists and is controlled by {owner_kind} {owner_name}")]
    ForeignChild {
        /// The child's kind.
        kind: &'static str,
        /// The child's name.
        name: String,
        /// The kind of its controller.
        owner_kind: String,
        /// The name of its controller.
        owner_name: String,
    },
    /// A Secret with the operator's name has another type, which no write can change; retried,
    /// since it may be deleted.
    #[error(
        "Secret {name} already exists with type {found}, not {wanted}, and a Secret's type cannot change: \
         delete or rename it"
    )]
    ForeignSecretType {
        /// The Secret's name.
        name: String,
        /// Its type.
        found: String,
        /// The type of the operator's login Secrets.
        wanted: String,
    },
    /// A request for a child failed.
    #[error("{verb} {kind} {name}: {source}")]
    Child {
        /// `creating`, `reading`, `applying` or `labelling`.
        verb: &'static str,
        /// The child's kind.
        kind: &'static str,
        /// The child's name.
        name: String,
        /// The client's error.
        source: kube::Error,
    },
    /// The Secret named by `spec.appSecretName` cannot be used; retried, since the user may
    /// create or fix it.
    #[error("spec.appSecretName: Secret {name} {problem}")]
    AppSecret {
        /// The Secret's name.
        name: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// A Secret `spec.certificates` names cannot be used; retried, since the user may create or
    /// fix it.
    #[error("spec.certificates: Secret {name} {problem}")]
    UserCertificate {
        /// The Secret's name.
        name: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// A certificate could not be issued; retried.
    #[error("issuing the certificate of Secret {name}: {source}")]
    Certificate {
        /// The Secret's name.
        name: String,
        /// Why.
        source: crate::databasecluster::tls::issue::IssueError,
    },
    /// The status patch failed.
    #[error("patching the status: {0}")]
    Status(#[source] kube::Error),
    /// A cached child's text did not decode. It decoded when it was cached ([`crate::databasecluster::cache::compact::Compact`]), so
    /// this is a broken invariant; retried, and the pass writes nothing meanwhile.
    #[error("decoding the cached {kind} {name}: {source}")]
    Cached {
        /// The child's kind.
        kind: &'static str,
        /// The child's name.
        name: String,
        /// The decoder's error.
        source: serde_json::Error,
    },
}

impl ReconcileError for Error {
    fn is_terminal(&self) -> bool {
        matches!(self, Error::InvalidSpec(_) | Error::Owner(_))
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::Child { source, .. } | Error::Status(source) => client::retry_after(source),
            _ => None,
        }
    }
}
