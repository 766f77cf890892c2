//! Step: the cluster's certificates ([`crate::databasecluster::tls`]): the CA's Secret, created
//! once and kept; then the server's and the two clients' Secrets, each issued again when
//! [`leaf_action`] says so. Nothing secret is logged: a line names the Secret, the reason and the
//! new expiry.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Secret;

use crate::databasecluster::api::certificates::ServerCertificate;
use crate::databasecluster::api::types::DatabaseCluster;
use crate::databasecluster::api::types::DatabaseClusterStatus;
use crate::databasecluster::api::validation::ValidSpec;
use crate::databasecluster::cache::forms::Forms;
use crate::databasecluster::controller::context::*;
use crate::databasecluster::controller::status::{ConditionSetter, condition, reason};
use crate::databasecluster::controller::steps::child::*;
use crate::databasecluster::specs::credentials::secret_value;
use crate::databasecluster::specs::names::Owner;
use crate::databasecluster::tls::issue::{IssueError, KeyPem, Leaf, issue_ca, issue_leaf, not_after};
use crate::databasecluster::tls::renew::{LeafAction, Lifetimes, expiring, leaf_action};
use crate::databasecluster::tls::secrets::CA_CERT_KEY;
use crate::databasecluster::tls::secrets::{
    build_ca_secret, build_leaf_secret, live_leaf, read_ca, read_leaf,
};
use crate::databasecluster::tls::{Client, ca_secret_name, server_dns_names, server_secret_name};
use crate::runtime::ObjectKey;

/// What the pass learnt of the certificates.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Certificates {
    /// The CA's certificate (PEM), which the login Secrets carry.
    pub(crate) ca_cert: String,
    /// Each Secret's certificate's expiry, by the Secret's name.
    pub(crate) expiries: Vec<(String, Timestamp)>,
    /// The earliest time a leaf enters its renewal margin.
    pub(crate) renew_at: Option<Timestamp>,
}

impl Certificates {
    /// `status.certificateExpiry`: each Secret's certificate's expiry, RFC 3339.
    pub(crate) fn expiry_by_secret(&self) -> std::collections::BTreeMap<String, String> {
        self.expiries.iter().map(|(name, at)| (name.clone(), at.to_string())).collect()
    }

    /// `status` with each certificate's expiry and the condition `CertificatesExpiring`: True
    /// (reason `CertificateExpiring`) while one is within its renewal margin after the pass
    /// ([`expiring`]); False once none is, when it was set before (a cluster that never had one
    /// expiring carries no such condition).
    pub(crate) fn on_status(
        &self,
        mut status: DatabaseClusterStatus,
        lifetimes: Lifetimes,
        now: Timestamp,
    ) -> DatabaseClusterStatus {
        status.certificate_expiry = self.expiry_by_secret();
        let expiring = expiring(&self.expiries, now, lifetimes);
        let known = status.conditions.iter().any(|c| c.type_ == condition::CERTIFICATES_EXPIRING);
        if expiring.is_empty() && !known {
            return status;
        }
        let mut conditions = ConditionSetter::new(status.conditions, status.observed_generation, now);
        if expiring.is_empty() {
            let message = "every certificate is renewed before its expiry".to_owned();
            conditions.set(condition::CERTIFICATES_EXPIRING, "False", reason::CERTIFICATES_RENEWED, message);
        } else {
            let list: Vec<String> =
                expiring.iter().map(|(name, at)| format!("{name} expires at {at}")).collect();
            let message = format!("not renewed: {}", list.join(", "));
            conditions.set(condition::CERTIFICATES_EXPIRING, "True", reason::CERTIFICATE_EXPIRING, message);
        }
        status.conditions = conditions.into_inner();
        status
    }

    /// How long from `now` until a leaf is to be renewed (zero when due).
    pub(crate) fn renew_in(&self, now: Timestamp) -> Option<std::time::Duration> {
        let at = self.renew_at?;
        Some(std::time::Duration::try_from(now.duration_until(at)).unwrap_or_default())
    }
}

fn issue_error(name: &str) -> impl FnOnce(IssueError) -> Error + '_ {
    move |source| Error::Certificate { name: name.to_owned(), source }
}

/// Ensures the CA's Secret and the leaves' Secrets: the server's unless the user brings it
/// (`spec.certificates`: then its CA is what the login Secrets carry, and its expiry is shown).
pub(crate) async fn ensure_certificates<F: Forms>(
    ctx: &Context<F>,
    cluster: &DatabaseCluster,
    owner: &Owner,
    spec: &ValidSpec,
) -> Result<Certificates, Error> {
    let (lifetimes, now) = (ctx.certificates, Timestamp::now());
    let ca = ensure_ca(ctx, cluster, owner, lifetimes, now).await?;
    let mut certificates = Certificates { ca_cert: ca.cert.clone(), ..Certificates::default() };
    if let Ok(expiry) = not_after(&ca.cert) {
        certificates.expiries.push((ca_secret_name(owner.name()), expiry));
    }
    let server = match &spec.server_certificate {
        Some(user) => {
            let (ca_cert, expiry) = read_user_certificate(ctx, owner, user).await?;
            certificates.ca_cert = ca_cert;
            certificates.expiries.push((user.tls_secret.clone(), expiry));
            None
        }
        None => Some((
            server_secret_name(owner.name()),
            Leaf::Server(server_dns_names(owner.name(), owner.namespace())),
        )),
    };
    let leaves = server
        .into_iter()
        .chain(Client::ALL.map(|c| (c.secret_name(owner.name()), Leaf::Client(c.user().to_owned()))));
    for (name, leaf) in leaves {
        let (expiry, renew_at) =
            ensure_leaf(ctx, cluster, owner, &ca, (name.clone(), leaf), lifetimes, now).await?;
        certificates.expiries.push((name, expiry));
        certificates.renew_at = certificates.renew_at.min(Some(renew_at)).or(Some(renew_at));
    }
    Ok(certificates)
}

