//! [`Identity`]: what a cached form ([`Compact`](crate::databasecluster::cache::compact::Compact),
//! [`CachedPod`](crate::databasecluster::cache::cached::CachedPod)) keeps of an object's metadata beside the rest, for the
//! runtime's reads ([`Object`](crate::runtime::Object)) and the passes' reads without decoding:
//! name, namespace, resourceVersion, generation, whether it is being deleted, and its controller
//! ownerReference. The strings share one allocation; the whole is 64 bytes inline, where an
//! `ObjectMeta` is 360 and allocates each string (an ownerReference alone is five allocations).

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::runtime::cache::controller_owner;
use crate::runtime::object::OwnerRef;

/// The identity of a cached object (see the module docs).
#[derive(Clone, PartialEq, Eq)]
pub struct Identity {
    /// The name, namespace, resourceVersion, then, for an object with a controller owner, its
    /// apiVersion, kind, name and uid, one after the other.
    text: Box<str>,
    /// Where each part of `text` ends but the last.
    ends: [u32; 6],
    generation: Option<i64>,
    deleting: bool,
    owned: bool,
}

impl Identity {
    /// The identity of an object with this metadata.
    pub fn of(metadata: &ObjectMeta) -> Self {
        let owner = controller_owner(metadata);
        let parts = [
            metadata.name.as_deref().unwrap_or_default(),
            metadata.namespace.as_deref().unwrap_or_default(),
            metadata.resource_version.as_deref().unwrap_or_default(),
            owner.map_or("", |owner| owner.api_version.as_str()),
            owner.map_or("", |owner| owner.kind.as_str()),
            owner.map_or("", |owner| owner.name.as_str()),
            owner.map_or("", |owner| owner.uid.as_str()),
        ];
        let mut text = String::with_capacity(parts.iter().map(|part| part.len()).sum());
        let mut ends = [0; 6];
        for (at, part) in parts.iter().enumerate() {
            text.push_str(part);
            if let Some(end) = ends.get_mut(at) {
                // Metadata strings are far below 4 GiB (the API server caps an object at 1.5 MiB).
                *end = u32::try_from(text.len()).unwrap_or(u32::MAX);
            }
        }
        Identity {
            text: text.into_boxed_str(),
            ends,
            generation: metadata.generation,
            deleting: metadata.deletion_timestamp.is_some(),
            owned: owner.is_some(),
        }
    }

    /// Part `at` of the text (see `text`).
    fn part(&self, at: usize) -> &str {
        let start = if at == 0 { 0 } else { self.ends[at - 1] as usize };
        let end = self.ends.get(at).map_or(self.text.len(), |end| *end as usize);
        self.text.get(start..end).unwrap_or_default()
    }

    fn non_empty(&self, at: usize) -> Option<&str> {
        Some(self.part(at)).filter(|part| !part.is_empty())
    }

    /// `metadata.name`.
    pub fn name(&self) -> Option<&str> {
        self.non_empty(0)
    }

    /// `metadata.namespace`.
    pub fn namespace(&self) -> Option<&str> {
        self.non_empty(1)
    }

    /// `metadata.resourceVersion`.
    pub fn resource_version(&self) -> Option<&str> {
        self.non_empty(2)
    }

    /// `metadata.generation`.
    pub fn generation(&self) -> Option<i64> {
        self.generation
    }

    /// Whether `metadata.deletionTimestamp` is set.
    pub fn is_deleting(&self) -> bool {
        self.deleting
    }

    /// The controller ownerReference, if any.
    pub fn controller_owner(&self) -> Option<OwnerRef<'_>> {
        self.owned.then(|| OwnerRef {
            api_version: self.part(3),
            kind: self.part(4),
            name: self.part(5),
            uid: self.part(6),
        })
    }

    /// The name, namespace, resourceVersion and generation as metadata (what a
    /// [`Compact`](crate::databasecluster::cache::compact::Compact)'s text leaves out).
    pub fn own_fields(&self) -> ObjectMeta {
        ObjectMeta {
            name: self.name().map(str::to_owned),
            namespace: self.namespace().map(str::to_owned),
            resource_version: self.resource_version().map(str::to_owned),
            generation: self.generation,
            ..ObjectMeta::default()
        }
    }
}

/// The [`Object`](crate::runtime::Object) methods of a cached form that keeps its [`Identity`] in
/// a field `identity` (all but `label`).
macro_rules! object_by_identity {
    () => {
        fn name(&self) -> Option<&str> {
            self.identity.name()
        }

        fn namespace(&self) -> Option<&str> {
            self.identity.namespace()
        }

        fn resource_version(&self) -> Option<&str> {
            self.identity.resource_version()
        }

        fn generation(&self) -> Option<i64> {
            self.identity.generation()
        }

        fn is_deleting(&self) -> bool {
            self.identity.is_deleting()
        }

        fn controller_owner(&self) -> Option<crate::runtime::object::OwnerRef<'_>> {
            self.identity.controller_owner()
        }
    };
}
pub(crate) use object_by_identity;

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identity")
            .field("name", &self.name())
            .field("namespace", &self.namespace())
            .field("resource_version", &self.resource_version())
            .field("generation", &self.generation)
            .field("deleting", &self.deleting)
            .field("controller_owner", &self.controller_owner())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::runtime::object::test_owner as owner;

    #[test]
    fn it_reads_as_the_metadata_it_was_made_of() {
        let metadata = ObjectMeta {
            name: Some("pg-rw".into()),
            namespace: Some("team-1".into()),
            resource_version: Some("4312".into()),
            generation: Some(3),
            deletion_timestamp: Some(Time(jiff::Timestamp::UNIX_EPOCH)),
            owner_references: Some(vec![owner("other", false), owner("pg", true)]),
            ..ObjectMeta::default()
        };
        let identity = Identity::of(&metadata);
        assert_eq!(
            (identity.name(), identity.namespace(), identity.resource_version(), identity.generation()),
            (Some("pg-rw"), Some("team-1"), Some("4312"), Some(3))
        );
        assert!(identity.is_deleting());
        let controller = identity.controller_owner().unwrap();
        assert_eq!(
            (controller.api_version, controller.kind, controller.name, controller.uid),
            ("databases.madmmas.dev/v1alpha1", "DatabaseCluster", "pg", "uid-pg"),
            "the controller, not the first owner"
        );
        assert_eq!(identity.own_fields().resource_version.as_deref(), Some("4312"));
    }

    #[test]
    fn missing_fields_read_as_missing() {
        let identity = Identity::of(&ObjectMeta { name: Some("node-1".into()), ..ObjectMeta::default() });
        assert_eq!(
            (identity.name(), identity.namespace(), identity.resource_version()),
            (Some("node-1"), None, None)
        );
        assert!(!identity.is_deleting() && identity.generation().is_none());
        assert_eq!(identity.controller_owner(), None);
        let owned_by_none =
            ObjectMeta { owner_references: Some(vec![owner("pg", false)]), ..ObjectMeta::default() };
        assert_eq!(Identity::of(&owned_by_none).controller_owner(), None, "no controller among the owners");
    }

    #[test]
    fn it_is_smaller_than_the_metadata() {
        assert!(size_of::<Identity>() <= 64 && size_of::<ObjectMeta>() >= 5 * size_of::<Identity>());
    }
}
