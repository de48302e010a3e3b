//! Kubernetes Events (`events.k8s.io/v1`) about the operator's resources.
//!
//! The same news about the same object (type, action, reason, note, regarding object, related
//! object) published again within [`SERIES_WINDOW`] of its last sighting is counted into the
//! first Event's `series` instead of creating another Event, as `kubectl describe` and event
//! exporters expect. Different news is a new Event.
//!
//! What a repeat needs is all that is remembered per Event: a hash of its key, when it was
//! created (its name is derived from that) and its series. The Event's body is not kept, so a
//! burst of a thousand resources' transitions costs a few dozen bytes each, and sightings older
//! than the window are forgotten on the next publish.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher, RandomState};
use std::sync::Mutex;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Reporter};
use kube::Client;
use serde_json::json;

/// How long after its last sighting a repeat still counts into an Event's series.
pub const SERIES_WINDOW: SignedDuration = SignedDuration::from_mins(6);

/// At most this many sightings are remembered; beyond it, news is published as new Events
/// until older sightings leave the window.
const REMEMBERED: usize = 16_384;

/// Publishes Events, counting repeats into series.
pub struct Recorder {
    client: Client,
    controller: String,
    instance: String,
    keys: RandomState,
    seen: Mutex<Sightings>,
}

#[derive(Default)]
struct Sightings {
    by_key: HashMap<u64, Sighting>,
    /// When sightings outside the window were last dropped.
    swept: Option<Timestamp>,
}

#[derive(Clone, Copy, Debug)]
struct Sighting {
    /// When the Event was created; its name is `<regarding name>.<nanoseconds in hex>`.
    created: Timestamp,
    count: i32,
    last: Timestamp,
}

impl Recorder {
    /// A recorder reporting as `reporter` (instance: the controller's name when unset).
    pub fn new(client: Client, reporter: Reporter) -> Self {
        Self {
            client,
            instance: reporter
                .instance
                .unwrap_or_else(|| reporter.controller.clone()),
            controller: reporter.controller,
            keys: RandomState::new(),
            seen: Mutex::default(),
        }
    }

    /// Publishes `ev` about `regarding`, in its namespace (`default` for a cluster-scoped object).
    pub async fn publish(
        &self,
        ev: &Event,
        regarding: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let now = Timestamp::now();
        let key = self.key(ev, regarding);
        let namespace = regarding.namespace.as_deref().unwrap_or("default");
        let api: Api<K8sEvent> = Api::namespaced(self.client.clone(), namespace);
        if let Some(seen) = self.sighting(key, now) {
            let count = seen.count + 1;
            let series = json!({"series": {"count": count, "lastObservedTime": MicroTime(now)}});
            match api
                .patch(
                    &event_name(regarding, &self.controller, seen.created),
                    &PatchParams::default(),
                    &Patch::Merge(&series),
                )
                .await
            {
                Ok(_) => {
                    self.remember(
                        key,
                        Sighting {
                            count,
                            last: now,
                            ..seen
                        },
                    );
                    return Ok(());
                }
                // Deleted meanwhile (the API server's event TTL, or by hand): start a new one.
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        api.create(&PostParams::default(), &self.event(ev, regarding, now))
            .await?;
        self.remember(
            key,
            Sighting {
                created: now,
                count: 1,
                last: now,
            },
        );
        Ok(())
    }

    /// How many sightings are remembered (for tests and benchmarks).
    pub fn remembered(&self) -> usize {
        self.seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .by_key
            .len()
    }

    /// The sighting of `key` still inside the window, after dropping those outside it (at most
    /// once a second).
    fn sighting(&self, key: u64, now: Timestamp) -> Option<Sighting> {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if seen
            .swept
            .is_none_or(|t| now.duration_since(t) >= SignedDuration::from_secs(1))
        {
            seen.by_key
                .retain(|_, s| now.duration_since(s.last) < SERIES_WINDOW);
            seen.swept = Some(now);
        }
        seen.by_key
            .get(&key)
            .copied()
            .filter(|s| now.duration_since(s.last) < SERIES_WINDOW)
    }

    fn remember(&self, key: u64, sighting: Sighting) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if seen.by_key.len() < REMEMBERED || seen.by_key.contains_key(&key) {
            seen.by_key.insert(key, sighting);
        }
    }

    /// The identity of a piece of news: the regarding object without its resourceVersion (an
    /// object's every write would otherwise make the same news new).
    fn key(&self, ev: &Event, regarding: &ObjectReference) -> u64 {
        let mut h = self.keys.build_hasher();
        matches!(ev.type_, EventType::Warning).hash(&mut h);
        ev.action.hash(&mut h);
        ev.reason.hash(&mut h);
        ev.note.hash(&mut h);
        for r in std::iter::once(regarding).chain(ev.secondary.as_ref()) {
            r.api_version.hash(&mut h);
            r.kind.hash(&mut h);
            r.namespace.hash(&mut h);
            r.name.hash(&mut h);
            r.uid.hash(&mut h);
            r.field_path.hash(&mut h);
        }
        h.finish()
    }

    fn event(&self, ev: &Event, regarding: &ObjectReference, now: Timestamp) -> K8sEvent {
        K8sEvent {
            metadata: ObjectMeta {
                name: Some(event_name(regarding, &self.controller, now)),
                namespace: regarding.namespace.clone(),
                ..ObjectMeta::default()
            },
            action: Some(ev.action.clone()),
            reason: Some(ev.reason.clone()),
            note: ev.note.clone(),
            type_: Some(
                match ev.type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .into(),
            ),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            related: ev.secondary.clone(),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            ..K8sEvent::default()
        }
    }
}

/// `<regarding name>.<creation time in nanoseconds, hex>`, as kubelets and client-go name Events.
fn event_name(regarding: &ObjectReference, controller: &str, created: Timestamp) -> String {
    format!(
        "{}.{:x}",
        regarding.name.as_deref().unwrap_or(controller),
        created.as_nanosecond()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorder() -> Recorder {
        // A client is needed to build one; these tests never send a request.
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("url"));
        Recorder::new(
            Client::try_from(config).expect("client"),
            Reporter {
                controller: "deepinfer-operator".into(),
                instance: None,
            },
        )
    }

    fn news(reason: &str, note: &str) -> Event {
        Event {
            type_: EventType::Normal,
            reason: reason.into(),
            note: Some(note.into()),
            action: "Reconcile".into(),
            secondary: None,
        }
    }

    fn about(name: &str, resource_version: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some("deepinfer.io/v1alpha1".into()),
            kind: Some("DeepInferDeployment".into()),
            namespace: Some("ns".into()),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            resource_version: Some(resource_version.into()),
            field_path: None,
        }
    }

