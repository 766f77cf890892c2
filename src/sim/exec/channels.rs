//! The channel protocol of `pods/exec` over WebSocket, as k8s.io/apimachinery's `wsstream`
//! serves it and client-go's `tools/remotecommand` (websocket.go) speaks it: pure framing and
//! the statuses of the error channel.
//!
//! Rules:
//! 1. Subprotocols served: `v5.channel.k8s.io` (KEP-4006: what kubectl 1.30+ asks for, and all it
//!    asks for) and `v4.channel.k8s.io`; the first the client offers wins (`wsstream`'s
//!    `handshake`).
//! 2. Every message is binary; its first byte is the channel: 0 stdin, 1 stdout, 2 stderr,
//!    3 error, 4 resize. In v5, 255 is the close signal: exactly one more byte, the channel the
//!    client has finished writing (stdin); any other length ends the connection.
//! 3. A resize message holds one JSON `{"Width": w, "Height": h}` (field names matched without
//!    case, as Go's `encoding/json` does).
//! 4. The error channel carries one `metav1.Status` as `json.Marshal` writes it (no kind or
//!    apiVersion): `Success`; `Failure` with reason `NonZeroExitCode` and the cause `ExitCode`
//!    whose message is the code; or an `InternalError` (500) for anything else
//!    (`v4WriteStatusFunc` of apimachinery's `util/proxy/websocket.go`, the statuses of the
//!    apiserver's `StreamTranslatorHandler`).

use serde_json::{Value, json};

/// Channel of the client's stdin.
pub const STDIN: u8 = 0;
/// Channel of the command's stdout.
pub const STDOUT: u8 = 1;
/// Channel of the command's stderr.
pub const STDERR: u8 = 2;
/// Channel of the final status.
pub const ERROR: u8 = 3;
/// Channel of terminal resizes.
pub const RESIZE: u8 = 4;
/// The v5 close signal.
pub const CLOSE: u8 = 255;

/// A subprotocol served (rule 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// `v5.channel.k8s.io`: v4 with the close signal.
    V5,
    /// `v4.channel.k8s.io`.
    V4,
}

impl Protocol {
    /// The subprotocol's name.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::V5 => "v5.channel.k8s.io",
            Protocol::V4 => "v4.channel.k8s.io",
        }
    }
}

/// Rule 1: the protocol taken from the client's `Sec-WebSocket-Protocol` values (each may list
/// several, comma-separated).
pub fn negotiate<'a>(offered: impl IntoIterator<Item = &'a str>) -> Option<Protocol> {
    offered.into_iter().flat_map(|v| v.split(',')).map(str::trim).find_map(|p| match p {
        "v5.channel.k8s.io" => Some(Protocol::V5),
        "v4.channel.k8s.io" => Some(Protocol::V4),
        _ => None,
    })
}

/// One message from the client (rules 2 and 3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FromClient {
    /// Bytes for the command's stdin.
    Stdin(Vec<u8>),
    /// The terminal's new size (columns, rows).
    Resize(u16, u16),
    /// The client will write no more on this channel.
    Closed(u8),
    /// Nothing to act on (an empty message, an unknown channel, an unreadable resize).
    Ignored,
}

/// Why a message ends the connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// A v5 close signal without exactly one channel byte.
    #[error("single channel byte should follow CLOSE signal, got {0} bytes")]
    BadClose(usize),
}

/// Reads one binary message from the client.
pub fn read(protocol: Protocol, message: &[u8]) -> Result<FromClient, ProtocolError> {
    let Some((&channel, data)) = message.split_first() else { return Ok(FromClient::Ignored) };
    Ok(match channel {
        CLOSE if protocol == Protocol::V5 => match data {
            [closed] => FromClient::Closed(*closed),
            _ => return Err(ProtocolError::BadClose(data.len())),
        },
        STDIN => FromClient::Stdin(data.to_vec()),
        RESIZE => resize(data).map_or(FromClient::Ignored, |(w, h)| FromClient::Resize(w, h)),
        _ => FromClient::Ignored,
    })
}

