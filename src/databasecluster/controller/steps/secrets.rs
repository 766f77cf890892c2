//! Step: the three login Secrets and the application's Secret; passwords read back from them. The
//! Secrets the operator generates carry the cluster's CA and verify-full URIs
//! ([`crate::databasecluster::tls::app`]).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use kube::Api;

use crate::databasecluster::api::types::DatabaseCluster;
use crate::databasecluster::api::validation::ValidSpec;
use crate::databasecluster::cache::forms::Forms;
use crate::databasecluster::controller::context::*;
use crate::databasecluster::controller::steps::child::*;
use crate::databasecluster::specs::app_secret;
use crate::databasecluster::specs::credentials::{
    Login, build_login_secret, build_replication_secret, generate_password, secret_password, secret_value,
};
use crate::databasecluster::specs::names::Owner;
use crate::runtime::ObjectKey;
/// Each login's user and password, as its Secret holds them (the replication login has none).
#[derive(Clone, Default)]
pub(crate) struct Credentials(BTreeMap<&'static str, (String, String)>);

impl Credentials {
    pub(crate) fn get(&self, login: Login) -> Option<(&str, &str)> {
        self.0.get(login.mount_dir()).map(|(user, password)| (user.as_str(), password.as_str()))
    }
}

/// The three login Secrets (the app one only when the spec names none): created with a fresh
/// password when absent, applied with the password read back otherwise.
pub(crate) async fn ensure_secrets<F: Forms>(
    ctx: &Context<F>,
    cluster: &DatabaseCluster,
    owner: &Owner,
    spec: &ValidSpec,
    ca_cert: &str,
) -> Result<Credentials, Error> {
    let mut credentials = Credentials::default();
    for login in Login::ALL {
        if let (Login::App, Some(name)) = (login, spec.app_secret_name.as_deref()) {
            let api: Api<Secret> = Api::namespaced(ctx.client.clone(), owner.namespace());
            // Labelled already: the informer's copy is current. Otherwise read it and label it.
            let key = ObjectKey::new(Some(owner.namespace()), name);
            let cached = ctx.app_secrets.get(&key).filter(|s| app_secret::is_labelled_for(s, owner.name()));
            let secret = match cached {
                Some(cached) => Some(Secret::clone(&cached)),
                None => app_secret::read_and_label(&api, name, owner.name())
                    .await
                    .map_err(|source| child_error("labelling", "Secret", name, source))?,
            };
            if let Some(problem) = app_secret::problem(secret.as_ref()) {
                return Err(Error::AppSecret { name: name.to_owned(), problem });
            }
            if let Some(secret) = &secret
                && let (Some(user), Some(password)) =
                    (secret_value(secret, "username"), secret_password(secret))
            {
                credentials.0.insert(login.mount_dir(), (user, password));
            }
            continue;
        }
        let key = ObjectKey::new(Some(owner.namespace()), &login.secret_name(owner.name()));
        let cached = ctx.secrets.get(&key);
        // The password the last `build` put in the Secret: what the server now holds (written
        // with it, or already holding it, since a differing password is drift).
        let mut chosen = None;
        let (_, outcome) = ensure_child(ctx, owner, "Secret", cached, |live: Option<&F::Secret>| {
            let live = live.map(|live| decode_cached::<Secret, _>(live, "Secret")).transpose()?;
            let (built, password) = if login == Login::Replication {
                // No password: the replication user logs in by certificate. An old Secret's
                // `password` is left as it is (no longer a field the operator writes).
                (build_replication_secret(owner), None)
            } else {
                let password = live.as_ref().and_then(secret_password).unwrap_or_else(|| {
                    if live.is_some() {
                        tracing::warn!(secret = %key, "the Secret holds no password; generating a new one");
                    }
                    generate_password()
                });
                (build_login_secret(owner, login, &password), Some(password))
            };
            let desired = crate::databasecluster::tls::app::with_tls(built, ca_cert);
            let type_of = |secret: &Secret| secret.type_.clone().unwrap_or_else(|| "Opaque".to_owned());
            if let Some(live) = live.as_ref().filter(|live| type_of(live) != type_of(&desired)) {
                return Err(Error::ForeignSecretType {
                    name: login.secret_name(owner.name()),
                    found: type_of(live),
                    wanted: type_of(&desired),
                });
            }
            chosen = password;
            Ok(desired)
        })
        .await?;
        report(ctx, cluster, "Secret", &key, &outcome, None).await;
        if let Some(password) = chosen {
            credentials.0.insert(login.mount_dir(), (login.username().to_owned(), password));
        }
    }
    Ok(credentials)
}
