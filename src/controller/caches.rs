//! The operator's caches of the objects it owns: one watch per kind over the operator's objects
//! (label `app.kubernetes.io/managed-by=deepinfer-operator`), decoded into the slimmer shapes of
//! [`crate::controller::cached`] and stored once each in a [`Cache`] that finds them by name and
//! by owner. The pods of a finished Job whose verdict is in status are left out of the pod cache
//! ([`DoneJobs`]).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::resource::v1::ResourceClaimTemplate;
use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use kube::runtime::watcher;

use crate::api::{labels, Component, DeepInferRole};
use crate::controller::cached::{
    Cached, CachedClaim, CachedJob, CachedMeta, CachedPod, CachedPodGroup, CachedRevision,
    CachedRole, Incoming, KeptLabel,
};
use crate::controller::written::Written;

/// The stores of the owned kinds a pass reads, each fed by one watch of the controller, and
/// whether all of them hold their first full list.
pub struct Caches {
    pub(crate) pods: Cache<CachedPod>,
    pub(crate) jobs: Cache<CachedJob>,
    pub(crate) services: Cache<CachedMeta<Service>>,
    pub(crate) budgets: Cache<CachedMeta<PodDisruptionBudget>>,
    pub(crate) revisions: Cache<CachedRevision>,
    pub(crate) pod_groups: Cache<CachedPodGroup>,
    pub(crate) claim_templates: Cache<CachedMeta<ResourceClaimTemplate>>,
    /// Rank-table and peer-endpoints ConfigMaps only.
    pub(crate) config_maps: Cache<CachedMeta<ConfigMap>>,
    /// Every PersistentVolumeClaim in scope, metadata and phase only.
    pub(crate) claims: Cache<CachedClaim>,
    /// DeepInferRoles (fed only where the API server serves them).
    pub(crate) scaled_roles: Cache<CachedRole>,
    /// The Jobs whose pods the pod cache leaves out.
    pub(crate) done_jobs: Arc<DoneJobs>,
    pub(crate) ready: tokio::sync::watch::Sender<bool>,
    /// How far each store has caught up with the operator's writes.
    pub written: Arc<Written>,
}

/// The writing ends of [`Caches`], taken by the controller loop that feeds them.
pub struct CacheWriters {
    /// Pods (worker and Job pods).
    pub pods: CacheWriter<CachedPod>,
    /// Jobs.
    pub jobs: CacheWriter<CachedJob>,
    /// Services.
    pub services: CacheWriter<CachedMeta<Service>>,
    /// PodDisruptionBudgets.
    pub budgets: CacheWriter<CachedMeta<PodDisruptionBudget>>,
    /// ControllerRevisions.
    pub revisions: CacheWriter<CachedRevision>,
    /// PodGroups (fed only where groups are PodGroups).
    pub pod_groups: CacheWriter<CachedPodGroup>,
    /// ResourceClaimTemplates (fed only where the API server serves them).
    pub claim_templates: CacheWriter<CachedMeta<ResourceClaimTemplate>>,
    /// Rank-table and peer-endpoints ConfigMaps.
    pub config_maps: CacheWriter<CachedMeta<ConfigMap>>,
    /// PersistentVolumeClaims.
    pub claims: CacheWriter<CachedClaim>,
    /// DeepInferRoles (fed only where the API server serves them).
    pub scaled_roles: CacheWriter<CachedRole>,
}

