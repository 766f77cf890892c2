//! The pod status the process kubelet reports, from what it knows of each container. Pure data:
//! the supervisors change it, [`PodModel::to_status`] renders it as the API's `PodStatus`.
//!
//! Phase: `Pending` until the init containers are done and every container has started once
//! (an unpullable image, a config error or a container being created keep it there); `Succeeded`
//! or `Failed` once every container has terminated for good (no restart is coming); `Running`
//! otherwise. `Ready` = `ContainersReady` = every container running and ready. A pod no node
//! could take (`unschedulable`) shows only `PodScheduled=False`, as the scheduler leaves it.

use serde_json::{Value, json};

/// Why a pod does not run when the simulator is not root.
pub const WITHOUT_ROOT: &str = "the process kubelet needs root (mount and PID namespaces, bind mounts, runAsUser): run the simulator as root, or use the timer kubelet";

/// One container's state, as `containerStatuses[].state` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContainerState {
    /// Not running: `ContainerCreating`, `ErrImagePull`, `CrashLoopBackOff`, `PodInitializing`…
    Waiting {
        /// The reason.
        reason: String,
        /// What went wrong, if anything.
        message: Option<String>,
    },
    /// Running since `started_at`.
    Running {
        /// RFC 3339.
        started_at: String,
    },
    /// Exited.
    Terminated {
        /// The exit code (128 + signal for a killed process).
        exit_code: i32,
        /// `Completed`, `Error`, `OOMKilled`…
        reason: String,
        /// The termination message (`terminationMessagePath`, or the log's tail with
        /// `FallbackToLogsOnError`), when there is one.
        message: Option<String>,
        /// RFC 3339.
        started_at: String,
        /// RFC 3339.
        finished_at: String,
    },
}

impl ContainerState {
    /// A waiting state.
    pub fn waiting(reason: &str, message: Option<String>) -> Self {
        ContainerState::Waiting { reason: reason.to_owned(), message }
    }

    fn to_json(&self) -> Value {
        match self {
            ContainerState::Waiting { reason, message } => match message {
                Some(m) => json!({"waiting": {"reason": reason, "message": m}}),
                None => json!({"waiting": {"reason": reason}}),
            },
            ContainerState::Running { started_at } => json!({"running": {"startedAt": started_at}}),
            ContainerState::Terminated { exit_code, reason, message, started_at, finished_at } => {
                let mut terminated = json!({"exitCode": exit_code, "reason": reason, "startedAt": started_at, "finishedAt": finished_at});
                if let Some(m) = message {
                    terminated["message"] = json!(m);
                }
                json!({ "terminated": terminated })
            }
        }
    }
}

/// What the kubelet knows of one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerModel {
    /// The container's name.
    pub name: String,
    /// Its image.
    pub image: String,
    /// The current state.
    pub state: ContainerState,
    /// The previous run's final state.
    pub last_state: Option<ContainerState>,
    /// How many times it was restarted.
    pub restart_count: u32,
    /// Whether the readiness probe (or no probe) says ready.
    pub ready: bool,
    /// Whether the startup probe (or no probe) passed.
    pub started: bool,
    /// Whether it has terminated and will not run again.
    pub finished: bool,
}

impl ContainerModel {
    /// A container about to be created.
    pub fn new(container: &Value) -> Self {
        Self {
            name: container["name"].as_str().unwrap_or_default().to_owned(),
            image: container["image"].as_str().unwrap_or_default().to_owned(),
            state: ContainerState::waiting("ContainerCreating", None),
            last_state: None,
            restart_count: 0,
            ready: false,
            started: false,
            finished: false,
        }
    }

    fn has_run(&self) -> bool {
        self.restart_count > 0 || !matches!(self.state, ContainerState::Waiting { .. })
    }

    fn to_json(&self, image_known: bool) -> Value {
        let mut status = json!({
            "name": self.name,
            "image": self.image,
            "imageID": if image_known { format!("process-kubelet://{}", self.image) } else { String::new() },
            "ready": self.ready,
            "started": self.started,
            "restartCount": self.restart_count,
            "state": self.state.to_json(),
            "lastState": self.last_state.as_ref().map_or(json!({}), ContainerState::to_json),
        });
        if matches!(self.state, ContainerState::Running { .. }) {
            status["containerID"] = json!(format!("process://{}", self.name));
        }
        status
    }
}

