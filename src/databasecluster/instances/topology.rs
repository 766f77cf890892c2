//! The replication topology as a pure function of what was observed: each pod (from the cache) and
//! what its instance said ([`crate::databasecluster::instances`]) give `status.instances[]`, `currentPrimary`, the
//! role labels to set, and the replication slots the primary should have.
//!
//! Rules:
//! - A pod's role is what its instance says (`pg_is_in_recovery()`): `primary` or `replica`;
//!   `unknown` when it could not be asked, and then its label is left as it is (Endpoints hold only
//!   ready pods, so a stale label on a pod that is down reaches nothing), and its `message` says
//!   why, unless its pod's failure says more ([`with_unreached`]).
//! - `currentPrimary` is the instance observed out of recovery; if several are (which the operator
//!   never causes), the recorded primary among them, else none.
//! - A standby's `syncState` is its primary's `pg_stat_replication.sync_state`; in a pass that
//!   observes no primary, each standby keeps the one last recorded (what a failover with
//!   `synchronousReplicas` decides by, [`crate::databasecluster::failover`]).
//! - Slots: `instance_<ordinal>` for every instance but the primary below `spec.replicas`. Slots
//!   the primary has that no instance should, and that no standby uses, are dropped; with
//!   `replicas: 0` (hibernation) nothing is dropped, so the standbys find their slots on waking.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ContainerStatus, PodStatus};

use crate::databasecluster::api::types::InstanceStatus;
use crate::databasecluster::instances::{InstanceFacts, SlotChanges, Standby};
use crate::databasecluster::specs::services::{ROLE_PRIMARY, ROLE_REPLICA};

/// The label the StatefulSet controller puts on each pod: the revision of its template.
pub const REVISION_LABEL: &str = "controller-revision-hash";

/// The role shown for an instance that could not be asked.
pub const ROLE_UNKNOWN: &str = "unknown";

/// A pod of the cluster, as the cache holds it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodView {
    /// The pod's name, `<cluster>-<ordinal>`.
    pub name: String,
    /// The StatefulSet ordinal.
    pub ordinal: i32,
    /// `status.podIP`, once assigned.
    pub ip: Option<String>,
    /// Whether the pod is Ready.
    pub ready: bool,
    /// Since when the pod is known not to have been ready, while it is not ready
    /// ([`not_ready_since`]).
    pub not_ready_since: Option<jiff::Timestamp>,
    /// Whether the pod is being deleted.
    pub deleting: bool,
    /// The `controller-revision-hash` label.
    pub revision: Option<String>,
    /// The role label it carries now.
    pub role_label: Option<String>,
    /// Why the instance cannot start: no node takes its pod, or its containers fail
    /// ([`start_failure`]).
    pub failure: Option<String>,
}

/// Since when a pod that is not ready is known not to have been: its `Ready` condition's
/// `lastTransitionTime` when the condition is false, or its creation when it has no `Ready`
/// condition at all (Kubernetes 1.28 leaves a pod no node has taken with `PodScheduled=False`
/// alone: it has never been ready). `None` for a ready pod.
pub fn not_ready_since(
    status: Option<&PodStatus>,
    created: Option<jiff::Timestamp>,
) -> Option<jiff::Timestamp> {
    let conditions = status.and_then(|s| s.conditions.as_deref()).unwrap_or_default();
    match conditions.iter().find(|c| c.type_ == "Ready") {
        Some(ready) if ready.status == "True" => None,
        Some(ready) => ready.last_transition_time.as_ref().map(|t| t.0).or(created),
        None => created,
    }
}

/// The most of one container's failure that `status.instances[].message` repeats.
const MAX_FAILURE_CHARS: usize = 1024;

/// Waiting reasons of a container that is merely on its way (not a failure).
const STARTING_REASONS: [&str; 2] = ["ContainerCreating", "PodInitializing"];

/// How long a pod may stay unschedulable before that counts as a failure: a scheduler reports
/// an unbound claim while its volume is provisioned, and too little CPU while an autoscaler adds
/// a node, both for seconds in the normal course.
pub const UNSCHEDULABLE_GRACE: jiff::SignedDuration = jiff::SignedDuration::from_secs(30);

