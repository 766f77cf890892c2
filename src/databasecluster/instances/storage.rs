//! Storage growth: a larger `spec.storageSize` reaches every instance's PersistentVolumeClaim.
//!
//! A StatefulSet's `volumeClaimTemplates` are immutable, so the template keeps the size the
//! cluster was created with ([`crate::databasecluster::cache::drift::keep_immutable_fields`]) and the operator patches
//! each claim `data-<name>-<ordinal>` (ordinals `0..replicas`) to the new request instead; a
//! claim the StatefulSet creates later (a scale-up) starts at the template's size and is grown on
//! a later pass. The decisions are pure ([`needs_look`], [`judge`]); [`grow_claims`] does the
//! I/O: one GET per claim, a merge patch of `spec.resources.requests.storage` for each claim
//! below the size.
//!
//! - Nothing is read while the template's size is the spec's and no resize is under way.
//! - A claim that is not bound yet is left as it is (the API server refuses to change its
//!   request) and counted as pending; a later pass grows it once it is bound.
//! - A growth the API server refuses with 403 because the claim's StorageClass does not allow
//!   expansion ends in [`Growth::NotSupported`] (`Resizing=False, ExpansionNotSupported` and a
//!   Warning Event, in `status` and `events`); it is not tried again until the generation
//!   changes, so a refused growth costs one request per spec change, never a retry loop.
//! - Other failures are logged and retried on the next pass (the resize's requeue).

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::databasecluster::api::types::DatabaseCluster;
use crate::databasecluster::api::validation::{StorageSize, ValidSpec};
use crate::databasecluster::controller::status::{condition, find_condition, reason};
use crate::databasecluster::specs::resources::{DATA_VOLUME, FIELD_MANAGER, Owner, statefulset_name};
use crate::runtime::controller::writes::{Verb, recorded_as};

/// Words of the resize admission's 403 (`PersistentVolumeClaimResize`): the claim's StorageClass
/// does not allow expansion.
const EXPANSION_REFUSED: &str = "must support resize";

/// Where a growth of the instances' volumes stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Growth {
    /// These claims' capacity is still below the size (requested, not yet expanded).
    InProgress {
        /// The claims waiting, by name.
        pending: Vec<String>,
    },
    /// Every existing claim has at least the size.
    Complete,
    /// The API server refused to grow a claim: its StorageClass does not allow expansion.
    NotSupported {
        /// The API server's message.
        message: String,
    },
}

/// The name of the data claim of instance `ordinal` (the StatefulSet's naming).
pub fn claim_name(cluster_name: &str, ordinal: i32) -> String {
    format!("{DATA_VOLUME}-{}-{ordinal}", statefulset_name(cluster_name))
}

/// The size the StatefulSet's volume claim template requests, if readable.
fn template_size(sts: &StatefulSet) -> Option<StorageSize> {
    let templates = sts.spec.as_ref()?.volume_claim_templates.as_ref()?;
    let requests = templates.iter().find(|t| t.metadata.name.as_deref() == Some(DATA_VOLUME))?;
    let storage = requests.spec.as_ref()?.resources.as_ref()?.requests.as_ref()?.get("storage")?;
    StorageSize::parse(&storage.0)
}

/// Whether this pass must look at the claims: the spec's size differs from the template's (the
/// cluster grew since it was created) or a resize is under way, and the growth was not refused
/// for this generation already.
pub fn needs_look(cluster: &DatabaseCluster, spec: &ValidSpec, sts: &StatefulSet) -> bool {
    let resizing = cluster.status.as_ref().and_then(|s| find_condition(s, condition::RESIZING));
    let refused = resizing.is_some_and(|c| {
        c.reason == reason::EXPANSION_NOT_SUPPORTED && c.observed_generation == cluster.metadata.generation
    });
    let grown = template_size(sts).is_none_or(|t| t.bytes() != spec.storage.bytes());
    !refused && (grown || resizing.is_some_and(|c| c.status == "True"))
}

/// A claim as this pass saw it (after any patch).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimSeen {
    /// The claim's name.
    pub name: String,
    /// Its `status.capacity.storage`, if any.
    pub capacity: Option<StorageSize>,
}

/// The growth's state from the claims seen: complete when every capacity is at least `size`.
pub fn judge(size: &StorageSize, claims: &[ClaimSeen]) -> Growth {
    let pending: Vec<String> = claims
        .iter()
        .filter(|c| c.capacity.as_ref().is_none_or(|cap| cap.bytes() < size.bytes()))
        .map(|c| c.name.clone())
        .collect();
    if pending.is_empty() { Growth::Complete } else { Growth::InProgress { pending } }
}

fn storage_of(
    quantities: Option<
        &std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >,
) -> Option<StorageSize> {
    StorageSize::parse(&quantities?.get("storage")?.0)
}

