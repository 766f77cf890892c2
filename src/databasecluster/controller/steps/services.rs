//! Step: the headless and the three client Services.

use crate::databasecluster::api::types::DatabaseCluster;
use crate::databasecluster::cache::forms::Forms;
use crate::databasecluster::controller::context::*;
use crate::databasecluster::controller::steps::child::*;
use crate::databasecluster::specs::resources::{Owner, build_headless_service, headless_service_name};
use crate::databasecluster::specs::services::{ClientService, build_client_service};
use crate::runtime::ObjectKey;
/// The headless Service and the three client Services.
pub(crate) async fn ensure_services<F: Forms>(
    ctx: &Context<F>,
    cluster: &DatabaseCluster,
    owner: &Owner,
) -> Result<(), Error> {
    let service_key = child_key(cluster, headless_service_name);
    let cached = ctx.services.get(&service_key);
    let (_, outcome) =
        ensure_child(ctx, owner, "Service", cached, |_| Ok(build_headless_service(owner))).await?;
    report(ctx, cluster, "Service", &service_key, &outcome, None).await;
    for which in ClientService::ALL {
        let key = ObjectKey::new(Some(owner.namespace()), &which.name(owner.name()));
        let cached = ctx.services.get(&key);
        let (_, outcome) =
            ensure_child(ctx, owner, "Service", cached, |_| Ok(build_client_service(owner, which))).await?;
        report(ctx, cluster, "Service", &key, &outcome, None).await;
    }
    Ok(())
}
