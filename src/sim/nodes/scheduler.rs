//! The scheduler's choice of a node for a pod, decided purely from the Node objects and the pods
//! already bound, as 1.28's default profile decides it for what the simulator's pods ask:
//!
//! 1. Filters (pkg/scheduler/framework/plugins): `NodeUnschedulable.Filter` (a cordoned node,
//!    `spec.unschedulable`, takes no pod unless it tolerates `node.kubernetes.io/unschedulable`);
//!    `TaintToleration.Filter` (a `NoSchedule` or `NoExecute` taint the pod does not tolerate,
//!    `FindMatchingUntoleratedTaint`); `InterPodAffinity.Filter`: the pod's required
//!    anti-affinity terms (`satisfyPodAntiAffinity`: no pod matching a term on a node with the
//!    same value of the term's `topologyKey`) and the bound pods' required anti-affinity terms
//!    that match the pod (`satisfyExistingPodsAntiAffinity`).
//! 2. Score: `InterPodAffinity.Score` for preferred anti-affinity, both ways (`processExistingPod`
//!    and `processTerm`: minus a term's weight for each matching pod in the node's topology
//!    domain), then the highest score wins. Upstream breaks ties at random among the best
//!    (`selectHost`) after the resource scorers (`NodeResourcesFit` LeastAllocated,
//!    `NodeResourcesBalancedAllocation`) spread pods; the simulator breaks them by the fewest
//!    pods bound, then the node's name, so that a run is repeatable.
//! 3. No node fits: the message lists how many nodes failed each filter, as
//!    `FitError.Error()` does (`0/3 nodes are available: …`).
//!
//! A term's namespaces are its `namespaces` or, when empty, the pod's own (`namespaceSelector`
//! is not simulated); its selector is `matchLabels` and `matchExpressions`.

use std::collections::BTreeMap;

use serde_json::Value;

/// The label every node carries with its name, the topology key of per-node spreading.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// The taint key of a cordoned node, as tolerations name it.
const UNSCHEDULABLE_TAINT: &str = "node.kubernetes.io/unschedulable";

/// Why one node was filtered out, worded as 1.28's plugins word it.
const CORDONED: &str = "node(s) were unschedulable";
const ANTI_AFFINITY: &str = "node(s) didn't match pod anti-affinity rules";
const EXISTING_ANTI_AFFINITY: &str = "node(s) didn't satisfy existing pods anti-affinity rules";

/// The scheduler's message for a pod that no node can take: `failures` counts the nodes each
/// reason filtered out (in the order of the reasons), out of `total`.
pub fn no_node_for(total: usize, failures: &[(String, usize)]) -> String {
    let reasons: Vec<String> = failures.iter().map(|(reason, n)| format!("{n} {reason}")).collect();
    fit_error(total, &reasons.join(", "))
}

/// The scheduler's message when none of `total` nodes can take a pod, for `detail`.
pub fn fit_error(total: usize, detail: &str) -> String {
    format!(
        "0/{total} nodes are available: {detail}. preemption: 0/{total} nodes are available: {total} Preemption is not helpful for scheduling."
    )
}

