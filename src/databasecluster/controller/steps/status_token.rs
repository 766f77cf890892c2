//! Step: the Secret `<name>-status-token` ([`crate::databasecluster::specs::status_token`]): created
//! with a fresh token when absent, applied with the token read back otherwise. The token is what
//! the pass then sends the instance managers.

use k8s_openapi::api::core::v1::Secret;

use crate::databasecluster::api::types::DatabaseCluster;
use crate::databasecluster::cache::forms::Forms;
use crate::databasecluster::controller::context::*;
use crate::databasecluster::controller::steps::child::*;
use crate::databasecluster::instances::StatusToken;
use crate::databasecluster::specs::credentials::secret_value;
use crate::databasecluster::specs::names::Owner;
use crate::databasecluster::specs::status_token::{
    TOKEN_KEY, build_status_token_secret, generate_token, status_token_secret_name,
};
use crate::runtime::ObjectKey;

/// Creates the Secret with a fresh token when absent; keeps the live token otherwise. The token
/// the Secret holds after the pass.
pub(crate) async fn ensure_status_token<F: Forms>(
    ctx: &Context<F>,
    cluster: &DatabaseCluster,
    owner: &Owner,
) -> Result<StatusToken, Error> {
    let key = ObjectKey::new(Some(owner.namespace()), &status_token_secret_name(owner.name()));
    let cached = ctx.secrets.get(&key);
    let mut chosen = None;
    let (_, outcome) = ensure_child(ctx, owner, "Secret", cached, |live: Option<&F::Secret>| {
        let live = live.map(|live| decode_cached::<Secret, _>(live, "Secret")).transpose()?;
        let token = live.as_ref().and_then(|s| secret_value(s, TOKEN_KEY)).unwrap_or_else(generate_token);
        let secret = build_status_token_secret(owner, &token);
        chosen = Some(token);
        Ok(secret)
    })
    .await?;
    report(ctx, cluster, "Secret", &key, &outcome, None).await;
    Ok(StatusToken::new(chosen.unwrap_or_default()))
}
