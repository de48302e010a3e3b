//! What the operator wrote, and how far its caches have caught up: every write the passes make
//! to a cached object is noted with the `resourceVersion` it produced ([`note_written`]), every
//! event a store takes in with its own, and a pass first waits until each store has taken in the
//! operator's newest write of its kind (resource versions of one kind compare as integers: they
//! are the storage revision). Where that wait runs out ([`CATCH_UP`]) the pass goes on with what
//! the stores hold.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::watcher;
use kube::Resource;

use crate::api::{labels, Component};

/// Longest a pass waits for the stores to take in the operator's own writes.
pub const CATCH_UP: Duration = Duration::from_secs(15);

/// Owners with writes noted beyond which those whose stores hold every write are dropped.
const OWNERS_SWEPT_AT: usize = 1024;

/// How far one kind's store has caught up with its watches: for each watch (one over every
/// namespace, or one per watched namespace), the newest `resourceVersion` it took into the store.
/// A `resourceVersion` orders the events of one watch only: the watch of another namespace may be
/// ahead, so a write is looked for in the progress of the watch of its own namespace.
#[derive(Debug, Default)]
pub struct Progress {
    /// By the namespace watched; `""` for a watch of every namespace.
    watches: std::sync::RwLock<HashMap<Box<str>, Arc<WatchProgress>>>,
    /// Whether this kind's watches are held back (see [`Progress::hold`]).
    held: Held,
}

/// How far the events of one watch are in its kind's store.
#[derive(Debug, Default)]
pub struct WatchProgress {
    stored: AtomicU64,
    /// The newest version of a relist under way (the store takes the list in whole at its end).
    listing: AtomicU64,
}

/// A switch that holds a kind's watch back; off unless a test turns it on.
#[derive(Debug)]
struct Held(tokio::sync::watch::Sender<bool>);

impl Default for Held {
    fn default() -> Self {
        Self(tokio::sync::watch::channel(false).0)
    }
}

fn version(meta: &ObjectMeta) -> Option<u64> {
    meta.resource_version.as_deref()?.parse().ok()
}

impl WatchProgress {
    /// Notes a watch event the cache has taken in.
    pub fn stored<K: Resource>(&self, event: &watcher::Event<K>) {
        match event {
            watcher::Event::Apply(o) | watcher::Event::Delete(o) => {
                if let Some(v) = version(o.meta()) {
                    self.stored.fetch_max(v, Ordering::SeqCst);
                }
            }
            watcher::Event::Init => self.listing.store(0, Ordering::SeqCst),
            watcher::Event::InitApply(o) => {
                if let Some(v) = version(o.meta()) {
                    self.listing.fetch_max(v, Ordering::SeqCst);
                }
            }
            watcher::Event::InitDone => {
                let listed = self.listing.swap(0, Ordering::SeqCst);
                self.stored.fetch_max(listed, Ordering::SeqCst);
            }
        }
        // A pass waiting for its writes looks again now, not on a poll.
        stored_news().notify_waiters();
    }
}

/// Wakes the passes waiting for their writes (see [`Written::caught_up`]) whenever any store
/// takes in an event.
fn stored_news() -> &'static tokio::sync::Notify {
    static NEWS: std::sync::OnceLock<tokio::sync::Notify> = std::sync::OnceLock::new();
    NEWS.get_or_init(tokio::sync::Notify::new)
}

