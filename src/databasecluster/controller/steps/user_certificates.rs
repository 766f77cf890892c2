//! Step helper: the Secrets `spec.certificates` names, read from the API (the operator caches
//! only its own Secrets) and checked. A Secret that is missing or lacks what it must hold is an
//! [`Error::UserCertificate`] naming it; the pass then shows `Ready=False`
//! (`InvalidCertificates`) and changes nothing ([`super::certificates`]).

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Secret;

use crate::databasecluster::api::certificates::{ClientCertificates, ServerCertificate};
use crate::databasecluster::cache::forms::Forms;
use crate::databasecluster::controller::context::*;
use crate::databasecluster::controller::steps::child::child_error;
use crate::databasecluster::specs::credentials::secret_value;
use crate::databasecluster::specs::names::Owner;
use crate::databasecluster::tls::issue::{KeyPem, not_after};
use crate::databasecluster::tls::secrets::{CA_CERT_KEY, CA_KEY_KEY, read_leaf};

fn unusable(name: &str, problem: &'static str) -> Error {
    Error::UserCertificate { name: name.to_owned(), problem }
}

/// Reads the user's Secret `name`: missing is an error.
async fn read<F: Forms>(ctx: &Context<F>, owner: &Owner, name: &str) -> Result<Secret, Error> {
    let api: kube::Api<Secret> = kube::Api::namespaced(ctx.client.clone(), owner.namespace());
    api.get_opt(name)
        .await
        .map_err(|source| child_error("reading", "Secret", name, source))?
        .ok_or_else(|| unusable(name, "does not exist"))
}

/// A user's `kubernetes.io/tls` Secret's certificate's expiry (it must hold `tls.crt` and `tls.key`).
fn leaf_expiry(secret: &Secret, name: &str) -> Result<Timestamp, Error> {
    let leaf = read_leaf(secret).ok_or_else(|| unusable(name, "has no tls.crt and tls.key"))?;
    not_after(&leaf.cert).map_err(|_| unusable(name, "holds no readable certificate"))
}

/// The user's server certificate: the `ca.crt` that verifies it, and its expiry.
pub(crate) async fn read_server<F: Forms>(
    ctx: &Context<F>,
    owner: &Owner,
    user: &ServerCertificate,
) -> Result<(String, Timestamp), Error> {
    let tls = read(ctx, owner, &user.tls_secret).await?;
    let expiry = leaf_expiry(&tls, &user.tls_secret)?;
    let ca_secret =
        if user.ca_secret == user.tls_secret { tls } else { read(ctx, owner, &user.ca_secret).await? };
    let ca_cert =
        secret_value(&ca_secret, CA_CERT_KEY).ok_or_else(|| unusable(&user.ca_secret, "has no ca.crt"))?;
    Ok((ca_cert, expiry))
}

/// What the user's client CA gives the pass.
#[derive(Debug)]
pub(crate) struct UserClients {
    /// The CA (and its key) that signs the replication certificate the operator issues; `None`
    /// when the user brings that certificate too.
    pub(crate) signer: Option<KeyPem>,
    /// Each of the user's Secrets with its certificate's expiry: the CA's, and the replication
    /// certificate's when the user brings it.
    pub(crate) expiries: Vec<(String, Timestamp)>,
}

/// The user's client CA (`ca.crt`, and `ca.key` when the operator is to sign the replication
/// certificate with it) and replication certificate, if given.
pub(crate) async fn read_clients<F: Forms>(
    ctx: &Context<F>,
    owner: &Owner,
    user: &ClientCertificates,
) -> Result<UserClients, Error> {
    let ca_secret = read(ctx, owner, &user.ca_secret).await?;
    let ca_cert =
        secret_value(&ca_secret, CA_CERT_KEY).ok_or_else(|| unusable(&user.ca_secret, "has no ca.crt"))?;
    let ca_expiry = not_after(&ca_cert).map_err(|_| unusable(&user.ca_secret, "holds no readable ca.crt"))?;
    let mut expiries = vec![(user.ca_secret.clone(), ca_expiry)];
    let signer = match &user.replication_secret {
        Some(name) => {
            let replication = read(ctx, owner, name).await?;
            expiries.push((name.clone(), leaf_expiry(&replication, name)?));
            None
        }
        None => {
            let missing = "has no ca.key, which signs the replication certificate when replicationTLSSecret is not given";
            let key =
                secret_value(&ca_secret, CA_KEY_KEY).ok_or_else(|| unusable(&user.ca_secret, missing))?;
            Some(KeyPem { cert: ca_cert, key })
        }
    };
    Ok(UserClients { signer, expiries })
}