impl Caches {
    /// Empty stores, not ready, and their writers.
    pub fn new() -> (Self, CacheWriters) {
        let (pods, pods_writer) = CacheWriter::new();
        let (jobs, jobs_writer) = CacheWriter::new();
        let (services, services_writer) = CacheWriter::new();
        let (budgets, budgets_writer) = CacheWriter::new();
        let (revisions, revisions_writer) = CacheWriter::new();
        let (pod_groups, pod_groups_writer) = CacheWriter::new();
        let (claim_templates, claim_templates_writer) = CacheWriter::new();
        let (config_maps, config_maps_writer) = CacheWriter::new();
        let (claims, claims_writer) = CacheWriter::new();
        let (scaled_roles, scaled_roles_writer) = CacheWriter::new();
        let done_jobs = Arc::new(DoneJobs::default());
        let writers = CacheWriters {
            pods: pods_writer.leaving_out(Uncached::PodsOf(done_jobs.clone())),
            jobs: jobs_writer.leaving_out(Uncached::Jobs(done_jobs.clone())),
            services: services_writer,
            budgets: budgets_writer,
            revisions: revisions_writer,
            pod_groups: pod_groups_writer,
            claim_templates: claim_templates_writer,
            config_maps: config_maps_writer,
            claims: claims_writer,
            scaled_roles: scaled_roles_writer,
        };
        let caches = Self {
            pods,
            jobs,
            services,
            budgets,
            revisions,
            pod_groups,
            claim_templates,
            config_maps,
            claims,
            scaled_roles,
            done_jobs,
            ready: tokio::sync::watch::Sender::new(false),
            written: Arc::new(Written::new(
                [
                    <Pod as k8s_openapi::Resource>::KIND,
                    <Job as k8s_openapi::Resource>::KIND,
                    <Service as k8s_openapi::Resource>::KIND,
                    <PodDisruptionBudget as k8s_openapi::Resource>::KIND,
                    <ControllerRevision as k8s_openapi::Resource>::KIND,
                    <PodGroup as k8s_openapi::Resource>::KIND,
                    <ResourceClaimTemplate as k8s_openapi::Resource>::KIND,
                    <ConfigMap as k8s_openapi::Resource>::KIND,
                    <DeepInferRole as k8s_openapi::Resource>::KIND,
                ]
                .into_iter()
                .map(|kind| (kind, Arc::default()))
                .collect(),
            )),
        };
        (caches, writers)
    }

    /// Leaves the pods of the Jobs `done` (uids) out of the pod cache from now on, and caches the
    /// pods of the Jobs `read` again as their events come (see [`DoneJobs`]).
    pub fn uncache_job_pods(&self, done: &[String], read: &[String]) {
        let mut uids = self.done_jobs.write();
        for uid in read {
            uids.remove(uid.as_str());
        }
        for uid in done {
            if uids.insert(uid.as_str().into()) {
                self.pods.write().remove_owned_by(uid);
            }
        }
    }

    /// The acceptance runs under way in the operator's scope (see
    /// [`crate::controller::fleet::run_key`]; every Job of a run carries its key in the
    /// `deepinfer.io/judges` annotation): runs with an acceptance Job that has not finished.
    ///
    /// Counted from the cached form (the labels and annotations it keeps, its conditions' type
    /// and status) as Jobs come and go, without rebuilding any Job.
    #[cfg(test)]
    pub(crate) fn acceptance_runs(&self) -> crate::controller::fleet::Runs {
        let jobs = self.jobs.read();
        let mut runs = crate::controller::fleet::Runs::default();
        for (key, (_, running)) in &jobs.runs.by_run {
            if *running > 0 {
                runs.under_way.insert(key.to_string());
            }
            runs.seen.insert(key.to_string());
        }
        runs
    }

    /// `ask` given the acceptance runs as the Job cache counts them as Jobs come and go: no
    /// cached Job is read (the fleet limit asks this on every admission).
    pub fn with_acceptance_runs<R>(
        &self,
        ask: impl FnOnce(&dyn crate::controller::fleet::RunsSeen) -> R,
    ) -> R {
        ask(&self.jobs.read().runs)
    }

    /// How many objects each store holds, by kind, read when called (for
    /// `deepinfer_cached_objects`).
    pub fn sizes(&self) -> crate::metrics::CacheSizes {
        let pods = self.pods.clone();
        let jobs = self.jobs.clone();
        let services = self.services.clone();
        let budgets = self.budgets.clone();
        let revisions = self.revisions.clone();
        let pod_groups = self.pod_groups.clone();
        let claim_templates = self.claim_templates.clone();
        let config_maps = self.config_maps.clone();
        let claims = self.claims.clone();
        let scaled_roles = self.scaled_roles.clone();
        Box::new(move || {
            vec![
                (<Pod as k8s_openapi::Resource>::KIND, pods.len()),
                (<Job as k8s_openapi::Resource>::KIND, jobs.len()),
                (<Service as k8s_openapi::Resource>::KIND, services.len()),
                (
                    <PodDisruptionBudget as k8s_openapi::Resource>::KIND,
                    budgets.len(),
                ),
                (
                    <ControllerRevision as k8s_openapi::Resource>::KIND,
                    revisions.len(),
                ),
                (<PodGroup as k8s_openapi::Resource>::KIND, pod_groups.len()),
                (
                    <ResourceClaimTemplate as k8s_openapi::Resource>::KIND,
                    claim_templates.len(),
                ),
                (
                    <ConfigMap as k8s_openapi::Resource>::KIND,
                    config_maps.len(),
                ),
                (
                    <PersistentVolumeClaim as k8s_openapi::Resource>::KIND,
                    claims.len(),
                ),
                (
                    <DeepInferRole as k8s_openapi::Resource>::KIND,
                    scaled_roles.len(),
                ),
            ]
        })
    }