/// Why a pod's instance cannot start, at `now`: no node has taken it for [`UNSCHEDULABLE_GRACE`]
/// (`PodScheduled=False`, reason `Unschedulable`: too little CPU or memory on every node, a
/// claim that is not bound…), with the scheduler's message; or, from its containers' state as
/// the kubelet reports it, the first init or main container that waits for a reason other than
/// starting (`CrashLoopBackOff`, `ErrImagePull`…) or has terminated with a non-zero exit code,
/// with the kubelet's message and the last termination's exit code and message (the log's tail,
/// with `FallbackToLogsOnError`).
pub fn start_failure(status: &PodStatus, now: jiff::Timestamp) -> Option<String> {
    let unscheduled = status.conditions.iter().flatten().find(|c| {
        c.type_ == "PodScheduled" && c.status == "False" && c.reason.as_deref() == Some("Unschedulable")
    });
    let lasting = |since: Option<&jiff::Timestamp>| {
        since.is_none_or(|since| now.duration_since(*since) >= UNSCHEDULABLE_GRACE)
    };
    if let Some(condition) = unscheduled.filter(|c| lasting(c.last_transition_time.as_ref().map(|t| &t.0))) {
        let message = condition.message.as_deref().unwrap_or("no node can take it");
        return Some(format!("not scheduled: {message}").chars().take(MAX_FAILURE_CHARS).collect());
    }
    let mut containers =
        status.init_container_statuses.iter().flatten().chain(status.container_statuses.iter().flatten());
    let failure = containers.find_map(failure_of)?;
    Some(failure.chars().take(MAX_FAILURE_CHARS).collect())
}

fn failure_of(container: &ContainerStatus) -> Option<String> {
    let state = container.state.as_ref()?;
    let last = container.last_state.as_ref().and_then(|s| s.terminated.as_ref());
    let (reason, message, terminated) = match (&state.waiting, &state.terminated) {
        (Some(waiting), _) => {
            let reason = waiting.reason.as_deref().unwrap_or("Waiting");
            if STARTING_REASONS.contains(&reason) {
                return None;
            }
            (reason, waiting.message.as_deref(), last)
        }
        (None, Some(terminated)) if terminated.exit_code != 0 => {
            (terminated.reason.as_deref().unwrap_or("Error"), None, Some(terminated))
        }
        _ => return None,
    };
    let mut text = format!("container {}: {reason}", container.name);
    if let Some(message) = message.filter(|m| !m.is_empty()) {
        text.push_str(&format!(" ({message})"));
    }
    if let Some(terminated) = terminated {
        text.push_str(&format!("; exit code {}", terminated.exit_code));
        if let Some(message) = terminated.message.as_deref().map(str::trim).filter(|m| !m.is_empty()) {
            text.push_str(&format!(": {message}"));
        }
    }
    Some(text)
}

/// The replication slot of instance `ordinal`.
pub fn slot_name(ordinal: i32) -> String {
    format!("instance_{ordinal}")
}

/// The observed role of an instance.
pub fn role_of(facts: Option<&InstanceFacts>) -> &'static str {
    match facts {
        Some(facts) if facts.in_recovery => ROLE_REPLICA,
        Some(_) => ROLE_PRIMARY,
        None => ROLE_UNKNOWN,
    }
}

/// The instance observed accepting writes (see the module docs).
pub fn current_primary(
    pods: &[PodView],
    facts: &BTreeMap<String, InstanceFacts>,
    recorded: &str,
) -> Option<String> {
    let primaries: Vec<&str> = pods
        .iter()
        .filter(|pod| !pod.deleting && facts.get(&pod.name).is_some_and(|f| !f.in_recovery))
        .map(|pod| pod.name.as_str())
        .collect();
    match primaries.as_slice() {
        [one] => Some((*one).to_owned()),
        many => many.iter().find(|name| **name == recorded).map(|name| (*name).to_owned()),
    }
}

/// `status.instances[]`, by ordinal.
pub fn instance_statuses(pods: &[PodView], facts: &BTreeMap<String, InstanceFacts>) -> Vec<InstanceStatus> {
    let standbys: BTreeMap<&str, &Standby> = facts
        .values()
        .filter(|f| !f.in_recovery)
        .flat_map(|f| f.standbys.iter())
        .map(|s| (s.name.as_str(), s))
        .collect();
    let mut pods: Vec<&PodView> = pods.iter().collect();
    pods.sort_by_key(|pod| pod.ordinal);
    pods.into_iter()
        .map(|pod| {
            let observed = facts.get(&pod.name);
            let role = role_of(observed);
            let replication = (role == ROLE_REPLICA).then(|| standbys.get(pod.name.as_str())).flatten();
            InstanceStatus {
                name: pod.name.clone(),
                role: role.to_owned(),
                ready: pod.ready && !pod.deleting,
                version: observed.map(|f| f.version.clone()),
                replication_state: replication.map(|s| s.state.clone()),
                lag_bytes: replication.map(|s| s.lag_bytes),
                sync_state: replication.map(|s| s.sync_state.clone()).filter(|s| !s.is_empty()),
                message: pod.failure.clone(),
            }
        })
        .collect()
}

