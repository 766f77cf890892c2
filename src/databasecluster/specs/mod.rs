//! Pure builders of the child objects a cluster owns, one kind each: the StatefulSet and its
//! PodDisruptionBudget ([`resources`]), the Services ([`services`]), the configuration
//! ([`config`]), the logins' Secrets ([`credentials`]) and the application's Secret
//! ([`app_secret`]). No I/O.

pub mod app_secret;
pub mod config;
pub mod credentials;
pub mod resources;
pub mod services;
