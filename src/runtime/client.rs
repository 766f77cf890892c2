//! The runtime's API client: kube's own retries off, so the runtime's retry policies are the only
//! ones.
//!
//! kube's default client retries 429/503/504 by itself (up to 15 times, honouring `Retry-After`)
//! under the reflector's reconnect backoff and the work queue's per-key backoff: two policies
//! stacked, neither visible. With [`client`], a failed LIST or WATCH reaches the reflector, which
//! backs off on its schedule (`Retry-After` as a floor), and a failed write reaches reconcile,
//! whose error requeues the key no earlier than the server's [`retry_after`].

use std::time::Duration;

use kube::{Client, Config};

/// A client for `config` with kube's retry layer off.
pub fn client(mut config: Config) -> Result<Client, kube::Error> {
    config.default_retry = false;
    Client::try_from(config)
}

/// How long the server asked the client to wait before retrying, if it did: the
/// `details.retryAfterSeconds` of a 429 (or 5xx) `Status`, which the apiserver sets together with
/// the `Retry-After` header.
pub fn retry_after(error: &kube::Error) -> Option<Duration> {
    match error {
        kube::Error::Api(status) => status
            .details
            .as_ref()
            .map(|details| details.retry_after_seconds)
            .filter(|&seconds| seconds > 0)
            .map(|seconds| Duration::from_secs(u64::from(seconds))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn api_error(status: serde_json::Value) -> kube::Error {
        kube::Error::Api(Box::new(serde_json::from_value::<Status>(status).unwrap()))
    }

    #[test]
    fn the_hint_comes_from_the_status_details() {
        let status =
            |seconds: u32| serde_json::json!({"code": 429, "details": {"retryAfterSeconds": seconds}});
        assert_eq!(retry_after(&api_error(status(3))), Some(Duration::from_secs(3)));
        assert_eq!(retry_after(&api_error(status(0))), None);
        assert_eq!(retry_after(&api_error(serde_json::json!({"code": 500}))), None);
    }
}