/// The user's server certificate (`spec.certificates`), read from the API (the operator caches
/// only its own Secrets): the `ca.crt` that verifies it, and its expiry.
async fn read_user_certificate<F: Forms>(
    ctx: &Context<F>,
    owner: &Owner,
    user: &ServerCertificate,
) -> Result<(String, Timestamp), Error> {
    let api: kube::Api<Secret> = kube::Api::namespaced(ctx.client.clone(), owner.namespace());
    let unusable = |name: &str, problem| Error::UserCertificate { name: name.to_owned(), problem };
    let read = |name: String| {
        let api = api.clone();
        async move {
            api.get_opt(&name)
                .await
                .map_err(|source| child_error("reading", "Secret", &name, source))?
                .ok_or_else(|| unusable(&name, "does not exist"))
        }
    };
    let tls = read(user.tls_secret.clone()).await?;
    let leaf = read_leaf(&tls).ok_or_else(|| unusable(&user.tls_secret, "has no tls.crt and tls.key"))?;
    let expiry =
        not_after(&leaf.cert).map_err(|_| unusable(&user.tls_secret, "holds no readable certificate"))?;
    let ca_secret =
        if user.ca_secret == user.tls_secret { tls } else { read(user.ca_secret.clone()).await? };
    let ca_cert =
        secret_value(&ca_secret, CA_CERT_KEY).ok_or_else(|| unusable(&user.ca_secret, "has no ca.crt"))?;
    Ok((ca_cert, expiry))
}

/// The CA's Secret: created with a new CA when absent (or holding no readable CA), kept otherwise.
async fn ensure_ca<F: Forms>(
    ctx: &Context<F>,
    cluster: &DatabaseCluster,
    owner: &Owner,
    lifetimes: Lifetimes,
    now: Timestamp,
) -> Result<KeyPem, Error> {
    let name = ca_secret_name(owner.name());
    let key = ObjectKey::new(Some(owner.namespace()), &name);
    let mut chosen = None;
    let subject = format!("{}/{}", owner.namespace(), owner.name());
    let (_, outcome) =
        ensure_child(ctx, owner, "Secret", ctx.secrets.get(&key), |live: Option<&F::Secret>| {
            let live = live.map(|live| decode_cached::<Secret, _>(live, "Secret")).transpose()?;
            let ca = match live.as_ref().and_then(read_ca) {
                Some(ca) => ca,
                None => {
                    tracing::info!(secret = %name, "issuing the cluster's CA");
                    issue_ca(&subject, now, lifetimes.ca).map_err(issue_error(&name))?
                }
            };
            let secret = build_ca_secret(owner, name.clone(), &ca);
            chosen = Some(ca);
            Ok(secret)
        })
        .await?;
    report(ctx, cluster, "Secret", &key, &outcome, None).await;
    chosen.ok_or_else(|| issue_error(&name)(IssueError::Parse("no CA was chosen".to_owned())))
}

/// One leaf's Secret, issued again when [`leaf_action`] says so: its expiry and when it is to be
/// renewed.
async fn ensure_leaf<F: Forms>(
    ctx: &Context<F>,
    cluster: &DatabaseCluster,
    owner: &Owner,
    ca: &KeyPem,
    (name, leaf): (String, Leaf),
    lifetimes: Lifetimes,
    now: Timestamp,
) -> Result<(Timestamp, Timestamp), Error> {
    let key = ObjectKey::new(Some(owner.namespace()), &name);
    let mut chosen = None;
    let (_, outcome) =
        ensure_child(ctx, owner, "Secret", ctx.secrets.get(&key), |live: Option<&F::Secret>| {
            let live = live.map(|live| decode_cached::<Secret, _>(live, "Secret")).transpose()?;
            let action = leaf_action(live.as_ref().map(live_leaf).as_ref(), &ca.cert, now, lifetimes);
            let kept = match action {
                // Kept only when signed by the live CA: its `ca.crt` is the live CA's.
                LeafAction::Keep { renew_at } => live.as_ref().and_then(read_leaf).map(|pem| (pem, renew_at)),
                LeafAction::Issue(_) => None,
            };
            let (pem, renew_at) = match kept {
                Some(kept) => kept,
                None => {
                    let pem = issue_leaf(ca, &leaf, now, lifetimes.leaf).map_err(issue_error(&name))?;
                    let expiry = not_after(&pem.cert).map_err(issue_error(&name))?;
                    let reason = match action {
                        LeafAction::Issue(reason) => reason.as_str(),
                        LeafAction::Keep { .. } => "unreadable",
                    };
                    tracing::info!(secret = %name, reason, not_after = %expiry, "issuing a certificate");
                    let margin = jiff::SignedDuration::try_from(lifetimes.renew_before).unwrap_or_default();
                    (pem, expiry.checked_sub(margin).unwrap_or(expiry))
                }
            };
            let expiry = not_after(&pem.cert).map_err(issue_error(&name))?;
            let secret = build_leaf_secret(owner, name.clone(), &pem, &ca.cert);
            chosen = Some((expiry, renew_at));
            Ok(secret)
        })
        .await?;
    report(ctx, cluster, "Secret", &key, &outcome, None).await;
    chosen.ok_or_else(|| issue_error(&name)(IssueError::Parse("no certificate was chosen".to_owned())))
}