    /// Waits until every fed store holds its first full list (PodGroups, ResourceClaimTemplates
    /// and DeepInferRoles only when fed), then lets passes read them.
    pub async fn fill(&self, pod_groups: bool, claim_templates: bool, scaled_roles: bool) {
        self.pods.filled().await;
        self.jobs.filled().await;
        self.services.filled().await;
        self.budgets.filled().await;
        self.revisions.filled().await;
        self.config_maps.filled().await;
        self.claims.filled().await;
        if pod_groups {
            self.pod_groups.filled().await;
        }
        if claim_templates {
            self.claim_templates.filled().await;
        }
        if scaled_roles {
            self.scaled_roles.filled().await;
        }
        self.ready.send_replace(true);
    }

    /// Waits until [`Caches::fill`] has seen every store filled.
    pub(crate) async fn ready(&self) {
        // The sender lives as long as `self`: `wait_for` cannot fail.
        let _ = self.ready.subscribe().wait_for(|ready| *ready).await;
    }
}

/// The label selector of the owned kinds' watches: objects the operator manages.
pub fn owned_selector() -> String {
    format!("{}={}", labels::MANAGED_BY, labels::MANAGER)
}

/// The label selector of the ConfigMap watch: the operator's rank tables and peer endpoints.
pub fn config_map_selector() -> String {
    format!(
        "{},{} in ({},{})",
        owned_selector(),
        labels::COMPONENT,
        Component::RankTable.as_str(),
        Component::PeerEndpoints.as_str()
    )
}

/// A cache holding `objects` as a watch's first list leaves it, as the controller's watches
/// store them. The benchmark measures with it what the operator's caches hold.
pub fn filled<K: Cached>(objects: Vec<Incoming<K>>) -> Cache<K> {
    let (cache, mut w) = CacheWriter::new();
    let events = std::iter::once(watcher::Event::Init)
        .chain(objects.into_iter().map(watcher::Event::InitApply))
        .chain(std::iter::once(watcher::Event::InitDone));
    for event in events {
        w.take(&event);
    }
    cache
}

/// One kind's cached objects, as a watch leaves them: each object once, found by
/// `namespace/name` and by the uid of each of its owners, so that a pass reads only what its
/// resource owns. Objects are kept as [`Cached::kept`] makes them, with no `ObjectMeta`.
pub struct Cache<K> {
    objects: Arc<std::sync::RwLock<Objects<K>>>,
    pub(crate) ready: Arc<tokio::sync::watch::Sender<bool>>,
}

impl<K> Clone for Cache<K> {
    fn clone(&self) -> Self {
        Self {
            objects: self.objects.clone(),
            ready: self.ready.clone(),
        }
    }
}

/// The writing end of a [`Cache`], fed with one watch's events: of every namespace, or of one
/// namespace beside the writers of the other watched namespaces (see
/// [`CacheWriter::per_namespace`]).
pub struct CacheWriter<K> {
    cache: Cache<K>,
    /// The namespace this writer's watch lists (`None`: every namespace); a relist replaces the
    /// cached objects of that namespace only.
    namespace: Option<Box<str>>,
    /// The objects of a relist under way; they replace the cache's objects of the namespace
    /// once the list is in.
    listing: Option<Vec<K>>,
    /// Whether this writer's first list is in.
    filled: bool,
    /// The writers of the cache whose first list is not in yet: the cache is filled at none.
    unfilled: Arc<std::sync::atomic::AtomicUsize>,
    /// What the writer leaves out of its cache, or keeps current of [`DoneJobs`].
    uncached: Uncached,
}

