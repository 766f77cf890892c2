//! The pod pieces of an object store, pure: the credentials Secret as a volume whose items are
//! the named keys projected to fixed file names, mounted read-only under the pod's Secrets
//! directory (`<secrets>/objectstore/`, and `<secrets>/objectstore-ca/` for a private CA), and
//! the store's settings as environment variables (`crate::instance::archive::config`). The
//! credentials' values never enter the pod spec: only the Secret's name and keys do.

use k8s_openapi::api::core::v1::{EnvVar, KeyToPath, SecretVolumeSource, Volume, VolumeMount};

use crate::databasecluster::api::object_store::{DEFAULT_CA_KEY, ValidObjectStore};
use crate::instance::archive::config::{
    ACCESS_KEY_ID_FILE, CA_DIR, CA_FILE, CREDENTIALS_DIR, ENV_ARCHIVE_TIMEOUT, ENV_COMPRESSION,
    ENV_DESTINATION, ENV_ENDPOINT, ENV_REGION, SECRET_ACCESS_KEY_FILE, SESSION_TOKEN_FILE,
};

/// The volume of the credentials.
pub const CREDENTIALS_VOLUME: &str = "objectstore-credentials";
/// The volume of the CA bundle.
pub const CA_VOLUME: &str = "objectstore-ca";

fn secret_volume(volume: &str, secret: &str, items: Vec<(String, &str)>) -> Volume {
    Volume {
        name: volume.to_owned(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret.to_owned()),
            items: Some(
                items
                    .into_iter()
                    .map(|(key, path)| KeyToPath { key, path: path.to_owned(), mode: None })
                    .collect(),
            ),
            // Readable by the pod's group (fsGroup) only.
            default_mode: Some(0o440),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    }
}

/// The volumes of `store`: the credentials, and the CA bundle when one is named.
pub fn volumes(store: &ValidObjectStore) -> Vec<Volume> {
    let credentials = &store.spec.credentials;
    let mut items = vec![
        (store.access_key_id_key().to_owned(), ACCESS_KEY_ID_FILE),
        (store.secret_access_key_key().to_owned(), SECRET_ACCESS_KEY_FILE),
    ];
    items.extend(credentials.session_token_key.clone().map(|key| (key, SESSION_TOKEN_FILE)));
    let mut volumes = vec![secret_volume(CREDENTIALS_VOLUME, &credentials.name, items)];
    volumes.extend(store.spec.ca_secret.as_ref().map(|ca| {
        let key = ca.key.clone().unwrap_or_else(|| DEFAULT_CA_KEY.to_owned());
        secret_volume(CA_VOLUME, &ca.name, vec![(key, CA_FILE)])
    }));
    volumes
}

/// Their mounts under `secrets_mount_path` (read-only).
pub fn mounts(store: &ValidObjectStore, secrets_mount_path: &str) -> Vec<VolumeMount> {
    let mount = |name: &str, dir: &str| VolumeMount {
        name: name.to_owned(),
        mount_path: format!("{secrets_mount_path}/{dir}"),
        read_only: Some(true),
        ..VolumeMount::default()
    };
    let mut mounts = vec![mount(CREDENTIALS_VOLUME, CREDENTIALS_DIR)];
    mounts.extend(store.spec.ca_secret.as_ref().map(|_| mount(CA_VOLUME, CA_DIR)));
    mounts
}

/// The instance manager's environment for `store`.
pub fn env(store: &ValidObjectStore) -> Vec<EnvVar> {
    let value =
        |name: &str, value: String| EnvVar { name: name.to_owned(), value: Some(value), ..EnvVar::default() };
    let mut env = vec![
        value(ENV_DESTINATION, store.spec.destination.clone()),
        value(ENV_COMPRESSION, store.compression.as_str().to_owned()),
    ];
    env.extend(store.spec.endpoint.clone().map(|e| value(ENV_ENDPOINT, e)));
    env.extend(store.spec.region.clone().map(|r| value(ENV_REGION, r)));
    env.extend(store.archive_timeout_seconds.map(|s| value(ENV_ARCHIVE_TIMEOUT, s.to_string())));
    env
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::databasecluster::api::object_store::{
        ObjectStoreSpec, SecretKey, StoreCredentials, WalArchiveSpec, validate_object_store,
    };

    fn store(ca: bool) -> ValidObjectStore {
        let spec = ObjectStoreSpec {
            destination: "s3://bkt/db".into(),
            endpoint: Some("https://s3.example.com".into()),
            region: None,
            credentials: StoreCredentials {
                name: "s3-creds".into(),
                access_key_id_key: Some("id".into()),
                secret_access_key_key: None,
                session_token_key: None,
            },
            ca_secret: ca.then(|| SecretKey { name: "s3-ca".into(), key: None }),
            compression: None,
        };
        let archive = WalArchiveSpec { enabled: None, archive_timeout: Some("5s".into()) };
        validate_object_store(Some(&spec), Some(&archive)).unwrap().unwrap()
    }

    #[test]
    fn the_credentials_are_files_of_the_named_keys_never_values() {
        let volumes = volumes(&store(false));
        assert_eq!(volumes.len(), 1);
        let secret = volumes[0].secret.clone().unwrap();
        assert_eq!(secret.secret_name.as_deref(), Some("s3-creds"));
        let items: Vec<(String, String)> =
            secret.items.unwrap().into_iter().map(|i| (i.key, i.path)).collect();
        assert_eq!(
            items,
            [
                ("id".to_owned(), "access-key-id".to_owned()),
                ("ACCESS_SECRET_KEY".into(), "secret-access-key".into())
            ]
        );
        assert_eq!(secret.default_mode, Some(0o440));
        let mounts = mounts(&store(true), "/etc/dbcluster-secrets");
        let paths: Vec<&str> = mounts.iter().map(|m| m.mount_path.as_str()).collect();
        assert_eq!(paths, ["/etc/dbcluster-secrets/objectstore", "/etc/dbcluster-secrets/objectstore-ca"]);
        assert!(mounts.iter().all(|m| m.read_only == Some(true)));
        assert_eq!(super::volumes(&store(true)).len(), 2);
    }

    #[test]
    fn the_settings_are_plain_environment() {
        let env: Vec<(String, String)> =
            env(&store(false)).into_iter().map(|e| (e.name, e.value.unwrap_or_default())).collect();
        assert_eq!(
            env,
            [
                ("DBC_OBJECT_STORE_DESTINATION".to_owned(), "s3://bkt/db".to_owned()),
                ("DBC_OBJECT_STORE_COMPRESSION".into(), "gzip".into()),
                ("DBC_OBJECT_STORE_ENDPOINT".into(), "https://s3.example.com".into()),
                ("DBC_WAL_ARCHIVE_TIMEOUT".into(), "5".into()),
            ]
        );
    }
}
