//! URLs parsed as Go's `net/url` parses them, which is what Kubernetes' CEL URL library answers
//! from: `ParseRequestURI` (an absolute URI or an absolute path, else an error) and `Parse`, the
//! accessors `Hostname`, `Port`, `EscapedPath`, `Query`, and Go's error texts. Pure.

use std::collections::BTreeMap;

/// A parsed URL: `scheme:opaque?query` or `scheme://userinfo@host/path?query`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct GoUrl {
    /// Lower-cased, empty for an absolute path.
    pub(super) scheme: String,
    opaque: String,
    /// `host` or `host:port`, IPv6 addresses in brackets.
    pub(super) host: String,
    /// The path as written (escaped), whose decoding Go keeps as `Path`.
    raw_path: String,
    raw_query: String,
}

/// Why a string is not a URL, worded as Go's `*url.Error` (`parse "x": ...`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("parse {url:?}: {reason}")]
pub(super) struct GoUrlError {
    url: String,
    reason: String,
}

/// How a component is escaped and unescaped, as Go's `encoding` modes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Path,
    Host,
    QueryComponent,
}

impl GoUrl {
    /// Go's `url.ParseRequestURI`: the check `url()` and `isURL()` make.
    pub(super) fn parse_request_uri(raw: &str) -> Result<GoUrl, GoUrlError> {
        parse(raw, true).map_err(|reason| GoUrlError { url: raw.to_owned(), reason })
    }

    /// Go's `url.Parse`, which `url()` builds its value with: the `#fragment` is dropped first.
    pub(super) fn parse(raw: &str) -> Result<GoUrl, GoUrlError> {
        let without_fragment = raw.split_once('#').map_or(raw, |(url, _)| url);
        parse(without_fragment, false).map_err(|reason| GoUrlError { url: raw.to_owned(), reason })
    }

    /// The host without its port and without the brackets of an IPv6 address.
    pub(super) fn hostname(&self) -> &str {
        let (host, _) = split_host_port(&self.host);
        host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host)
    }

    /// The port, or the empty string.
    pub(super) fn port(&self) -> &str {
        split_host_port(&self.host).1
    }

    /// The path escaped: as written if that is a valid escaping, else escaped afresh.
    pub(super) fn escaped_path(&self) -> String {
        if self.opaque.is_empty() && valid_encoded_path(&self.raw_path) {
            return self.raw_path.clone();
        }
        let path = unescape(&self.raw_path, Mode::Path).unwrap_or_default();
        if path == "*" { path } else { escape_path(&path) }
    }

    /// The query's values by key, as Go's `Query()`: pairs that do not decode are skipped.
    pub(super) fn query(&self) -> BTreeMap<String, Vec<String>> {
        let mut values: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for pair in self.raw_query.split('&').filter(|p| !p.is_empty() && !p.contains(';')) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let decoded = unescape(key, Mode::QueryComponent)
                .and_then(|k| Ok((k, unescape(value, Mode::QueryComponent)?)));
            if let Ok((key, value)) = decoded {
                values.entry(key).or_default().push(value);
            }
        }
        values
    }
}

/// Go's `parse`: `via_request` is `ParseRequestURI`'s strictness (no empty URL, no relative path,
/// `//` starts a path, not an authority, without a scheme).
fn parse(raw: &str, via_request: bool) -> Result<GoUrl, String> {
    if raw.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return Err("net/url: invalid control character in URL".to_owned());
    }
    if raw.is_empty() && via_request {
        return Err("empty url".to_owned());
    }
    let mut url = GoUrl {
        scheme: String::new(),
        opaque: String::new(),
        host: String::new(),
        raw_path: String::new(),
        raw_query: String::new(),
    };
    if raw == "*" {
        url.raw_path = "*".to_owned();
        return Ok(url);
    }
    let (scheme, rest) = split_scheme(raw)?;
    url.scheme = scheme.to_ascii_lowercase();
    let rest = match rest.split_once('?') {
        Some((rest, query)) => {
            url.raw_query = query.to_owned();
            rest
        }
        None => rest,
    };
    if !rest.starts_with('/') {
        if !url.scheme.is_empty() {
            url.opaque = rest.to_owned();
            return Ok(url);
        }
        if via_request {
            return Err("invalid URI for request".to_owned());
        }
        if rest.split('/').next().is_some_and(|segment| segment.contains(':')) {
            return Err("first path segment in URL cannot contain colon".to_owned());
        }
    }
    let has_authority =
        (!url.scheme.is_empty() || !via_request && !rest.starts_with("///")) && rest.starts_with("//");
    let path = if has_authority {
        let after = &rest[2..];
        let end = after.find('/').unwrap_or(after.len());
        url.host = parse_authority(&after[..end])?;
        &after[end..]
    } else {
        rest
    };
    unescape(path, Mode::Path)?;
    url.raw_path = path.to_owned();
    Ok(url)
}

/// The scheme and the rest, as Go's `getScheme`: no scheme unless letters (then digits, `+-.`)
/// come before the first `:`.
fn split_scheme(raw: &str) -> Result<(&str, &str), String> {
    for (i, c) in raw.char_indices() {
        match c {
            'a'..='z' | 'A'..='Z' => {}
            '0'..='9' | '+' | '-' | '.' if i > 0 => {}
            ':' if i == 0 => return Err("missing protocol scheme".to_owned()),
            ':' => return Ok((&raw[..i], &raw[i + 1..])),
            _ => return Ok(("", raw)),
        }
    }
    Ok(("", raw))
}

