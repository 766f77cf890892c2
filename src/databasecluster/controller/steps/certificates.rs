//! Step: the cluster's certificates ([`crate::databasecluster::tls`]): the CA's Secret, made once
//! and rotated before it expires ([`plan_ca`]); then the server's and the replication client's
//! Secrets, each issued again when [`leaf_action`] says so. What `spec.certificates` brings is
//! read instead ([`super::user_certificates`]) and nothing of it is issued: no CA at all when the
//! user brings both the servers' certificate and the clients' CA.
//!
//! A renewal the API refuses (a leaf or CA due and its Secret's write failing) does not stop the
//! pass: the certificate in place still serves, the status says `CertificatesExpiring=True`
//! (`CertificateRenewalFailed`, with a Warning Event), and the pass then ends with the error so it
//! is retried with back-off. Nothing secret is logged: a line names the Secret, the reason and the
//! new expiry.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Secret;

use crate::databasecluster::api::types::{DatabaseCluster, DatabaseClusterStatus};
use crate::databasecluster::api::validation::ValidSpec;
use crate::databasecluster::cache::forms::Forms;
use crate::databasecluster::controller::context::*;
use crate::databasecluster::controller::status::{ConditionSetter, condition, reason};
use crate::databasecluster::controller::steps::child::*;
use crate::databasecluster::controller::steps::user_certificates::{read_clients, read_server};
use crate::databasecluster::specs::credentials::REPLICATION_USER;
use crate::databasecluster::specs::names::Owner;
use crate::databasecluster::tls::issue::{IssueError, KeyPem, Leaf, issue_ca, issue_leaf, not_after};
use crate::databasecluster::tls::renew::{LeafAction, Lifetimes, expiring, leaf_action};
use crate::databasecluster::tls::rotation::{CaSet, CaStep, plan_ca};
use crate::databasecluster::tls::secrets::{
    build_ca_secret, build_leaf_secret, live_leaf, read_ca, read_leaf,
};
use crate::databasecluster::tls::{
    ca_secret_name, replication_client_secret_name, server_dns_names, server_secret_name,
};
use crate::runtime::ObjectKey;

/// What the pass learnt of the certificates.
#[derive(Debug, Default)]
pub(crate) struct Certificates {
    /// The CAs that verify the servers (PEM), which the login Secrets carry.
    pub(crate) ca_cert: String,
    /// Each Secret's certificate's expiry, by the Secret's name.
    pub(crate) expiries: Vec<(String, Timestamp)>,
    /// The earliest time a certificate is to be renewed (or the CA's rotation to move on).
    pub(crate) renew_at: Option<Timestamp>,
    /// The renewals the API refused: the Secret, and the error.
    pub(crate) refused: Vec<(String, Error)>,
}

impl Certificates {
    fn due(&mut self, at: Option<Timestamp>) {
        self.renew_at = match (self.renew_at, at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }

    /// `status.certificateExpiry`: each Secret's certificate's expiry, RFC 3339.
    pub(crate) fn expiry_by_secret(&self) -> std::collections::BTreeMap<String, String> {
        self.expiries.iter().map(|(name, at)| (name.clone(), at.to_string())).collect()
    }

    /// `status` with each certificate's expiry and the condition `CertificatesExpiring`: True
    /// with reason `CertificateRenewalFailed` when the API refused a renewal this pass, else True
    /// with reason `CertificateExpiring` while one is within its renewal margin after the pass
    /// ([`expiring`]: the user's, which the operator cannot renew); False once none is, when it
    /// was set before (a cluster that never had one expiring carries no such condition).
    pub(crate) fn on_status(
        &self,
        mut status: DatabaseClusterStatus,
        lifetimes: Lifetimes,
        now: Timestamp,
    ) -> DatabaseClusterStatus {
        status.certificate_expiry = self.expiry_by_secret();
        let expiring = expiring(&self.expiries, now, lifetimes);
        let known = status.conditions.iter().any(|c| c.type_ == condition::CERTIFICATES_EXPIRING);
        if expiring.is_empty() && self.refused.is_empty() && !known {
            return status;
        }
        let mut conditions = ConditionSetter::new(status.conditions, status.observed_generation, now);
        let (value, why, message) = if !self.refused.is_empty() {
            let list: Vec<String> =
                self.refused.iter().map(|(name, error)| format!("{name}: {error}")).collect();
            ("True", reason::CERTIFICATE_RENEWAL_FAILED, format!("could not renew {}", list.join("; ")))
        } else if !expiring.is_empty() {
            let list: Vec<String> =
                expiring.iter().map(|(name, at)| format!("{name} expires at {at}")).collect();
            ("True", reason::CERTIFICATE_EXPIRING, format!("not renewed: {}", list.join(", ")))
        } else {
            (
                "False",
                reason::CERTIFICATES_RENEWED,
                "every certificate is renewed before its expiry".to_owned(),
            )
        };
        conditions.set(condition::CERTIFICATES_EXPIRING, value, why, message);
        status.conditions = conditions.into_inner();
        status
    }

    /// How long from `now` until a certificate is to be renewed (zero when due).
    pub(crate) fn renew_in(&self, now: Timestamp) -> Option<std::time::Duration> {
        let at = self.renew_at?;
        Some(std::time::Duration::try_from(now.duration_until(at)).unwrap_or_default())
    }

    /// The first renewal the API refused, which ends the pass (after its status is written) so
    /// that it is retried with back-off.
    pub(crate) fn into_refusal(self) -> Option<Error> {
        self.refused.into_iter().next().map(|(_, error)| error)
    }
}

fn issue_error(name: &str) -> impl FnOnce(IssueError) -> Error + '_ {
    move |source| Error::Certificate { name: name.to_owned(), source }
}

