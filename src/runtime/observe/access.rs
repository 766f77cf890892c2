//! Who may read the operator's `/metrics` and `/debug/*` (`run --metrics-secure`), decided as
//! controller-runtime's secure metrics serving decides it (`filters.WithAuthenticationAndAuthorization`):
//! the request's bearer token goes to the API server in a TokenReview (`authentication.k8s.io/v1`),
//! and the user it names in a SubjectAccessReview (`authorization.k8s.io/v1`) for a `get` on the
//! request's path as a non-resource URL. RBAC grants that with `nonResourceURLs` (see
//! `manifests/rbac.yaml`'s metrics reader). No token, or one the API server does not authenticate: 401.
//! Authenticated but not allowed: 403. A review that cannot be made (the API server unreachable):
//! 500, as controller-runtime answers; never open. The listeners it guards speak TLS only
//! (`server::encrypted`, certificate from `tls`), so the token never crosses the network in clear.
//!
//! Answers are remembered for [`CACHE_TTL`] (an authenticated token by its SHA-256, an allowed
//! user and path), so a scrape every 15 s costs an API request a minute, not two per scrape;
//! refusals are not remembered. The requests and their answers are pure functions below; only
//! [`AccessReview::check`] does I/O.

use std::collections::HashMap;
use std::time::Duration;

use http::{HeaderMap, StatusCode, header};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use tokio::time::Instant;

/// How long an authenticated token and an allowed (user, path) are remembered: controller-runtime's
/// (and kube-apiserver's delegating authenticator's) token cache TTL.
pub const CACHE_TTL: Duration = Duration::from_secs(60);

/// Entries kept per cache before it is emptied (so a flood of distinct tokens costs bounded memory).
const CACHE_LIMIT: usize = 1024;

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    /// No bearer token, or one the API server did not authenticate.
    #[error("Unauthorized")]
    Unauthenticated,
    /// The user may not `get` the path.
    #[error("Authorization denied for user {user} to get {path}")]
    Forbidden {
        /// The authenticated user.
        user: String,
        /// The path asked for.
        path: String,
    },
    /// A review could not be made.
    #[error("{what} failed: {reason}")]
    ReviewFailed {
        /// `TokenReview` or `SubjectAccessReview`.
        what: &'static str,
        /// Why, in one line.
        reason: String,
    },
}

impl Denied {
    /// The HTTP status it is answered with.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::Unauthenticated => StatusCode::UNAUTHORIZED,
            Self::Forbidden { .. } => StatusCode::FORBIDDEN,
            Self::ReviewFailed { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// The token of an `Authorization: Bearer <token>` header.
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The TokenReview of `token` (for the API server's own audience, as controller-runtime asks).
pub fn token_review(token: &str) -> TokenReview {
    TokenReview {
        spec: TokenReviewSpec { token: Some(token.to_owned()), audiences: None },
        ..TokenReview::default()
    }
}

/// The user an answered TokenReview authenticated, if it did.
pub fn authenticated(review: &TokenReview) -> Option<UserInfo> {
    let status = review.status.as_ref()?;
    let user = status.user.as_ref()?;
    (status.authenticated == Some(true) && user.username.as_deref().is_some_and(|u| !u.is_empty()))
        .then(|| user.clone())
}

/// The SubjectAccessReview of `user` getting the non-resource URL `path`.
pub fn access_review(user: &UserInfo, path: &str) -> SubjectAccessReview {
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: user.username.clone(),
            groups: user.groups.clone(),
            uid: user.uid.clone(),
            extra: user.extra.clone(),
            non_resource_attributes: Some(NonResourceAttributes {
                path: Some(path.to_owned()),
                verb: Some("get".to_owned()),
            }),
            resource_attributes: None,
        },
        ..SubjectAccessReview::default()
    }
}

/// Whether an answered SubjectAccessReview allows.
pub fn allowed(review: &SubjectAccessReview) -> bool {
    review.status.as_ref().is_some_and(|s| s.allowed)
}

/// Answers remembered until their deadline.
#[derive(Debug, Default)]
struct Remembered {
    tokens: HashMap<[u8; 32], (Instant, UserInfo)>,
    allowed: HashMap<(String, String), Instant>,
}

/// Reviews requests with the API server the operator's client talks to (its ServiceAccount needs
/// `create` on `tokenreviews` and `subjectaccessreviews`).
pub struct AccessReview {
    client: kube::Client,
    remembered: Mutex<Remembered>,
}

impl std::fmt::Debug for AccessReview {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessReview").finish_non_exhaustive()
    }
}

impl AccessReview {
    /// Reviews through `client`.
    pub fn new(client: kube::Client) -> Self {
        Self { client, remembered: Mutex::default() }
    }