/// What the kubelet knows of one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodModel {
    /// The pod IP.
    pub pod_ip: String,
    /// When the kubelet took the pod (RFC 3339).
    pub start_time: String,
    /// The init containers.
    pub init: Vec<ContainerModel>,
    /// Whether every init container has succeeded.
    pub initialized: bool,
    /// The containers.
    pub containers: Vec<ContainerModel>,
    /// When `PodScheduled` last changed (RFC 3339).
    pub scheduled_time: String,
    /// When `Initialized` last changed.
    pub initialized_time: String,
    /// When `Ready` and `ContainersReady` last changed.
    pub ready_time: String,
    /// The scheduler's message while no node can take the pod (a claim it needs is missing or
    /// not bound): the pod is then reported unscheduled, as a real scheduler leaves it.
    pub unschedulable: Option<String>,
}

impl PodModel {
    /// A pod whose containers are all about to be created.
    pub fn new(pod: &Value, pod_ip: String, now: &str) -> Self {
        let models = |field: &str| {
            pod["spec"][field].as_array().into_iter().flatten().map(ContainerModel::new).collect::<Vec<_>>()
        };
        let init = models("initContainers");
        Self {
            pod_ip,
            start_time: now.to_owned(),
            initialized: init.is_empty(),
            init,
            containers: models("containers"),
            scheduled_time: now.to_owned(),
            initialized_time: now.to_owned(),
            ready_time: now.to_owned(),
            unschedulable: None,
        }
    }