    #[tokio::test]
    async fn the_same_news_about_an_object_is_one_key_whatever_its_resource_version() {
        let r = recorder();
        let ev = news("Ready", "Ready=True: serving");
        assert_eq!(r.key(&ev, &about("a", "1")), r.key(&ev, &about("a", "2")));
        assert_ne!(r.key(&ev, &about("a", "1")), r.key(&ev, &about("b", "1")));
        let other_note = news("Ready", "Ready=True: serving revision 2");
        assert_ne!(
            r.key(&ev, &about("a", "1")),
            r.key(&other_note, &about("a", "1"))
        );
        let warning = Event {
            type_: EventType::Warning,
            ..news("Ready", "Ready=True: serving")
        };
        assert_ne!(
            r.key(&ev, &about("a", "1")),
            r.key(&warning, &about("a", "1"))
        );
    }

    #[tokio::test]
    async fn sightings_leave_the_window_and_are_forgotten() {
        let r = recorder();
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().expect("time");
        r.remember(
            1,
            Sighting {
                created: t0,
                count: 1,
                last: t0,
            },
        );
        let inside = t0 + SignedDuration::from_mins(5);
        assert_eq!(r.sighting(1, inside).map(|s| s.count), Some(1));
        let outside = t0 + SERIES_WINDOW;
        assert!(r.sighting(1, outside).is_none());
        assert_eq!(r.remembered(), 0, "dropped, not only ignored");
    }

    #[tokio::test]
    async fn at_most_the_bound_is_remembered_but_a_known_key_still_counts() {
        let r = recorder();
        let t: Timestamp = "2026-01-01T00:00:00Z".parse().expect("time");
        let s = Sighting {
            created: t,
            count: 1,
            last: t,
        };
        for key in 0..REMEMBERED as u64 + 10 {
            r.remember(key, s);
        }
        assert_eq!(r.remembered(), REMEMBERED);
        r.remember(0, Sighting { count: 5, ..s });
        assert_eq!(r.sighting(0, t).map(|s| s.count), Some(5));
    }

    #[test]
    fn events_are_named_after_their_object_and_creation() {
        let t: Timestamp = "2026-01-01T00:00:00.000000255Z".parse().expect("time");
        assert_eq!(
            event_name(&about("a", "1"), "deepinfer-operator", t),
            format!("a.{:x}", t.as_nanosecond())
        );
        assert!(event_name(&about("a", "1"), "c", t).ends_with("ff"));
    }
}
