//! The application user's Secret when the user names their own (`spec.appSecretName`) instead of
//! the generated `<name>-app`.
//!
//! The operator does not own that Secret and never changes its data. It adds one label,
//! [`APP_SECRET_OF`]` = <cluster name>`, with a merge patch of that label alone, so that the
//! operator's `app-secrets` informer (selected by that label, never by caching every Secret in
//! the namespace) sees a rotation and the cluster's next pass applies the new password to the
//! database. Once labelled, the Secret is read from that informer's cache, not from the API. A Secret that is missing or lacks `username`/`password` is a retryable error: the
//! pass fails with a message naming the Secret (a Warning Event, and after a few passes a
//! `ReconcileSucceeded=False` condition), and the work queue's backoff retries until it appears.

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::databasecluster::specs::credentials::{secret_password, secret_value};
use crate::runtime::controller::writes::{Verb, recorded_as};

/// The label the operator puts on a user-named app Secret: the name of the cluster using it.
pub const APP_SECRET_OF: &str = "databases.madmmas.dev/app-secret-of";

/// What is wrong with a user-named app Secret, in words for the error.
pub fn problem(secret: Option<&Secret>) -> Option<&'static str> {
    match secret {
        None => Some("does not exist"),
        Some(secret) if secret_value(secret, "username").is_none() => Some("has no username key"),
        Some(secret) if secret_password(secret).is_none() => Some("has no password key"),
        Some(_) => None,
    }
}

/// Whether `secret` already carries [`APP_SECRET_OF`] for `cluster`.
pub fn is_labelled_for(secret: &Secret, cluster: &str) -> bool {
    secret.metadata.labels.as_ref().and_then(|labels| labels.get(APP_SECRET_OF)).map(String::as_str)
        == Some(cluster)
}

/// Reads the Secret `name`; labels it for `cluster` when it is not yet. `Ok(None)` when it does
/// not exist.
pub async fn read_and_label(
    api: &Api<Secret>,
    name: &str,
    cluster: &str,
) -> Result<Option<Secret>, kube::Error> {
    let Some(secret) = api.get_opt(name).await? else {
        return Ok(None);
    };
    if is_labelled_for(&secret, cluster) {
        return Ok(Some(secret));
    }
    let patch = json!({"metadata": {"labels": {APP_SECRET_OF: cluster}}});
    let labelled =
        recorded_as(Verb::Patch, api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await?);
    tracing::info!(secret = %name, "labelled the user's app Secret so that its changes are watched");
    Ok(Some(labelled))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use std::collections::BTreeMap;

    fn secret(keys: &[(&str, &str)]) -> Secret {
        Secret {
            data: Some(
                keys.iter().map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec()))).collect(),
            ),
            ..Secret::default()
        }
    }

    #[test]
    fn a_usable_secret_has_a_username_and_a_password() {
        assert_eq!(problem(None), Some("does not exist"));
        assert_eq!(problem(Some(&secret(&[("password", "p")]))), Some("has no username key"));
        assert_eq!(
            problem(Some(&secret(&[("username", "app"), ("password", "")]))),
            Some("has no password key")
        );
        assert_eq!(problem(Some(&secret(&[("username", "app"), ("password", "p")]))), None);
    }

    #[test]
    fn the_label_names_the_cluster() {
        let mut labelled = secret(&[]);
        labelled.metadata.labels = Some(BTreeMap::from([(APP_SECRET_OF.to_owned(), "db".to_owned())]));
        assert!(is_labelled_for(&labelled, "db"));
        assert!(!is_labelled_for(&labelled, "other"));
        assert!(!is_labelled_for(&secret(&[]), "db"));
    }
}
