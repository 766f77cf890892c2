//! `manifests/` and the Dockerfile: every object is valid for its kind (it deserialises into the
//! k8s-openapi type and serialises back to the same document, so a misspelt field fails), the
//! kustomization applies the CRD, RBAC and Deployment, and the Deployment is what production
//! needs (two replicas with leader election, probes, resources, a restricted security context).

use std::path::{Path, PathBuf};

use dbcluster_operator::databasecluster::api::types::DatabaseCluster;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// The crate's root: the Dockerfile, Cargo.toml and Cargo.lock.
fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn manifests() -> PathBuf {
    root().join("manifests")
}

fn dockerfile() -> String {
    std::fs::read_to_string(root().join("Dockerfile")).unwrap()
}

fn documents(file: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(manifests().join(file)).unwrap();
    serde_saphyr::from_multiple::<Value>(&text).unwrap().into_iter().filter(|d| !d.is_null()).collect()
}

/// Drops nulls so that a typed round trip (which omits unset fields) compares equal.
fn without_nulls(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k, without_nulls(v))).collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(without_nulls).collect()),
        other => other,
    }
}

fn typed<T: DeserializeOwned + Serialize>(document: &Value) -> T {
    let object: T = serde_json::from_value(document.clone())
        .unwrap_or_else(|e| panic!("{} does not deserialise: {e}", document["kind"]));
    let back = without_nulls(serde_json::to_value(&object).unwrap());
    assert_eq!(
        back,
        without_nulls(document.clone()),
        "{} has fields its type does not know",
        document["kind"]
    );
    object
}

/// Checks a document against its kind's type; fails for kinds the manifests should not hold.
fn check(document: &Value) {
    let kind = (document["apiVersion"].as_str().unwrap(), document["kind"].as_str().unwrap());
    match kind {
        ("v1", "Namespace") => drop(typed::<Namespace>(document)),
        ("v1", "ServiceAccount") => drop(typed::<ServiceAccount>(document)),
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => drop(typed::<ClusterRole>(document)),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => drop(typed::<ClusterRoleBinding>(document)),
        ("rbac.authorization.k8s.io/v1", "Role") => drop(typed::<Role>(document)),
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => drop(typed::<RoleBinding>(document)),
        ("apps/v1", "Deployment") => drop(typed::<Deployment>(document)),
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => {
            drop(typed::<CustomResourceDefinition>(document))
        }
        ("databases.madmmas.dev/v1alpha1", "DatabaseCluster") => drop(typed::<DatabaseCluster>(document)),
        other => panic!("unexpected kind {other:?} in manifests/"),
    }
}

#[test]
fn every_object_in_manifests_is_valid_for_its_kind() {
    let mut files = vec!["crd.yaml".to_string(), "rbac.yaml".to_string(), "deployment.yaml".to_string()];
    for entry in std::fs::read_dir(manifests().join("samples")).unwrap() {
        files.push(format!("samples/{}", entry.unwrap().file_name().to_string_lossy()));
    }
    let mut seen = 0;
    for file in &files {
        for document in documents(file) {
            check(&document);
            seen += 1;
        }
    }
    assert!(seen >= 8, "only {seen} objects");
}

#[test]
fn the_kustomization_applies_the_crd_rbac_and_deployment() {
    let kustomization = &documents("kustomization.yaml")[0];
    assert_eq!(kustomization["kind"], "Kustomization");
    let resources: Vec<&str> =
        kustomization["resources"].as_array().unwrap().iter().map(|r| r.as_str().unwrap()).collect();
    assert_eq!(resources, ["crd.yaml", "rbac.yaml", "deployment.yaml"]);
    for resource in resources {
        assert!(manifests().join(resource).exists());
    }
}

fn find<T: DeserializeOwned + Serialize>(file: &str, kind: &str) -> T {
    typed(documents(file).iter().find(|d| d["kind"] == kind).unwrap_or_else(|| panic!("no {kind} in {file}")))
}

