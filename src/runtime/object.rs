//! [`Object`]: what the runtime reads of an object it lists, watches, caches and maps to keys —
//! its name and namespace, resourceVersion, generation, controller owner and labels — and
//! nothing else. Every `kube::Resource` is an `Object` as it is, through its `ObjectMeta`. A
//! cached form need not be one: a `kube::Resource` must hand out a whole `ObjectMeta` (360 bytes
//! inline, mostly empty `Option`s, and an allocation per string), which a cache holding tens of
//! thousands of objects pays for each of them. Such a form names the resource it stands for
//! ([`Object::Resource`]): its informer lists and watches that resource's URL, and owners and
//! writes are matched by that resource's kind.

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde::de::DeserializeOwned;

use crate::runtime::cache::controller_owner;

/// An object as the runtime reads it (see the module docs).
pub trait Object {
    /// The API resource these objects are: its URL, kind and group. A decoded object's is itself.
    type Resource: kube::Resource;

    /// `metadata.name`.
    fn name(&self) -> Option<&str>;
    /// `metadata.namespace` (`None` for a cluster-scoped object).
    fn namespace(&self) -> Option<&str>;
    /// `metadata.resourceVersion`.
    fn resource_version(&self) -> Option<&str>;
    /// `metadata.generation`.
    fn generation(&self) -> Option<i64>;
    /// Whether `metadata.deletionTimestamp` is set: the object is being deleted.
    fn is_deleting(&self) -> bool;
    /// The controller ownerReference (`controller: true`), if any.
    fn controller_owner(&self) -> Option<OwnerRef<'_>>;
    /// The value of label `key`, if set.
    fn label(&self, key: &str) -> Option<&str>;
}

/// An [`Object`] an informer can hold: decoded from the API's JSON, shared across tasks. Every
/// type that is all of these is one.
pub trait InformerObject: Object + Clone + DeserializeOwned + fmt::Debug + Send + Sync + 'static {}

impl<T: Object + Clone + DeserializeOwned + fmt::Debug + Send + Sync + 'static> InformerObject for T {}

/// An object's controller ownerReference, as the runtime reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwnerRef<'a> {
    /// `apiVersion`, `group/version` (`version` alone for the core group).
    pub api_version: &'a str,
    /// `kind`.
    pub kind: &'a str,
    /// `name` (in the object's namespace).
    pub name: &'a str,
    /// `uid`.
    pub uid: &'a str,
}

/// The metadata an [`Object`] can show: its name, namespace, resourceVersion, generation and
/// controller ownerReference; for a cached form shown, or handed on, as an object.
pub fn shown_metadata<O: Object + ?Sized>(object: &O) -> ObjectMeta {
    ObjectMeta {
        name: object.name().map(str::to_owned),
        namespace: object.namespace().map(str::to_owned),
        resource_version: object.resource_version().map(str::to_owned),
        generation: object.generation(),
        owner_references: object.controller_owner().map(|owner| {
            vec![OwnerReference {
                api_version: owner.api_version.to_owned(),
                kind: owner.kind.to_owned(),
                name: owner.name.to_owned(),
                uid: owner.uid.to_owned(),
                controller: Some(true),
                ..OwnerReference::default()
            }]
        }),
        ..ObjectMeta::default()
    }
}

impl<K: kube::Resource> Object for K {
    type Resource = K;

    fn name(&self) -> Option<&str> {
        self.meta().name.as_deref()
    }

    fn namespace(&self) -> Option<&str> {
        self.meta().namespace.as_deref()
    }

    fn resource_version(&self) -> Option<&str> {
        self.meta().resource_version.as_deref()
    }

    fn generation(&self) -> Option<i64> {
        self.meta().generation
    }

    fn is_deleting(&self) -> bool {
        self.meta().deletion_timestamp.is_some()
    }

    fn controller_owner(&self) -> Option<OwnerRef<'_>> {
        controller_owner(self.meta()).map(|owner| OwnerRef {
            api_version: &owner.api_version,
            kind: &owner.kind,
            name: &owner.name,
            uid: &owner.uid,
        })
    }

    fn label(&self, key: &str) -> Option<&str> {
        self.meta().labels.as_ref()?.get(key).map(String::as_str)
    }
}

/// A DatabaseCluster's ownerReference named `name` (uid `uid-<name>`), for the tests of the
/// objects that read one.
#[cfg(test)]
pub(crate) fn test_owner(name: &str, controller: bool) -> OwnerReference {
    OwnerReference {
        api_version: "databases.madmmas.dev/v1alpha1".into(),
        kind: "DatabaseCluster".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        controller: Some(controller),
        ..OwnerReference::default()
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;

    #[test]
    fn a_resource_reads_as_its_metadata_and_shows_its_identity_with_its_controller_only() {
        let metadata = ObjectMeta {
            name: Some("pg-config".into()),
            namespace: Some("team-1".into()),
            resource_version: Some("42".into()),
            generation: Some(2),
            labels: Some([("app".to_owned(), "pg".to_owned())].into()),
            owner_references: Some(vec![test_owner("other", false), test_owner("pg", true)]),
            ..ObjectMeta::default()
        };
        let config_map = ConfigMap { metadata, ..ConfigMap::default() };
        assert_eq!(config_map.label("app"), Some("pg"));
        assert_eq!(config_map.controller_owner().map(|owner| owner.uid), Some("uid-pg"));
        assert!(!config_map.is_deleting());
        let shown = shown_metadata(&config_map);
        assert_eq!(
            shown,
            ObjectMeta {
                labels: None,
                owner_references: Some(vec![test_owner("pg", true)]),
                ..config_map.metadata.clone()
            }
        );
    }
}