    /// The pod's phase.
    pub fn phase(&self) -> &'static str {
        if self.init.iter().any(|c| {
            c.finished && matches!(c.state, ContainerState::Terminated { exit_code, .. } if exit_code != 0)
        }) {
            return "Failed";
        }
        if !self.initialized {
            return "Pending";
        }
        if !self.containers.is_empty() && self.containers.iter().all(|c| c.finished) {
            let all_ok = self
                .containers
                .iter()
                .all(|c| matches!(c.state, ContainerState::Terminated { exit_code: 0, .. }));
            return if all_ok { "Succeeded" } else { "Failed" };
        }
        if self.containers.iter().all(ContainerModel::has_run) { "Running" } else { "Pending" }
    }

    /// Every container waits with `RunContainerError` and `message` (the process kubelet
    /// without root runs nothing; see the module doc of `kubelet`).
    pub fn refuse(&mut self, message: &str) {
        for c in self.init.iter_mut().chain(self.containers.iter_mut()) {
            c.state = ContainerState::waiting("RunContainerError", Some(message.to_owned()));
        }
    }

    /// Reports the pod unschedulable with the scheduler's message `why`, or scheduled (`None`),
    /// at `now`: `PodScheduled` flips, and the conditions a scheduled pod shows start at `now`.
    pub fn set_unschedulable(&mut self, why: Option<String>, now: &str) {
        if self.unschedulable != why {
            self.unschedulable = why;
            self.scheduled_time = now.to_owned();
            self.initialized_time = now.to_owned();
            self.ready_time = now.to_owned();
        }
    }

    /// Whether every container is running and ready.
    pub fn ready(&self) -> bool {
        !self.containers.is_empty()
            && self.containers.iter().all(|c| c.ready && matches!(c.state, ContainerState::Running { .. }))
    }

    /// The API's `PodStatus`, with the conditions a 1.28 kubelet writes (`generateAPIPodStatus`
    /// in pkg/kubelet/kubelet_pods.go and pkg/kubelet/status/generate.go: `Initialized`, `Ready`,
    /// `ContainersReady`, `PodScheduled`, each False one with its reason and the containers it
    /// waits for; `PodReadyToStartContainers` is an alpha gate off in 1.28), and each condition's
    /// `lastTransitionTime` when its own status last changed.
    pub fn to_status(&self, image_known: bool) -> Value {
        let ready = self.ready();
        let condition = |kind: &str, ok: bool, at: &str| json!({"type": kind, "status": if ok { "True" } else { "False" }, "lastProbeTime": null, "lastTransitionTime": at});
        if let Some(why) = &self.unschedulable {
            // No node, so no IP, start time, container statuses or other condition yet.
            let mut scheduled = condition("PodScheduled", false, &self.scheduled_time);
            scheduled["reason"] = json!("Unschedulable");
            scheduled["message"] = json!(why);
            return json!({"phase": "Pending", "conditions": [scheduled], "qosClass": "Burstable"});
        }
        let waiting_for = |containers: &[ContainerModel], done: fn(&ContainerModel) -> bool| {
            let names: Vec<&str> = containers.iter().filter(|c| !done(c)).map(|c| c.name.as_str()).collect();
            format!("[{}]", names.join(" "))
        };
        let mut initialized = condition("Initialized", self.initialized, &self.initialized_time);
        if !self.initialized {
            initialized["reason"] = json!("ContainersNotInitialized");
            let pending = waiting_for(&self.init, |c| c.finished);
            initialized["message"] = json!(format!("containers with incomplete status: {pending}"));
        }
        let mut ready_conditions =
            ["Ready", "ContainersReady"].map(|kind| condition(kind, ready, &self.ready_time));
        if !ready {
            let unready = waiting_for(&self.containers, |c| c.ready);
            for c in &mut ready_conditions {
                c["reason"] = json!("ContainersNotReady");
                c["message"] = json!(format!("containers with unready status: {unready}"));
            }
        }
        let [ready_condition, containers_ready] = ready_conditions;
        let mut status = json!({
            "phase": self.phase(),
            "conditions": [
                initialized,
                ready_condition,
                containers_ready,
                condition("PodScheduled", true, &self.scheduled_time),
            ],
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
            "podIP": self.pod_ip,
            "podIPs": [{"ip": self.pod_ip}],
            "startTime": self.start_time,
            "containerStatuses": self.containers.iter().map(|c| c.to_json(image_known)).collect::<Vec<_>>(),
            "qosClass": "Burstable",
        });
        if !self.init.is_empty() {
            status["initContainerStatuses"] =
                json!(self.init.iter().map(|c| c.to_json(image_known)).collect::<Vec<_>>());
        }
        status
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Value {
        json!({"spec": {"initContainers": [{"name": "init", "image": "postgres:15"}], "containers": [{"name": "db", "image": "postgres:15"}]}})
    }

    fn terminated(code: i32) -> ContainerState {
        ContainerState::Terminated {
            exit_code: code,
            reason: "Error".into(),
            message: Some("why".into()),
            started_at: "a".into(),
            finished_at: "b".into(),
        }
    }

    #[test]
    fn a_pod_is_pending_until_initialised_and_started() {
        let mut model = PodModel::new(&pod(), "127.10.0.1".into(), "t");
        assert_eq!(model.phase(), "Pending");
        model.initialized = true;
        assert_eq!(model.phase(), "Pending");
        model.containers[0].state = ContainerState::Running { started_at: "t".into() };
        assert_eq!(model.phase(), "Running");
        assert!(!model.ready());
        model.containers[0].ready = true;
        assert!(model.ready());
        let status = model.to_status(true);
        assert_eq!(
            status["conditions"][1],
            json!({"type": "Ready", "status": "True", "lastProbeTime": null, "lastTransitionTime": "t"})
        );
        assert_eq!(status["podIP"], "127.10.0.1");
    }

    /// The conditions of a pod in each state 1.28 leaves it in (`generateAPIPodStatus`,
    /// `GeneratePodReadyCondition`, `GeneratePodInitializedCondition` in
    /// pkg/kubelet/status/generate.go; the scheduler's `PodScheduled=False` for a pod no node
    /// takes), with each condition's own transition time.
    #[test]
    fn conditions_are_those_a_1_28_kubelet_and_scheduler_write() {
        let conditions = |model: &PodModel| model.to_status(true)["conditions"].as_array().unwrap().clone();
        let find = |all: &[Value], kind: &str| all.iter().find(|c| c["type"] == kind).cloned();

        let mut model = PodModel::new(&pod(), "ip".into(), "t0");
        model.set_unschedulable(Some("0/1 nodes are available: 1 node(s) were unschedulable.".into()), "t1");
        let unscheduled = model.to_status(true);
        assert_eq!(unscheduled["phase"], "Pending");
        assert_eq!(unscheduled["podIP"], Value::Null);
        let all = conditions(&model);
        assert_eq!(all.len(), 1, "only PodScheduled: {all:?}");
        assert_eq!(
            (&all[0]["type"], &all[0]["status"], &all[0]["reason"]),
            (&json!("PodScheduled"), &json!("False"), &json!("Unschedulable"))
        );
        assert_eq!(all[0]["lastTransitionTime"], "t1");

        model.set_unschedulable(None, "t2");
        let all = conditions(&model);
        let initialized = find(&all, "Initialized").unwrap();
        assert_eq!(
            (&initialized["status"], &initialized["reason"]),
            (&json!("False"), &json!("ContainersNotInitialized"))
        );
        assert_eq!(initialized["message"], "containers with incomplete status: [init]");
        let ready = find(&all, "Ready").unwrap();
        assert_eq!((&ready["status"], &ready["reason"]), (&json!("False"), &json!("ContainersNotReady")));
        assert_eq!(ready["message"], "containers with unready status: [db]");
        assert_eq!(find(&all, "PodScheduled").unwrap()["lastTransitionTime"], "t2");
        assert_eq!(find(&all, "PodReadyToStartContainers"), None, "an alpha gate, off in 1.28");

        // A container waiting (a crash loop) after the pod was initialised: Ready stays False
        // since its own transition, whatever else changes.
        model.init[0].finished = true;
        model.initialized = true;
        model.initialized_time = "t3".into();
        model.containers[0].state = ContainerState::waiting("CrashLoopBackOff", None);
        let all = conditions(&model);
        assert_eq!(find(&all, "Initialized").unwrap()["lastTransitionTime"], "t3");
        assert_eq!(find(&all, "Ready").unwrap()["lastTransitionTime"], "t2");
        assert_eq!(find(&all, "ContainersReady").unwrap()["reason"], "ContainersNotReady");
    }

    #[test]
    fn a_crash_looping_container_keeps_the_pod_running_and_unready() {
        let mut model = PodModel::new(&pod(), "ip".into(), "t");
        model.initialized = true;
        model.containers[0].restart_count = 3;
        model.containers[0].last_state = Some(terminated(1));
        model.containers[0].state = ContainerState::waiting("CrashLoopBackOff", Some("back-off".into()));
        assert_eq!(model.phase(), "Running");
        let status = model.to_status(true);
        assert_eq!(status["containerStatuses"][0]["state"]["waiting"]["reason"], "CrashLoopBackOff");
        assert_eq!(status["containerStatuses"][0]["lastState"]["terminated"]["exitCode"], 1);
        assert_eq!(status["containerStatuses"][0]["lastState"]["terminated"]["message"], "why");
    }

    #[test]
    fn without_root_every_container_waits_with_the_reason_and_the_pod_stays_pending() {
        let mut model = PodModel::new(&pod(), "ip".into(), "t");
        model.refuse(WITHOUT_ROOT);
        assert_eq!(model.phase(), "Pending");
        let status = model.to_status(true);
        for field in ["initContainerStatuses", "containerStatuses"] {
            let waiting = &status[field][0]["state"]["waiting"];
            assert_eq!(waiting["reason"], "RunContainerError", "{status}");
            assert!(waiting["message"].as_str().unwrap().contains("needs root"), "{status}");
        }
    }

    #[test]
    fn finished_containers_decide_success_or_failure() {
        let mut model = PodModel::new(&pod(), "ip".into(), "t");
        model.initialized = true;
        model.containers[0].finished = true;
        model.containers[0].state = terminated(0);
        assert_eq!(model.phase(), "Succeeded");
        model.containers[0].state = terminated(2);
        assert_eq!(model.phase(), "Failed");
        let mut failed_init = PodModel::new(&pod(), "ip".into(), "t");
        failed_init.init[0].finished = true;
        failed_init.init[0].state = terminated(1);
        assert_eq!(failed_init.phase(), "Failed");
    }
}
