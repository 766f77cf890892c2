//! WAL archiving to a real S3-compatible server (moto, `common::s3`) by a real PostgreSQL 15 run
//! under the instance manager (`instance run` with the object store's environment, as the
//! operator's pod spec sets it): every finished segment is archived through `instance
//! wal-archive`, restored by `wal-restore`'s function, a retry of an archived segment succeeds, an object with the same name and other
//! content is never overwritten and is reported in `/status`, and while the store hangs writes go
//! on, the WAL waits on the primary and the failure is reported, then the backlog leaves with no
//! gap; after a failover the promoted standby archives its new timeline from where the old one's
//! archive ends.

#![cfg(feature = "sim")]

use std::time::Duration;

use crate::common;
use crate::instance_program::{Fixture, connect};
use dbcluster_operator::databasecluster::instances::SlotChanges;
use dbcluster_operator::databasecluster::instances::client::{change_slots, promote};

use common::postgres::eventually_some;
use common::s3::S3Server;
use dbcluster_operator::instance::archive::config::{
    ACCESS_KEY_ID_FILE, CREDENTIALS_DIR, ENV_ARCHIVE_TIMEOUT, ENV_DESTINATION, ENV_ENDPOINT,
    SECRET_ACCESS_KEY_FILE,
};
use dbcluster_operator::instance::archive::state::ArchiverReport;
use dbcluster_operator::instance::archive::store::{Put, Store};
use dbcluster_operator::instance::archive::wal::{archive, object_name, restore};

const ACCESS_KEY_ID: &str = "AKIDTESTARCHIVE";
const SECRET_ACCESS_KEY: &str = "secret-key-never-shown";

/// The test's own client of the archive.
fn test_store(s3: &S3Server, bucket: &str) -> Store {
    s3.client(bucket, "db", ACCESS_KEY_ID, SECRET_ACCESS_KEY)
}

/// A primary archiving to `s3://<bucket>/db` every second.
async fn archiving_primary(subnet: u8, s3: &S3Server, bucket: &str) -> Fixture {
    let mut fixture = archiving_fixture(subnet, s3, bucket).await;
    fixture.init(0).await;
    fixture.start(0).await;
    fixture
}

/// The files of a cluster whose instances archive to `s3://<bucket>/db` every second.
async fn archiving_fixture(subnet: u8, s3: &S3Server, bucket: &str) -> Fixture {
    s3.create_bucket(bucket).await;
    let mut fixture = Fixture::new(subnet, &[]).await;
    fixture.env = vec![
        (ENV_DESTINATION.into(), format!("s3://{bucket}/db")),
        (ENV_ENDPOINT.into(), s3.endpoint()),
        (ENV_ARCHIVE_TIMEOUT.into(), "1".into()),
    ];
    let dir = fixture.root.join("sec").join(CREDENTIALS_DIR);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(ACCESS_KEY_ID_FILE), ACCESS_KEY_ID).unwrap();
    std::fs::write(dir.join(SECRET_ACCESS_KEY_FILE), SECRET_ACCESS_KEY).unwrap();
    let chown = std::process::Command::new("chown").args(["-R", "postgres:postgres"]).arg(&dir).status();
    assert!(chown.unwrap().success());
    fixture
}

async fn archiver(fixture: &Fixture) -> ArchiverReport {
    let status = fixture.status(0).await;
    serde_json::from_value(status["archiver"].clone()).unwrap_or_else(|e| panic!("{e}: {status}"))
}

/// Writes a little, then closes the current segment: its name.
async fn write_and_switch(client: &tokio_postgres::Client) -> String {
    client.batch_execute("INSERT INTO t SELECT generate_series(1, 100)").await.unwrap();
    let row = client.query_one("SELECT pg_walfile_name(pg_switch_wal())", &[]).await.unwrap();
    row.get(0)
}

/// Waits until `segment` is in the archive; its content.
async fn archived(store: &Store, segment: &str) -> bytes::Bytes {
    let name = object_name(segment).unwrap();
    eventually_some(&format!("{segment} archived"), || async { store.get(&name).await.ok().flatten() }).await
}

/// Segment `name`'s position in its timeline (16 MiB segments).
fn segment_number(name: &str) -> u64 {
    u64::from_str_radix(&name[8..16], 16).unwrap() * 256 + u64::from_str_radix(&name[16..24], 16).unwrap()
}

