//! `kubectl exec -it <pod> -- psql`: psql run as the pod's user with the environment the
//! operator's pod spec gives the `postgres` container (`PGHOST`, the socket's directory, and
//! `PGUSER`, the superuser), the run directory mounted where the spec mounts it (a private mount
//! namespace, as a kubelet's exec enters the container's), against an instance of
//! `instance_program`'s fixture: it connects as the superuser over the socket without a password,
//! while the same login over TCP needs one (no trust over TCP).
#![cfg(feature = "sim")]

use std::path::Path;
use std::process::Output;

use dbcluster_operator::databasecluster::api::types::{DatabaseCluster, DatabaseClusterSpec};
use dbcluster_operator::databasecluster::api::validation::validate_spec;
use dbcluster_operator::databasecluster::specs::credentials::Login;
use dbcluster_operator::databasecluster::specs::resources::{
    Owner, POSTGRES_CONTAINER, RUN_MOUNT_PATH, build_statefulset,
};
use k8s_openapi::api::core::v1::EnvVar;

use crate::common::postgres::POSTGRES_BIN;
use crate::instance_program::Fixture;

/// The `PG*` variables of the operator's `postgres` container, resolved as a kubelet resolves
/// them (a Secret's key read from the fixture's mounted Secrets).
fn pod_environment(fixture: &Fixture) -> Vec<(String, String)> {
    let mut cluster = DatabaseCluster::new(
        "db",
        DatabaseClusterSpec {
            replicas: 2,
            version: "15".into(),
            storage_size: "1Gi".into(),
            ..DatabaseClusterSpec::default()
        },
    );
    cluster.metadata.namespace = Some("default".into());
    cluster.metadata.uid = Some("uid".into());
    let spec = validate_spec(&cluster.spec).unwrap();
    let sts = build_statefulset(&Owner::of(&cluster).unwrap(), &spec);
    let pod = sts.spec.unwrap().template.spec.unwrap();
    let container = pod.containers.into_iter().find(|c| c.name == POSTGRES_CONTAINER).unwrap();
    let resolve = |var: &EnvVar| -> String {
        if let Some(value) = &var.value {
            return value.clone();
        }
        let reference = var
            .value_from
            .as_ref()
            .and_then(|f| f.secret_key_ref.as_ref())
            .expect("a value or a Secret's key");
        let login =
            Login::ALL.into_iter().find(|l| reference.name.ends_with(l.mount_dir())).expect("a login Secret");
        std::fs::read_to_string(fixture.root.join("sec").join(login.mount_dir()).join(&reference.key))
            .unwrap()
    };
    let vars = container.env.unwrap().into_iter().filter(|v| v.name.starts_with("PG") && v.name != "PGDATA");
    vars.map(|v| (v.name.clone(), resolve(&v))).collect()
}

/// psql as the pod's user with `env`, pod `0`'s run directory at `RUN_MOUNT_PATH`.
fn psql(fixture: &Fixture, env: &[(String, String)], sql: &str) -> Output {
    let run = fixture.root.join("db-0").join("run");
    let env: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let inner = format!(
        "mount -t tmpfs tmpfs {parent} && mkdir -p {RUN_MOUNT_PATH} && mount --bind {run} {RUN_MOUNT_PATH} && \
         exec setpriv --reuid=postgres --regid=postgres --init-groups env -i PATH={POSTGRES_BIN}:/usr/bin:/bin {env} \
         psql -XAtw -c \"{sql}\"",
        parent = Path::new(RUN_MOUNT_PATH).parent().unwrap().display(),
        run = run.display(),
        env = env.join(" "),
    );
    std::process::Command::new("unshare").args(["-m", "bash", "-c", &inner]).output().unwrap()
}

#[tokio::test]
async fn psql_in_the_pod_reaches_the_server_as_the_superuser_over_the_socket_only() {
    let mut fixture = Fixture::new(43, &[]).await;
    fixture.init(0).await;
    fixture.start(0).await;
    let env = pod_environment(&fixture);
    let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(names, ["PGHOST", "PGUSER"]);

    let output = psql(
        &fixture,
        &env,
        "SELECT current_user, inet_server_addr() IS NULL, rolsuper FROM pg_roles WHERE rolname = current_user",
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
    let superuser = std::fs::read_to_string(fixture.root.join("sec/superuser/username")).unwrap();
    assert_eq!(stdout.trim(), format!("{superuser}|t|t"), "the Secret's superuser, over the socket");

    // The same login over TCP, on the pod's address: a password is asked, none is given.
    let mut tcp = env.clone();
    tcp.retain(|(k, _)| k != "PGHOST");
    tcp.push(("PGHOST".into(), fixture.ip(0)));
    let refused = psql(&fixture, &tcp, "SELECT 1");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && stderr.contains("no password supplied"), "{stderr}");
}