    /// Whether the request with `headers` may read `path`.
    pub async fn check(&self, headers: &HeaderMap, path: &str) -> Result<(), Denied> {
        let token = bearer_token(headers).ok_or(Denied::Unauthenticated)?;
        let user = self.authenticate(token).await?;
        let username = user.username.clone().unwrap_or_default();
        let key = (username.clone(), path.to_owned());
        let now = Instant::now();
        if self.remembered.lock().allowed.get(&key).is_some_and(|until| *until > now) {
            return Ok(());
        }
        let reviews: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let answer = reviews
            .create(&PostParams::default(), &access_review(&user, path))
            .await
            .map_err(|e| failed("SubjectAccessReview", &e))?;
        if !allowed(&answer) {
            return Err(Denied::Forbidden { user: username, path: path.to_owned() });
        }
        let mut remembered = self.remembered.lock();
        if remembered.allowed.len() >= CACHE_LIMIT {
            remembered.allowed.clear();
        }
        remembered.allowed.insert(key, now + CACHE_TTL);
        Ok(())
    }

    async fn authenticate(&self, token: &str) -> Result<UserInfo, Denied> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let now = Instant::now();
        if let Some((until, user)) = self.remembered.lock().tokens.get(&digest)
            && *until > now
        {
            return Ok(user.clone());
        }
        let reviews: Api<TokenReview> = Api::all(self.client.clone());
        let answer = reviews
            .create(&PostParams::default(), &token_review(token))
            .await
            .map_err(|e| failed("TokenReview", &e))?;
        let user = authenticated(&answer).ok_or(Denied::Unauthenticated)?;
        let mut remembered = self.remembered.lock();
        if remembered.tokens.len() >= CACHE_LIMIT {
            remembered.tokens.clear();
        }
        remembered.tokens.insert(digest, (now + CACHE_TTL, user.clone()));
        Ok(user)
    }
}

fn failed(what: &'static str, error: &kube::Error) -> Denied {
    tracing::warn!(%error, "{what} for a request to the operator's endpoints failed");
    Denied::ReviewFailed { what, reason: error.to_string().lines().next().unwrap_or_default().to_owned() }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::authentication::v1::TokenReviewStatus;
    use k8s_openapi::api::authorization::v1::SubjectAccessReviewStatus;

    use super::*;

    #[test]
    fn only_a_bearer_authorization_carries_a_token() {
        let headers = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::AUTHORIZATION, value.parse().unwrap());
            headers
        };
        assert_eq!(bearer_token(&headers("Bearer abc")), Some("abc"));
        assert_eq!(bearer_token(&headers("bearer  abc ")), Some("abc"));
        assert_eq!(bearer_token(&headers("Basic YTpi")), None);
        assert_eq!(bearer_token(&headers("Bearer ")), None);
        assert_eq!(bearer_token(&HeaderMap::new()), None);
    }

    #[test]
    fn the_reviews_ask_what_controller_runtime_asks() {
        assert_eq!(token_review("t").spec.token.as_deref(), Some("t"));
        let user = UserInfo {
            username: Some("system:serviceaccount:monitoring:prometheus".into()),
            groups: Some(vec!["system:serviceaccounts".into()]),
            uid: Some("u1".into()),
            extra: None,
        };
        let review = access_review(&user, "/metrics");
        let attributes = review.spec.non_resource_attributes.as_ref().unwrap();
        assert_eq!((attributes.path.as_deref(), attributes.verb.as_deref()), (Some("/metrics"), Some("get")));
        assert_eq!(review.spec.user, user.username);
        assert_eq!((review.spec.groups, review.spec.uid), (user.groups.clone(), user.uid.clone()));
        assert!(review.spec.resource_attributes.is_none());
    }

    #[test]
    fn answers_are_read_strictly() {
        let mut review = token_review("t");
        assert_eq!(authenticated(&review), None, "no status");
        let user = UserInfo { username: Some("alice".into()), ..UserInfo::default() };
        review.status = Some(TokenReviewStatus {
            authenticated: Some(false),
            user: Some(user.clone()),
            ..Default::default()
        });
        assert_eq!(authenticated(&review), None, "not authenticated");
        review.status.as_mut().unwrap().authenticated = Some(true);
        assert_eq!(authenticated(&review), Some(user));
        review.status.as_mut().unwrap().user = Some(UserInfo::default());
        assert_eq!(authenticated(&review), None, "no user name");

        let mut sar = SubjectAccessReview::default();
        assert!(!allowed(&sar));
        sar.status = Some(SubjectAccessReviewStatus { allowed: true, ..Default::default() });
        assert!(allowed(&sar));
    }
}