/// An archiving primary into `bucket`, the test's own client of that archive, and a session on
/// the primary with a table `t` to write to.
async fn archiving_table(
    subnet: u8,
    s3: &S3Server,
    bucket: &str,
) -> (Fixture, Store, tokio_postgres::Client) {
    let fixture = archiving_primary(subnet, s3, bucket).await;
    let store = test_store(s3, bucket);
    let client = connect(&fixture.superuser(0)).await.unwrap();
    client.batch_execute("CREATE TABLE t (i int)").await.unwrap();
    (fixture, store, client)
}

#[tokio::test]
async fn segments_are_archived_a_retry_succeeds_and_other_content_is_never_overwritten() {
    let s3 = S3Server::start().await;
    let (fixture, store, client) = archiving_table(46, &s3, "archive-conflict").await;
    let first = write_and_switch(&client).await;
    let content = archived(&store, &first).await;
    let report = archiver(&fixture).await;
    assert!(report.archived_count >= 1 && !report.failing(), "{report:?}");

    // PostgreSQL retrying a segment whose upload succeeded (its answer lost): success, no change.
    let retry = tempfile::tempdir().unwrap();
    std::fs::write(retry.path().join(&first), &content).unwrap();
    assert_eq!(archive(&store, &retry.path().join(&first)).await.unwrap(), Put::AlreadyThere);

    // What `wal-restore` gives back is the segment as PostgreSQL wrote it; a missing one is absent.
    let restored = retry.path().join("RECOVERYXLOG");
    assert!(restore(&store, &first, &restored).await.unwrap());
    let on_disk = std::fs::read(fixture.pgdata(0).join("pg_wal").join(&first)).unwrap();
    assert!(std::fs::read(&restored).unwrap() == on_disk, "the restored segment is the original");
    assert!(!restore(&store, "0000000100000000000000FF", &restored).await.unwrap());

    // Another object under the name of the segment being written now: refused, reported, kept.
    client.batch_execute("INSERT INTO t VALUES (0)").await.unwrap();
    let current: String =
        client.query_one("SELECT pg_walfile_name(pg_current_wal_lsn())", &[]).await.unwrap().get(0);
    let planted = object_name(&current).unwrap();
    assert_eq!(store.put_new(&planted, b"someone else's segment").await.unwrap(), Put::Stored);
    assert_eq!(write_and_switch(&client).await, current);
    let failure = eventually_some("the conflict reported in /status", || async {
        archiver(&fixture).await.failure.filter(|f| f.wal == current)
    })
    .await;
    assert!(
        failure.error.contains("different content") && failure.error.contains("not overwritten"),
        "{failure:?}"
    );
    assert!(!failure.error.contains(SECRET_ACCESS_KEY) && !failure.error.contains(ACCESS_KEY_ID));
    assert_eq!(store.get(&planted).await.unwrap().unwrap().as_ref(), b"someone else's segment");
    let ready = fixture.pgdata(0).join("pg_wal/archive_status").join(format!("{current}.ready"));
    assert!(ready.exists(), "the segment waits on the primary");

    // The operator of the store removes the foreign object: the segment is archived at last.
    store.delete(&format!("{planted}.gz")).await.unwrap();
    client.batch_execute("SELECT pg_switch_wal()").await.unwrap();
    let content = archived(&store, &current).await;
    assert_eq!(content.len(), 16 * 1024 * 1024);
    eventually_some("archiving reported healthy again", || async {
        let report = archiver(&fixture).await;
        (!report.failing() && report.failure.is_none()).then_some(())
    })
    .await;
    assert!(!fixture.log(0).contains(SECRET_ACCESS_KEY), "the secret is never logged");
}

