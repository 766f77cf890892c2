//! The operator's commands to the instance manager (`POST /promote`, `/checkpoint`, `/reload`,
//! `/slots`) and the Secrets it applies while it runs, against real PostgreSQL 15.

use super::*;

use dbcluster_operator::databasecluster::instances::InstanceError;
use dbcluster_operator::databasecluster::instances::client::checkpoint;
use dbcluster_operator::instance::commands::Command;

#[tokio::test]
async fn the_operators_commands_need_the_token_and_manage_only_the_instances_slots() {
    let fixture = primary_and_standby(9).await;
    for command in Command::ALL {
        for token in [None, Some("wrong")] {
            let answer = fixture.request_on(0, STATUS_PORT, "POST", command.path(), token).await;
            assert_eq!(answer.map(|(code, _)| code), Some(401), "{} with {token:?}", command.path());
        }
    }
    let answer = fixture.request_on(0, STATUS_PORT, "GET", "/promote", Some(TOKEN)).await;
    assert_eq!(answer.map(|(code, _)| code), Some(405), "a command is a POST");

    let manager = fixture.manager(0);
    let slots = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>();
    let create = SlotChanges { create: slots(&["instance_3"]), drop: Vec::new() };
    change_slots(&manager, &create).await.unwrap();
    change_slots(&manager, &create).await.expect("a slot that exists already counts as created");
    let names = |facts: &dbcluster_operator::databasecluster::instances::InstanceFacts| {
        facts.slots.iter().map(|s| s.name.clone()).collect::<Vec<_>>()
    };
    assert_eq!(names(&observe(&manager, STATUS_TIMEOUT).await.unwrap()), ["instance_1", "instance_3"]);
    let drop = SlotChanges { create: Vec::new(), drop: slots(&["instance_3", "instance_7"]) };
    change_slots(&manager, &drop).await.expect("a slot that does not exist counts as dropped");
    assert_eq!(names(&observe(&manager, STATUS_TIMEOUT).await.unwrap()), ["instance_1"]);
    let foreign = SlotChanges { create: slots(&["backup_tool"]), drop: Vec::new() };
    let refused = change_slots(&manager, &foreign).await.unwrap_err();
    assert!(matches!(refused, InstanceError::Answer { code: 400, .. }), "{refused}");
    let active = SlotChanges { create: Vec::new(), drop: slots(&["instance_1"]) };
    let in_use = change_slots(&manager, &active).await.unwrap_err();
    assert!(
        matches!(in_use, InstanceError::Answer { code: 500, .. }),
        "a slot a standby streams over stays: {in_use}"
    );

    // A checkpoint on request: the report's checkpoint moves past the WAL written before it.
    let before = observe(&manager, STATUS_TIMEOUT).await.unwrap().checkpoint_lsn.unwrap();
    let app = connect(&fixture.target(0, Login::App, "app")).await.unwrap();
    app.batch_execute("CREATE TABLE filler AS SELECT generate_series(1, 10000) AS i").await.unwrap();
    checkpoint(&manager).await.unwrap();
    let after = observe(&manager, STATUS_TIMEOUT).await.unwrap().checkpoint_lsn.unwrap();
    assert!(after > before, "checkpoint at {after}, before at {before}");
}

/// A Secret rotated while the instances run: the primary applies it, the standby rewrites its
/// password file, and both report the versions they applied (the replication login, which has no
/// password, reports none, even from a Secret of an older version that still holds one, as the
/// fixture's do); the standby's walreceiver, which logs in with its client certificate, streams
/// again when its connection breaks.
#[tokio::test]
async fn a_rotated_secret_reaches_the_primary_and_the_standbys_password_file() {
    let fixture = primary_and_standby(10).await;
    fixture.set_secret(Login::Superuser, "rotated-superuser-password");
    let wanted = credential_version(TOKEN, "postgres", "rotated-superuser-password");
    let (primary, standby) = eventually_some("both report the rotated superuser Secret applied", || async {
        let primary = observe(&fixture.manager(0), STATUS_TIMEOUT).await.ok()?.credentials;
        let standby = observe(&fixture.manager(1), STATUS_TIMEOUT).await.ok()?.credentials;
        (primary.get("superuser") == Some(&wanted) && standby.get("superuser") == Some(&wanted))
            .then_some((primary, standby))
    })
    .await;
    for versions in [primary, standby] {
        assert!(!versions.contains_key("replication"), "no version for a login without a password");
    }
    let su = connect(&fixture.superuser(0)).await.unwrap();
    su.batch_execute("SELECT pg_terminate_backend(pid) FROM pg_stat_replication").await.unwrap();
    eventually_some("the standby streams again by its certificate", || async {
        let standbys = observe(&fixture.manager(0), STATUS_TIMEOUT).await.ok()?.standbys;
        standbys.iter().any(|s| s.name == "db-1" && s.state == "streaming").then_some(())
    })
    .await;
    let connections = su
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'walsender' AND usename = 'replicator'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(connections.get::<_, i64>(0), 1);
}