/// `statuses` of a pass that observed no primary, with each standby's `syncState` as `previous`
/// recorded it (see the module docs); a pass that observed one is returned as it is.
pub fn with_recorded_sync_states(
    mut statuses: Vec<InstanceStatus>,
    previous: &[InstanceStatus],
) -> Vec<InstanceStatus> {
    if statuses.iter().any(|s| s.role == ROLE_PRIMARY) {
        return statuses;
    }
    for status in &mut statuses {
        status.sync_state =
            previous.iter().find(|p| p.name == status.name).and_then(|p| p.sync_state.clone());
    }
    statuses
}

/// `statuses` with the reason each instance in `unreached` (pod name → why its status could not
/// be read) was not observed, as its `message`, where its pod's own failure says nothing.
pub fn with_unreached(
    mut statuses: Vec<InstanceStatus>,
    unreached: &BTreeMap<String, String>,
) -> Vec<InstanceStatus> {
    for status in &mut statuses {
        if status.message.is_none() && status.role == ROLE_UNKNOWN {
            status.message = unreached.get(&status.name).cloned();
        }
    }
    statuses
}

/// The pods whose role label differs from their observed role, with the label they should carry.
pub fn label_changes(
    pods: &[PodView],
    facts: &BTreeMap<String, InstanceFacts>,
) -> Vec<(String, &'static str)> {
    pods.iter()
        .filter(|pod| !pod.deleting)
        .filter_map(|pod| {
            let role = role_of(facts.get(&pod.name));
            (role != ROLE_UNKNOWN && pod.role_label.as_deref() != Some(role))
                .then(|| (pod.name.clone(), role))
        })
        .collect()
}

/// The slot changes on the primary (instance `primary_ordinal`) for `replicas` instances.
pub fn slot_changes(primary: &InstanceFacts, primary_ordinal: i32, replicas: i32) -> SlotChanges {
    let wanted: Vec<String> = (0..replicas).filter(|o| *o != primary_ordinal).map(slot_name).collect();
    let create = wanted.iter().filter(|w| !primary.slots.iter().any(|s| &s.name == *w)).cloned().collect();
    let drop = if replicas == 0 {
        Vec::new()
    } else {
        primary
            .slots
            .iter()
            .filter(|s| s.name.starts_with("instance_") && !s.active && !wanted.contains(&s.name))
            .map(|s| s.name.clone())
            .collect()
    };
    SlotChanges { create, drop }
}