/// A leaf to keep: its Secret's name, what it is for, the CA that signs it and the CAs its
/// Secret's `ca.crt` carries.
struct LeafPlan<'a> {
    name: String,
    leaf: Leaf,
    signer: &'a KeyPem,
    trust: String,
}

/// Ensures the certificates: the operator's CA unless the user brings both halves, the servers'
/// (or the user's, whose CA the login Secrets then carry) and the replication client's (signed
/// by the operator's CA, or the user's client CA, or the user's own).
pub(crate) async fn ensure_certificates<F: Forms>(
    ctx: &Context<F>,
    cluster: &DatabaseCluster,
    owner: &Owner,
    spec: &ValidSpec,
) -> Result<Certificates, Error> {
    let (lifetimes, now) = (ctx.certificates, Timestamp::now());
    let mut certificates = Certificates::default();
    let own = match (&spec.server_certificate, &spec.client_certificates) {
        (Some(_), Some(_)) => None,
        _ => Some(ensure_ca(ctx, cluster, owner, lifetimes, now, &mut certificates).await?),
    };
    let mut leaves = Vec::new();
    if let Some(user) = &spec.server_certificate {
        let (ca_cert, expiry) = read_server(ctx, owner, user).await?;
        certificates.ca_cert = ca_cert;
        certificates.expiries.push((user.tls_secret.clone(), expiry));
    } else if let Some(cas) = &own {
        certificates.ca_cert = cas.trust_bundle();
        let leaf = Leaf::Server(server_dns_names(owner.name(), owner.namespace()));
        leaves.push(LeafPlan {
            name: server_secret_name(owner.name()),
            leaf,
            signer: &cas.current,
            trust: cas.trust_bundle(),
        });
    }
    let user_signer = match &spec.client_certificates {
        Some(user) => {
            let clients = read_clients(ctx, owner, user).await?;
            certificates.expiries.extend(clients.expiries);
            clients.signer
        }
        None => None,
    };
    let replication = match (&spec.client_certificates, &user_signer, &own) {
        (Some(_), Some(ca), _) => Some((ca, ca.cert.clone())),
        (None, _, Some(cas)) => Some((&cas.current, cas.trust_bundle())),
        _ => None,
    };
    if let Some((signer, trust)) = replication {
        let leaf = Leaf::Client(REPLICATION_USER.to_owned());
        leaves.push(LeafPlan { name: replication_client_secret_name(owner.name()), leaf, signer, trust });
    }
    for plan in leaves {
        ensure_leaf(ctx, cluster, owner, plan, lifetimes, now, &mut certificates).await?;
    }
    Ok(certificates)
}

/// Whether `error` is the API refusing a write, which a renewal shows in the status; any other
/// error (an unreadable cache, a certificate rcgen cannot make) ends the pass.
fn refused_write(error: &Error) -> bool {
    matches!(error, Error::Child { .. })
}