/// Whether a label selector (`matchLabels`, `matchExpressions`) selects `labels`. A missing
/// selector selects nothing, as in an affinity term.
fn selects(selector: &Value, labels: &Value) -> bool {
    if !selector.is_object() {
        return false;
    }
    let by_label = selector["matchLabels"].as_object().into_iter().flatten().all(|(k, v)| labels[k] == *v);
    let by_expression = selector["matchExpressions"].as_array().into_iter().flatten().all(|e| {
        let key = e["key"].as_str().unwrap_or_default();
        let value = labels[key].as_str();
        let values: Vec<&str> =
            e["values"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        match e["operator"].as_str() {
            Some("In") => value.is_some_and(|v| values.contains(&v)),
            Some("NotIn") => value.is_none_or(|v| !values.contains(&v)),
            Some("Exists") => value.is_some(),
            Some("DoesNotExist") => value.is_none(),
            _ => false,
        }
    });
    by_label && by_expression
}

/// Whether `term` (an affinity term of a pod in `owner_namespace`) matches `pod`.
fn term_matches(term: &Value, owner_namespace: &str, pod: &Value) -> bool {
    let namespace = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    let namespaces: Vec<&str> =
        term["namespaces"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    let in_scope =
        if namespaces.is_empty() { namespace == owner_namespace } else { namespaces.contains(&namespace) };
    in_scope && selects(&term["labelSelector"], &pod["metadata"]["labels"])
}

/// The pod's required anti-affinity terms.
fn required_terms(pod: &Value) -> impl Iterator<Item = &Value> {
    pod["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        .as_array()
        .into_iter()
        .flatten()
}

/// The pod's preferred anti-affinity terms, with their weights.
fn preferred_terms(pod: &Value) -> impl Iterator<Item = (&Value, i64)> {
    pod["spec"]["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|w| (&w["podAffinityTerm"], w["weight"].as_i64().unwrap_or(0)))
}

fn namespace(pod: &Value) -> &str {
    pod["metadata"]["namespace"].as_str().unwrap_or_default()
}

/// The node's value for a topology key (`None` when it has no such label).
fn topology<'a>(node: &'a Value, key: &str) -> Option<&'a str> {
    node["metadata"]["labels"][key].as_str()
}

/// Whether `pod` tolerates a taint (`key`, `value`, `effect`), as `ToleratesTaint` decides.
pub fn tolerates<'a>(pod: &'a Value, key: &str, value: &str, effect: &str) -> Option<&'a Value> {
    pod["spec"]["tolerations"].as_array().into_iter().flatten().find(|t| {
        let effect_ok = t["effect"].as_str().is_none_or(|e| e.is_empty() || e == effect);
        let key_ok = t["key"].as_str().is_none_or(|k| k.is_empty() || k == key);
        let value_ok = match t["operator"].as_str() {
            Some("Exists") => true,
            _ => t["value"].as_str().unwrap_or_default() == value,
        };
        effect_ok && key_ok && value_ok
    })
}

/// The first `NoSchedule`/`NoExecute` taint of `node` that `pod` does not tolerate.
fn untolerated_taint<'a>(pod: &Value, node: &'a Value) -> Option<&'a Value> {
    node["spec"]["taints"].as_array().into_iter().flatten().find(|taint| {
        let effect = taint["effect"].as_str().unwrap_or_default();
        matches!(effect, "NoSchedule" | "NoExecute")
            && tolerates(
                pod,
                taint["key"].as_str().unwrap_or_default(),
                taint["value"].as_str().unwrap_or_default(),
                effect,
            )
            .is_none()
    })
}

/// Why `node` cannot take `pod`, given the pods bound to every node (`placed`: pod, its node).
fn filter(pod: &Value, node: &Value, placed: &[(&Value, &Value)]) -> Option<String> {
    let cordoned = node["spec"]["unschedulable"] == true;
    if cordoned && tolerates(pod, UNSCHEDULABLE_TAINT, "", "NoSchedule").is_none() {
        return Some(CORDONED.to_owned());
    }
    if let Some(taint) = untolerated_taint(pod, node) {
        let (key, value) =
            (taint["key"].as_str().unwrap_or_default(), taint["value"].as_str().unwrap_or_default());
        return Some(format!("node(s) had untolerated taint {{{key}: {value}}}"));
    }
    let same_domain = |other_node: &Value, key: &str| {
        topology(node, key).is_some_and(|value| topology(other_node, key) == Some(value))
    };
    let own = namespace(pod);
    let anti = required_terms(pod).any(|term| {
        let key = term["topologyKey"].as_str().unwrap_or_default();
        placed.iter().any(|(other, on)| same_domain(on, key) && term_matches(term, own, other))
    });
    if anti {
        return Some(ANTI_AFFINITY.to_owned());
    }
    let existing = placed.iter().any(|(other, on)| {
        required_terms(other).any(|term| {
            let key = term["topologyKey"].as_str().unwrap_or_default();
            same_domain(on, key) && term_matches(term, namespace(other), pod)
        })
    });
    existing.then(|| EXISTING_ANTI_AFFINITY.to_owned())
}

