//! The string `format`s the apiserver checks on custom resources (its strfmt registry); formats it does
//! not know, such as `int32` or `int-or-string`, constrain nothing.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use base64::Engine;

/// Whether `text` is valid for `format`; unknown formats accept everything, as the apiserver's do.
pub(super) fn is_valid(format: &str, text: &str) -> bool {
    match format {
        "date-time" | "datetime" => is_date_time(text),
        "date" => text.len() == 10 && text.parse::<jiff::civil::Date>().is_ok(),
        "uuid" => is_uuid(text),
        "byte" => base64::engine::general_purpose::STANDARD.decode(text).is_ok(),
        "ipv4" => text.parse::<Ipv4Addr>().is_ok(),
        "ipv6" => text.parse::<Ipv6Addr>().is_ok(),
        "cidr" => is_cidr(text),
        "hostname" => is_hostname(text),
        _ => true,
    }
}

/// RFC 3339 with a zone (`2024-01-02T03:04:05Z`, fractional seconds allowed), or a zoneless local time.
fn is_date_time(text: &str) -> bool {
    text.parse::<jiff::Timestamp>().is_ok()
        || (text.contains('T') && text.parse::<jiff::civil::DateTime>().is_ok())
}

fn is_uuid(text: &str) -> bool {
    let groups: Vec<&str> = text.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, len)| g.len() == len && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn is_cidr(text: &str) -> bool {
    let Some((ip, prefix)) = text.split_once('/') else { return false };
    let Ok(prefix) = prefix.parse::<u8>() else { return false };
    match ip.parse::<IpAddr>() {
        Ok(IpAddr::V4(_)) => prefix <= 32,
        Ok(IpAddr::V6(_)) => prefix <= 128,
        Err(_) => false,
    }
}

fn is_hostname(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 255
        && text.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

#[cfg(test)]
mod tests {
    use super::is_valid;

    #[test]
    fn known_formats_are_checked() {
        assert!(is_valid("date-time", "2024-01-02T03:04:05Z"));
        assert!(is_valid("date-time", "2024-01-02T03:04:05.123+02:00"));
        assert!(!is_valid("date-time", "yesterday"));
        assert!(!is_valid("date-time", "2024-13-02T03:04:05Z"));
        assert!(is_valid("date", "2024-01-02"));
        assert!(!is_valid("date", "2024-1-2"));
        assert!(is_valid("uuid", "123e4567-e89b-12d3-a456-426614174000"));
        assert!(!is_valid("uuid", "123e4567"));
        assert!(is_valid("byte", "aGVsbG8="));
        assert!(!is_valid("byte", "not base64!"));
        assert!(is_valid("ipv4", "10.0.0.1") && !is_valid("ipv4", "10.0.0"));
        assert!(is_valid("ipv6", "::1") && !is_valid("ipv6", "10.0.0.1"));
        assert!(is_valid("cidr", "10.0.0.0/8") && !is_valid("cidr", "10.0.0.0/33"));
        assert!(is_valid("hostname", "db-0.example.com") && !is_valid("hostname", "-bad"));
    }

    #[test]
    fn unknown_formats_accept_anything() {
        assert!(is_valid("int-or-string", "anything"));
        assert!(is_valid("int32", "x"));
    }
}
