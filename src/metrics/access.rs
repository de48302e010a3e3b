//! Who may read `/metrics`: by default, a caller whose bearer token the API server authenticates
//! (TokenReview) and who may `get` the non-resource URL `/metrics` (SubjectAccessReview), as the
//! metrics endpoints of kubebuilder operators and kube-state-metrics' RBAC proxy decide. A
//! decision is kept for [`DECISION_TTL`] per token (by its SHA-256), so a scrape every few seconds
//! costs two reviews a minute at most.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use kube::Client;

/// How long a decision for one token is kept.
pub const DECISION_TTL: Duration = Duration::from_secs(60);

/// Decisions kept at most (older ones are dropped first when full).
const DECISIONS_KEPT: usize = 1024;

/// What a request to `/metrics` gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Served.
    Allowed,
    /// 401: no bearer token, or one the API server does not authenticate.
    Unauthenticated,
    /// 403: authenticated as this user, who may not get `/metrics`.
    Forbidden(String),
}

/// Reviews bearer tokens against the API server.
pub struct Reviewer {
    client: Client,
    decisions: Mutex<HashMap<[u8; 32], (Decision, Instant)>>,
}

impl std::fmt::Debug for Reviewer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reviewer").finish_non_exhaustive()
    }
}

impl Reviewer {
    /// A reviewer asking the API server `client` talks to.
    pub fn new(client: Client) -> Self {
        Self {
            client,
            decisions: Mutex::new(HashMap::new()),
        }
    }

    /// The decision for a request whose `Authorization` header is `authorization`. An API server
    /// that cannot be asked gives no decision: the request is refused (503) and asked again.
    pub async fn decide(&self, authorization: Option<&str>) -> Result<Decision, kube::Error> {
        let Some(token) = authorization
            .and_then(|h| h.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty())
        else {
            return Ok(Decision::Unauthenticated);
        };
        let key: [u8; 32] = ring::digest::digest(&ring::digest::SHA256, token.as_bytes())
            .as_ref()
            .try_into()
            .unwrap_or([0; 32]);
        if let Some((decision, at)) = self.lock().get(&key) {
            if at.elapsed() < DECISION_TTL {
                return Ok(decision.clone());
            }
        }
        let decision = self.review(token).await?;
        let mut decisions = self.lock();
        if decisions.len() >= DECISIONS_KEPT {
            decisions.retain(|_, (_, at)| at.elapsed() < DECISION_TTL);
            if decisions.len() >= DECISIONS_KEPT {
                decisions.clear();
            }
        }
        decisions.insert(key, (decision.clone(), Instant::now()));
        Ok(decision)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], (Decision, Instant)>> {
        self.decisions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// TokenReview, then SubjectAccessReview of `get /metrics` for the user it names.
    async fn review(&self, token: &str) -> Result<Decision, kube::Error> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_string(),
                ..TokenReviewSpec::default()
            },
            ..TokenReview::default()
        };
        let reviewed = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await?;
        let status = reviewed.status.unwrap_or_default();
        let Some(user) = status.user.filter(|_| status.authenticated == Some(true)) else {
            return Ok(Decision::Unauthenticated);
        };
        let access = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username.clone(),
                uid: user.uid.clone(),
                groups: user.groups.clone(),
                extra: user.extra.clone(),
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some("/metrics".into()),
                    verb: Some("get".into()),
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let decided = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &access)
            .await?;
        Ok(if decided.status.is_some_and(|s| s.allowed) {
            Decision::Allowed
        } else {
            Decision::Forbidden(user.username.unwrap_or_default())
        })
    }
}