/// Whether every standby below `replicas` streams from the primary.
pub fn all_standbys_streaming(statuses: &[InstanceStatus], primary: Option<&str>) -> bool {
    statuses
        .iter()
        .filter(|s| Some(s.name.as_str()) != primary)
        .all(|s| s.role == ROLE_REPLICA && s.replication_state.as_deref() == Some("streaming"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::databasecluster::instances::Slot;

    /// A pod's status in each state Kubernetes 1.28 leaves a pod in, as the scheduler
    /// (`PodScheduled=False` alone for a pod no node takes) and the kubelet
    /// (`generateAPIPodStatus`: `Ready=False` while a container waits or fails its probe) write it.
    #[test]
    fn a_pod_is_known_down_since_its_ready_condition_turned_false_or_else_since_its_creation() {
        let at = |second: i64| jiff::Timestamp::from_second(1_800_000_000 + second).unwrap();
        let status = |conditions: serde_json::Value| -> PodStatus {
            serde_json::from_value(serde_json::json!({"phase": "Pending", "conditions": conditions})).unwrap()
        };
        let created = Some(at(0));
        let unschedulable = status(serde_json::json!([{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "lastTransitionTime": "2027-01-15T08:00:05Z",
            "message": "0/1 nodes are available: 1 node(s) were unschedulable."
        }]));
        assert_eq!(
            not_ready_since(Some(&unschedulable), created),
            created,
            "never ready: since its creation"
        );
        assert_eq!(not_ready_since(None, created), created, "no status yet: since its creation");
        let waiting = status(serde_json::json!([
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2027-01-15T08:00:01Z"},
            {"type": "Ready", "status": "False", "reason": "ContainersNotReady", "lastTransitionTime": "2027-01-15T08:00:02Z"},
        ]));
        assert_eq!(not_ready_since(Some(&waiting), created), Some("2027-01-15T08:00:02Z".parse().unwrap()));
        let ready = status(
            serde_json::json!([{"type": "Ready", "status": "True", "lastTransitionTime": "2027-01-15T08:00:02Z"}]),
        );
        assert_eq!(not_ready_since(Some(&ready), created), None);
        let unstamped = status(serde_json::json!([{"type": "Ready", "status": "False"}]));
        assert_eq!(not_ready_since(Some(&unstamped), created), created);
    }

    fn pod(ordinal: i32, role_label: Option<&str>) -> PodView {
        PodView {
            name: format!("db-{ordinal}"),
            ordinal,
            ip: Some(format!("127.0.0.{}", ordinal + 2)),
            ready: true,
            role_label: role_label.map(str::to_owned),
            ..PodView::default()
        }
    }

    fn primary_facts(standbys: &[(&str, &str, i64)], slots: &[(&str, bool)]) -> InstanceFacts {
        InstanceFacts {
            in_recovery: false,
            version: "15.4".into(),
            standbys: standbys
                .iter()
                .map(|(n, s, l)| Standby {
                    name: (*n).into(),
                    state: (*s).into(),
                    lag_bytes: *l,
                    sync_state: if *s == "streaming" { "quorum".into() } else { "potential".into() },
                    lag_seconds: None,
                })
                .collect(),
            slots: slots.iter().map(|(n, a)| Slot { name: (*n).into(), active: *a }).collect(),
            ..InstanceFacts::default()
        }
    }

    fn standby_facts() -> InstanceFacts {
        InstanceFacts { in_recovery: true, version: "15.4".into(), ..InstanceFacts::default() }
    }

    #[test]
    fn a_container_that_cannot_start_says_why() {
        let status = |value: serde_json::Value| -> PodStatus { serde_json::from_value(value).unwrap() };
        let starting = status(serde_json::json!({
            "initContainerStatuses": [{"name": "bootstrap", "image": "postgres:15", "imageID": "", "ready": false,
                "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}],
            "containerStatuses": [{"name": "postgres", "image": "postgres:15", "imageID": "", "ready": false,
                "restartCount": 0, "state": {"waiting": {"reason": "PodInitializing"}}}]
        }));
        let now = jiff::Timestamp::now();
        assert_eq!(start_failure(&starting, now), None);
        let crashing = status(serde_json::json!({
            "containerStatuses": [{"name": "postgres", "image": "postgres:15", "imageID": "", "ready": false,
                "restartCount": 3,
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
                "lastState": {"terminated": {"exitCode": 1, "reason": "Error",
                    "message": "FATAL:  invalid value for parameter \"work_mem\": \"lots\"\n"}}}]
        }));
        assert_eq!(
            start_failure(&crashing, now).as_deref(),
            Some(
                "container postgres: CrashLoopBackOff (back-off 40s); exit code 1: FATAL:  invalid value for parameter \"work_mem\": \"lots\""
            )
        );
        let failed_init = status(serde_json::json!({
            "initContainerStatuses": [{"name": "bootstrap", "image": "postgres:15", "imageID": "", "ready": false,
                "restartCount": 0, "state": {"terminated": {"exitCode": 2, "reason": "Error"}}}]
        }));
        assert_eq!(
            start_failure(&failed_init, now).as_deref(),
            Some("container bootstrap: Error; exit code 2")
        );
    }

    #[test]
    fn a_pod_no_node_takes_for_the_grace_says_what_the_scheduler_said() {
        let since: jiff::Timestamp = "2026-12-01T10:00:00Z".parse().unwrap();
        let status: PodStatus = serde_json::from_value(serde_json::json!({
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 Insufficient cpu.", "lastTransitionTime": since.to_string()}]
        }))
        .unwrap();
        assert_eq!(
            start_failure(&status, since + UNSCHEDULABLE_GRACE - jiff::SignedDuration::from_secs(1)),
            None
        );
        assert_eq!(
            start_failure(&status, since + UNSCHEDULABLE_GRACE).as_deref(),
            Some("not scheduled: 0/3 nodes are available: 3 Insufficient cpu.")
        );
        let scheduling: PodStatus = serde_json::from_value(serde_json::json!({
            "phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]
        }))
        .unwrap();
        assert_eq!(
            start_failure(&scheduling, since),
            None,
            "only a pod the scheduler gave up on is a failure"
        );
    }

    #[test]
    fn roles_and_replication_come_from_what_the_instances_say() {
        let pods = [pod(0, None), pod(1, None), pod(2, None)];
        let facts = BTreeMap::from([
            ("db-0".to_owned(), primary_facts(&[("db-1", "streaming", 0), ("db-2", "catchup", 4096)], &[])),
            ("db-1".to_owned(), standby_facts()),
        ]);
        let statuses = instance_statuses(&pods, &facts);
        let summary: Vec<_> = statuses
            .iter()
            .map(|s| (s.name.as_str(), s.role.as_str(), s.replication_state.as_deref(), s.lag_bytes))
            .collect();
        assert_eq!(
            summary,
            [
                ("db-0", "primary", None, None),
                ("db-1", "replica", Some("streaming"), Some(0)),
                ("db-2", "unknown", None, None)
            ]
        );
        assert_eq!(current_primary(&pods, &facts, "db-0").as_deref(), Some("db-0"));
        assert!(!all_standbys_streaming(&statuses, Some("db-0")));
        assert_eq!(statuses[1].sync_state.as_deref(), Some("quorum"));
    }

    #[test]
    fn sync_states_are_kept_while_no_primary_is_observed() {
        let pods = [pod(0, None), pod(1, None), pod(2, None)];
        let up = BTreeMap::from([
            ("db-0".to_owned(), primary_facts(&[("db-1", "streaming", 0), ("db-2", "catchup", 9)], &[])),
            ("db-1".to_owned(), standby_facts()),
            ("db-2".to_owned(), standby_facts()),
        ]);
        let before = instance_statuses(&pods, &up);
        let down =
            BTreeMap::from([("db-1".to_owned(), standby_facts()), ("db-2".to_owned(), standby_facts())]);
        let kept = with_recorded_sync_states(instance_statuses(&pods, &down), &before);
        let states: Vec<_> = kept.iter().map(|s| s.sync_state.as_deref()).collect();
        assert_eq!(states, [None, Some("quorum"), Some("potential")]);
        let fresh = with_recorded_sync_states(instance_statuses(&pods, &up), &[]);
        assert_eq!(fresh, before, "a pass that observes the primary records what it says");
    }

    #[test]
    fn an_instance_not_observed_says_why_unless_its_pod_says_more() {
        let pods = [pod(0, None), pod(1, None), pod(2, None)];
        let mut failing = pods[2].clone();
        failing.failure = Some("container postgres: CrashLoopBackOff".into());
        let pods = [pods[0].clone(), pods[1].clone(), failing];
        let facts = BTreeMap::from([("db-0".to_owned(), primary_facts(&[], &[]))]);
        let unreached = BTreeMap::from([
            ("db-1".to_owned(), "no answer".to_owned()),
            ("db-2".to_owned(), "no answer".to_owned()),
        ]);
        let statuses = with_unreached(instance_statuses(&pods, &facts), &unreached);
        let messages: Vec<_> = statuses.iter().map(|s| s.message.as_deref()).collect();
        assert_eq!(messages, [None, Some("no answer"), Some("container postgres: CrashLoopBackOff")]);
    }

    #[test]
    fn labels_follow_the_observed_role_and_unknown_leaves_them_alone() {
        let pods = [pod(0, Some("replica")), pod(1, Some("replica")), pod(2, Some("primary"))];
        let facts = BTreeMap::from([
            ("db-0".to_owned(), primary_facts(&[], &[])),
            ("db-1".to_owned(), standby_facts()),
        ]);
        assert_eq!(label_changes(&pods, &facts), [("db-0".to_owned(), "primary")]);
    }

    #[test]
    fn two_primaries_resolve_to_the_recorded_one_or_none() {
        let pods = [pod(0, None), pod(1, None)];
        let facts = BTreeMap::from([
            ("db-0".to_owned(), primary_facts(&[], &[])),
            ("db-1".to_owned(), primary_facts(&[], &[])),
        ]);
        assert_eq!(current_primary(&pods, &facts, "db-1").as_deref(), Some("db-1"));
        assert_eq!(current_primary(&pods, &facts, "db-7"), None);
    }

    #[test]
    fn slots_exist_for_every_standby_and_go_with_scale_down() {
        let primary =
            primary_facts(&[], &[("instance_1", true), ("instance_3", false), ("instance_4", true)]);
        let changes = slot_changes(&primary, 0, 3);
        assert_eq!(changes.create, ["instance_2"]);
        assert_eq!(changes.drop, ["instance_3"], "a slot still in use waits for its standby to go");
        let hibernating = slot_changes(&primary, 0, 0);
        assert!(hibernating.drop.is_empty() && hibernating.create.is_empty());
        let other = primary_facts(&[], &[("backup_tool", false)]);
        assert!(slot_changes(&other, 0, 1).drop.is_empty(), "slots the operator did not make are kept");
    }
}