/// The preferred anti-affinity score of `node` for `pod` (0 at best, lower is worse).
fn score(pod: &Value, node: &Value, placed: &[(&Value, &Value)]) -> i64 {
    let same_domain = |other_node: &Value, key: &str| {
        topology(node, key).is_some_and(|value| topology(other_node, key) == Some(value))
    };
    let mut total = 0;
    for (other, on) in placed {
        for (term, weight) in preferred_terms(pod) {
            let key = term["topologyKey"].as_str().unwrap_or_default();
            if same_domain(on, key) && term_matches(term, namespace(pod), other) {
                total -= weight;
            }
        }
        for (term, weight) in preferred_terms(other) {
            let key = term["topologyKey"].as_str().unwrap_or_default();
            if same_domain(on, key) && term_matches(term, namespace(other), pod) {
                total -= weight;
            }
        }
    }
    total
}

/// The node `pod` goes to, or the scheduler's message when none fits. `nodes` are the Node
/// objects; `placed` every pod bound to a node and still running there, with its Node.
pub fn choose<'a>(pod: &Value, nodes: &'a [Value], placed: &[(&Value, &Value)]) -> Result<&'a str, String> {
    let mut failures: BTreeMap<String, usize> = BTreeMap::new();
    let mut best: Option<((i64, i64), &str)> = None;
    for node in nodes {
        let name = node["metadata"]["name"].as_str().unwrap_or_default();
        if let Some(reason) = filter(pod, node, placed) {
            *failures.entry(reason).or_default() += 1;
            continue;
        }
        let load = placed.iter().filter(|(_, on)| on["metadata"]["name"] == name).count() as i64;
        let rank = (score(pod, node, placed), -load);
        if best.is_none_or(|(top, _)| rank > top) {
            best = Some((rank, name));
        }
    }
    best.map(|(_, name)| name).ok_or_else(|| {
        let failures: Vec<(String, usize)> = failures.into_iter().collect();
        no_node_for(nodes.len(), &failures)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str) -> Value {
        json!({"metadata": {"name": name, "labels": {HOSTNAME_LABEL: name}}, "spec": {}})
    }

    fn pod(name: &str, app: &str, anti: Value) -> Value {
        json!({"metadata": {"name": name, "namespace": "default", "labels": {"app": app}},
               "spec": {"affinity": {"podAntiAffinity": anti}}})
    }

    fn term(app: &str) -> Value {
        json!({"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": HOSTNAME_LABEL})
    }

    fn preferred(app: &str) -> Value {
        json!({"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": term(app)}]})
    }

    fn required(app: &str) -> Value {
        json!({"requiredDuringSchedulingIgnoredDuringExecution": [term(app)]})
    }

    /// Places `pods` one after the other as the scheduler would; their nodes' names.
    fn place_all(nodes: &[Value], pods: &[Value]) -> Vec<Result<String, String>> {
        let mut bound: Vec<(&Value, &Value)> = Vec::new();
        let mut chosen = Vec::new();
        for p in pods {
            let result = choose(p, nodes, &bound).map(str::to_owned);
            if let Ok(name) = &result {
                bound.push((p, nodes.iter().find(|n| n["metadata"]["name"] == name.as_str()).unwrap()));
            }
            chosen.push(result);
        }
        chosen
    }

    #[test]
    fn preferred_anti_affinity_spreads_pods_over_nodes_then_doubles_up() {
        // InterPodAffinity's Score (processTerm): each matching pod in the domain costs the weight.
        let nodes = [node("a"), node("b"), node("c")];
        let pods: Vec<Value> = (0..4).map(|i| pod(&format!("db-{i}"), "db", preferred("db"))).collect();
        let placed = place_all(&nodes, &pods);
        let names: Vec<&str> = placed.iter().map(|r| r.as_deref().unwrap()).collect();
        let mut first_three = names[..3].to_vec();
        first_three.sort_unstable();
        assert_eq!(first_three, ["a", "b", "c"], "one per node while nodes are free");
        assert!(names[3] == "a", "preferred only: the fourth still runs, on the first least-loaded node");
    }

    #[test]
    fn preferred_anti_affinity_of_a_bound_pod_repels_a_matching_newcomer() {
        // processExistingPod: the existing pod's preferred terms count against the incoming pod.
        let nodes = [node("a"), node("b")];
        let bound = pod("db-0", "db", preferred("db"));
        let newcomer = pod("db-1", "db", json!({}));
        assert_eq!(choose(&newcomer, &nodes, &[(&bound, &nodes[0])]), Ok("b"));
        let other = pod("web", "web", json!({}));
        let web_placed = [(&other, &nodes[1]), (&bound, &nodes[0])];
        assert_eq!(choose(&newcomer, &nodes, &web_placed), Ok("b"), "the repulsion outweighs the load");
    }

    #[test]
    fn required_anti_affinity_leaves_a_pod_pending_when_every_node_holds_a_match() {
        // satisfyPodAntiAffinity / satisfyExistingPodsAntiAffinity.
        let nodes = [node("a"), node("b")];
        let pods: Vec<Value> = (0..3).map(|i| pod(&format!("db-{i}"), "db", required("db"))).collect();
        let placed = place_all(&nodes, &pods);
        assert!(placed[0].is_ok() && placed[1].is_ok() && placed[0] != placed[1]);
        assert_eq!(
            placed[2],
            Err(no_node_for(2, &[(ANTI_AFFINITY.to_owned(), 2)])),
            "the scheduler's FitError message"
        );
        let plain = pod("plain", "db", json!({}));
        let bound = [(&pods[0], &nodes[0]), (&pods[1], &nodes[1])];
        assert_eq!(
            choose(&plain, &nodes, &bound),
            Err(no_node_for(2, &[(EXISTING_ANTI_AFFINITY.to_owned(), 2)])),
            "a bound pod's required term keeps a matching pod away"
        );
        let elsewhere =
            json!({"metadata": {"name": "x", "namespace": "other", "labels": {"app": "db"}}, "spec": {}});
        assert!(choose(&elsewhere, &nodes, &bound).is_ok(), "terms apply in their own namespace only");
    }

    #[test]
    fn a_cordoned_or_tainted_node_takes_no_pod_unless_tolerated() {
        // NodeUnschedulable.Filter and TaintToleration.Filter.
        let mut cordoned = node("a");
        cordoned["spec"]["unschedulable"] = json!(true);
        let mut tainted = node("b");
        tainted["spec"]["taints"] = json!([{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]);
        let nodes = [cordoned, tainted];
        let p = pod("p", "p", json!({}));
        let message = choose(&p, &nodes, &[]).unwrap_err();
        assert!(message.starts_with("0/2 nodes are available: "), "{message}");
        assert!(message.contains("1 node(s) were unschedulable"), "{message}");
        assert!(
            message.contains("1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }"),
            "{message}"
        );
        let mut tolerant = p.clone();
        tolerant["spec"]["tolerations"] =
            json!([{"key": "node.kubernetes.io/unreachable", "operator": "Exists"}]);
        assert_eq!(choose(&tolerant, &nodes, &[]), Ok("b"));
    }

    #[test]
    fn selectors_honour_match_expressions() {
        let labels = json!({"app": "db", "role": "primary"});
        assert!(selects(
            &json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["db"]}]}),
            &labels
        ));
        assert!(!selects(
            &json!({"matchExpressions": [{"key": "role", "operator": "NotIn", "values": ["primary"]}]}),
            &labels
        ));
        assert!(selects(
            &json!({"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]}),
            &labels
        ));
        assert!(!selects(&Value::Null, &labels), "no selector selects nothing");
    }
}