impl Progress {
    /// The progress of the watch of `namespace` (`None`: of every namespace).
    pub fn watch(&self, namespace: Option<&str>) -> Arc<WatchProgress> {
        let key = namespace.unwrap_or_default();
        if let Some(p) = self.read().get(key) {
            return p.clone();
        }
        let mut watches = self.watches.write().unwrap_or_else(|e| e.into_inner());
        watches.entry(key.into()).or_default().clone()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<Box<str>, Arc<WatchProgress>>> {
        self.watches.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes an event of the watch of every namespace (see [`WatchProgress::stored`]).
    pub fn stored<K: Resource>(&self, event: &watcher::Event<K>) {
        self.watch(None).stored(event);
    }

    /// Whether the store holds the write of `version` in `namespace` (or a newer state of the
    /// object): the watch of that namespace, or of every namespace, has taken it in.
    fn has(&self, namespace: &str, version: u64) -> bool {
        let watches = self.read();
        watches
            .get(namespace)
            .or_else(|| watches.get(""))
            .is_some_and(|w| w.stored.load(Ordering::SeqCst) >= version)
    }

    /// Fault injection: holds this kind's watch back, as a lagging watch or a long relist does.
    /// Events wait, in order, until [`Progress::release`]; the store keeps what it had.
    pub fn hold(&self) {
        self.held.0.send_replace(true);
    }

    /// Lets a held watch go on; its waiting events reach the store in order.
    pub fn release(&self) {
        self.held.0.send_replace(false);
    }

    /// Returns once the watch is not held.
    pub async fn unheld(&self) {
        let mut held = self.held.0.subscribe();
        // The sender lives as long as `self`, so the wait cannot fail.
        let _ = held.wait_for(|h| !*h).await;
    }
}

/// [`Progress`] of every cached kind, by kind name, and the writes each deployment's passes made
/// that a later pass of the same deployment must find in the stores.
#[derive(Debug, Default)]
pub struct Written {
    kinds: BTreeMap<&'static str, Arc<Progress>>,
    /// Per owner (the UID of the written object's controller owner): the newest write of each
    /// kind, by the namespace written in, not yet known to be in its store.
    owners: std::sync::Mutex<HashMap<String, BTreeMap<Where, u64>>>,
    /// The number of owners past which the next write sweeps them: twice as many as a sweep
    /// left, at least [`OWNERS_SWEPT_AT`], so that sweeps cost a constant per write on average.
    sweep_at: std::sync::atomic::AtomicUsize,
}

/// A kind and the namespace of a write.
type Where = (&'static str, Box<str>);

impl Written {
    pub(crate) fn new(kinds: BTreeMap<&'static str, Arc<Progress>>) -> Self {
        Self {
            kinds,
            owners: std::sync::Mutex::default(),
            sweep_at: std::sync::atomic::AtomicUsize::new(OWNERS_SWEPT_AT),
        }
    }

    /// The progress of `kind`, if it is cached.
    pub fn of(&self, kind: &str) -> Option<Arc<Progress>> {
        self.kinds.get(kind).cloned()
    }

    /// The writes for `owner` whose stores have not taken them in yet, as (kind, version).
    pub(crate) fn pending(&self, owner: &str) -> Vec<(&'static str, u64)> {
        let owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
        owners
            .get(owner)
            .into_iter()
            .flatten()
            .filter(|(at, v)| self.unstored(at, **v))
            .map(|((kind, _), v)| (*kind, *v))
            .collect()
    }

    /// Whether the write of `version` at `at` is not yet known to be in its kind's store.
    fn unstored(&self, (kind, namespace): &Where, version: u64) -> bool {
        self.kinds
            .get(kind)
            .is_some_and(|p| !p.has(namespace, version))
    }

    /// Forgets what `owner`'s passes wrote: the stores hold it, or a wait for it ran out (later
    /// passes do not wait for the same write again).
    fn forget(&self, owner: &str) {
        self.owners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(owner);
    }

    /// Notes an object the operator wrote, if its kind's store watches it.
    pub(crate) fn note(&self, kind: &str, meta: &ObjectMeta) {
        let watched = meta.labels.as_ref().is_some_and(|l| {
            l.get(labels::MANAGED_BY).map(String::as_str) == Some(labels::MANAGER)
                && (kind != "ConfigMap"
                    || matches!(
                        Component::of(l),
                        Some(Component::RankTable | Component::PeerEndpoints)
                    ))
        });
        let (Some((kind, _)), Some(v)) = (self.kinds.get_key_value(kind), version(meta)) else {
            return;
        };
        if !watched {
            return;
        }
        let owner = meta
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true))
            .map_or_else(String::new, |o| o.uid.clone());
        let mut owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
        let at = (*kind, meta.namespace.as_deref().unwrap_or_default().into());
        let newest = owners.entry(owner).or_default().entry(at).or_insert(0);
        *newest = (*newest).max(v);
        // The writes of a deployment whose passes stopped (it was deleted) stay until the stores
        // hold them; then they go with the next sweep, so the map stays as large as the
        // deployments with writes in flight.
        if owners.len() > self.sweep_at.load(Ordering::Relaxed) {
            owners.retain(|_, writes| writes.iter().any(|(at, v)| self.unstored(at, *v)));
            self.sweep_at
                .store((owners.len() * 2).max(OWNERS_SWEPT_AT), Ordering::Relaxed);
        }
    }

    /// The number of owners past which the next write sweeps them.
    #[cfg(test)]
    pub(crate) fn sweep_at(&self) -> usize {
        self.sweep_at.load(Ordering::Relaxed)
    }

    /// The owners with writes noted.
    #[cfg(test)]
    pub(crate) fn owners_noted(&self) -> usize {
        self.owners.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Waits, at most `limit`, until the stores hold every write the passes of `owner` (a
    /// deployment's UID) made: a pass never decides on a view older than its own deployment's
    /// earlier passes, and never waits for another deployment's writes.
    pub(crate) async fn caught_up(&self, owner: &str, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            // Listening before looking: a store's event between the two still wakes the wait.
            let news = stored_news().notified();
            tokio::pin!(news);
            news.as_mut().enable();
            let pending = self.pending(owner);
            if pending.is_empty() {
                return self.forget(owner);
            }
            if tokio::time::Instant::now() >= deadline {
                for (kind, version) in pending {
                    tracing::warn!(kind, version, "the cache has not caught up with the operator's own write; reading it as it is");
                }
                return self.forget(owner);
            }
            tokio::select! {
                () = &mut news => {}
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
    }
}

tokio::task_local! {
    /// Where the writes of the running pass are noted.
    static PASS_WRITES: Arc<Written>;
}

/// Runs one pass with its writes noted in `written` (see [`note_written`]).
pub async fn noting_writes<F: std::future::Future>(written: Arc<Written>, pass: F) -> F::Output {
    PASS_WRITES.scope(written, pass).await
}

/// Notes an object the running pass wrote, as the API server returned it, so that later passes
/// wait until its store has it; outside a pass (or for a kind not cached) nothing happens.
pub fn note_written<K: Resource + k8s_openapi::Resource>(obj: &K) {
    let _ = PASS_WRITES.try_with(|w| w.note(<K as k8s_openapi::Resource>::KIND, obj.meta()));
}
