//! Leader election on a `coordination.k8s.io/v1` Lease, so that of several replicas exactly one
//! runs the workers while the others keep warm caches and wait.
//!
//! The protocol is client-go's `leaderelection` with two deliberate differences:
//!
//! - **Expiry is judged by the observer's own clock.** A candidate remembers when it last saw the
//!   lease *change* (its `resourceVersion`, which every write bumps, rather than client-go's byte
//!   comparison of the record) and treats the lease as free once `leaseDurationSeconds` have passed
//!   on its monotonic clock since then. Clocks of different machines are never compared. So a
//!   standby takes over at most `lease_duration + retry_period × 1.2` after the leader's last
//!   renewal it saw.
//! - **The renew deadline counts from the last successful renewal** (client-go counts from the
//!   start of the renew round, one retry period later). A leader that has not renewed for
//!   `renew_deadline` stops its workers at once — it aborts them rather than draining them — and
//!   since `renew_deadline < lease_duration`, that happens before any other candidate can see the
//!   lease expire.
//!
//! A clean shutdown lets the workers finish (while the lease keeps being renewed), then releases
//! the lease — `holderIdentity` cleared, `leaseDurationSeconds: 1` — so a standby takes it on its
//! next try instead of waiting for the lease to run out.
//!
//! Writes use optimistic concurrency: every update carries the `resourceVersion` just read, so of
//! two candidates racing for a free lease one gets `409 Conflict` and stays a candidate.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::PostParams;
use kube::{Api, Client};
use rand::Rng;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Where the lease lives, who we are and the election's timing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseConfig {
    /// Namespace of the Lease object.
    pub namespace: String,
    /// Name of the Lease object (`--leader-election-id`).
    pub name: String,
    /// This candidate's identity, written to `holderIdentity`; unique per process.
    pub identity: String,
    /// How long a lease holds without renewal, as seen by the other candidates.
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it stops its workers.
    pub renew_deadline: Duration,
    /// How long candidates wait between tries (with up to 20 % jitter).
    pub retry_period: Duration,
}

impl LeaseConfig {
    /// controller-runtime's timing (15 s / 10 s / 2 s) for the lease `namespace/name`.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>, identity: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    /// Checks that a leader gives up before others may take over, and can retry before that.
    fn validate(&self) -> Result<(), LeaderError> {
        let invalid = |reason| Err(LeaderError::InvalidTiming(reason));
        if self.identity.is_empty() {
            return invalid("the identity must not be empty");
        }
        if self.lease_duration <= self.renew_deadline {
            return invalid("the lease duration must be longer than the renew deadline");
        }
        if self.renew_deadline <= self.retry_period.mul_f64(1.2) {
            return invalid("the renew deadline must be longer than 1.2 retry periods");
        }
        if self.retry_period.is_zero() {
            return invalid("the retry period must be positive");
        }
        Ok(())
    }
}

/// A process identity for `holderIdentity`: the host name (the pod name in a cluster) and a random
/// suffix, so two processes on one host never share it.
pub fn default_identity() -> String {
    let host = std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty());
    let suffix: u64 = rand::rng().random();
    format!("{}_{suffix:016x}", host.as_deref().unwrap_or("dbcluster-operator"))
}

/// Why leader election ended other than by a clean shutdown.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// The configuration cannot guarantee a single leader.
    #[error("invalid leader election settings: {0}")]
    InvalidTiming(&'static str),
    /// The leader could not renew within the renew deadline and stopped its workers.
    #[error("lost the lease {namespace}/{name}: not renewed within {deadline:?}")]
    Lost {
        /// The lease's namespace.
        namespace: String,
        /// The lease's name.
        name: String,
        /// The renew deadline that passed.
        deadline: Duration,
    },
    /// The work run while leading panicked.
    #[error("the work run while leading panicked")]
    WorkPanicked,
}

/// The result of one try at the lease.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Attempt {
    /// We hold the lease (newly or still).
    Held,
    /// Another candidate holds an unexpired lease.
    HeldBy(String),
    /// Another write got there first; try again later.
    Conflict,
}

/// The last state of the lease this candidate saw, and when (on its own clock) it last changed.
#[derive(Debug, Clone)]
struct Observed {
    resource_version: Option<String>,
    changed_at: Instant,
}

/// A candidate for leadership of one lease. [`LeaderElector::run`] campaigns, runs the given work
/// while leading, and releases the lease on shutdown; [`LeaderElector::leading`] tells anyone
/// (metrics, the debug endpoint) whether this replica leads right now.
pub struct LeaderElector {
    api: Api<Lease>,
    config: LeaseConfig,
    observed: Option<Observed>,
    leading: watch::Sender<bool>,
}

impl std::fmt::Debug for LeaderElector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderElector").field("config", &self.config).finish()
    }
}

