//! `spec.bootstrap.recovery`: a new cluster recovered from another cluster's object store (its base
//! backups and WAL archive) to a point in time, and the checks the CRD cannot make
//! ([`validate_recovery`]).
//!
//! The CRD's CEL rules refuse two targets at once and, where the strings are equal, a recovery
//! source that is the cluster's own archive destination; [`validate_recovery`] also refuses one
//! destination inside the other (`s3://b/x` and `s3://b/x/y`) and targets that do not parse.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::databasecluster::api::object_store::{
    ObjectStoreError, ObjectStoreSpec, ValidObjectStore, parse_destination, validate_object_store,
};

/// The CEL rule on `target`: at most one kind of target.
const ONE_TARGET_RULE: &str = "[has(self.time), has(self.lsn), has(self.xid), has(self.name), has(self.immediate)].filter(x, x).size() <= 1";
/// Its message.
pub const ONE_TARGET_MESSAGE: &str = "target takes one of time, lsn, xid, name or immediate";
/// The CEL rule on the spec: the recovery source is not the cluster's own archive.
pub const OWN_ARCHIVE_RULE: &str = "!has(self.bootstrap) || !has(self.bootstrap.recovery) || !has(self.backup) || !has(self.backup.objectStore) || (self.bootstrap.recovery.objectStore.destination != self.backup.objectStore.destination && self.bootstrap.recovery.objectStore.destination + '/' != self.backup.objectStore.destination && self.bootstrap.recovery.objectStore.destination != self.backup.objectStore.destination + '/')";
/// Its message.
pub const OWN_ARCHIVE_MESSAGE: &str = "bootstrap.recovery.objectStore.destination is this cluster's own backup.objectStore.destination: a recovered cluster must archive somewhere else";
/// The CEL rule on `bootstrap`: one way to start.
pub const ONE_BOOTSTRAP_RULE: &str = "has(self.fromBackup) != has(self.recovery)";
/// Its message.
pub const ONE_BOOTSTRAP_MESSAGE: &str = "bootstrap takes exactly one of fromBackup or recovery";

/// Recover from an object store to a point in time.
#[derive(Deserialize, Serialize, schemars::JsonSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RecoverySpec {
    /// The source's object store (the source cluster's `backup.objectStore`; the cluster itself
    /// may be gone). Its credentials Secret must be in this cluster's namespace.
    pub object_store: ObjectStoreSpec,
    /// The base backup to start from (its name, e.g. `20261207T101500Z`), or `latest` (default):
    /// the newest one that ends before the target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(latest|[0-9]{8}T[0-9]{6}Z)$"))]
    pub backup: Option<String>,
    /// Where replay stops (default: the end of the archive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<RecoveryTarget>,
}

/// One recovery target.
#[derive(Deserialize, Serialize, KubeSchema, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new(ONE_TARGET_RULE).message(ONE_TARGET_MESSAGE))]
pub struct RecoveryTarget {
    /// Replay every transaction committed at or before this time (RFC 3339, e.g.
    /// `2026-12-07T10:15:00Z`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub time: Option<String>,
    /// Replay up to this WAL position (`X/Y`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}$"))]
    pub lsn: Option<String>,
    /// Replay up to and including this transaction id's commit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]{1,20}$"))]
    pub xid: Option<String>,
    /// Replay up to the restore point of this name (`pg_create_restore_point`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub name: Option<String>,
    /// Stop as soon as the base backup is consistent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub immediate: Option<bool>,
}

/// Why a recovery setting cannot be acted on.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum RecoverySpecError {
    /// The source store is unusable.
    #[error("spec.bootstrap.recovery.objectStore: {0}")]
    Store(#[from] ObjectStoreError),
    /// The source is (or contains, or is inside) the cluster's own archive.
    #[error(
        "spec.bootstrap.recovery.objectStore.destination {source_destination:?} overlaps this cluster's own archive {own:?}: a recovered cluster must never write into its source's archive; give spec.backup.objectStore another destination"
    )]
    OwnArchive {
        /// The source.
        source_destination: String,
        /// The cluster's own.
        own: String,
    },
    /// The target time does not parse.
    #[error("spec.bootstrap.recovery.target.time {0:?} is not an RFC 3339 time such as 2026-12-07T10:15:00Z")]
    Time(String),
}

