//! The node lifecycle controller's rules on a paused clock, against the store.

use super::*;
use crate::sim::nodes::{heartbeat, install};
use crate::sim::version::KubernetesVersion;

const GRACE: Duration = Duration::from_secs(40);

fn cluster_with_a_pod() -> State {
    let mut state = State::new(1000, KubernetesVersion::OLDEST_SUPPORTED);
    let namespaces = state.registry.get("", "v1", "namespaces").unwrap();
    for ns in ["default", LEASE_NAMESPACE] {
        let obj = json!({"metadata": {"name": ns}});
        ops::create(&mut state, &namespaces, None, obj, &WriteContext::controller(MANAGER)).unwrap();
    }
    install(&mut state, &["n0".to_owned(), "n1".to_owned()]);
    let kind = state.registry.get("", "v1", "pods").unwrap();
    let mut pod = json!({"metadata": {"name": "db-0", "namespace": "default"},
                         "spec": {"nodeName": "n0", "containers": [{"name": "c", "image": "postgres"}]}});
    default_tolerations(&mut pod, 300);
    let created =
        ops::create(&mut state, &kind, Some("default"), pod, &WriteContext::controller(MANAGER)).unwrap();
    let status = json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": meta::now()}]});
    write_status(&mut state, "", "pods", &created, status).unwrap();
    state
}

fn node(state: &State, name: &str) -> Value {
    state.store.get("nodes", "", name).unwrap().clone()
}

fn pod_ready(state: &State) -> Option<String> {
    let pod = state.store.get("pods", "default", "db-0")?;
    pod["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == "Ready")?["status"]
        .as_str()
        .map(str::to_owned)
}

fn events(state: &State, reason: &str) -> usize {
    state.store.list("events", None).filter(|e| e["reason"] == reason).count()
}

#[tokio::test(start_paused = true)]
async fn a_silent_node_turns_unknown_after_the_grace_period_its_pods_unready_then_evicted() {
    // tryUpdateNodeHealth, MarkPodsNotReady, doNoExecuteTaintingPass, processPodOnNode.
    let mut state = cluster_with_a_pod();
    let mut controller = Lifecycle::new(Settings { grace: GRACE });
    let start = Instant::now();
    controller.monitor(&mut state, start);
    tokio::time::advance(Duration::from_secs(20)).await;
    heartbeat(&mut state, "n1");
    controller.monitor(&mut state, Instant::now());
    tokio::time::advance(Duration::from_secs(20)).await;
    controller.monitor(&mut state, Instant::now());
    assert_eq!(ready_of(&node(&state, "n0")), Some("True"), "40 s of silence is within the grace period");
    tokio::time::advance(Duration::from_secs(1)).await;
    heartbeat(&mut state, "n1");
    controller.monitor(&mut state, Instant::now());
    let lost = node(&state, "n0");
    assert_eq!(ready_of(&lost), Some("Unknown"));
    let condition = &lost["status"]["conditions"][0];
    assert_eq!(condition["reason"], "NodeStatusUnknown");
    assert_eq!(condition["message"], "Kubelet stopped posting node status.");
    let taints = lost["spec"]["taints"].as_array().unwrap();
    assert!(
        taints.iter().any(|t| t["key"] == UNREACHABLE_TAINT
            && t["effect"] == "NoExecute"
            && t["timeAdded"].is_string())
    );
    assert!(taints.iter().any(|t| t["key"] == UNREACHABLE_TAINT && t["effect"] == "NoSchedule"));
    assert_eq!(ready_of(&node(&state, "n1")), Some("True"), "the node that beat stays ready");
    assert!(node(&state, "n1")["spec"]["taints"].is_null());
    assert_eq!(pod_ready(&state).as_deref(), Some("False"), "MarkPodsNotReady sets False");
    assert_eq!(events(&state, "NodeNotReady"), 2, "one for the node, one for its pod");
    tokio::time::advance(Duration::from_secs(299)).await;
    controller.monitor(&mut state, Instant::now());
    assert!(pod_ready(&state).is_some(), "the default toleration (300 s) has not run out");
    tokio::time::advance(Duration::from_secs(1)).await;
    controller.monitor(&mut state, Instant::now());
    assert!(state.store.get("pods", "default", "db-0").is_none(), "evicted after its tolerationSeconds");
    assert_eq!(events(&state, "TaintManagerEviction"), 1);
}

#[tokio::test(start_paused = true)]
async fn a_node_that_reports_again_is_ready_and_untainted() {
    let mut state = cluster_with_a_pod();
    let mut controller = Lifecycle::new(Settings { grace: GRACE });
    controller.monitor(&mut state, Instant::now());
    tokio::time::advance(Duration::from_secs(41)).await;
    controller.monitor(&mut state, Instant::now());
    assert_eq!(ready_of(&node(&state, "n0")), Some("Unknown"));
    heartbeat(&mut state, "n0");
    controller.monitor(&mut state, Instant::now());
    let back = node(&state, "n0");
    assert_eq!(ready_of(&back), Some("True"));
    assert!(back["spec"]["taints"].is_null(), "{back}");
    assert!(state.store.get("pods", "default", "db-0").is_some(), "not evicted");
}

#[test]
fn tolerations_decide_when_a_pod_is_evicted() {
    // getMinTolerationTime: the least tolerationSeconds; none for ever; an untolerated taint at once.
    let taints =
        json!([{"key": UNREACHABLE_TAINT, "effect": "NoExecute"}, {"key": "other", "effect": "NoSchedule"}]);
    let mut pod = json!({"spec": {}});
    assert_eq!(toleration(&pod, &taints), None, "not tolerated: evicted at once");
    default_tolerations(&mut pod, 300);
    assert_eq!(pod["spec"]["tolerations"].as_array().unwrap().len(), 2);
    assert_eq!(toleration(&pod, &taints), Some(Some(Duration::from_secs(300))));
    default_tolerations(&mut pod, 300);
    assert_eq!(pod["spec"]["tolerations"].as_array().unwrap().len(), 2, "the plugin adds none twice");
    let forever = json!({"spec": {"tolerations": [{"operator": "Exists"}]}});
    assert_eq!(toleration(&forever, &taints), Some(None));
}
