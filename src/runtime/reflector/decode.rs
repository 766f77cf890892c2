//! Decoding the API server's answers: one watch line ([`decode_watch_line`]) and one LIST page
//! ([`decode_list_page`]), each so that an object that fails to decode costs that object, not the
//! stream or the page.

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ListMeta, Status};
use serde::de::{DeserializeOwned, DeserializeSeed, Error as _, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use super::ReflectorStats;

/// The annotation on the bookmark that ends a streaming list's initial events.
pub const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// One decoded line of a watch stream.
#[derive(Debug, Clone, PartialEq)]
pub enum WatchLine<K> {
    /// `ADDED`.
    Added(K),
    /// `MODIFIED`.
    Modified(K),
    /// `DELETED`, with the object's final state.
    Deleted(K),
    /// `BOOKMARK`.
    Bookmark {
        /// The resourceVersion the stream has reached.
        resource_version: String,
        /// Whether this bookmark ends a streaming list's initial events.
        initial_events_end: bool,
    },
    /// `ERROR`, with the server's Status.
    Error {
        /// The Status code (410 for an expired resourceVersion).
        code: u16,
        /// The Status reason.
        reason: String,
        /// The Status message.
        message: String,
    },
}

/// A watch line that could not be decoded; the stream goes on without it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("malformed {event_type} event for {object}: {error}")]
pub struct MalformedLine {
    /// The event's `type`, or `?` if even that was unreadable.
    pub event_type: String,
    /// `namespace/name` of the object if readable, else `?`.
    pub object: String,
    /// The decoder's message.
    pub error: String,
}

#[derive(Clone, Copy, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
enum LineType {
    Added,
    Modified,
    Deleted,
    Bookmark,
    Error,
}

/// What a bookmark's object carries that the reflector reads: its resourceVersion, and whether
/// it ends a streaming list's initial events. Nothing else of it is decoded.
#[derive(Deserialize)]
struct BookmarkObject {
    #[serde(default)]
    metadata: BookmarkMeta,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct BookmarkMeta {
    #[serde(default)]
    resource_version: Option<String>,
    #[serde(default)]
    annotations: Option<BTreeMap<String, String>>,
}

impl<K> From<BookmarkObject> for WatchLine<K> {
    fn from(bookmark: BookmarkObject) -> Self {
        let BookmarkMeta { resource_version, annotations } = bookmark.metadata;
        WatchLine::Bookmark {
            resource_version: resource_version.unwrap_or_default(),
            initial_events_end: annotations
                .as_ref()
                .and_then(|a| a.get(INITIAL_EVENTS_END))
                .is_some_and(|v| v == "true"),
        }
    }
}

/// The single pass over a line: the object is decoded as what the type says, a `K` for an
/// object event and only [`BookmarkObject`] for a bookmark (a bookmark is not a `K`: it has no
/// name, and a cache must not keep what it carries). The API server writes the type first; an
/// object that comes before its type is only delimited (a borrowed raw value, no allocation)
/// and decoded once the type is known. An error event, or an object that does not decode,
/// fails, for the slower second pass.
struct TypedLine<K>(PhantomData<K>);

impl<'de, K: DeserializeOwned> Visitor<'de> for TypedLine<K> {
    type Value = WatchLine<K>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a watch event")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<WatchLine<K>, A::Error> {
        let mut kind = None;
        let mut line = None;
        let mut object_first: Option<&'de RawValue> = None;
        while let Some(field) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match (field.as_ref(), kind) {
                ("type", _) => kind = Some(map.next_value::<LineType>()?),
                ("object", Some(kind)) => line = Some(map.next_value_seed(ObjectOf::<K>(kind, PhantomData))?),
                ("object", None) => object_first = Some(map.next_value()?),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        if let (None, Some(kind), Some(object)) = (&line, kind, object_first) {
            let mut de = serde_json::Deserializer::from_str(object.get());
            line = Some(ObjectOf::<K>(kind, PhantomData).deserialize(&mut de).map_err(A::Error::custom)?);
        }
        line.ok_or_else(|| A::Error::custom("a watch event without a type or an object"))
    }
}

/// A line's object, decoded as what its type says.
struct ObjectOf<K>(LineType, PhantomData<K>);

impl<'de, K: DeserializeOwned> DeserializeSeed<'de> for ObjectOf<K> {
    type Value = WatchLine<K>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<WatchLine<K>, D::Error> {
        Ok(match self.0 {
            LineType::Added => WatchLine::Added(K::deserialize(deserializer)?),
            LineType::Modified => WatchLine::Modified(K::deserialize(deserializer)?),
            LineType::Deleted => WatchLine::Deleted(K::deserialize(deserializer)?),
            LineType::Bookmark => BookmarkObject::deserialize(deserializer)?.into(),
            LineType::Error => return Err(D::Error::custom("an error event")),
        })
    }
}

/// Decodes one line of a watch stream. The common case (an object that decodes as `K`, or a
/// bookmark) is a single pass; errors and malformed objects take a slower second pass through
/// `serde_json::Value` to say what they were.
pub fn decode_watch_line<K: DeserializeOwned>(line: &[u8]) -> Result<WatchLine<K>, MalformedLine> {
    let mut de = serde_json::Deserializer::from_slice(line);
    match de.deserialize_map(TypedLine(PhantomData)).and_then(|decoded| de.end().map(|()| decoded)) {
        Ok(decoded) => Ok(decoded),
        Err(_) => decode_untyped_line(line),
    }
}

fn decode_untyped_line<K: DeserializeOwned>(line: &[u8]) -> Result<WatchLine<K>, MalformedLine> {
    let value: serde_json::Value = serde_json::from_slice(line).map_err(|e| MalformedLine {
        event_type: "?".into(),
        object: "?".into(),
        error: e.to_string(),
    })?;
    let event_type = value["type"].as_str().unwrap_or("?").to_string();
    let object = &value["object"];
    let as_k = |object: &serde_json::Value| serde_json::from_value::<K>(object.clone());
    let malformed = |event_type: String, error: serde_json::Error| MalformedLine {
        event_type,
        object: describe(object),
        error: error.to_string(),
    };
    match event_type.as_str() {
        "ADDED" => as_k(object).map(WatchLine::Added).map_err(|e| malformed(event_type, e)),
        "MODIFIED" => as_k(object).map(WatchLine::Modified).map_err(|e| malformed(event_type, e)),
        "DELETED" => as_k(object).map(WatchLine::Deleted).map_err(|e| malformed(event_type, e)),
        "BOOKMARK" => serde_json::from_value::<BookmarkObject>(object.clone())
            .map(WatchLine::from)
            .map_err(|e| malformed(event_type, e)),
        "ERROR" => {
            let status: Status = serde_json::from_value(object.clone()).unwrap_or_default();
            Ok(WatchLine::Error {
                code: status.code.and_then(|c| u16::try_from(c).ok()).unwrap_or(500),
                reason: status.reason.unwrap_or_default(),
                message: status.message.unwrap_or_default(),
            })
        }
        _ => Err(MalformedLine {
            error: format!("unknown event type {event_type:?}"),
            event_type,
            object: describe(object),
        }),
    }
}

fn describe(object: &serde_json::Value) -> String {
    let meta = &object["metadata"];
    match (meta["namespace"].as_str(), meta["name"].as_str()) {
        (Some(ns), Some(name)) => format!("{ns}/{name}"),
        (None, Some(name)) => name.to_string(),
        _ => "?".to_string(),
    }
}

/// Decodes a LIST response, handing each item to `on_item` as soon as it is decoded (the page is
/// never held as a `Vec` of objects). Items that do not decode are counted, logged and skipped;
/// items before a bad one may then be handed over twice, which a relist absorbs (same
/// resourceVersion → unchanged).
pub fn decode_list_page<K: DeserializeOwned>(
    body: &[u8],
    on_item: &mut dyn FnMut(K),
    stats: &ReflectorStats,
) -> Result<ListMeta, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(body);
    match (ListPageSeed { on_item: &mut *on_item, _kind: PhantomData::<K> }).deserialize(&mut de) {
        Ok(meta) => Ok(meta),
        Err(_) => {
            let page: UntypedPage = serde_json::from_slice(body)?;
            for item in page.items {
                match serde_json::from_value::<K>(item) {
                    Ok(obj) => on_item(obj),
                    Err(error) => {
                        stats.bump(&stats.malformed_skipped);
                        tracing::warn!(%error, "skipping a listed object that does not decode");
                    }
                }
            }
            Ok(page.metadata)
        }
    }
}

#[derive(Deserialize)]
struct UntypedPage {
    #[serde(default)]
    metadata: ListMeta,
    #[serde(default)]
    items: Vec<serde_json::Value>,
}

struct ListPageSeed<'a, K> {
    on_item: &'a mut dyn FnMut(K),
    _kind: PhantomData<K>,
}