/// The host of an authority (`userinfo@host:port`), checked as Go checks both parts.
fn parse_authority(authority: &str) -> Result<String, String> {
    let (userinfo, host) = match authority.rfind('@') {
        Some(at) => (Some(&authority[..at]), &authority[at + 1..]),
        None => (None, authority),
    };
    let valid_userinfo =
        |u: &str| u.chars().all(|c| c.is_ascii_alphanumeric() || "-._:~!$&'()*+,;=%@".contains(c));
    if userinfo.is_some_and(|u| !valid_userinfo(u)) {
        return Err("net/url: invalid userinfo".to_owned());
    }
    parse_host(host)
}

/// Go's `parseHost`: a bracketed IPv6 literal or a name, each with an optional numeric port.
fn parse_host(host: &str) -> Result<String, String> {
    let invalid_port = |port: &str| format!("invalid port {port:?} after host");
    if host.starts_with('[') {
        let close = host.rfind(']').ok_or_else(|| "missing ']' in host".to_owned())?;
        let port = &host[close + 1..];
        if !valid_optional_port(port) {
            return Err(invalid_port(port));
        }
    } else if let Some(colon) = host.rfind(':') {
        let port = &host[colon..];
        if !valid_optional_port(port) {
            return Err(invalid_port(port));
        }
    }
    unescape(host, Mode::Host)
}

/// `""`, or `:` followed by digits.
fn valid_optional_port(port: &str) -> bool {
    port.is_empty() || port.strip_prefix(':').is_some_and(|digits| digits.bytes().all(|b| b.is_ascii_digit()))
}

/// The host and the port of `host:port` (the port empty when there is none).
fn split_host_port(host_port: &str) -> (&str, &str) {
    match host_port.rfind(':') {
        Some(colon) if valid_optional_port(&host_port[colon..]) => {
            (&host_port[..colon], &host_port[colon + 1..])
        }
        _ => (host_port, ""),
    }
}

/// Whether Go escapes byte `c` in a path or host (`shouldEscape`).
fn should_escape(c: u8, mode: Mode) -> bool {
    if c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.' | b'~') {
        return false;
    }
    match mode {
        Mode::Host => !b"!$&'()*+,;=:[]<>\"".contains(&c),
        Mode::Path => !b"$&+,/:;=@".contains(&c),
        Mode::QueryComponent => true,
    }
}

/// Go's `unescape`: `%XX` decoded (`+` as a space in a query component); a bad escape, or a host
/// character that would need escaping, is an error.
fn unescape(text: &str, mode: Mode) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
                let byte = hex.and_then(|h| u8::from_str_radix(h, 16).ok()).ok_or_else(|| {
                    let bad = &text[i..text.len().min(i + 3)];
                    format!("invalid URL escape {bad:?}")
                })?;
                decoded.push(byte);
                i += 3;
                continue;
            }
            b'+' if mode == Mode::QueryComponent => decoded.push(b' '),
            c if mode == Mode::Host && c < 0x80 && should_escape(c, mode) => {
                return Err(format!("invalid character {:?} in host name", char::from(c).to_string()));
            }
            c => decoded.push(c),
        }
        i += 1;
    }
    Ok(String::from_utf8_lossy(&decoded).into_owned())
}

/// Go's `escape(s, encodePath)`: what must not appear in a path as `%XX`.
fn escape_path(path: &str) -> String {
    path.bytes()
        .map(|b| if should_escape(b, Mode::Path) { format!("%{b:02X}") } else { char::from(b).to_string() })
        .collect()
}

/// Go's `validEncoded(raw, encodePath)` with the check that it decodes back: a path written with
/// valid escapes is kept as written.
fn valid_encoded_path(raw: &str) -> bool {
    let allowed = |b: u8| b"!$&'()*+,;=:@[]%".contains(&b) || !should_escape(b, Mode::Path);
    raw.bytes().all(allowed) && unescape(raw, Mode::Path).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_uris_are_absolute_uris_or_absolute_paths() {
        for good in ["https://example.com:80/", "/absolute-path", "http://[::1]:80/", "mailto:a@b", "*"] {
            assert!(GoUrl::parse_request_uri(good).is_ok(), "{good}");
        }
        let error = |raw: &str| GoUrl::parse_request_uri(raw).unwrap_err().to_string();
        assert_eq!(error("../relative-path"), r#"parse "../relative-path": invalid URI for request"#);
        assert_eq!(error(""), r#"parse "": empty url"#);
        assert_eq!(error(":x"), r#"parse ":x": missing protocol scheme"#);
        assert_eq!(error("http://h:x/"), r#"parse "http://h:x/": invalid port ":x" after host"#);
        assert_eq!(error("http://[::1/"), r#"parse "http://[::1/": missing ']' in host"#);
        assert_eq!(error("/a%zz"), r#"parse "/a%zz": invalid URL escape "%zz""#);
        assert_eq!(error("http://a b/"), r#"parse "http://a b/": invalid character " " in host name"#);
    }

    #[test]
    fn accessors_answer_as_gos() {
        let url = GoUrl::parse("HTTPS://user@[::1]:8443/a b/%2F?k=a&k=b+c&j=%zz#frag").unwrap();
        assert_eq!((url.scheme.as_str(), url.host.as_str()), ("https", "[::1]:8443"));
        assert_eq!((url.hostname(), url.port()), ("::1", "8443"));
        assert_eq!(url.escaped_path(), "/a%20b//");
        assert_eq!(GoUrl::parse("/a%2Fb").unwrap().escaped_path(), "/a%2Fb");
        let query = url.query();
        assert_eq!(query.get("k"), Some(&vec!["a".to_owned(), "b c".to_owned()]));
        assert_eq!(query.get("j"), None);
        let plain = GoUrl::parse("https://example.com/p").unwrap();
        assert_eq!(
            (plain.hostname(), plain.port(), plain.escaped_path().as_str()),
            ("example.com", "", "/p")
        );
        assert_eq!(GoUrl::parse("/x").unwrap().scheme, "");
    }
}