#[test]
fn the_deployment_runs_two_restricted_replicas_with_leader_election_and_probes() {
    let deployment: Deployment = find("deployment.yaml", "Deployment");
    let namespace = deployment.metadata.namespace.clone().unwrap();
    let spec = deployment.spec.unwrap();
    assert_eq!(spec.replicas, Some(2));
    let pod = spec.template.spec.unwrap();
    assert!(pod.termination_grace_period_seconds.unwrap() > 30, "longer than --shutdown-timeout");
    let pod_security = pod.security_context.unwrap();
    assert_eq!(pod_security.run_as_non_root, Some(true));
    assert_eq!(pod_security.seccomp_profile.unwrap().type_, "RuntimeDefault");

    let [container] = &pod.containers[..] else { panic!("one container") };
    let args = container.args.clone().unwrap();
    assert!(args.contains(&"--leader-elect".to_string()));
    assert!(
        args.contains(&"--metrics-secure".to_string()),
        "/metrics behind TokenReview + SubjectAccessReview"
    );
    assert!(!args.contains(&"run".to_string()), "the image's entrypoint already says `run`");
    let port = |name: &str| {
        container
            .ports
            .as_ref()
            .unwrap()
            .iter()
            .find(|p| p.name.as_deref() == Some(name))
            .unwrap()
            .container_port
    };
    assert_eq!((port("metrics"), port("health")), (8080, 8081));
    let probe_path = |probe: &Option<k8s_openapi::api::core::v1::Probe>| {
        let get = probe.clone().unwrap().http_get.unwrap();
        (get.path.unwrap(), serde_json::to_value(get.port).unwrap())
    };
    assert_eq!(probe_path(&container.liveness_probe), ("/healthz".to_string(), Value::from("health")));
    assert_eq!(probe_path(&container.readiness_probe), ("/readyz".to_string(), Value::from("health")));
    // Under --metrics-secure the metrics port is HTTPS; the probes' own port stays plain HTTP.
    let scheme =
        |probe: &Option<k8s_openapi::api::core::v1::Probe>| probe.clone().unwrap().http_get.unwrap().scheme;
    assert!(matches!(scheme(&container.liveness_probe).as_deref(), None | Some("HTTP")));
    assert!(matches!(scheme(&container.readiness_probe).as_deref(), None | Some("HTTP")));
    let annotations = spec.template.metadata.clone().unwrap().annotations.unwrap();
    assert_eq!(annotations["prometheus.io/scheme"], "https");
    // The certificate Secret is optional: the pod starts without it.
    let volume = pod.volumes.as_ref().unwrap().iter().find(|v| v.name == "metrics-tls").unwrap();
    let secret = volume.secret.clone().unwrap();
    assert_eq!(
        (secret.secret_name.as_deref(), secret.optional),
        (Some("dbcluster-operator-metrics-tls"), Some(true))
    );
    let mount = container.volume_mounts.as_ref().unwrap().iter().find(|m| m.name == "metrics-tls").unwrap();
    assert_eq!(mount.read_only, Some(true));
    let resources = container.resources.clone().unwrap();
    for key in ["cpu", "memory"] {
        assert!(resources.requests.as_ref().unwrap().contains_key(key));
        assert!(resources.limits.as_ref().unwrap().contains_key(key));
    }
    let security = container.security_context.clone().unwrap();
    assert_eq!(security.read_only_root_filesystem, Some(true));
    assert_eq!(security.allow_privilege_escalation, Some(false));
    assert_eq!(security.run_as_non_root, Some(true));
    assert_eq!(security.capabilities.unwrap().drop, Some(vec!["ALL".to_string()]));

    // The service account exists and is bound, in the Deployment's namespace (the lease's too).
    let account: ServiceAccount = find("rbac.yaml", "ServiceAccount");
    assert_eq!(pod.service_account_name, account.metadata.name);
    assert_eq!(account.metadata.namespace.as_deref(), Some(namespace.as_str()));
    let cluster_binding: ClusterRoleBinding = find("rbac.yaml", "ClusterRoleBinding");
    let binding: RoleBinding = find("rbac.yaml", "RoleBinding");
    let role: Role = find("rbac.yaml", "Role");
    assert_eq!(role.metadata.namespace.as_deref(), Some(namespace.as_str()));
    for subjects in [cluster_binding.subjects.unwrap(), binding.subjects.unwrap()] {
        assert_eq!(subjects[0].name, account.metadata.name.clone().unwrap());
        assert_eq!(subjects[0].namespace.as_deref(), Some(namespace.as_str()));
    }
    let ns: Namespace = find("deployment.yaml", "Namespace");
    assert_eq!(ns.metadata.name.as_deref(), Some(namespace.as_str()));
}

