//! What a reconcile pass wrote: the record behind read-your-writes (KEP-5647, stale controller
//! mitigation) and hot-loop detection.
//!
//! A pass that runs right after its own write may read a cache the watch has not yet brought up to
//! date, and act on stale data (a second Event, a 409 on a stale precondition, a duplicate child).
//! So every write the server acknowledges is recorded during the pass ([`recorded`]): the object's
//! kind, key, labels and the resourceVersion the server returned. Before the key's next pass the
//! controller waits (bounded) until each informer that delivers those objects (of their kind, with
//! a selector matching the labels or a cache holding the object; see `freshness`) has delivered
//! that resourceVersion ([`resource_version_reached`]).
//!
//! Recording is ambient: the controller runs each pass inside [`record_writes`], and
//! [`recorded`] adds to the current pass's record (outside a pass it does nothing), so reconcile
//! code only wraps the result of each write.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::future::Future;

use kube::Resource;
use serde::Serialize;

use crate::runtime::ObjectKey;
use crate::runtime::controller::causes::ResourceVersion;

/// The kind of an object, `group/Kind` (`Kind` alone for the core group): how the controller
/// matches writes to informers, and how a cause names the informer it came from. Interned
/// ([`kind_name`]): one pointer wide (a cause is moved on every claim, and every pass's history
/// holds its writes' kinds), compared by its text, shown as the text.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KindName(&'static String);

impl KindName {
    /// The kind of `K`.
    pub fn of<K: Resource>() -> Self
    where
        K::DynamicType: Default,
    {
        let types = K::DynamicType::default();
        let group = K::group(&types);
        let kind = K::kind(&types);
        if group.is_empty() { kind_name(&kind) } else { kind_name(&format!("{group}/{kind}")) }
    }

    /// The name, `group/Kind` (`Kind` for the core group).
    pub fn as_str(self) -> &'static str {
        self.0
    }
}

/// Every kind name interned so far, in the order they were first asked for.
static KIND_NAMES: parking_lot::Mutex<Vec<&'static String>> = parking_lot::Mutex::new(Vec::new());

/// The one copy of the kind name `name` for the life of the process (informers register a
/// handful of kinds; each distinct name is stored once, so writes and causes refer to it for free).
pub fn kind_name(name: &str) -> KindName {
    let mut names = KIND_NAMES.lock();
    if let Some(known) = names.iter().find(|known| known.as_str() == name) {
        return KindName(known);
    }
    // Bounded: one entry per distinct kind name the process's informers and writes use.
    let interned: &'static String = Box::leak(Box::new(name.to_owned()));
    names.push(interned);
    KindName(interned)
}

impl std::fmt::Debug for KindName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl std::fmt::Display for KindName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Serialized as the name.
impl Serialize for KindName {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// How a pass wrote an object, for its history in `/debug/queue/<namespace>/<name>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verb {
    /// A create (POST).
    Create,
    /// A server-side apply.
    Apply,
    /// A patch of the object.
    Patch,
    /// A patch of its `/status` subresource.
    PatchStatus,
    /// A write the caller did not name ([`recorded`]).
    Write,
}

/// One write the server acknowledged: which object, how, and the resourceVersion it returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Write {
    /// The object's labels as written: which informers' selectors deliver it (read when the
    /// pass ends, by `Freshness::pending`; neither what the next pass waits for nor the pass's
    /// history keeps them, see [`Write::for_history`]).
    pub labels: BTreeMap<String, String>,
    /// How it was written.
    pub verb: Verb,
    /// The object's kind.
    pub kind: KindName,
    /// The object's key.
    pub key: ObjectKey,
    /// The resourceVersion the server returned for the write.
    pub resource_version: String,
}

impl Write {
    /// This write as a pass's history keeps it.
    pub fn for_history(&self) -> PassWrite {
        PassWrite {
            verb: self.verb,
            kind: self.kind,
            key: self.key.clone(),
            resource_version: ResourceVersion::from(self.resource_version.as_str()),
        }
    }
}

/// A write as a pass's record shows it, for `/debug/queue/<namespace>/<name>`: no labels, the
/// kind interned, the key shared with the write, the resourceVersion inline when it is a number.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PassWrite {
    /// How it was written.
    pub verb: Verb,
    /// The object's kind.
    pub kind: KindName,
    /// The object's key.
    pub key: ObjectKey,
    /// The resourceVersion the server returned for the write.
    pub resource_version: ResourceVersion,
}

tokio::task_local! {
    static PASS_WRITES: RefCell<Vec<Write>>;
}

/// Runs `pass`, collecting what it records with [`recorded`]; returns its output and the writes.
pub async fn record_writes<F: Future>(pass: F) -> (F::Output, Vec<Write>) {
    PASS_WRITES
        .scope(RefCell::new(Vec::new()), async move {
            let output = pass.await;
            let writes = PASS_WRITES.with(|writes| writes.take());
            (output, writes)
        })
        .await
}

