//! Several nodes: Node objects with heartbeats, the scheduler's placement (pod anti-affinity,
//! cordon), and the faults on them: a lost node (its pods frozen, then `Ready=Unknown`, tainted,
//! evicted) and a hung pod. What stands for a pod's liveness here is an HTTP server answering.

use super::*;

use dbcluster_operator::sim::{KubeletKind, SimConfig};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::ListParams;

/// An HTTP server pod labelled `app: <group>`, kept off its group's other pods' nodes.
fn server(group: &str) -> Value {
    json!({
        "containers": [{
            "name": "web", "image": "postgres:15",
            "command": ["python3", "-m", "http.server", "--bind", "127.0.0.1", "8080"],
            "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
        }],
        "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"group": group}}, "topologyKey": "kubernetes.io/hostname"},
        ]}},
    })
}

async fn create_server(cluster: &TestCluster, name: &str, group: &str) -> Api<Pod> {
    let mut pod = pod(name, server(group));
    pod.metadata.labels.get_or_insert_default().insert("group".into(), group.into());
    let pods: Api<Pod> = cluster.api();
    pods.create(&PostParams::default(), &pod).await.expect("the pod is accepted");
    pods
}

/// Whether the pod's HTTP server answers within a second.
async fn answers(pod: &Value) -> bool {
    let Some(ip) = pod["status"]["podIP"].as_str().and_then(|ip| ip.parse::<std::net::Ipv4Addr>().ok())
    else {
        return false;
    };
    let get = try_http_get(std::net::SocketAddr::from((ip, 8080)), "/");
    tokio::time::timeout(Duration::from_secs(1), get).await.ok().flatten().is_some()
}

fn node_of(pod: &Value) -> String {
    pod["spec"]["nodeName"].as_str().unwrap_or_default().to_owned()
}

fn condition<'a>(obj: &'a Value, kind: &str) -> Option<&'a Value> {
    obj["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == kind)
}