/// The Jobs (by uid) whose pods the pod cache leaves out: finished, their verdict in status,
/// and given a time to live, so that no pass reads their pods again and the TTL controller
/// removes them (see [`crate::controller::gates::housekeeping::uncache`]). A Job leaves the set when a
/// pass reads it again, when it is deleted, or when a relist of Jobs no longer has it.
#[derive(Debug, Default)]
pub struct DoneJobs(std::sync::RwLock<HashSet<Box<str>>>);

impl DoneJobs {
    pub(crate) fn read(&self) -> std::sync::RwLockReadGuard<'_, HashSet<Box<str>>> {
        self.0.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashSet<Box<str>>> {
        self.0.write().unwrap_or_else(|e| e.into_inner())
    }
}

/// How a [`CacheWriter`] takes part in leaving pods of done Jobs out.
#[derive(Clone, Debug)]
enum Uncached {
    /// It keeps every object.
    Nothing,
    /// The pod writer: a pod owned by one of these Jobs is left out.
    PodsOf(Arc<DoneJobs>),
    /// The Job writer: a Job deleted, or missing from a relist, leaves the set.
    Jobs(Arc<DoneJobs>),
}

/// The objects of a [`Cache`].
pub(crate) struct Objects<K> {
    by_key: std::collections::HashSet<Entry<K>>,
    pub(crate) by_owner: HashMap<Box<str>, Vec<Arc<K>>>,
    /// The fleet's acceptance runs the objects count for ([`Cached::fleet_run`]), kept as
    /// objects come and go.
    pub(crate) runs: RunCounts,
}

/// Per acceptance run: its Jobs, and those of them not finished; and how many runs have one.
#[derive(Debug, Default)]
pub(crate) struct RunCounts {
    by_run: HashMap<Box<str>, (u32, u32)>,
    under_way: usize,
}

impl RunCounts {
    fn add(&mut self, key: &str, unfinished: bool) {
        let (jobs, running) = self.by_run.entry(key.into()).or_default();
        *jobs += 1;
        if unfinished {
            *running += 1;
            if *running == 1 {
                self.under_way += 1;
            }
        }
    }

    fn remove(&mut self, key: &str, unfinished: bool) {
        let Some((jobs, running)) = self.by_run.get_mut(key) else {
            return;
        };
        *jobs = jobs.saturating_sub(1);
        if unfinished && *running > 0 {
            *running -= 1;
            if *running == 0 {
                self.under_way = self.under_way.saturating_sub(1);
            }
        }
        if *jobs == 0 {
            self.by_run.remove(key);
        }
    }
}

impl crate::controller::fleet::RunsSeen for RunCounts {
    fn under_way(&self, key: &str) -> bool {
        self.by_run
            .get(key)
            .is_some_and(|(_, running)| *running > 0)
    }

    fn seen(&self, key: &str) -> bool {
        self.by_run.contains_key(key)
    }

    fn under_way_count(&self) -> usize {
        self.under_way
    }
}

impl<K> Default for Objects<K> {
    fn default() -> Self {
        Self {
            by_key: Default::default(),
            by_owner: HashMap::new(),
            runs: RunCounts::default(),
        }
    }
}

/// A cached object in the set of a [`Cache`], hashed and compared by its `namespace/name`, so
/// the set needs no key of its own.
struct Entry<K>(Arc<K>);

impl<K: Cached> std::borrow::Borrow<str> for Entry<K> {
    fn borrow(&self) -> &str {
        self.0.slim().key()
    }
}

impl<K: Cached> std::hash::Hash for Entry<K> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.slim().key().hash(state);
    }
}

impl<K: Cached> PartialEq for Entry<K> {
    fn eq(&self, other: &Self) -> bool {
        self.0.slim().key() == other.0.slim().key()
    }
}

impl<K: Cached> Eq for Entry<K> {}

impl<K: Cached> Objects<K> {
    /// Replaces the objects of `namespace` (`None`: every object) with `list`.
    fn replace(&mut self, namespace: Option<&str>, list: Vec<K>) {
        match namespace {
            None => *self = Self::default(),
            Some(ns) => {
                let gone: Vec<Arc<K>> = self
                    .by_key
                    .iter()
                    .filter(|e| e.0.slim().namespace() == Some(ns))
                    .map(|e| e.0.clone())
                    .collect();
                for o in gone {
                    self.remove(o.slim().key());
                }
            }
        }
        for o in list {
            self.put(o);
        }
    }