/// The CA's Secret: made when absent (or holding no readable CA), rotated by [`plan_ca`].
async fn ensure_ca<F: Forms>(
    ctx: &Context<F>,
    cluster: &DatabaseCluster,
    owner: &Owner,
    lifetimes: Lifetimes,
    now: Timestamp,
    certificates: &mut Certificates,
) -> Result<CaSet, Error> {
    let name = ca_secret_name(owner.name());
    let key = ObjectKey::new(Some(owner.namespace()), &name);
    let subject = format!("{}/{}", owner.namespace(), owner.name());
    let mut planned = None;
    let mut live_set = None;
    let written = ensure_child(ctx, owner, "Secret", ctx.secrets.get(&key), |live: Option<&F::Secret>| {
        let live = live.map(|live| decode_cached::<Secret, _>(live, "Secret")).transpose()?;
        live_set = live.as_ref().and_then(read_ca);
        let issue = || issue_ca(&subject, now, lifetimes.ca);
        let (set, step, due) =
            plan_ca(live_set.clone(), now, lifetimes, issue).map_err(issue_error(&name))?;
        if step != CaStep::Keep {
            tracing::info!(secret = %name, ?step, "rotating the cluster's CA");
        }
        let secret = build_ca_secret(owner, name.clone(), &set);
        planned = Some((set, due));
        Ok(secret)
    })
    .await;
    let (set, due) = match (written, planned, live_set) {
        (Ok((_, outcome)), Some(planned), _) => {
            report(ctx, cluster, "Secret", &key, &outcome, None).await;
            planned
        }
        // The API refused the rotation: the CAs in place still sign and verify.
        (Err(error), _, Some(live)) if refused_write(&error) => {
            tracing::warn!(secret = %name, %error, "could not rotate the cluster's CA");
            certificates.refused.push((name.clone(), error));
            (live, None)
        }
        (Err(error), _, _) => return Err(error),
        (Ok(_), None, _) => return Err(issue_error(&name)(IssueError::Parse("no CA was chosen".to_owned()))),
    };
    if let Ok(expiry) = not_after(&set.current.cert) {
        certificates.expiries.push((name, expiry));
    }
    certificates.due(due);
    Ok(set)
}

/// One leaf's Secret, issued again when [`leaf_action`] says so; its expiry and renewal time go
/// into `certificates`.
async fn ensure_leaf<F: Forms>(
    ctx: &Context<F>,
    cluster: &DatabaseCluster,
    owner: &Owner,
    plan: LeafPlan<'_>,
    lifetimes: Lifetimes,
    now: Timestamp,
    certificates: &mut Certificates,
) -> Result<(), Error> {
    let LeafPlan { name, leaf, signer, trust } = plan;
    let key = ObjectKey::new(Some(owner.namespace()), &name);
    let margin = jiff::SignedDuration::try_from(lifetimes.renew_before).unwrap_or_default();
    let mut chosen = None;
    let mut live_expiry = None;
    let written = ensure_child(ctx, owner, "Secret", ctx.secrets.get(&key), |live: Option<&F::Secret>| {
        let live = live.map(|live| decode_cached::<Secret, _>(live, "Secret")).transpose()?;
        let known = live.as_ref().map(|live| live_leaf(live, &signer.cert));
        live_expiry = known.as_ref().and_then(|known| known.not_after);
        let action = leaf_action(known.as_ref(), now, lifetimes);
        let pem = match action {
            LeafAction::Keep { .. } => live.as_ref().and_then(read_leaf),
            LeafAction::Issue(_) => None,
        };
        let pem = match pem {
            Some(pem) => pem,
            None => {
                let pem = issue_leaf(signer, &leaf, now, lifetimes.leaf).map_err(issue_error(&name))?;
                let reason = match action {
                    LeafAction::Issue(reason) => reason.as_str(),
                    LeafAction::Keep { .. } => "unreadable",
                };
                let expiry = not_after(&pem.cert).map_err(issue_error(&name))?;
                tracing::info!(secret = %name, reason, not_after = %expiry, "issuing a certificate");
                pem
            }
        };
        chosen = Some(not_after(&pem.cert).map_err(issue_error(&name))?);
        Ok(build_leaf_secret(owner, name.clone(), &pem, &trust))
    })
    .await;
    let expiry = match (written, chosen, live_expiry) {
        (Ok((_, outcome)), Some(expiry), _) => {
            report(ctx, cluster, "Secret", &key, &outcome, None).await;
            expiry
        }
        // The API refused the renewal: the certificate in place still serves until it expires.
        (Err(error), _, Some(live)) if refused_write(&error) => {
            tracing::warn!(secret = %name, %error, "could not renew a certificate");
            certificates.refused.push((name.clone(), error));
            certificates.expiries.push((name, live));
            return Ok(());
        }
        (Err(error), _, _) => return Err(error),
        (Ok(_), None, _) => {
            return Err(issue_error(&name)(IssueError::Parse("no certificate was chosen".to_owned())));
        }
    };
    certificates.expiries.push((name, expiry));
    certificates.due(Some(expiry.checked_sub(margin).unwrap_or(expiry)));
    Ok(())
}