/// Records `object`, as the server returned it from a write, in the current pass's record, and
/// hands it back. Outside a pass (or for an object without a resourceVersion) it only hands it back.
/// [`recorded_as`] also says how it was written.
pub fn recorded<K: Resource>(object: K) -> K
where
    K::DynamicType: Default,
{
    recorded_as(Verb::Write, object)
}

/// [`recorded`], written by `verb`.
pub fn recorded_as<K: Resource>(verb: Verb, object: K) -> K
where
    K::DynamicType: Default,
{
    if let Some(resource_version) = object.meta().resource_version.clone() {
        let write = Write {
            labels: object.meta().labels.clone().unwrap_or_default(),
            verb,
            kind: KindName::of::<K>(),
            key: ObjectKey::of(&object),
            resource_version,
        };
        // Outside `record_writes` there is no record to add to: nothing to do.
        let _ = PASS_WRITES.try_with(|writes| writes.borrow_mut().push(write));
    }
    object
}

/// Whether an informer that has delivered `seen` has also delivered `wanted`. Kubernetes
/// resourceVersions are decimal integers from one counter (comparable since 1.35, KEP-5504; the
/// informer applies events in that order), compared here by length then digits. Versions that
/// are not plain decimals cannot be ordered: only equality counts, so a wait on them ends at its
/// bound.
pub fn resource_version_reached(seen: &str, wanted: &str) -> bool {
    let decimal = |rv: &str| !rv.is_empty() && rv.bytes().all(|b| b.is_ascii_digit());
    if decimal(seen) && decimal(wanted) {
        let (seen, wanted) = (seen.trim_start_matches('0'), wanted.trim_start_matches('0'));
        (seen.len(), seen) >= (wanted.len(), wanted)
    } else {
        seen == wanted
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::StatefulSet;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    fn config_map(name: &str, rv: Option<&str>) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                namespace: Some("prod".into()),
                name: Some(name.into()),
                resource_version: rv.map(Into::into),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    #[test]
    fn resource_versions_compare_as_integers() {
        assert!(resource_version_reached("10", "9"));
        assert!(resource_version_reached("10", "10"));
        assert!(!resource_version_reached("9", "10"));
        assert!(resource_version_reached("0100", "99"));
        assert!(!resource_version_reached("abc", "9"));
        assert!(resource_version_reached("abc", "abc"));
    }

    #[test]
    fn kinds_are_named_by_group() {
        assert_eq!(KindName::of::<ConfigMap>().as_str(), "ConfigMap");
        assert_eq!(KindName::of::<StatefulSet>().as_str(), "apps/StatefulSet");
    }

    #[tokio::test]
    async fn writes_are_recorded_within_a_pass_only() {
        let _ = recorded(config_map("outside", Some("1")));
        let ((), writes) = record_writes(async {
            let _ = recorded(config_map("a", Some("7")));
            tokio::task::yield_now().await;
            let _ = recorded(config_map("no-version", None));
            let _ = recorded_as(Verb::Create, config_map("b", Some("8")));
        })
        .await;
        let recorded: Vec<_> =
            writes.iter().map(|w| (w.key.name().to_string(), w.resource_version.as_str())).collect();
        assert_eq!(recorded, [("a".to_string(), "7"), ("b".to_string(), "8")]);
        assert!(writes.iter().all(|w| w.kind.as_str() == "ConfigMap"));
        assert_eq!([writes[0].verb, writes[1].verb], [Verb::Write, Verb::Create]);
    }

    #[test]
    fn a_pass_history_keeps_a_write_small_and_shows_it_as_written() {
        assert!(std::mem::size_of::<PassWrite>() <= 64);
        let write = Write {
            labels: BTreeMap::from([("app".to_string(), "pg".to_string())]),
            verb: Verb::Apply,
            kind: KindName::of::<StatefulSet>(),
            key: ObjectKey::namespaced("prod", "pg"),
            resource_version: "4312".into(),
        };
        let kept = write.for_history();
        assert!(
            std::ptr::eq(kept.kind.as_str(), KindName::of::<StatefulSet>().as_str()),
            "the kind is interned"
        );
        assert_eq!(kept.resource_version, ResourceVersion::Number(4312));
        assert_eq!(
            serde_json::to_value(&kept).unwrap(),
            serde_json::json!({"verb": "apply", "kind": "apps/StatefulSet", "key": "prod/pg", "resource_version": "4312"})
        );
        let opaque = Write { resource_version: "a/7".into(), ..write }.for_history();
        assert_eq!(serde_json::to_value(&opaque).unwrap()["resource_version"], "a/7");
    }
}