#[tokio::test]
async fn while_the_store_hangs_writes_go_on_and_the_backlog_leaves_without_a_gap_when_it_returns() {
    let s3 = S3Server::start().await;
    let (fixture, store, client) = archiving_table(47, &s3, "archive-outage").await;
    let first = write_and_switch(&client).await;
    archived(&store, &first).await;

    s3.pause();
    let started = std::time::Instant::now();
    let mut during = Vec::new();
    for _ in 0..3 {
        during.push(write_and_switch(&client).await);
    }
    let failure =
        eventually_some("the hanging store reported", || async { archiver(&fixture).await.failure }).await;
    assert!(started.elapsed() < Duration::from_secs(60), "reported within a minute: {:?}", started.elapsed());
    assert!(!failure.error.contains(SECRET_ACCESS_KEY), "{failure:?}");
    let report = archiver(&fixture).await;
    assert!(report.failing() && report.pending >= 3, "{report:?}");
    let kept = fixture.pgdata(0).join("pg_wal").join(during.last().unwrap());
    assert!(kept.exists(), "the WAL waits on the primary");

    s3.resume();
    let last = write_and_switch(&client).await;
    archived(&store, &last).await;
    eventually_some("the backlog archived", || async {
        let report = archiver(&fixture).await;
        (!report.failing() && report.pending == 0).then_some(())
    })
    .await;
    let names: Vec<String> = store
        .list("wal")
        .await
        .unwrap()
        .into_iter()
        .filter_map(|n| n.rsplit('/').next().map(|f| f.trim_end_matches(".gz").to_owned()))
        .filter(|f| f.len() == 24)
        .collect();
    let numbers: Vec<u64> = names.iter().map(|n| segment_number(n)).collect();
    let (low, high) = (segment_number(&first), segment_number(&last));
    let expected: Vec<u64> = (numbers[0]..=high).collect();
    assert!(numbers[0] <= low, "{names:?}");
    assert_eq!(numbers, expected, "no segment missing from the archive: {names:?}");
}

#[tokio::test]
async fn after_a_failover_the_new_primary_archives_its_timeline() {
    let s3 = S3Server::start().await;
    let mut fixture = archiving_fixture(48, &s3, "archive-failover").await;
    fixture.init(0).await;
    fixture.start(0).await;
    let slot = SlotChanges { create: vec!["instance_1".into()], drop: Vec::new() };
    change_slots(&fixture.manager(0), &slot).await.unwrap();
    fixture.init(1).await;
    fixture.start(1).await;
    let store = test_store(&s3, "archive-failover");
    let primary = connect(&fixture.superuser(0)).await.unwrap();
    primary.batch_execute("CREATE TABLE t (i int)").await.unwrap();
    let before = write_and_switch(&primary).await;
    archived(&store, &before).await;
    drop(primary);

    // A failover as the operator makes it: the record names db-1, the old primary fences itself
    // (archiving what it finished), db-1 is promoted onto timeline 2.
    std::fs::write(fixture.root.join("cfg").join("primary"), "db-1").unwrap();
    fixture.exited(0).await;
    assert!(promote(&fixture.manager(1)).await.unwrap());
    let promoted = connect(&fixture.superuser(1)).await.unwrap();
    let after = write_and_switch(&promoted).await;
    assert!(after.starts_with("00000002"), "{after}");
    archived(&store, &after).await;
    let history = store.get("wal/00000002.history").await.unwrap();
    assert!(history.is_some_and(|h| !h.is_empty()), "the new timeline's history is archived");
    eventually_some("the new primary reports archiving", || async {
        let status = fixture.status(1).await;
        let report: ArchiverReport = serde_json::from_value(status["archiver"].clone()).ok()?;
        (report.archived_count >= 1 && !report.failing()).then_some(())
    })
    .await;
    // No gap at the switch: timeline 1 up to the segment of the switch (whole, or the `.partial`
    // the promoted standby archives), then timeline 2 from that segment on.
    let names = store.list("wal").await.unwrap();
    let timeline = |tl: &str| -> Vec<u64> {
        let mut numbers: Vec<u64> = names
            .iter()
            .filter_map(|n| n.rsplit('/').next())
            .map(|f| f.trim_end_matches(".gz").trim_end_matches(".partial"))
            .filter(|f| f.len() == 24 && f.starts_with(tl))
            .map(segment_number)
            .collect();
        numbers.dedup();
        numbers
    };
    let (first, second) = (timeline("00000001"), timeline("00000002"));
    assert_eq!(first, (first[0]..=*first.last().unwrap()).collect::<Vec<_>>(), "{names:?}");
    // Timeline 2 begins in the segment where timeline 1's archive ends: every position is covered.
    assert!(*first.last().unwrap() >= second[0], "{names:?}");
    assert_eq!(second, (second[0]..=*second.last().unwrap()).collect::<Vec<_>>(), "{names:?}");
}