    /// Stores `o`, its owner references shared with a cached object of its first owner's that
    /// names the same owners.
    fn put(&mut self, mut o: K) {
        let same = (o.slim().owner_uids().next())
            .and_then(|uid| self.by_owner.get(uid))
            .and_then(|owned| owned.first())
            .cloned();
        if let Some(same) = same {
            o.slim_mut().share_owners(same.slim());
        }
        let o = Arc::new(o);
        if let Some(old) = self.by_key.replace(Entry(o.clone())) {
            self.unindex(&old.0);
        }
        if let Some((run, unfinished)) = o.fleet_run() {
            self.runs.add(&run, unfinished);
        }
        for owner in o.slim().owner_uids() {
            self.by_owner
                .entry(owner.into())
                .or_default()
                .push(o.clone());
        }
    }

    fn remove(&mut self, key: &str) {
        if let Some(old) = self.by_key.take(key) {
            self.unindex(&old.0);
        }
    }

    /// Removes every object naming `uid` among its owners.
    fn remove_owned_by(&mut self, uid: &str) {
        let owned = self.by_owner.get(uid).cloned().unwrap_or_default();
        for o in owned {
            self.remove(o.slim().key());
        }
    }

    fn unindex(&mut self, old: &Arc<K>) {
        if let Some((run, unfinished)) = old.fleet_run() {
            self.runs.remove(&run, unfinished);
        }
        for owner in old.slim().owner_uids() {
            if let Some(owned) = self.by_owner.get_mut(owner) {
                owned.retain(|o| !Arc::ptr_eq(o, old));
                if owned.is_empty() {
                    self.by_owner.remove(owner);
                }
            }
        }
    }
}

impl<K: Cached> CacheWriter<K> {
    pub(crate) fn new() -> (Cache<K>, Self) {
        let cache = Cache {
            objects: Arc::default(),
            ready: Arc::new(tokio::sync::watch::Sender::new(false)),
        };
        let writer = Self {
            cache: cache.clone(),
            namespace: None,
            listing: None,
            filled: false,
            unfilled: Arc::new(1.into()),
            uncached: Uncached::Nothing,
        };
        (cache, writer)
    }

    fn leaving_out(self, uncached: Uncached) -> Self {
        Self { uncached, ..self }
    }

    /// One writer per namespace in place of this one, each for the watch of its namespace: a
    /// relist of one namespace leaves the others' objects as they are, and the cache is filled
    /// once every namespace's first list is in. `None` for a watch of every namespace: this
    /// writer alone.
    pub fn per_namespace(self, namespaces: &[Option<&str>]) -> Vec<Self> {
        if let [None] = namespaces {
            return vec![self];
        }
        let unfilled = Arc::new(std::sync::atomic::AtomicUsize::new(namespaces.len()));
        namespaces
            .iter()
            .map(|ns| Self {
                cache: self.cache.clone(),
                namespace: ns.map(Into::into),
                listing: None,
                filled: false,
                unfilled: unfilled.clone(),
                uncached: self.uncached.clone(),
            })
            .collect()
    }

    /// Takes in one watch event: an object applied or deleted at once; a relist replaces the
    /// objects of this writer's namespace (of every namespace for a writer of all) once its list
    /// is in (until then readers see the old view), and marks the cache filled once every
    /// writer's first list is in.
    pub fn take(&mut self, event: &watcher::Event<Incoming<K>>) {
        match event {
            watcher::Event::Apply(o) => {
                let o = o.shape();
                match &self.uncached {
                    // Under the set's lock, so that a Job found done meanwhile loses this pod too.
                    Uncached::PodsOf(done) => {
                        let done = done.read();
                        let mut objects = self.cache.write();
                        if o.slim().owner_uids().any(|uid| done.contains(uid)) {
                            objects.remove(o.slim().key());
                        } else {
                            objects.put(o.clone());
                        }
                    }
                    _ => self.cache.write().put(o.clone()),
                }
            }
            watcher::Event::Delete(o) => {
                self.cache.write().remove(o.shape().slim().key());
                if let Uncached::Jobs(done) = &self.uncached {
                    done.write().remove(o.shape().slim().uid());
                }
            }
            watcher::Event::Init => self.listing = Some(Vec::new()),
            watcher::Event::InitApply(o) => {
                if let Some(listing) = self.listing.as_mut() {
                    listing.push(o.shape().clone());
                }
            }
            watcher::Event::InitDone => {
                if let Some(mut listed) = self.listing.take() {
                    match &self.uncached {
                        Uncached::PodsOf(done) => {
                            let done = done.read();
                            listed.retain(|o| !o.slim().owner_uids().any(|uid| done.contains(uid)));
                            self.cache
                                .write()
                                .replace(self.namespace.as_deref(), listed);
                        }
                        Uncached::Jobs(done) => {
                            let mut objects = self.cache.write();
                            objects.replace(self.namespace.as_deref(), listed);
                            let uids: HashSet<&str> =
                                objects.by_key.iter().map(|e| e.0.slim().uid()).collect();
                            done.write().retain(|uid| uids.contains(&**uid));
                        }
                        Uncached::Nothing => self
                            .cache
                            .write()
                            .replace(self.namespace.as_deref(), listed),
                    }
                }
                if !std::mem::replace(&mut self.filled, true)
                    && self.unfilled.fetch_sub(1, Ordering::SeqCst) == 1
                {
                    self.cache.ready.send_replace(true);
                }
            }
        }
    }
}