/// Rule 3.
fn resize(data: &[u8]) -> Option<(u16, u16)> {
    let size: Value = serde_json::from_slice(data).ok()?;
    let field = |name: &str| {
        size.as_object()?
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .and_then(|(_, v)| v.as_u64())
            .and_then(|n| u16::try_from(n).ok())
    };
    Some((field("width")?, field("height")?))
}

/// A message to the client: `data` on `channel`.
pub fn frame(channel: u8, data: &[u8]) -> Vec<u8> {
    let mut message = Vec::with_capacity(data.len() + 1);
    message.push(channel);
    message.extend_from_slice(data);
    message
}

/// Rule 4: the command exited 0.
pub fn success() -> Value {
    json!({"metadata": {}, "status": "Success"})
}

/// Rule 4: the command `command` exited with `code` (not 0); the message is the kubelet's.
pub fn exit_status(command: &[String], code: i32) -> Value {
    json!({
        "metadata": {},
        "status": "Failure",
        "message": format!(
            "command terminated with non-zero exit code: error executing command [{}], exit code {code}",
            command.join(" ")
        ),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
    })
}

/// Rule 4: the session failed for `why` (`apierrors.NewInternalError`).
pub fn internal_error(why: &str) -> Value {
    json!({
        "metadata": {},
        "status": "Failure",
        "message": format!("Internal error occurred: {why}"),
        "reason": "InternalError",
        "details": {"causes": [{"message": why}]},
        "code": 500,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_protocol_offered_and_served_wins() {
        assert_eq!(negotiate(["v5.channel.k8s.io"]), Some(Protocol::V5));
        assert_eq!(
            negotiate(["base64.channel.k8s.io, v4.channel.k8s.io", "v5.channel.k8s.io"]),
            Some(Protocol::V4)
        );
        assert_eq!(negotiate(["channel.k8s.io"]), None);
        assert_eq!(negotiate([]), None);
    }

    #[test]
    fn client_messages_are_stdin_resizes_and_v5_close_signals() {
        assert_eq!(read(Protocol::V5, b"\x00hi\n"), Ok(FromClient::Stdin(b"hi\n".to_vec())));
        assert_eq!(read(Protocol::V5, b"\x04{\"Width\":120,\"Height\":40}"), Ok(FromClient::Resize(120, 40)));
        assert_eq!(read(Protocol::V5, b"\x04{\"width\":80,\"height\":24}"), Ok(FromClient::Resize(80, 24)));
        assert_eq!(read(Protocol::V5, b"\x04not json"), Ok(FromClient::Ignored));
        assert_eq!(read(Protocol::V5, &[CLOSE, STDIN]), Ok(FromClient::Closed(STDIN)));
        assert_eq!(read(Protocol::V5, &[CLOSE]), Err(ProtocolError::BadClose(0)));
        assert_eq!(read(Protocol::V5, &[CLOSE, 0, 1]), Err(ProtocolError::BadClose(2)));
        assert_eq!(read(Protocol::V4, &[CLOSE, STDIN]), Ok(FromClient::Ignored), "no close signal in v4");
        assert_eq!(read(Protocol::V5, b""), Ok(FromClient::Ignored));
        assert_eq!(frame(STDOUT, b"out"), b"\x01out");
    }

    #[test]
    fn statuses_are_what_client_go_decodes() {
        assert_eq!(success().to_string(), r#"{"metadata":{},"status":"Success"}"#);
        let failed = exit_status(&["sh".into(), "-c".into(), "exit 3".into()], 3);
        assert_eq!(failed["reason"], "NonZeroExitCode");
        assert_eq!(failed["details"]["causes"][0], json!({"reason": "ExitCode", "message": "3"}));
        assert!(failed["message"].as_str().unwrap().ends_with("[sh -c exit 3], exit code 3"));
        let internal = internal_error("container not found (\"db\")");
        assert_eq!(internal["message"], "Internal error occurred: container not found (\"db\")");
        assert_eq!(
            (internal["code"].as_u64(), internal["reason"].as_str()),
            (Some(500), Some("InternalError"))
        );
    }
}
