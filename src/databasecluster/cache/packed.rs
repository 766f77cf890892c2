//! [`Packed`]: JSON text the operator's caches keep LZ4-compressed against a dictionary per type
//! (a `Compact` child's whole object, a cached pod's status).
//!
//! The contract:
//! - one dictionary per type `T` for the life of the process ([`Packed::pack`]): the first text
//!   of a `T` that its packer offers as a sample, without its top-level `data`, `stringData` and
//!   `binaryData` unless it is a ConfigMap (so no Secret's values outlive that Secret in it; a
//!   ConfigMap's values are configuration, and the operator's scripts, the same in every
//!   cluster's ConfigMap, are most of its text). A text that is not a sample
//!   (a watch's bookmark, a pod that has no status yet) is packed against the dictionary if there
//!   is one, and against none if not. The operator's objects of one type differ mostly in names,
//!   uids, versions and times, so the e2e benchmark's StatefulSet (about 6 KB) packs into about
//!   300 bytes;
//! - packing costs about a tenth of the decode before it (2 µs for that StatefulSet), unpacking
//!   about a hundredth of the parse after it (0.2 µs against 18);
//! - each `Packed` keeps a pointer to its dictionary, so unpacking takes no lock, and the text
//!   unpacks exactly as it was given;
//! - the dictionaries are never freed: one per type that is packed (a handful).

use std::any::TypeId;
use std::fmt;

use serde::ser::Error as _;
use serde::{Serialize, Serializer};
use serde_json::value::RawValue;

/// JSON text kept LZ4-compressed against its type's dictionary (see the module docs).
#[derive(Clone)]
pub struct Packed {
    /// The text, compressed, its length prepended.
    bytes: Box<[u8]>,
    /// The dictionary it was compressed against (empty for none).
    dictionary: &'static [u8],
}

impl Packed {
    /// Packs `text`, the JSON of a `T`, against `T`'s dictionary. If `T` has none yet and
    /// `sample` says `text` is a typical `T`, `text` makes it.
    pub fn pack<T: 'static>(text: &[u8], sample: bool) -> Self {
        let dictionary = dictionary_of::<T>(text, sample);
        Packed {
            bytes: lz4_flex::block::compress_prepend_size_with_dict(text, dictionary).into_boxed_slice(),
            dictionary,
        }
    }

    /// The text, unpacked. It fails only if the packed bytes were corrupted in memory (this
    /// process packed them, against the same dictionary).
    pub fn unpack(&self) -> serde_json::Result<Vec<u8>> {
        lz4_flex::block::decompress_size_prepended_with_dict(&self.bytes, self.dictionary).map_err(|error| {
            <serde_json::Error as serde::de::Error>::custom(format!("unpacking a cached text: {error}"))
        })
    }

    /// How many bytes the packed text takes.
    pub fn packed_len(&self) -> usize {
        self.bytes.len()
    }
}

impl fmt::Debug for Packed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Packed").field("packed_bytes", &self.bytes.len()).finish()
    }
}

/// Serialized as the JSON it holds.
impl Serialize for Packed {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let text = String::from_utf8(self.unpack().map_err(S::Error::custom)?).map_err(S::Error::custom)?;
        RawValue::from_string(text).map_err(S::Error::custom)?.serialize(serializer)
    }
}