/// A cluster whose node lifecycle controller acts within seconds.
async fn quick_nodes_cluster() -> TestCluster {
    require_postgres();
    TestCluster::start_with(SimConfig {
        kubelet: KubeletKind::Process,
        node_lease_renew_interval: Duration::from_millis(500),
        node_monitor_period: Duration::from_millis(500),
        node_monitor_grace_period: Duration::from_secs(3),
        default_toleration_seconds: 4,
        ..SimConfig::default()
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_ready_nodes_and_required_anti_affinity_places_one_pod_per_node() {
    let cluster = process_cluster().await;
    let nodes: Api<Node> = Api::all(cluster.sim.client());
    let listed = eventually_some("three Ready nodes", || async {
        let list = nodes.list(&ListParams::default()).await.ok()?;
        let values: Vec<Value> = list.items.iter().map(|n| serde_json::to_value(n).unwrap()).collect();
        let all_ready = values.iter().all(|n| condition(n, "Ready").is_some_and(|c| c["status"] == "True"));
        (values.len() == 3 && all_ready).then_some(values)
    })
    .await;
    let names: Vec<&str> = listed.iter().map(|n| n["metadata"]["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["sim-node-0", "sim-node-1", "sim-node-2"]);
    assert!(
        listed.iter().all(|n| n["metadata"]["labels"]["kubernetes.io/hostname"] == n["metadata"]["name"])
    );
    // The kubelet's heartbeat: its Lease in kube-node-lease (renewed every 10 s by default).
    let leases: Api<Lease> = Api::namespaced(cluster.sim.client(), "kube-node-lease");
    let lease = leases.get("sim-node-0").await.unwrap();
    assert!(lease.spec.unwrap().renew_time.is_some());
    // InterPodAffinity's Filter (satisfyPodAntiAffinity): one pod of the group per node.
    let mut placed = Vec::new();
    for i in 0..3 {
        let pods = create_server(&cluster, &format!("web-{i}"), "web").await;
        placed.push(node_of(&await_pod(&pods, &format!("web-{i}"), "ready", ready).await));
    }
    placed.sort();
    assert_eq!(placed, ["sim-node-0", "sim-node-1", "sim-node-2"]);
    let pods = create_server(&cluster, "web-3", "web").await;
    let pending = await_pod(&pods, "web-3", "unschedulable", |p| {
        condition(p, "PodScheduled").is_some_and(|c| c["reason"] == "Unschedulable")
    })
    .await;
    let message = condition(&pending, "PodScheduled").unwrap()["message"].as_str().unwrap().to_owned();
    assert!(
        message.starts_with("0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules."),
        "{message}"
    );
    // Deleting one of the group frees its node for the waiting pod.
    pods.delete("web-1", &DeleteParams::default()).await.unwrap();
    let moved = await_pod(&pods, "web-3", "scheduled once a node is free", ready).await;
    assert!(!node_of(&moved).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cordoned_node_takes_no_new_pod() {
    let cluster = process_cluster().await;
    // NodeUnschedulable's Filter: with two of three nodes cordoned, every new pod goes to the third.
    cluster.sim.faults().cordon_node("sim-node-0");
    cluster.sim.faults().cordon_node("sim-node-2");
    let pods = create_server(&cluster, "a", "a").await;
    create_server(&cluster, "b", "b").await;
    for name in ["a", "b"] {
        assert_eq!(node_of(&await_pod(&pods, name, "ready", ready).await), "sim-node-1");
    }
    cluster.sim.faults().cordon_node("sim-node-1");
    create_server(&cluster, "c", "c").await;
    let pending = await_pod(&pods, "c", "unschedulable", |p| {
        condition(p, "PodScheduled").is_some_and(|c| c["reason"] == "Unschedulable")
    })
    .await;
    let message = condition(&pending, "PodScheduled").unwrap()["message"].as_str().unwrap().to_owned();
    assert!(message.starts_with("0/3 nodes are available: 3 node(s) were unschedulable."), "{message}");
    cluster.sim.faults().uncordon_node("sim-node-2");
    assert_eq!(node_of(&await_pod(&pods, "c", "ready", ready).await), "sim-node-2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_node_freezes_its_pods_turns_unknown_and_its_pods_are_evicted_but_wait_for_it() {
    let cluster = quick_nodes_cluster().await;
    let pods = create_server(&cluster, "lost", "g").await;
    create_server(&cluster, "sibling", "g").await;
    let lost = await_pod(&pods, "lost", "ready", ready).await;
    let sibling = await_pod(&pods, "sibling", "ready", ready).await;
    assert!(answers(&lost).await && answers(&sibling).await);
    let node = node_of(&lost);
    assert_ne!(node, node_of(&sibling));
    assert_eq!(cluster.sim.faults().lose_node(&node), 1, "one pod on the lost node");
    // Frozen, not killed: the server stops answering, its sibling on another node does not.
    eventually_some("the lost node's pod to stop answering", || async {
        (!answers(&lost).await).then_some(())
    })
    .await;
    assert!(answers(&sibling).await, "a pod on another node keeps running");
    // After the grace period: Ready=Unknown, the unreachable taint, the pod's Ready=False.
    let nodes: Api<Node> = Api::all(cluster.sim.client());
    let unknown = eventually_some("the node Ready=Unknown and tainted", || async {
        let n = serde_json::to_value(nodes.get(&node).await.ok()?).ok()?;
        let unknown = condition(&n, "Ready").is_some_and(|c| c["status"] == "Unknown");
        (unknown && n["spec"]["taints"].is_array()).then_some(n)
    })
    .await;
    let taints = unknown["spec"]["taints"].as_array().unwrap();
    assert!(
        taints.iter().any(|t| t["key"] == "node.kubernetes.io/unreachable" && t["effect"] == "NoExecute")
    );
    let unready = await_pod(&pods, "lost", "Ready=False", |p| {
        condition(p, "Ready").is_some_and(|c| c["status"] == "False")
    })
    .await;
    assert!(
        unready["spec"]["tolerations"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| { t["key"] == "node.kubernetes.io/unreachable" && t["tolerationSeconds"] == 4 }),
        "DefaultTolerationSeconds gave the pod its toleration"
    );
    // Evicted after its toleration, the deletion waits for the silent kubelet (Terminating).
    await_pod(&pods, "lost", "marked for deletion", |p| p["metadata"]["deletionTimestamp"].is_string()).await;
    let sibling_now = serde_json::to_value(pods.get("sibling").await.unwrap()).unwrap();
    assert!(
        sibling_now["metadata"]["deletionTimestamp"].is_null(),
        "nothing happens to the other node's pods"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        pods.get_opt("lost").await.unwrap().is_some(),
        "no kubelet confirms the deletion while the node is lost"
    );
    // Back: the kubelet reports Ready again and carries out the deletion.
    cluster.sim.faults().restore_node(&node);
    await_absent(&pods, "lost", "the evicted pod removed once its node is back").await;
    eventually_some("the node Ready=True, untainted", || async {
        let n = serde_json::to_value(nodes.get(&node).await.ok()?).ok()?;
        (condition(&n, "Ready").is_some_and(|c| c["status"] == "True") && n["spec"]["taints"].is_null())
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_pod_stops_answering_while_its_sibling_runs_and_resumes() {
    let cluster = process_cluster().await;
    let pods = create_server(&cluster, "hung", "h").await;
    create_server(&cluster, "sibling", "h").await;
    let hung = await_pod(&pods, "hung", "ready", ready).await;
    let sibling = await_pod(&pods, "sibling", "ready", ready).await;
    assert!(cluster.sim.faults().hang_pod("default", "hung"));
    eventually_some("the hung pod to stop answering", || async { (!answers(&hung).await).then_some(()) })
        .await;
    assert!(answers(&sibling).await, "its sibling keeps running");
    // Its kubelet still probes it: the readiness probe fails, the pod turns unready.
    await_pod(&pods, "hung", "unready", |p| !ready(p)).await;
    assert!(cluster.sim.faults().resume_pod("default", "hung"));
    await_pod(&pods, "hung", "ready again", ready).await;
    assert!(answers(&hung).await, "resumed, not restarted");
    let restarts =
        pods.get("hung").await.unwrap().status.unwrap().container_statuses.unwrap()[0].restart_count;
    assert_eq!(restarts, 0);
    assert!(!cluster.sim.faults().hang_pod("default", "no-such-pod"));
}