impl<K: Cached> Cache<K> {
    pub(crate) fn read(&self) -> std::sync::RwLockReadGuard<'_, Objects<K>> {
        self.objects.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Objects<K>> {
        self.objects.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The object `namespace/name`, if cached.
    pub(crate) fn get(&self, ns: &str, name: &str) -> Option<Kept<K>> {
        self.read()
            .by_key
            .get(format!("{ns}/{name}").as_str())
            .map(|e| Kept(e.0.clone()))
    }

    /// The objects naming `uid` among their owners.
    fn owned_by(&self, uid: &str) -> Vec<Kept<K>> {
        self.read()
            .by_owner
            .get(uid)
            .map(|owned| owned.iter().cloned().map(Kept).collect())
            .unwrap_or_default()
    }

    /// How many objects the cache holds.
    pub(crate) fn len(&self) -> usize {
        self.read().by_key.len()
    }

    /// Waits until the cache holds its first full list (at once if it does).
    async fn filled(&self) {
        // The sender lives as long as `self`: `wait_for` cannot fail.
        let _ = self.ready.subscribe().wait_for(|ready| *ready).await;
    }
}

/// An object as a [`Cache`] holds it, read through its cut-down metadata or as the API type: a
/// stored object has no `ObjectMeta` (see [`Cached::kept`]), so it is not read as a
/// `kube::Resource`.
pub(crate) struct Kept<K>(Arc<K>);

impl<K: Cached> Kept<K> {
    pub(crate) fn slim(&self) -> &crate::controller::cached::Slim {
        self.0.slim()
    }

    fn label(&self, key: KeptLabel) -> Option<&str> {
        self.0.label(key)
    }

