//! Step: the PodDisruptionBudget (2+ instances).

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;
use kube::api::DeleteParams;

use crate::databasecluster::api::types::DatabaseCluster;
use crate::databasecluster::cache::forms::Forms;
use crate::databasecluster::controller::context::*;
use crate::databasecluster::controller::steps::child::*;
use crate::databasecluster::specs::names::Owner;
use crate::databasecluster::specs::services::{build_pdb, pdb_name};
use crate::runtime::ObjectKey;
/// The PodDisruptionBudget with 2+ instances; none (deleted if there) below.
pub(crate) async fn ensure_pdb<F: Forms>(
    ctx: &Context<F>,
    cluster: &DatabaseCluster,
    owner: &Owner,
    replicas: i32,
) -> Result<(), Error> {
    let key = ObjectKey::new(Some(owner.namespace()), &pdb_name(owner.name()));
    let cached = ctx.pdbs.get(&key);
    match build_pdb(owner, replicas) {
        Some(pdb) => {
            let (_, outcome) =
                ensure_child(ctx, owner, "PodDisruptionBudget", cached, |_| Ok(pdb.clone())).await?;
            report(ctx, cluster, "PodDisruptionBudget", &key, &outcome, None).await;
        }
        None if cached.is_some() => {
            let api: Api<PodDisruptionBudget> = Api::namespaced(ctx.client.clone(), owner.namespace());
            match api.delete(key.name(), &DeleteParams::default()).await {
                Ok(_) => {
                    tracing::info!(name = %key.name(), "fewer than two instances: PodDisruptionBudget deleted")
                }
                Err(kube::Error::Api(status)) if status.is_not_found() => {}
                Err(source) => {
                    return Err(child_error("deleting", "PodDisruptionBudget", key.name(), source));
                }
            }
        }
        None => {}
    }
    Ok(())
}
