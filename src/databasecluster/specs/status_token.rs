//! The Secret `<name>-status-token` (built here, ensured by the step
//! `controller::steps::status_token`): the bearer token each instance manager requires on its
//! `/status` (mounted at `$DBC_SECRETS/status/token`, see `crate::instance::http`). Drawn once from
//! the CSPRNG when the Secret is created and read back from the live Secret ever after, like the
//! login passwords.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use rand::distr::{Alphanumeric, SampleString};

use crate::databasecluster::specs::names::{Owner, child_metadata};

/// The key holding the token.
pub const TOKEN_KEY: &str = "token";
/// The token's length (alphanumeric: about 285 bits).
const TOKEN_LENGTH: usize = 48;

/// The Secret's name.
pub fn status_token_secret_name(cluster_name: &str) -> String {
    format!("{cluster_name}-status-token")
}

/// A fresh token from the thread-local CSPRNG (ChaCha, seeded from the OS).
pub fn generate_token() -> String {
    Alphanumeric.sample_string(&mut rand::rng(), TOKEN_LENGTH)
}

/// The Secret holding `token`.
pub fn build_status_token_secret(owner: &Owner, token: &str) -> Secret {
    Secret {
        metadata: child_metadata(owner, status_token_secret_name(owner.name())),
        type_: Some("Opaque".to_owned()),
        data: Some(BTreeMap::from([(TOKEN_KEY.to_owned(), ByteString(token.as_bytes().to_vec()))])),
        ..Secret::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_long_fresh_and_alphanumeric() {
        let (a, b) = (generate_token(), generate_token());
        assert_ne!(a, b);
        assert_eq!(a.len(), TOKEN_LENGTH);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric()));
    }
}