/// Grows every instance's claim to the spec's size (see the module docs); `None` when this pass
/// need not look ([`needs_look`]), so the `Resizing` condition stays as it is.
pub async fn grow_claims(
    client: &kube::Client,
    cluster: &DatabaseCluster,
    owner: &Owner,
    spec: &ValidSpec,
    sts: &StatefulSet,
) -> Option<Growth> {
    if !needs_look(cluster, spec, sts) {
        return None;
    }
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), owner.namespace());
    let params = PatchParams { field_manager: Some(FIELD_MANAGER.to_owned()), ..PatchParams::default() };
    let patch = json!({"spec": {"resources": {"requests": {"storage": spec.storage.as_str()}}}});
    let mut seen = Vec::new();
    for ordinal in 0..spec.replicas {
        let name = claim_name(owner.name(), ordinal);
        let claim = match api.get_opt(&name).await {
            Ok(Some(claim)) => claim,
            // Not created yet: the StatefulSet creates it with its pod; a later pass grows it.
            Ok(None) => continue,
            Err(error) => {
                tracing::warn!(claim = %name, %error, "could not read the claim; retrying on the next pass");
                seen.push(ClaimSeen { name, capacity: None });
                continue;
            }
        };
        let request = claim
            .spec
            .as_ref()
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| storage_of(r.requests.as_ref()));
        let bound = claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
        // An unbound claim's request is immutable: it is grown once bound, on a later pass.
        let claim = if !bound || request.is_some_and(|r| r.bytes() >= spec.storage.bytes()) {
            claim
        } else {
            match api.patch(&name, &params, &Patch::Merge(&patch)).await {
                Ok(grown) => {
                    let grown = recorded_as(Verb::Patch, grown);
                    tracing::info!(claim = %name, size = spec.storage.as_str(), "claim's storage request grown");
                    grown
                }
                Err(kube::Error::Api(status))
                    if status.code == 403 && status.message.contains(EXPANSION_REFUSED) =>
                {
                    tracing::warn!(claim = %name, message = %status.message, "the claim's StorageClass does not allow expansion");
                    return Some(Growth::NotSupported { message: status.message });
                }
                Err(error) => {
                    tracing::warn!(claim = %name, %error, "could not grow the claim; retrying on the next pass");
                    claim
                }
            }
        };
        let capacity = claim.status.as_ref().and_then(|s| storage_of(s.capacity.as_ref()));
        seen.push(ClaimSeen { name, capacity });
    }
    Some(judge(&spec.storage, &seen))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::databasecluster::api::validation::validate;
    use crate::databasecluster::fixtures::cluster;
    use crate::databasecluster::specs::resources::build_statefulset;

    fn size(text: &str) -> StorageSize {
        StorageSize::parse(text).unwrap()
    }

    #[test]
    fn claims_are_named_as_the_statefulset_names_them() {
        assert_eq!(claim_name("pg", 2), "data-pg-2");
    }

    #[test]
    fn growth_is_complete_once_every_capacity_reaches_the_size() {
        let seen = |name: &str, capacity: Option<&str>| ClaimSeen {
            name: name.into(),
            capacity: capacity.map(size),
        };
        let claims =
            [seen("data-pg-0", Some("2Gi")), seen("data-pg-1", Some("1Gi")), seen("data-pg-2", None)];
        assert_eq!(
            judge(&size("2Gi"), &claims),
            Growth::InProgress { pending: vec!["data-pg-1".into(), "data-pg-2".into()] }
        );
        assert_eq!(judge(&size("2Gi"), &[seen("data-pg-0", Some("2048Mi"))]), Growth::Complete);
    }

    #[test]
    fn claims_are_looked_at_only_after_a_growth_and_not_after_a_refusal_of_this_generation() {
        let mut grown = cluster(3, "16", 1);
        let owner = Owner::of(&grown).unwrap();
        let sts = build_statefulset(&owner, &validate(&grown).unwrap());
        assert!(!needs_look(&grown, &validate(&grown).unwrap(), &sts), "unchanged size");
        grown.spec.storage_size = "20Gi".into();
        let spec = validate(&grown).unwrap();
        assert!(needs_look(&grown, &spec, &sts), "grown size");
        let refused = k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
            type_: condition::RESIZING.into(),
            status: "False".into(),
            reason: reason::EXPANSION_NOT_SUPPORTED.into(),
            message: "no".into(),
            observed_generation: grown.metadata.generation,
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                jiff::Timestamp::UNIX_EPOCH,
            ),
        };
        grown.status.get_or_insert_default().conditions.push(refused);
        assert!(!needs_look(&grown, &spec, &sts), "refused for this generation");
        grown.metadata.generation = grown.metadata.generation.map(|g| g + 1);
        assert!(needs_look(&grown, &spec, &sts), "a new generation tries again");
    }
}
