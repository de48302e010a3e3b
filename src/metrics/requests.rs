//! Requests the operator's client sends to the API server, by verb, resource and response code,
//! and their latency: what `rest_client_requests_total` and `rest_client_request_duration_seconds`
//! show controller-runtime users, with the Kubernetes verb and resource instead of the HTTP method
//! and host, so that a dashboard can tell a list storm from a patch storm.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

/// `{verb, resource, code}` of one request; `code` is the HTTP status, `error` when no response
/// came back.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct RequestLabels {
    pub verb: &'static str,
    pub resource: String,
    pub code: String,
}

/// `{verb, resource}` of one request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct VerbLabels {
    pub verb: &'static str,
    pub resource: String,
}

/// Latency buckets, 2 ms to 10 s: the Kubernetes SLO for mutating calls is p99 ≤ 1 s.
const LATENCY_BUCKETS: [f64; 12] = [
    0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

/// The client's request counters, shared by the client's tower layer (which records) and the
/// metric registry (which exports). Cloning shares the counts.
#[derive(Clone, Debug)]
pub struct ApiRequests {
    /// Mutating requests (everything but GET); the figure a converged operator keeps at zero.
    pub(super) writes: Arc<AtomicU64>,
    /// `deepinfer_api_requests_total{verb, resource, code}`.
    pub(super) total: Family<RequestLabels, Counter>,
    /// `deepinfer_api_request_duration_seconds{verb, resource}`: until the response headers.
    pub(super) latency: Family<VerbLabels, Histogram, fn() -> Histogram>,
}

impl Default for ApiRequests {
    fn default() -> Self {
        Self {
            writes: Arc::default(),
            total: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
        }
    }
}

impl ApiRequests {
    /// Mutating requests sent so far.
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }

    /// The counter of mutating requests itself, for readers that poll it.
    pub fn write_counter(&self) -> Arc<AtomicU64> {
        self.writes.clone()
    }

    /// Records one finished request.
    pub fn record(&self, verb: &'static str, resource: &str, code: Option<u16>, seconds: f64) {
        if verb != "get" && verb != "list" && verb != "watch" {
            self.writes.fetch_add(1, Ordering::Relaxed);
        }
        let code = code.map_or_else(|| "error".to_string(), |c| c.to_string());
        self.total
            .get_or_create(&RequestLabels {
                verb,
                resource: resource.to_string(),
                code,
            })
            .inc();
        self.latency
            .get_or_create(&VerbLabels {
                verb,
                resource: resource.to_string(),
            })
            .observe(seconds);
    }
}

/// The Kubernetes verb and resource (`pods`, `pods/status`, `deepinferdeployments`) of a request
/// to the API server; non-resource paths (`/version`, `/apis`) are resource `nonresource`.
pub fn classify(method: &http::Method, uri: &http::Uri) -> (&'static str, String) {
    let segments: Vec<&str> = uri.path().split('/').filter(|s| !s.is_empty()).collect();
    let rest = match segments.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => &[][..],
    };
    // `namespaces/<ns>/<resource>…` is namespaced; `namespaces[/<ns>[/status]]` is the namespace.
    let rest = match rest {
        ["namespaces", _ns, resource, tail @ ..] => {
            let mut r = vec![*resource];
            r.extend_from_slice(tail);
            r
        }
        other => other.to_vec(),
    };
    let (resource, named) = match rest.as_slice() {
        [] => ("nonresource".to_string(), false),
        [resource] => (resource.to_string(), false),
        [resource, _name] => (resource.to_string(), true),
        [resource, _name, sub, ..] => (format!("{resource}/{sub}"), true),
    };
    let watching = uri
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
    let verb = match *method {
        http::Method::GET if watching => "watch",
        http::Method::GET if named || resource == "nonresource" => "get",
        http::Method::GET => "list",
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE if named => "delete",
        http::Method::DELETE => "deletecollection",
        _ => "other",
    };
    (verb, resource)
}

/// Tower layer recording every request of the wrapped client into [`ApiRequests`].
#[derive(Clone)]
pub struct ApiRequestsLayer(pub ApiRequests);

impl<S> tower::Layer<S> for ApiRequestsLayer {
    type Service = Recorded<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Recorded {
            inner,
            requests: self.0.clone(),
        }
    }
}

/// A client service whose requests are recorded; see [`ApiRequestsLayer`].
#[derive(Clone)]
pub struct Recorded<S> {
    inner: S,
    requests: ApiRequests,
}

impl<S, ReqBody, ResBody> tower::Service<http::Request<ReqBody>> for Recorded<S>
where
    S: tower::Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<ReqBody>) -> Self::Future {
        let (verb, resource) = classify(req.method(), req.uri());
        let requests = self.requests.clone();
        let start = Instant::now();
        let response = self.inner.call(req);
        Box::pin(async move {
            let response = response.await;
            let code = response.as_ref().ok().map(|r| r.status().as_u16());
            requests.record(verb, &resource, code, start.elapsed().as_secs_f64());
            response
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verb_resource(method: http::Method, uri: &str) -> (&'static str, String) {
        classify(&method, &uri.parse().unwrap())
    }

    #[test]
    fn requests_are_classified_by_kubernetes_verb_and_resource() {
        use http::Method as M;
        let cases = [
            (
                M::GET,
                "/api/v1/namespaces/a/pods?labelSelector=x",
                "list",
                "pods",
            ),
            (
                M::GET,
                "/api/v1/namespaces/a/pods?watch=true&resourceVersion=5",
                "watch",
                "pods",
            ),
            (M::GET, "/api/v1/namespaces/a/pods/p", "get", "pods"),
            (
                M::PATCH,
                "/api/v1/namespaces/a/pods/p/status",
                "patch",
                "pods/status",
            ),
            (
                M::POST,
                "/apis/batch/v1/namespaces/a/jobs",
                "create",
                "jobs",
            ),
            (
                M::PUT,
                "/apis/coordination.k8s.io/v1/namespaces/a/leases/l",
                "update",
                "leases",
            ),
            (
                M::DELETE,
                "/api/v1/namespaces/a/services/s",
                "delete",
                "services",
            ),
            (
                M::DELETE,
                "/api/v1/namespaces/a/pods",
                "deletecollection",
                "pods",
            ),
            (
                M::PATCH,
                "/apis/deepinfer.io/v1alpha1/namespaces/a/deepinferdeployments/d/status",
                "patch",
                "deepinferdeployments/status",
            ),
            (M::GET, "/api/v1/namespaces/a", "get", "namespaces"),
            (M::GET, "/api/v1/nodes?watch=1", "watch", "nodes"),
            (
                M::GET,
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/x",
                "get",
                "customresourcedefinitions",
            ),
            (M::GET, "/version", "get", "nonresource"),
        ];
        for (method, uri, verb, resource) in cases {
            assert_eq!(
                verb_resource(method, uri),
                (verb, resource.to_string()),
                "{uri}"
            );
        }
    }

    #[test]
    fn only_mutating_requests_count_as_writes() {
        let requests = ApiRequests::default();
        requests.record("list", "pods", Some(200), 0.01);
        requests.record("watch", "pods", Some(200), 0.01);
        requests.record("get", "pods", Some(404), 0.01);
        requests.record("patch", "pods/status", Some(200), 0.01);
        requests.record("create", "jobs", None, 0.01);
        assert_eq!(requests.writes(), 2);
    }
}