#[test]
fn the_dockerfile_builds_locked_and_runs_non_root() {
    let dockerfile = dockerfile();
    assert_eq!(dockerfile.lines().filter(|l| l.starts_with("FROM ")).count(), 2, "multi-stage");
    assert!(dockerfile.contains("cargo build --profile dist --locked"));
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let dist = manifest.split("[profile.dist]").nth(1).expect("Cargo.toml has the dist profile");
    assert!(
        dist.contains(r#"lto = "fat""#) && dist.contains("codegen-units = 1"),
        "what ships is optimised whole"
    );
    assert!(dockerfile.contains("distroless") && dockerfile.contains(":nonroot"));
    assert!(dockerfile.lines().any(|l| l.starts_with("USER 65532")));
    assert!(dockerfile.contains(r#"ENTRYPOINT ["/usr/local/bin/dbcluster-operator", "run"]"#));
}

#[test]
fn the_image_is_built_without_the_simulator_with_jemalloc_from_pinned_bases_with_cached_dependencies() {
    let dockerfile = dockerfile();
    let builds: Vec<&str> = dockerfile.lines().filter(|l| l.contains("cargo build")).collect();
    assert_eq!(builds.len(), 2, "the dependencies, then the crate: {builds:?}");
    assert!(builds.iter().all(|l| l.contains("--no-default-features")), "{builds:?}");
    assert!(builds.iter().all(|l| l.contains("--features jemalloc")), "the image's allocator: {builds:?}");
    for from in dockerfile.lines().filter_map(|l| l.strip_prefix("FROM ")) {
        let image = from.split_whitespace().next().unwrap();
        let (_, tag) = image.rsplit_once(':').unwrap_or_else(|| panic!("{image} has no tag"));
        assert!(tag != "latest" && !tag.starts_with("1-"), "{image} floats");
    }
    let position = |text: &str| dockerfile.find(text).unwrap_or_else(|| panic!("{text} in the Dockerfile"));
    assert!(position("COPY Cargo.toml Cargo.lock") < position("cargo build"));
    assert!(
        position("cargo build") < position("COPY src src"),
        "dependencies build before the sources arrive"
    );
}

/// The Dockerfile's first `RUN`: the commands that make the dependency layer's stub crate, before
/// its `cargo build` (the continuation lines joined).
fn dependency_stub_commands(dockerfile: &str) -> String {
    let start = dockerfile.find("\nRUN ").expect("the Dockerfile has a RUN") + "\nRUN ".len();
    let run = dockerfile[start..].split("\n\n").next().unwrap().replace("\\\n", " ");
    let commands: Vec<&str> =
        run.split("&&").map(str::trim).take_while(|c| !c.starts_with("cargo build")).collect();
    commands.join(" && ")
}

#[test]
fn the_dockerfiles_dependency_stub_is_a_crate_cargo_accepts() {
    // Cargo refuses a manifest whose declared targets have no file (a bench added to Cargo.toml
    // and not to the stub broke the image's build once): make the stub as the Dockerfile does,
    // beside the real Cargo.toml and Cargo.lock, and have cargo load it and resolve its locked
    // dependencies, offline, for this machine (`scripts/test` fetched them).
    let stub = tempfile::tempdir().unwrap();
    for file in ["Cargo.toml", "Cargo.lock"] {
        std::fs::copy(root().join(file), stub.path().join(file)).unwrap();
    }
    let commands = dependency_stub_commands(&dockerfile());
    assert!(commands.contains("src/main.rs"), "{commands}");
    let made =
        std::process::Command::new("sh").arg("-c").arg(&commands).current_dir(stub.path()).output().unwrap();
    assert!(made.status.success(), "{commands}: {}", String::from_utf8_lossy(&made.stderr));

    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = std::process::Command::new(rustc).arg("-vV").output().unwrap();
    let version = String::from_utf8(version.stdout).unwrap();
    let host = version.lines().find_map(|l| l.strip_prefix("host: ")).expect("rustc -vV names the host");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let fetched = std::process::Command::new(cargo)
        .args(["fetch", "--locked", "--offline", "--target", host])
        .current_dir(stub.path())
        .output()
        .unwrap();
    assert!(fetched.status.success(), "cargo refuses the stub: {}", String::from_utf8_lossy(&fetched.stderr));
}
