//! The `metadata` scanner: cuts `metadata.managedFields` out of the raw JSON of a watch line or a
//! LIST page before it is decoded ([`elide_managed_fields`]), and named members out of one
//! object's own metadata ([`cut_metadata_members`]), without parsing anything else.

/// Removes `metadata.managedFields` from the raw JSON of a watch line (`{"type":…,"object":{…}}`)
/// or of a list (`{"items":[{…},…]}`) before it is decoded, so the field's many small allocations
/// are never made. Returns `None` when there is nothing to remove (or the text is not shaped as
/// expected, in which case the typed decoder will say what is wrong). Only the `managedFields`
/// member of each object's own `metadata` is touched: the same name anywhere else (inside a
/// string, in a spec) is left alone.
pub fn elide_managed_fields(json: &[u8]) -> Option<Vec<u8>> {
    memchr::memmem::find(json, b"\"managedFields\"")?;
    let mut cuts = Vec::new();
    if let Some((_, object)) = find_member(json, 0, b"object") {
        cuts.extend(managed_fields_member(json, object));
    } else if let Some((_, items)) = find_member(json, 0, b"items")
        && json.get(items) == Some(&b'[')
    {
        let mut i = skip_ws(json, items + 1);
        while json.get(i).is_some_and(|&b| b != b']') {
            cuts.extend(managed_fields_member(json, i));
            i = skip_ws(json, skip_value(json, i)?);
            if json.get(i) == Some(&b',') {
                i = skip_ws(json, i + 1);
            }
        }
    }
    if cuts.is_empty() {
        return None;
    }
    let removed: usize = cuts.iter().map(|cut: &std::ops::Range<usize>| cut.len()).sum();
    let mut out = Vec::with_capacity(json.len() - removed);
    let mut from = 0;
    for cut in cuts {
        out.extend_from_slice(&json[from..cut.start]);
        from = cut.end;
    }
    out.extend_from_slice(&json[from..]);
    Some(out)
}

/// Removes the members named in `keys` from the own `metadata` of the JSON object `object` (not
/// from a metadata nested deeper, nor from any string), keeping the other members in their
/// order. `None` when none of them is there, or the text is not shaped as expected (the typed
/// decoder that reads the same text says what is wrong).
pub fn cut_metadata_members(object: &[u8], keys: &[&str]) -> Option<Vec<u8>> {
    let (_, metadata) = find_member(object, 0, b"metadata")?;
    if object.get(metadata) != Some(&b'{') {
        return None;
    }
    let mut out = Vec::with_capacity(object.len());
    out.extend_from_slice(&object[..=metadata]);
    let (mut cut, mut kept) = (false, 0usize);
    let mut i = skip_ws(object, metadata + 1);
    while object.get(i) == Some(&b'"') {
        let (name, value) = member_at(object, i)?;
        let value_end = skip_value(object, value)?;
        if keys.iter().any(|key| name == key.as_bytes()) {
            cut = true;
        } else {
            if kept > 0 {
                out.push(b',');
            }
            out.extend_from_slice(&object[i..value_end]);
            kept += 1;
        }
        i = skip_ws(object, value_end);
        if object.get(i) == Some(&b',') {
            i = skip_ws(object, i + 1);
        }
    }
    if !cut || object.get(i) != Some(&b'}') {
        return None;
    }
    out.extend_from_slice(&object[i..]);
    Some(out)
}

/// The byte range to cut to drop `metadata.managedFields` (with one separating comma) from the
/// object starting at `object`.
fn managed_fields_member(json: &[u8], object: usize) -> Option<std::ops::Range<usize>> {
    let (_, metadata) = find_member(json, object, b"metadata")?;
    let (member, value) = find_member(json, metadata, b"managedFields")?;
    let end = skip_value(json, value)?;
    let after = skip_ws(json, end);
    if json.get(after) == Some(&b',') {
        return Some(member..after + 1);
    }
    let before = json[..member].iter().rposition(|b| !b.is_ascii_whitespace())?;
    Some(if json[before] == b',' { before..end } else { member..end })
}

/// Finds the member `key` of the JSON object starting at `object` (after whitespace):
/// the offsets of the member's key and of its value.
fn find_member(json: &[u8], object: usize, key: &[u8]) -> Option<(usize, usize)> {
    let mut i = skip_ws(json, object);
    if json.get(i) != Some(&b'{') {
        return None;
    }
    i = skip_ws(json, i + 1);
    while json.get(i) == Some(&b'"') {
        let (name, value) = member_at(json, i)?;
        if name == key {
            return Some((i, value));
        }
        i = skip_ws(json, skip_value(json, value)?);
        if json.get(i) != Some(&b',') {
            return None;
        }
        i = skip_ws(json, i + 1);
    }
    None
}

