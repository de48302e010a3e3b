//! Resources whose pass failed because the API server could not be reached are looked at again
//! as soon as it answers, instead of on the error policy's fixed retry: after a control-plane
//! restart, a resource changed just before the outage would otherwise keep reporting its earlier
//! generation for up to a retry interval after the API returned.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use crate::controller::cached::CachedDeployment;
use futures::channel::mpsc;
use kube::runtime::reflector::ObjectRef;
use kube::Client;

use crate::controller::error::Error;

/// How often the API server is asked whether it answers again while resources wait for it.
const PROBE_INTERVAL: Duration = Duration::from_millis(500);

/// Whether a failed pass failed because the API server was away or not ready (connection
/// refused or reset, timeout; 503, 504 while it starts) rather than on an answer about the
/// request (any other status, a decoding failure, the operator's own errors). A 429 is not an
/// outage: a throttled pass waits the error policy's interval rather than retrying at once.
pub fn unreachable(error: &Error) -> bool {
    let source = match error {
        Error::Kube(source) | Error::Api { source, .. } => source,
        _ => return false,
    };
    match source {
        kube::Error::Service(_) | kube::Error::HyperError(_) => true,
        kube::Error::Api(status) => matches!(status.code, 503 | 504),
        _ => false,
    }
}

/// Whether the API server reports itself ready (`/readyz`).
async fn ready(client: &Client) -> bool {
    let Ok(request) = http::Request::get("/readyz").body(Vec::new()) else {
        return false;
    };
    client.request_text(request).await.is_ok()
}

/// Resources waiting for the API server to answer again.
pub struct AwaitingApi {
    waiting: Mutex<HashSet<ObjectRef<CachedDeployment>>>,
    wake: tokio::sync::Notify,
    retry: mpsc::UnboundedSender<ObjectRef<CachedDeployment>>,
}

impl AwaitingApi {
    /// The registry and the stream of resources to reconcile once the API answers (for
    /// `Controller::reconcile_on`).
    pub fn new() -> (Self, mpsc::UnboundedReceiver<ObjectRef<CachedDeployment>>) {
        let (retry, due) = mpsc::unbounded();
        (
            Self {
                waiting: Mutex::default(),
                wake: tokio::sync::Notify::new(),
                retry,
            },
            due,
        )
    }

    fn waiting(&self) -> std::sync::MutexGuard<'_, HashSet<ObjectRef<CachedDeployment>>> {
        // Plain set operations cannot leave the set inconsistent when a holder panics.
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `resource`'s pass could not reach the API server: reconcile it when the server answers.
    pub fn wait_for_api(&self, resource: ObjectRef<CachedDeployment>) {
        self.waiting().insert(resource);
        self.wake.notify_one();
    }

    /// Hands every waiting resource to the controller; returns how many.
    fn release(&self) -> usize {
        let due = std::mem::take(&mut *self.waiting());
        let released = due.len();
        for resource in due {
            // The controller is gone when the receiver is: nothing left to retry then.
            let _ = self.retry.unbounded_send(resource);
        }
        released
    }

    /// Sleeps until a resource waits, probes the API server's readiness every
    /// [`PROBE_INTERVAL`] until it is ready, then releases the waiting resources; forever.
    pub async fn run(&self, client: Client) {
        loop {
            self.wake.notified().await;
            loop {
                tokio::time::sleep(PROBE_INTERVAL).await;
                if ready(&client).await {
                    break;
                }
            }
            let released = self.release();
            if released > 0 {
                tracing::info!(
                    resources = released,
                    "the API server answers again; reconciling the resources that could not reach it"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    fn resource(name: &str) -> ObjectRef<CachedDeployment> {
        ObjectRef::new_with(name, crate::api::api_resource()).within("ns")
    }

    #[tokio::test]
    async fn waiting_resources_are_released_once_each() {
        let (awaiting, mut due) = AwaitingApi::new();
        awaiting.wait_for_api(resource("a"));
        awaiting.wait_for_api(resource("b"));
        awaiting.wait_for_api(resource("a"));
        assert_eq!(awaiting.release(), 2);
        assert_eq!(
            awaiting.release(),
            0,
            "released resources do not wait any more"
        );
        let mut names = vec![
            due.next().await.expect("a").name,
            due.next().await.expect("b").name,
        ];
        names.sort();
        assert_eq!(names, ["a", "b"]);
    }

    #[test]
    fn only_failures_to_reach_the_server_wait_for_it() {
        let status = kube::Error::Api(
            kube::core::Status::failure("conflict", "Conflict")
                .with_code(409)
                .boxed(),
        );
        assert!(!unreachable(&Error::api("apply", "Pod", "p", status)));
        assert!(!unreachable(&Error::NoNamespace("x".into())));
        let starting = kube::Error::Api(
            kube::core::Status::failure("unavailable", "ServiceUnavailable")
                .with_code(503)
                .boxed(),
        );
        assert!(unreachable(&Error::Kube(starting)));
        let throttled = kube::Error::Api(
            kube::core::Status::failure("too many requests", "TooManyRequests")
                .with_code(429)
                .boxed(),
        );
        assert!(!unreachable(&Error::Kube(throttled)));
        let refused = kube::Error::Service(Box::new(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "connection refused",
        )));
        assert!(unreachable(&Error::api("list", "Job", "ns/-l x", refused)));
    }
}
