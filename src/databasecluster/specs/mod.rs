//! Pure builders of the child objects a cluster owns, one kind each: the StatefulSet and its
//! PodDisruptionBudget ([`resources`]), the Services ([`services`]), the configuration
//! ([`config`]), the logins' Secrets ([`credentials`]), the status token's Secret
//! ([`status_token`]), the pod pieces that run the instance manager ([`instance_pod`]) and the
//! application's Secret ([`app_secret`]). What they all share (owner, labels, names) is in the
//! leaf [`names`]. No I/O.

pub mod app_secret;
pub mod config;
pub mod credentials;
pub mod instance_pod;
pub mod names;
pub mod resources;
pub mod services;
pub mod status_token;