    pub(crate) fn to_api(&self) -> K::Api {
        self.0.to_api()
    }
}

impl Kept<CachedClaim> {
    pub(crate) fn phase(&self) -> Option<&str> {
        self.0.phase()
    }
}

/// The cached objects of `namespace` owned by `uid` and labelled with `deployment` (and
/// `component`, if given), by name.
pub(crate) fn owned<K: Cached>(
    cache: &Cache<K>,
    ns: &str,
    deployment: &str,
    uid: &str,
    component: Option<Component>,
) -> Vec<Kept<K>> {
    let mut owned: Vec<Kept<K>> = cache
        .owned_by(uid)
        .into_iter()
        .filter(|o| o.slim().namespace() == Some(ns))
        .filter(|o| o.label(KeptLabel::Deployment) == Some(deployment))
        .filter(|o| component.is_none_or(|c| o.label(KeptLabel::Component) == Some(c.as_str())))
        .collect();
    owned.sort_by(|a, b| a.slim().name().cmp(b.slim().name()));
    owned
}

/// [`owned`], as the API type.
pub(crate) fn owned_in<K: Cached>(
    cache: &Cache<K>,
    ns: &str,
    deployment: &str,
    uid: &str,
    component: Option<Component>,
) -> Vec<K::Api> {
    owned(cache, ns, deployment, uid, component)
        .iter()
        .map(|o| o.to_api())
        .collect()
}

/// Whether a Job has finished (a Complete or Failed condition).
pub fn finished(job: &Job) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    /// The acceptance runs read from the cached Jobs are the runs the Jobs themselves name: an
    /// unfinished acceptance Job's run is under way, a finished one's only seen, and Jobs of
    /// other components or without a run key count for nothing.
    #[test]
    fn acceptance_runs_are_read_from_the_cached_jobs_as_from_the_jobs() {
        let job = |name: &str, component: &str, judges: Option<&str>, condition: Option<&str>| {
            let mut annotations = serde_json::Map::new();
            if let Some(judges) = judges {
                annotations.insert(
                    crate::controller::build::JUDGES_ANNOTATION.into(),
                    json!(judges),
                );
            }
            json!({
                "metadata": {
                    "name": name, "namespace": "team", "uid": format!("uid-{name}"),
                    "labels": {labels::DEPLOYMENT: "flash", labels::COMPONENT: component},
                    "annotations": annotations,
                },
                "status": {"conditions": condition.map_or_else(Vec::new, |c| vec![
                    json!({"type": c, "status": "True"})
                ])},
            })
        };
        let jobs: Vec<Value> = vec![
            job("run-a-0", "acceptance", Some("a"), None),
            job("run-a-1", "acceptance", Some("a"), Some("Complete")),
            job("run-b-0", "acceptance", Some("b"), Some("Failed")),
            job("run-c-0", "acceptance", Some("c"), Some("Suspended")),
            job("no-key", "acceptance", None, None),
            job("fetch", "fetch", Some("d"), None),
        ];
        let (caches, mut writers) = Caches::new();
        writers.jobs.take(&watcher::Event::Init);
        for j in &jobs {
            let incoming: Incoming<CachedJob> =
                serde_json::from_value(j.clone()).expect("a cached Job");
            writers.jobs.take(&watcher::Event::InitApply(incoming));
        }
        writers.jobs.take(&watcher::Event::InitDone);
        let runs = caches.acceptance_runs();
        // The same reading over the Jobs as the API server serves them.
        let mut expected = crate::controller::fleet::Runs::default();
        for j in &jobs {
            let j: Job = serde_json::from_value(j.clone()).expect("a Job");
            let labels = j.metadata.labels.clone().unwrap_or_default();
            let judges = j
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(crate::controller::build::JUDGES_ANNOTATION).cloned());
            if Component::of(&labels) != Some(Component::Acceptance) {
                continue;
            }
            let Some(judges) = judges else { continue };
            let key = crate::controller::fleet::run_key("team", "flash", &judges);
            if !finished(&j) {
                expected.under_way.insert(key.clone());
            }
            expected.seen.insert(key);
        }
        assert_eq!(runs.under_way, expected.under_way);
        assert_eq!(runs.seen, expected.seen);
        assert_eq!(runs.under_way.len(), 2, "a (one Job still running) and c");
        assert_eq!(runs.seen.len(), 3);

        // As Jobs come and go the counts follow, and the queue reads them without a Job read.
        use crate::controller::fleet::RunsSeen;
        let apply = |writers: &mut CacheWriters, j: Value| {
            let incoming: Incoming<CachedJob> = serde_json::from_value(j).expect("a cached Job");
            writers.jobs.take(&watcher::Event::Apply(incoming));
        };
        let key = |judges: &str| crate::controller::fleet::run_key("team", "flash", judges);
        apply(
            &mut writers,
            job("run-a-0", "acceptance", Some("a"), Some("Complete")),
        );
        let counted = |f: &dyn Fn(&dyn RunsSeen) -> (bool, bool, usize)| {
            caches.with_acceptance_runs(|r| f(r))
        };
        assert_eq!(
            counted(&|r| (
                r.under_way(&key("a")),
                r.seen(&key("a")),
                r.under_way_count()
            )),
            (false, true, 1),
            "a finished; c is under way"
        );
        apply(&mut writers, job("run-e-0", "acceptance", Some("e"), None));
        let gone: Incoming<CachedJob> =
            serde_json::from_value(job("run-c-0", "acceptance", Some("c"), Some("Suspended")))
                .expect("a cached Job");
        writers.jobs.take(&watcher::Event::Delete(gone));
        assert_eq!(
            counted(&|r| (
                r.under_way(&key("e")),
                r.seen(&key("c")),
                r.under_way_count()
            )),
            (true, false, 1),
            "e started, c is gone"
        );
        assert_eq!(caches.acceptance_runs().seen.len(), 3, "a, b and e");
    }
}