/// The object member whose key starts at `start` (which holds `"`): its key as written (without
/// the quotes), and the offset of its value.
fn member_at(json: &[u8], start: usize) -> Option<(&[u8], usize)> {
    let key_end = skip_string(json, start)?;
    let colon = skip_ws(json, key_end);
    if json.get(colon) != Some(&b':') {
        return None;
    }
    Some((&json[start + 1..key_end - 1], skip_ws(json, colon + 1)))
}

fn skip_ws(json: &[u8], mut i: usize) -> usize {
    while json.get(i).is_some_and(u8::is_ascii_whitespace) {
        i += 1;
    }
    i
}

/// The offset just past the string starting at `start` (which holds `"`).
fn skip_string(json: &[u8], start: usize) -> Option<usize> {
    let mut i = start + 1;
    loop {
        i += memchr::memchr2(b'"', b'\\', json.get(i..)?)?;
        if json[i] == b'\\' {
            i += 2;
        } else {
            return Some(i + 1);
        }
    }
}

/// The offset just past the JSON value starting at `start`.
fn skip_value(json: &[u8], start: usize) -> Option<usize> {
    match *json.get(start)? {
        b'"' => skip_string(json, start),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = start;
            loop {
                match *json.get(i)? {
                    b'"' => {
                        i = skip_string(json, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
        }
        _ => {
            let len =
                json[start..].iter().position(|b| matches!(b, b',' | b'}' | b']') || b.is_ascii_whitespace());
            Some(start + len.unwrap_or(json.len() - start))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn managed_fields_are_elided_from_watch_lines_and_list_items_only_where_they_belong() {
        let line = br#"{"type":"ADDED","object":{"kind":"ConfigMap","metadata":{"name":"a","managedFields":[{"manager":"x","fieldsV1":{"f:data":{"f:\"]}":{}}}}],"namespace":"n"},"data":{"managedFields":"kept"}}}"#;
        let elided = elide_managed_fields(line).unwrap();
        assert_eq!(
            std::str::from_utf8(&elided).unwrap(),
            r#"{"type":"ADDED","object":{"kind":"ConfigMap","metadata":{"name":"a","namespace":"n"},"data":{"managedFields":"kept"}}}"#
        );
        let last = br#"{"type":"MODIFIED","object":{"metadata":{"name":"a", "managedFields" : [] }}}"#;
        assert_eq!(
            elide_managed_fields(last).unwrap(),
            br#"{"type":"MODIFIED","object":{"metadata":{"name":"a" }}}"#
        );
        let only = br#"{"type":"MODIFIED","object":{"metadata":{"managedFields":[1]}}}"#;
        assert_eq!(elide_managed_fields(only).unwrap(), br#"{"type":"MODIFIED","object":{"metadata":{}}}"#);
        assert_eq!(elide_managed_fields(br#"{"type":"ADDED","object":{"data":{"managedFields":[]}}}"#), None);

        let list = br#"{"metadata":{"resourceVersion":"1"},"items":[{"metadata":{"managedFields":[{}],"name":"a"}},{"metadata":{"name":"b"}},{"metadata":{"name":"c","managedFields":[]}}]}"#;
        assert_eq!(
            std::str::from_utf8(&elide_managed_fields(list).unwrap()).unwrap(),
            r#"{"metadata":{"resourceVersion":"1"},"items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b"}},{"metadata":{"name":"c"}}]}"#
        );
        assert_eq!(elide_managed_fields(br#"{"items":[{"metadata":{"managedFields":[{"#), None);
    }

    #[test]
    fn named_members_are_cut_from_the_objects_own_metadata_only() {
        let keys = ["name", "resourceVersion"];
        let cut = |text: &str| {
            cut_metadata_members(text.as_bytes(), &keys).map(|out| String::from_utf8(out).unwrap())
        };
        assert_eq!(
            cut(r#"{"kind":"Service","metadata":{"name":"a", "labels":{"name":"x"},"resourceVersion":"7","uid":"u"},"spec":{"name":"b"}}"#)
                .as_deref(),
            Some(r#"{"kind":"Service","metadata":{"labels":{"name":"x"},"uid":"u"},"spec":{"name":"b"}}"#)
        );
        assert_eq!(
            cut(r#"{"metadata":{"uid":"u","name":"a"}}"#).as_deref(),
            Some(r#"{"metadata":{"uid":"u"}}"#)
        );
        assert_eq!(
            cut(r#"{"metadata":{"name":"a","resourceVersion":"1"}}"#).as_deref(),
            Some(r#"{"metadata":{}}"#)
        );
        assert_eq!(cut(r#"{"metadata":{"uid":"u"},"name":"top"}"#), None, "nothing of the metadata's to cut");
        assert_eq!(cut(r#"{"metadata":{}}"#), None);
        assert_eq!(cut(r#"{"metadata":"not an object"}"#), None);
        assert_eq!(cut(r#"{"metadata":{"name":"a""#), None, "cut short");
    }

    mod property {
        use proptest::prelude::*;
        use serde_json::{Map, Value};

        use super::{cut_metadata_members, elide_managed_fields};

        /// Strings that stress the scanner: any unicode, and JSON's special characters (quotes,
        /// backslashes, brackets, the member's own name) that the serialiser must escape or that
        /// look like structure.
        fn tricky_string() -> impl Strategy<Value = String> {
            prop_oneof![
                any::<String>(),
                r#"[\\"{}\[\],: aé\u{1F980}\n]{0,12}"#,
                Just("managedFields".to_string()),
                Just("\"managedFields\":[]".to_string()),
                Just("metadata".to_string()),
            ]
        }

        /// Any JSON value, nested a few levels, with tricky strings as keys and values.
        fn json_value() -> impl Strategy<Value = Value> {
            let leaf = prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::Bool),
                any::<i64>().prop_map(Value::from),
                tricky_string().prop_map(Value::String),
            ];
            leaf.prop_recursive(4, 48, 6, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                    prop::collection::btree_map(tricky_string(), inner, 0..5)
                        .prop_map(|members| Value::Object(members.into_iter().collect())),
                ]
            })
        }

        /// An object whose `metadata` may hold `managedFields` among other members, and whose
        /// other fields may hold the same name anywhere.
        fn object() -> impl Strategy<Value = Value> {
            (
                prop::collection::btree_map(tricky_string(), json_value(), 0..4),
                prop::option::of(json_value()),
                json_value(),
            )
                .prop_map(|(meta, managed, data)| {
                    let mut metadata: Map<String, Value> = meta.into_iter().collect();
                    metadata.remove("managedFields");
                    if let Some(managed) = managed {
                        metadata.insert("managedFields".into(), managed);
                    }
                    serde_json::json!({"kind": "ConfigMap", "metadata": metadata, "data": data})
                })
        }

        fn without_managed_fields(mut object: Value) -> Value {
            if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
                metadata.remove("managedFields");
            }
            object
        }

        /// Decodes `document` after eliding, as the reflector does.
        fn decode_elided(document: &Value, pretty: bool) -> Value {
            let text =
                if pretty { serde_json::to_vec_pretty(document) } else { serde_json::to_vec(document) }
                    .unwrap();
            let elided = elide_managed_fields(&text);
            serde_json::from_slice(elided.as_deref().unwrap_or(&text)).expect("elided text is JSON")
        }

        proptest! {
            #[test]
            fn eliding_a_watch_line_equals_decoding_it_and_dropping_managed_fields(
                object in object(), event_type in tricky_string(), pretty in any::<bool>(),
            ) {
                let line = serde_json::json!({"type": event_type, "object": object.clone()});
                let expected = serde_json::json!({"type": event_type, "object": without_managed_fields(object)});
                prop_assert_eq!(decode_elided(&line, pretty), expected);
            }

            #[test]
            fn eliding_a_list_page_equals_decoding_it_and_dropping_managed_fields(
                items in prop::collection::vec(object(), 0..4), list_meta in json_value(), pretty in any::<bool>(),
            ) {
                let page = serde_json::json!({"kind": "List", "metadata": list_meta, "items": items.clone()});
                let items: Vec<Value> = items.into_iter().map(without_managed_fields).collect();
                let expected = serde_json::json!({"kind": "List", "metadata": list_meta, "items": items});
                prop_assert_eq!(decode_elided(&page, pretty), expected);
            }

            #[test]
            fn cutting_metadata_members_equals_decoding_and_removing_them(
                object in object(), pretty in any::<bool>(),
            ) {
                let keys = ["managedFields", "metadata", "name"];
                let text = if pretty { serde_json::to_vec_pretty(&object) } else { serde_json::to_vec(&object) }.unwrap();
                let cut = cut_metadata_members(&text, &keys);
                let decoded: Value = serde_json::from_slice(cut.as_deref().unwrap_or(&text)).expect("cut text is JSON");
                let mut expected = object;
                let metadata = expected["metadata"].as_object_mut().unwrap();
                for key in keys {
                    metadata.remove(key);
                }
                prop_assert_eq!(decoded, expected);
            }
        }
    }
}
