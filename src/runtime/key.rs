//! The key the runtime passes around: a `namespace/name` pair, cheap to clone and hash.

use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::{Arc, OnceLock};

/// Identifies one object of a kind: `namespace/name`, or `name` for cluster-scoped objects.
///
/// The queue and the cache carry only keys, never objects. The text is held once in an
/// `Arc<str>` so that cloning a key (which the queue does on every add) is one atomic increment,
/// and a digest of it is made once, so hashing a key (the queue hashes on every add) never reads
/// the text.
#[derive(Clone, Eq, PartialOrd, Ord)]
pub struct ObjectKey {
    /// `namespace/name`, or `name` when there is no namespace.
    full: Arc<str>,
    /// Byte length of the namespace part (0 for cluster-scoped objects).
    ns_len: u32,
    /// [`digest`] of `full` (in what would otherwise be padding: the key stays 24 bytes).
    digest: u32,
}

/// A 32-bit digest of a key's text, with a seed drawn once per process (so names chosen to
/// collide in one process do not collide in another).
fn digest(text: &str) -> u32 {
    static SEED: OnceLock<hashbrown::DefaultHashBuilder> = OnceLock::new();
    let hash = SEED.get_or_init(Default::default).hash_one(text);
    (hash ^ (hash >> 32)) as u32
}

impl ObjectKey {
    /// The key of a namespaced object.
    pub fn namespaced(namespace: &str, name: &str) -> Self {
        if namespace.is_empty() {
            return Self::cluster(name);
        }
        let full = format!("{namespace}/{name}");
        Self { digest: digest(&full), full: full.into(), ns_len: namespace.len() as u32 }
    }

    /// The key of a cluster-scoped object.
    pub fn cluster(name: &str) -> Self {
        Self { full: name.into(), ns_len: 0, digest: digest(name) }
    }

    /// The key of an object from its namespace (if any) and name.
    pub fn new(namespace: Option<&str>, name: &str) -> Self {
        match namespace {
            Some(ns) => Self::namespaced(ns, name),
            None => Self::cluster(name),
        }
    }

    /// The key of a Kubernetes object, from its namespace and name.
    pub fn of<K: crate::runtime::Object + ?Sized>(obj: &K) -> Self {
        Self::new(obj.namespace(), obj.name().unwrap_or_default())
    }

    /// The namespace, or `None` for a cluster-scoped object.
    pub fn namespace(&self) -> Option<&str> {
        (self.ns_len > 0).then(|| &self.full[..self.ns_len as usize])
    }

    /// The object's name.
    pub fn name(&self) -> &str {
        if self.ns_len == 0 { &self.full } else { &self.full[self.ns_len as usize + 1..] }
    }

    /// The key as `namespace/name` text.
    pub fn as_str(&self) -> &str {
        &self.full
    }
}

/// Different digests settle most unequal pairs, and clones of one key share their text, so
/// comparing pointers settles most equal ones (the work queue's duplicate adds): the text is read
/// only for equal keys made apart, or a digest collision.
impl PartialEq for ObjectKey {
    fn eq(&self, other: &Self) -> bool {
        self.digest == other.digest
            && self.ns_len == other.ns_len
            && (Arc::ptr_eq(&self.full, &other.full) || same_text(&self.full, &other.full))
    }
}

/// The text comparison, out of line so that a lookup's equality check stays small enough to
/// inline into its probe.
#[inline(never)]
fn same_text(a: &str, b: &str) -> bool {
    a == b
}

/// The digest stands for the text (equal keys have equal texts, so equal digests).
impl Hash for ObjectKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u32(self.digest);
        self.ns_len.hash(state);
    }
}

/// Serialized as its `namespace/name` text (the debug endpoint's reports).
impl serde::Serialize for ObjectKey {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.full)
    }
}

impl fmt::Debug for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ObjectKey({})", self.full)
    }
}

impl std::str::FromStr for ObjectKey {
    type Err = std::convert::Infallible;

    /// Parses `namespace/name` or `name`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s.split_once('/') {
            Some((ns, name)) => Self::namespaced(ns, name),
            None => Self::cluster(s),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaced_and_cluster_keys_split_back_into_their_parts() {
        let k = ObjectKey::namespaced("production", "pg");
        assert_eq!((k.namespace(), k.name(), k.as_str()), (Some("production"), "pg", "production/pg"));
        let c = ObjectKey::cluster("node-1");
        assert_eq!((c.namespace(), c.name(), c.to_string()), (None, "node-1", "node-1".to_string()));
        assert_eq!("a/b".parse::<ObjectKey>().unwrap(), ObjectKey::namespaced("a", "b"));
        assert_eq!(ObjectKey::namespaced("", "x"), ObjectKey::cluster("x"));
    }

    #[test]
    fn keys_made_apart_from_one_text_are_equal_and_hash_alike() {
        let hasher = hashbrown::DefaultHashBuilder::default();
        let (a, b) = (ObjectKey::namespaced("team", "pg"), "team/pg".parse::<ObjectKey>().unwrap());
        assert!(!Arc::ptr_eq(&a.full, &b.full));
        assert_eq!((&a, hasher.hash_one(&a)), (&b, hasher.hash_one(&b)));
        assert_ne!(a, ObjectKey::namespaced("team", "pg2"));
        assert_ne!(a, ObjectKey::cluster("team/pg"), "a namespaced key is not the cluster key of its text");
        assert_eq!(std::mem::size_of::<ObjectKey>(), 24, "the digest sits in the padding");
    }
}
