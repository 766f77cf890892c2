//! What the operator's caches keep of each object: only what a pass reads, as controller-runtime's
//! cache transforms and kube-runtime's metadata watches do, so that the operator's memory grows
//! with what it needs, not with the size of the objects it watches.
//!
//! Every kind loses `metadata.managedFields`. Besides:
//! - a **Pod** keeps no `spec` (the passes read its name, labels, owner, deletion and `status`:
//!   the StatefulSet, not the pod, says what it runs);
//! - a **ConfigMap** keeps each `data` value longer than [`DIGEST_ABOVE`] bytes as its SHA-256
//!   digest (`sha256:<hex>`): the passes read the short records (`primary`, `demoting`) and compare
//!   the rest with what they would write, which [`CacheShape::cached_form`] puts in the same shape
//!   first, so a changed script is still drift. The scripts are most of a cluster's cached bytes.
//!
//! Every other kind is kept whole: its spec is compared with what the operator would write.

use std::borrow::Cow;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Resource;
use sha2::{Digest, Sha256};

use super::types::DatabaseCluster;
use crate::runtime::cache::{CacheWriter, strip_managed_fields};

/// ConfigMap values longer than this are cached as their digest.
pub const DIGEST_ABOVE: usize = 256;

/// How an object of this kind is kept in the operator's caches (see the module docs).
pub trait CacheShape: Resource + Clone + Send + Sync + 'static {
    /// Reduces `self` to what the cache keeps, besides `managedFields` (none by default).
    fn shape(&mut self) {}

    /// `desired` in the shape the cache keeps, to compare it with a cached object: borrowed as it
    /// is for the kinds kept whole (no copy on every pass), a reshaped copy for the others.
    fn cached_form(desired: &Self) -> Cow<'_, Self> {
        Cow::Borrowed(desired)
    }

    /// A writer of a cache that keeps objects of this kind in this shape.
    fn cache_writer() -> CacheWriter<Self> {
        CacheWriter::new(Arc::new(|obj: &mut Self| {
            strip_managed_fields(obj);
            obj.shape();
        }))
    }
}

/// `desired` reshaped as its cache keeps it.
fn reshaped<K: CacheShape>(desired: &K) -> Cow<'_, K> {
    let mut shaped = desired.clone();
    shaped.shape();
    Cow::Owned(shaped)
}

impl CacheShape for Pod {
    fn shape(&mut self) {
        self.spec = None;
    }

    fn cached_form(desired: &Self) -> Cow<'_, Self> {
        reshaped(desired)
    }
}

impl CacheShape for ConfigMap {
    fn shape(&mut self) {
        for value in self.data.iter_mut().flat_map(|data| data.values_mut()) {
            if value.len() > DIGEST_ABOVE {
                let digest = Sha256::digest(value.as_bytes());
                *value = std::iter::once("sha256:".to_owned())
                    .chain(digest.iter().map(|b| format!("{b:02x}")))
                    .collect();
            }
        }
    }

    fn cached_form(desired: &Self) -> Cow<'_, Self> {
        reshaped(desired)
    }
}

impl CacheShape for DatabaseCluster {}
impl CacheShape for StatefulSet {}
impl CacheShape for Service {}
impl CacheShape for Secret {}
impl CacheShape for PodDisruptionBudget {}
impl CacheShape for Job {}
impl CacheShape for CronJob {}
impl CacheShape for PersistentVolumeClaim {}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::PodSpec;

    use super::*;
    use crate::databasecluster::drift::needs_update;

    fn config_map(script: &str) -> ConfigMap {
        ConfigMap {
            data: Some(BTreeMap::from([
                ("primary".to_owned(), "pg-0".to_owned()),
                ("instance.sh".to_owned(), script.to_owned()),
            ])),
            ..ConfigMap::default()
        }
    }

    fn cached(mut obj: ConfigMap) -> ConfigMap {
        obj.shape();
        obj
    }

    #[test]
    fn long_values_are_cached_as_digests_and_short_ones_as_they_are() {
        let script = "#!/bin/sh\n".repeat(100);
        let kept = cached(config_map(&script));
        let data = kept.data.unwrap();
        assert_eq!(data["primary"], "pg-0");
        assert!(data["instance.sh"].starts_with("sha256:"), "{}", data["instance.sh"]);
        assert!(data["instance.sh"].len() < 80);
    }

    #[test]
    fn a_changed_long_value_is_still_drift_and_an_unchanged_one_is_not() {
        let script = "#!/bin/sh\n".repeat(100);
        let live = cached(config_map(&script));
        let desired = config_map(&script);
        assert!(!needs_update(&*ConfigMap::cached_form(&desired), &live));
        let edited = cached(config_map(&format!("{script}echo edited\n")));
        assert!(needs_update(&*ConfigMap::cached_form(&desired), &edited));
    }

    #[test]
    fn a_cached_pod_has_no_spec_and_keeps_its_metadata() {
        let mut pod = Pod { spec: Some(PodSpec::default()), ..Pod::default() };
        pod.metadata.name = Some("pg-0".into());
        pod.metadata.managed_fields = Some(vec![Default::default()]);
        let mut writer = Pod::cache_writer();
        pod.metadata.namespace = Some("default".into());
        writer.apply(crate::runtime::reflector::ReflectorEvent::Applied(pod));
        let kept = writer.cache().list();
        assert_eq!(kept.len(), 1);
        assert!(kept[0].spec.is_none());
        assert!(kept[0].metadata.managed_fields.is_none());
        assert_eq!(kept[0].metadata.name.as_deref(), Some("pg-0"));
    }
}