impl LeaderElector {
    /// A candidate for the lease `config` names; fails if the timing cannot guarantee one leader.
    pub fn new(client: Client, config: LeaseConfig) -> Result<Self, LeaderError> {
        config.validate()?;
        let api = Api::namespaced(client, &config.namespace);
        Ok(Self { api, config, observed: None, leading: watch::Sender::new(false) })
    }

    /// Whether this replica leads now; changes as leadership is won and lost.
    pub fn leading(&self) -> watch::Receiver<bool> {
        self.leading.subscribe()
    }

    /// Campaigns until this candidate holds the lease, then runs `on_leading(token)` on its own
    /// task while renewing. Returns:
    ///
    /// - `Ok(None)` if `shutdown` fired before this candidate ever led;
    /// - `Ok(Some(output))` once the work finished — because `shutdown` fired and the work honoured
    ///   the cancelled `token`, or on its own — and the lease was released;
    /// - `Err(Lost)` if the lease could not be renewed within the renew deadline: the work was
    ///   aborted at that moment, without waiting for it (another replica may take over soon).
    pub async fn run<F, Fut>(
        mut self,
        shutdown: CancellationToken,
        on_leading: F,
    ) -> Result<Option<Fut::Output>, LeaderError>
    where
        F: FnOnce(CancellationToken) -> Fut,
        Fut: Future + Send + 'static,
        Fut::Output: Send + 'static,
    {
        let (lease_ns, lease_name) = (self.config.namespace.clone(), self.config.name.clone());
        // The holder last reported, so that a standby says once (per holder) why it waits.
        let mut waiting_for: Option<String> = None;
        let mut renewed_at = loop {
            let started = Instant::now();
            let attempt = tokio::select! {
                _ = shutdown.cancelled() => return Ok(None),
                attempt = self.attempt_bounded() => attempt,
            };
            match attempt {
                Some(Attempt::Held) => break started,
                Some(Attempt::HeldBy(holder)) if waiting_for.as_ref() != Some(&holder) => {
                    tracing::info!(lease = %lease_name, namespace = %lease_ns, %holder,
                        "another operator holds the lease: waiting as a standby, doing no work until it is released or expires");
                    waiting_for = Some(holder);
                }
                _ => {}
            }
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(None),
                _ = tokio::time::sleep(self.jittered_retry()) => {}
            }
        };
        tracing::info!(lease = %lease_name, namespace = %lease_ns, identity = %self.config.identity,
            "became leader");
        self.leading.send_replace(true);