/// `T`'s dictionary: made from `text` if there is none yet and `sample` allows it (see the
/// module docs); empty while there is none. Bounded: one per type that is packed.
fn dictionary_of<T: 'static>(text: &[u8], sample: bool) -> &'static [u8] {
    static DICTIONARIES: parking_lot::Mutex<Vec<(TypeId, &'static [u8])>> =
        parking_lot::Mutex::new(Vec::new());
    let mut dictionaries = DICTIONARIES.lock();
    if let Some((_, dictionary)) = dictionaries.iter().find(|(kind, _)| *kind == TypeId::of::<T>()) {
        return dictionary;
    }
    if !sample {
        return &[];
    }
    let dictionary: &'static [u8] = Box::leak(dictionary_sample(text).into_boxed_slice());
    dictionaries.push((TypeId::of::<T>(), dictionary));
    dictionary
}

/// `text` without its top-level `data`, `stringData` and `binaryData` (a Secret's values), unless
/// it says it is a ConfigMap; empty if `text` is not a JSON object.
fn dictionary_sample(text: &[u8]) -> Vec<u8> {
    let Ok(mut object) = serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(text) else {
        return Vec::new();
    };
    if object.get("kind").and_then(|kind| kind.as_str()) != Some("ConfigMap") {
        for values in ["data", "stringData", "binaryData"] {
            object.remove(values);
        }
    }
    serde_json::to_vec(&object).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn endpoints(name: &str, uid: &str) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "metadata": {"name": name, "namespace": "team-1", "uid": uid, "resourceVersion": "42",
                "labels": {"app.kubernetes.io/instance": name, "app.kubernetes.io/managed-by": "dbcluster-operator"},
                "ownerReferences": [{"apiVersion": "databases.madmmas.dev/v1alpha1", "kind": "DatabaseCluster",
                    "name": name, "uid": "owner-1", "controller": true}]},
            "subsets": [{"addresses": [{"ip": "10.0.0.1", "hostname": "pg-0"}, {"ip": "10.0.0.2", "hostname": "pg-1"}],
                "ports": [{"name": "postgres", "port": 5432, "protocol": "TCP"}]}],
        }))
        .unwrap()
    }

    #[test]
    fn texts_of_a_type_are_packed_against_its_first_sample() {
        // Types of this test's own, so its first texts make their dictionaries.
        struct Endpoints;
        struct Other;
        let first = Packed::pack::<Endpoints>(&endpoints("payments", "u-1"), true);
        let second = Packed::pack::<Endpoints>(&endpoints("inventory", "u-2"), true);
        assert!(std::ptr::eq(first.dictionary, second.dictionary), "one dictionary per type");
        assert_eq!(second.unpack().unwrap(), endpoints("inventory", "u-2"), "unpacked exactly");
        assert!(
            second.packed_len() * 4 < endpoints("inventory", "u-2").len(),
            "a sibling of the first text packs into less than a quarter of it: {} bytes",
            second.packed_len()
        );
        let other = Packed::pack::<Other>(&endpoints("payments", "u-1"), true);
        assert!(!std::ptr::eq(other.dictionary, first.dictionary), "another type, another dictionary");
        let serialized = serde_json::to_vec(&second).unwrap();
        assert_eq!(serialized, endpoints("inventory", "u-2"), "serialized as the JSON it holds");
    }

    #[test]
    fn a_text_that_is_no_sample_makes_no_dictionary() {
        struct Quota;
        let bookmark = br#"{"metadata":{"resourceVersion":"7"}}"#;
        let kept = Packed::pack::<Quota>(bookmark, false);
        assert!(kept.dictionary.is_empty());
        assert_eq!(kept.unpack().unwrap(), bookmark);
        let first = Packed::pack::<Quota>(&endpoints("payments", "u-1"), true);
        assert!(!first.dictionary.is_empty(), "the first sample makes it");
        let later = Packed::pack::<Quota>(bookmark, false);
        assert!(std::ptr::eq(later.dictionary, first.dictionary), "and it stays");
    }

    #[test]
    fn a_dictionary_keeps_no_values() {
        let secret = json!({"metadata": {"name": "pg-app", "namespace": "team-1"}, "type": "Opaque",
            "data": {"password": "czNjcjN0LXZhbHVl"}, "stringData": {"user": "app"}, "binaryData": {"k": "AA=="}});
        let sample = dictionary_sample(&serde_json::to_vec(&secret).unwrap());
        let sample: serde_json::Value = serde_json::from_slice(&sample).unwrap();
        assert_eq!(sample, json!({"metadata": {"name": "pg-app", "namespace": "team-1"}, "type": "Opaque"}));
        assert!(dictionary_sample(b"[1, 2]").is_empty(), "only an object makes a dictionary");
        let mut labelled_secret = secret.clone();
        labelled_secret["kind"] = json!("Secret");
        let sample = dictionary_sample(&serde_json::to_vec(&labelled_secret).unwrap());
        assert!(!String::from_utf8(sample).unwrap().contains("czNjcjN0LXZhbHVl"));
    }

    #[test]
    fn a_config_maps_values_stay_in_its_dictionary() {
        let script = "#!/bin/sh\nset -eu\n".repeat(200);
        let config_map = |name: &str| {
            serde_json::to_vec(&json!({"kind": "ConfigMap", "apiVersion": "v1",
                "metadata": {"name": name, "namespace": "team-1"}, "data": {"instance.sh": script, "primary": name}}))
            .unwrap()
        };
        let sample: serde_json::Value =
            serde_json::from_slice(&dictionary_sample(&config_map("pg-1"))).unwrap();
        assert_eq!(sample["data"]["instance.sh"], script.as_str());
        // The type is this test's own, so its dictionary is the first text below.
        struct ScriptsOnly;
        let _first = Packed::pack::<ScriptsOnly>(&config_map("pg-1"), true);
        let second = Packed::pack::<ScriptsOnly>(&config_map("pg-2"), true);
        assert!(second.packed_len() * 20 < config_map("pg-2").len(), "{} bytes", second.packed_len());
        assert_eq!(second.unpack().unwrap(), config_map("pg-2"));
    }
}
