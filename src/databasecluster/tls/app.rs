//! What the login Secrets the operator generates carry for TLS: `ca.crt` (the cluster's CA),
//! `sslmode` (`verify-full`), `sslrootcert` ([`APP_CA_PATH`]), and the same two parameters in
//! `uri` and `jdbc-uri`. So `psql "$uri"` verifies the server's certificate and name, provided
//! the application mounts the Secret at [`APP_SECRET_MOUNT_PATH`] (`docs/tls.md`): the path in the
//! URI must name a file, and a private CA is in no system trust store (`sslrootcert=system` would
//! refuse it).

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;

use super::secrets::CA_CERT_KEY;

/// Where an application mounts its login Secret (documented; the URIs name the CA under it).
pub const APP_SECRET_MOUNT_PATH: &str = "/etc/dbcluster-app";
/// The CA's path in the URIs: `ca.crt` of the Secret mounted at [`APP_SECRET_MOUNT_PATH`].
pub const APP_CA_PATH: &str = "/etc/dbcluster-app/ca.crt";
/// The libpq `sslmode` every URI carries.
pub const SSLMODE: &str = "verify-full";

/// `secret` (a login Secret just built) with the CA `ca_cert` and TLS parameters in its URIs.
pub fn with_tls(mut secret: Secret, ca_cert: &str) -> Secret {
    let data = secret.data.get_or_insert_with(Default::default);
    let text = |value: &str| ByteString(value.as_bytes().to_vec());
    let parameters = format!("sslmode={SSLMODE}&sslrootcert={APP_CA_PATH}");
    for (key, joiner) in [("uri", '?'), ("jdbc-uri", '&')] {
        if let Some(uri) = data.get(key).and_then(|v| String::from_utf8(v.0.clone()).ok()) {
            let joiner = if uri.contains('?') { joiner } else { '?' };
            data.insert(key.to_owned(), text(&format!("{uri}{joiner}{parameters}")));
        }
    }
    data.insert(CA_CERT_KEY.to_owned(), text(ca_cert));
    data.insert("sslmode".to_owned(), text(SSLMODE));
    data.insert("sslrootcert".to_owned(), text(APP_CA_PATH));
    secret
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::databasecluster::fixtures;
    use crate::databasecluster::specs::credentials::{Login, build_login_secret, secret_value};

    #[test]
    fn every_uri_verifies_the_server_with_the_mounted_ca() {
        let secret = with_tls(build_login_secret(&fixtures::owner(), Login::App, "pw"), "CA PEM");
        let host = "production-postgres-rw.default.svc";
        let value = |key| secret_value(&secret, key).unwrap();
        assert_eq!(
            value("uri"),
            format!(
                "postgresql://app:pw@{host}:5432/app?sslmode=verify-full&sslrootcert=/etc/dbcluster-app/ca.crt"
            )
        );
        assert_eq!(
            value("jdbc-uri"),
            format!(
                "jdbc:postgresql://{host}:5432/app?user=app&password=pw&sslmode=verify-full&sslrootcert=/etc/dbcluster-app/ca.crt"
            )
        );
        assert_eq!((value("ca.crt"), value("sslmode")), ("CA PEM".to_owned(), "verify-full".to_owned()));
        assert_eq!(value("sslrootcert"), APP_CA_PATH);
    }
}