impl<'de, K: DeserializeOwned> DeserializeSeed<'de> for ListPageSeed<'_, K> {
    type Value = ListMeta;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<ListMeta, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de, K: DeserializeOwned> Visitor<'de> for ListPageSeed<'_, K> {
    type Value = ListMeta;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Kubernetes list")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ListMeta, A::Error> {
        let mut meta = ListMeta::default();
        while let Some(field) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match field.as_ref() {
                "metadata" => meta = map.next_value()?,
                "items" => {
                    map.next_value_seed(ItemsSeed { on_item: &mut *self.on_item, _kind: PhantomData::<K> })?
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(meta)
    }
}

struct ItemsSeed<'a, K> {
    on_item: &'a mut dyn FnMut(K),
    _kind: PhantomData<K>,
}

impl<'de, K: DeserializeOwned> DeserializeSeed<'de> for ItemsSeed<'_, K> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_option(self)
    }
}

impl<'de, K: DeserializeOwned> Visitor<'de> for ItemsSeed<'_, K> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of objects")
    }

    fn visit_none<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(item) = seq.next_element::<K>()? {
            (self.on_item)(item);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use std::sync::atomic::Ordering;

    #[test]
    fn decodes_object_events_bookmarks_and_errors() {
        let added = br#"{"type":"ADDED","object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"n","resourceVersion":"5"}}}"#;
        match decode_watch_line::<ConfigMap>(added) {
            Ok(WatchLine::Added(cm)) => assert_eq!(cm.metadata.resource_version.as_deref(), Some("5")),
            other => panic!("{other:?}"),
        }
        let bookmark = br#"{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"9","annotations":{"k8s.io/initial-events-end":"true"}}}}"#;
        assert_eq!(
            decode_watch_line::<ConfigMap>(bookmark),
            Ok(WatchLine::Bookmark { resource_version: "9".into(), initial_events_end: true })
        );
        let error = br#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","code":410,"reason":"Expired","message":"too old"}}"#;
        assert_eq!(
            decode_watch_line::<ConfigMap>(error),
            Ok(WatchLine::Error { code: 410, reason: "Expired".into(), message: "too old".into() })
        );
    }

    /// A `K` that counts how often it was decoded.
    #[derive(Debug, PartialEq)]
    struct Counted;

    static COUNTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    impl<'de> Deserialize<'de> for Counted {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            IgnoredAny::deserialize(deserializer)?;
            COUNTED.fetch_add(1, Ordering::Relaxed);
            Ok(Counted)
        }
    }

    #[test]
    fn a_bookmark_is_read_without_decoding_a_k_and_the_object_may_come_first() {
        let bookmark = br#"{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"9","annotations":{"k8s.io/initial-events-end":"true"}}}}"#;
        let before = COUNTED.load(Ordering::Relaxed);
        assert_eq!(
            decode_watch_line::<Counted>(bookmark),
            Ok(WatchLine::Bookmark { resource_version: "9".into(), initial_events_end: true })
        );
        let plain = br#"{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"10"}}}"#;
        assert_eq!(
            decode_watch_line::<Counted>(plain),
            Ok(WatchLine::Bookmark { resource_version: "10".into(), initial_events_end: false })
        );
        let object_first = br#"{"object":{"metadata":{"resourceVersion":"12"}},"type":"BOOKMARK"}"#;
        assert_eq!(
            decode_watch_line::<Counted>(object_first),
            Ok(WatchLine::Bookmark { resource_version: "12".into(), initial_events_end: false })
        );
        assert_eq!(COUNTED.load(Ordering::Relaxed), before, "a bookmark is never decoded as a K");
        assert_eq!(
            decode_watch_line::<Counted>(br#"{"type":"ADDED","object":{}}"#),
            Ok(WatchLine::Added(Counted))
        );
        assert_eq!(COUNTED.load(Ordering::Relaxed), before + 1);

        for (event, expected) in [("ADDED", "a"), ("MODIFIED", "b"), ("DELETED", "c")] {
            let line = format!(
                r#"{{"object":{{"metadata":{{"name":"{expected}","namespace":"n"}}}},"type":"{event}"}}"#
            );
            let name = match decode_watch_line::<ConfigMap>(line.as_bytes()) {
                Ok(WatchLine::Added(cm) | WatchLine::Modified(cm) | WatchLine::Deleted(cm)) => {
                    cm.metadata.name
                }
                other => panic!("{other:?}"),
            };
            assert_eq!(name.as_deref(), Some(expected), "{event}, the object before the type");
        }
        let bookmark_last = br#"{"object":{"metadata":{"resourceVersion":"11"}},"type":"BOOKMARK"}"#;
        assert_eq!(
            decode_watch_line::<ConfigMap>(bookmark_last),
            Ok(WatchLine::Bookmark { resource_version: "11".into(), initial_events_end: false })
        );
        let unknown =
            decode_watch_line::<ConfigMap>(br#"{"type":"RENAMED","object":{"metadata":{"name":"a"}}}"#);
        assert!(unknown.is_err_and(|e| e.error.contains("unknown event type") && e.object == "a"));
    }

    #[test]
    fn a_malformed_object_is_reported_with_its_name() {
        let bad = br#"{"type":"MODIFIED","object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"n"},"data":{"k":17}}}"#;
        let err = decode_watch_line::<ConfigMap>(bad).unwrap_err();
        assert_eq!((err.event_type.as_str(), err.object.as_str()), ("MODIFIED", "n/a"));
        let garbage = decode_watch_line::<ConfigMap>(b"{not json").unwrap_err();
        assert_eq!(garbage.event_type, "?");
    }

    #[test]
    fn list_pages_stream_items_and_skip_malformed_ones() {
        let stats = ReflectorStats::default();
        let page = br#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"42","continue":"tok"},
            "items":[{"metadata":{"name":"a","namespace":"n"}},{"metadata":{"name":"b","namespace":"n"}}]}"#;
        let mut names = Vec::new();
        let meta =
            decode_list_page::<ConfigMap>(page, &mut |cm| names.push(cm.metadata.name.unwrap()), &stats)
                .unwrap();
        assert_eq!(
            (names, meta.resource_version.as_deref(), meta.continue_.as_deref()),
            (vec!["a".to_string(), "b".to_string()], Some("42"), Some("tok"))
        );

        let bad = br#"{"metadata":{"resourceVersion":"43"},"items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b"},"data":{"k":1}},{"metadata":{"name":"c"}}]}"#;
        let mut names = Vec::new();
        let meta =
            decode_list_page::<ConfigMap>(bad, &mut |cm| names.push(cm.metadata.name.unwrap()), &stats)
                .unwrap();
        assert_eq!(meta.resource_version.as_deref(), Some("43"));
        assert_eq!(names.last().map(String::as_str), Some("c"));
        assert!(!names.contains(&"b".to_string()));
        assert_eq!(stats.malformed_skipped.load(Ordering::Relaxed), 1);

        let empty = br#"{"metadata":{"resourceVersion":"44"},"items":null}"#;
        let meta = decode_list_page::<ConfigMap>(empty, &mut |_| panic!("no items"), &stats).unwrap();
        assert_eq!(meta.resource_version.as_deref(), Some("44"));
    }
}
