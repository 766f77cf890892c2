//! [`Object`]: what the runtime reads of an object it lists, watches, caches and maps to keys —
//! its name and namespace, resourceVersion, generation, controller owner and labels — and
//! nothing else. Every `kube::Resource` is an `Object` as it is, through its `ObjectMeta`. A
//! cached form need not be one: a `kube::Resource` must hand out a whole `ObjectMeta` (360 bytes
//! inline, mostly empty `Option`s, and an allocation per string), which a cache holding tens of
//! thousands of objects pays for each of them. Such a form names the resource it stands for
//! ([`Object::Resource`]): its informer lists and watches that resource's URL, and owners and
//! writes are matched by that resource's kind.

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
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

impl OwnerRef<'_> {
    /// The ownerReference itself (`controller: true`), for an object shown or handed on whole.
    pub fn to_reference(&self) -> OwnerReference {
        OwnerReference {
            api_version: self.api_version.to_owned(),
            kind: self.kind.to_owned(),
            name: self.name.to_owned(),
            uid: self.uid.to_owned(),
            controller: Some(true),
            ..OwnerReference::default()
        }
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