/// A recovery the operator can act on.
#[derive(Clone, Debug, PartialEq)]
pub struct ValidRecovery {
    /// The source's store.
    pub store: ValidObjectStore,
    /// The backup (`latest` when unset).
    pub backup: String,
    /// The target.
    pub target: RecoveryTarget,
}

/// Whether two destinations overlap: the same bucket, and one path equal to or inside the other.
pub fn overlapping(a: &str, b: &str) -> bool {
    let (Some((bucket_a, path_a)), Some((bucket_b, path_b))) = (parse_destination(a), parse_destination(b))
    else {
        return false;
    };
    let inside = |outer: &str, inner: &str| {
        outer.is_empty() || inner == outer || inner.starts_with(&format!("{outer}/"))
    };
    bucket_a == bucket_b && (inside(&path_a, &path_b) || inside(&path_b, &path_a))
}

/// Checks `recovery` against the cluster's own store `own` (`spec.backup.objectStore`).
pub fn validate_recovery(
    recovery: &RecoverySpec,
    own: Option<&ObjectStoreSpec>,
) -> Result<ValidRecovery, RecoverySpecError> {
    let store = validate_object_store(Some(&recovery.object_store), None)?
        .ok_or_else(|| RecoverySpecError::Store(ObjectStoreError::Destination(String::new())))?;
    if let Some(own) = own.filter(|own| overlapping(&own.destination, &recovery.object_store.destination)) {
        return Err(RecoverySpecError::OwnArchive {
            source_destination: recovery.object_store.destination.clone(),
            own: own.destination.clone(),
        });
    }
    let target = recovery.target.clone().unwrap_or_default();
    if let Some(time) = target.time.as_ref().filter(|t| t.parse::<jiff::Timestamp>().is_err()) {
        return Err(RecoverySpecError::Time(time.clone()));
    }
    Ok(ValidRecovery {
        store,
        backup: recovery.backup.clone().unwrap_or_else(|| "latest".to_owned()),
        target,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::databasecluster::api::object_store::StoreCredentials;

    fn store(destination: &str) -> ObjectStoreSpec {
        ObjectStoreSpec {
            destination: destination.into(),
            endpoint: None,
            region: None,
            credentials: StoreCredentials {
                name: "s3".into(),
                access_key_id_key: None,
                secret_access_key_key: None,
                session_token_key: None,
            },
            ca_secret: None,
            compression: None,
        }
    }

    fn recovery(destination: &str, time: Option<&str>) -> RecoverySpec {
        RecoverySpec {
            object_store: store(destination),
            backup: None,
            target: Some(RecoveryTarget { time: time.map(String::from), ..RecoveryTarget::default() }),
        }
    }

    #[test]
    fn the_source_may_not_be_the_clusters_own_archive_nor_overlap_it() {
        for own in ["s3://bkt/orders", "s3://bkt/orders/", "s3://bkt", "s3://bkt/orders/new"] {
            let error = validate_recovery(&recovery("s3://bkt/orders", None), Some(&store(own))).unwrap_err();
            assert!(matches!(error, RecoverySpecError::OwnArchive { .. }), "{own}: {error}");
        }
        for own in ["s3://bkt/orders-restored", "s3://other/orders"] {
            let valid = validate_recovery(&recovery("s3://bkt/orders", None), Some(&store(own))).unwrap();
            assert_eq!(valid.backup, "latest");
        }
        assert!(validate_recovery(&recovery("s3://bkt/orders", None), None).is_ok());
    }

    #[test]
    fn a_target_time_must_be_rfc_3339() {
        let bad = validate_recovery(&recovery("s3://bkt/a", Some("yesterday")), None).unwrap_err();
        assert_eq!(bad, RecoverySpecError::Time("yesterday".into()));
        assert!(validate_recovery(&recovery("s3://bkt/a", Some("2026-12-07T10:15:00+01:00")), None).is_ok());
    }
}