        let stop_work = CancellationToken::new();
        // If this future is dropped (its task aborted), the work must not outlive the renewals.
        let mut work = AbortOnDrop(tokio::spawn(on_leading(stop_work.clone())));
        let mut next_try = renewed_at + self.config.retry_period;
        let output = loop {
            tokio::select! {
                biased;
                joined = &mut work.0 => break joined,
                _ = shutdown.cancelled(), if !stop_work.is_cancelled() => {
                    tracing::info!(lease = %lease_name, "shutting down: stopping the work, then releasing the lease");
                    stop_work.cancel();
                }
                _ = tokio::time::sleep_until(next_try) => {
                    let started = Instant::now();
                    let deadline = renewed_at + self.config.renew_deadline;
                    let attempt = tokio::time::timeout_at(deadline, self.try_acquire_or_renew()).await;
                    match &attempt {
                        Ok(Ok(Attempt::Held)) => {
                            renewed_at = started;
                            next_try = started + self.config.retry_period;
                            continue;
                        }
                        Ok(Ok(Attempt::HeldBy(holder))) => {
                            tracing::error!(lease = %lease_name, %holder, "another candidate holds the lease");
                        }
                        Ok(Ok(Attempt::Conflict)) => {}
                        Ok(Err(error)) => tracing::warn!(lease = %lease_name, %error, "renewing the lease failed"),
                        Err(_) => {}
                    }
                    let lost_leadership = matches!(attempt, Ok(Ok(Attempt::HeldBy(_))));
                    if lost_leadership || Instant::now() >= deadline {
                        tracing::error!(lease = %lease_name, deadline = ?self.config.renew_deadline,
                            "lease not renewed in time: stopping the work now");
                        work.0.abort();
                        let _ = (&mut work.0).await;
                        self.leading.send_replace(false);
                        return Err(LeaderError::Lost {
                            namespace: lease_ns,
                            name: lease_name,
                            deadline: self.config.renew_deadline,
                        });
                    }
                    next_try = (Instant::now() + self.config.retry_period).min(deadline);
                }
            }
        };
        self.leading.send_replace(false);
        self.release().await;
        match output {
            Ok(output) => Ok(Some(output)),
            Err(_) => Err(LeaderError::WorkPanicked),
        }
    }

    /// One try, bounded by the renew deadline so that a hung request cannot stall the campaign.
    async fn attempt_bounded(&mut self) -> Option<Attempt> {
        let limit = self.config.renew_deadline;
        match tokio::time::timeout(limit, self.try_acquire_or_renew()).await {
            Ok(Ok(attempt)) => Some(attempt),
            Ok(Err(error)) => {
                tracing::warn!(lease = %self.config.name, %error, "trying for the lease failed");
                None
            }
            Err(_) => None,
        }
    }

    fn jittered_retry(&self) -> Duration {
        self.config.retry_period.mul_f64(1.0 + rand::rng().random_range(0.0..0.2))
    }

    /// Reads the lease and takes or renews it if it is ours, free or expired.
    async fn try_acquire_or_renew(&mut self) -> Result<Attempt, kube::Error> {
        let now = Instant::now();
        let wall = MicroTime(jiff::Timestamp::now());
        let Some(lease) = self.api.get_opt(&self.config.name).await? else {
            let fresh = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.config.identity.clone()),
                    lease_duration_seconds: Some(whole_seconds(self.config.lease_duration)),
                    acquire_time: Some(wall.clone()),
                    renew_time: Some(wall),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &fresh).await {
                Ok(created) => {
                    self.observe(&created, now);
                    Ok(Attempt::Held)
                }
                Err(kube::Error::Api(status)) if status.code == 409 => Ok(Attempt::Conflict),
                Err(error) => Err(error),
            };
        };
        self.observe(&lease, now);
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|holder| !holder.is_empty());
        let ours = holder.as_deref() == Some(self.config.identity.as_str());
        if let Some(holder) = holder.filter(|_| !ours) {
            let duration = spec
                .lease_duration_seconds
                .map(|s| Duration::from_secs(s.max(0) as u64))
                .unwrap_or(self.config.lease_duration);
            let changed_at = self.observed.as_ref().map_or(now, |o| o.changed_at);
            if now < changed_at + duration {
                return Ok(Attempt::HeldBy(holder));
            }
        }
        let renewed = Lease {
            metadata: lease.metadata.clone(),
            spec: Some(LeaseSpec {
                holder_identity: Some(self.config.identity.clone()),
                lease_duration_seconds: Some(whole_seconds(self.config.lease_duration)),
                acquire_time: if ours { spec.acquire_time.clone() } else { Some(wall.clone()) },
                renew_time: Some(wall),
                lease_transitions: Some(match spec.lease_transitions {
                    Some(n) if ours => n,
                    n => n.unwrap_or(0) + 1,
                }),
                ..spec
            }),
        };
        match self.api.replace(&self.config.name, &PostParams::default(), &renewed).await {
            Ok(written) => {
                self.observe(&written, now);
                Ok(Attempt::Held)
            }
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(Attempt::Conflict),
            Err(error) => Err(error),
        }
    }

    /// Remembers the lease's resourceVersion; the observation time moves only when it changed.
    fn observe(&mut self, lease: &Lease, now: Instant) {
        let resource_version = lease.metadata.resource_version.clone();
        match &mut self.observed {
            Some(seen) if seen.resource_version == resource_version => {}
            seen => *seen = Some(Observed { resource_version, changed_at: now }),
        }
    }

    /// Gives the lease up if we still hold it, so that a standby need not wait for it to expire.
    async fn release(&mut self) {
        let name = self.config.name.clone();
        let released = tokio::time::timeout(self.config.renew_deadline, async {
            let Some(mut lease) = self.api.get_opt(&name).await? else { return Ok(false) };
            let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
            if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
                return Ok(false);
            }
            spec.holder_identity = None;
            spec.lease_duration_seconds = Some(1);
            spec.renew_time = Some(MicroTime(jiff::Timestamp::now()));
            self.api.replace(&name, &PostParams::default(), &lease).await.map(|_| true)
        })
        .await;
        match released {
            Ok(Ok(true)) => tracing::info!(lease = %name, "released the lease"),
            Ok(Ok(false)) => {
                tracing::info!(lease = %name, "the lease was no longer ours; nothing to release")
            }
            Ok(Err(error)) => {
                tracing::warn!(lease = %name, %error, "releasing the lease failed; it will expire")
            }
            Err(_) => tracing::warn!(lease = %name, "releasing the lease timed out; it will expire"),
        }
    }
}

/// Aborts the task when dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A duration in whole seconds for `leaseDurationSeconds` (at least 1, at most `i32::MAX`).
fn whole_seconds(d: Duration) -> i32 {
    d.as_secs().clamp(1, i32::MAX as u64) as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timing_must_let_the_leader_step_down_before_the_lease_expires() {
        assert!(LeaseConfig::new("ns", "lease", "me").validate().is_ok());
        let mut config = LeaseConfig::new("ns", "lease", "me");
        config.renew_deadline = config.lease_duration;
        assert!(config.validate().is_err());
        let mut config = LeaseConfig::new("ns", "lease", "me");
        config.retry_period = Duration::from_secs(9);
        assert!(config.validate().is_err());
        assert!(LeaseConfig::new("ns", "lease", "").validate().is_err());
    }

    #[test]
    fn identities_are_unique_per_process() {
        assert_ne!(default_identity(), default_identity());
    }
}
