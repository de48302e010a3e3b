//! The watches that feed the caches and start passes, and the controller loop over them.

use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::core::{ApiResource, PartialObjectMeta};
use kube::runtime::controller::Controller;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, Resource, ResourceExt};
use tracing::{info, warn};

use crate::api::api_resource;
use crate::api::labels;
use crate::controller::cached::{self, Cached, CachedDeployment, Incoming};
use crate::controller::context::{Context, Namespaces};
use crate::controller::error::Error;
use crate::controller::merged::Merged;
use crate::controller::reconcile::{error_policy, reconcile};
use crate::controller::referrers::{Referred, Referrers};
use crate::controller::text::phase_key;
use crate::controller::{build, gang, gates};

/// What every watch of one controller loop shares, resolved once before any watch starts.
struct Scope {
    client: Client,
    /// The namespaces watched: each kind has one watch per listed namespace, or one of every
    /// namespace.
    namespaces: Namespaces,
    ar: ApiResource,
    /// How every watch reads its initial state.
    lists: InitialLists,
    /// Whether groups are PodGroups here.
    pod_groups: bool,
    /// Whether the API server serves ResourceClaimTemplates.
    claim_templates: bool,
    /// Whether the API server serves DeepInferRoles.
    scaled_roles: bool,
}

impl Scope {
    async fn resolve(ctx: &Context, namespaces: Namespaces) -> Self {
        let client = ctx.client.clone();
        let ns = namespaces.watches().first().copied().flatten();
        let lists = InitialLists::of(
            resolved("streaming lists", || InitialLists::probe(&client, ns)).await,
        );
        let pod_groups = resolved("gang scheduling", || ctx.pod_groups()).await;
        let claim_templates = resolved("ResourceClaimTemplates served", || async {
            gang::served(&client, "resource.k8s.io/v1", "resourceclaimtemplates")
                .await
                .map_err(Error::Kube)
        })
        .await;
        let scaled_roles = resolved("DeepInferRoles served", || ctx.scaled_roles()).await;
        Self {
            client,
            namespaces,
            ar: api_resource(),
            lists,
            pod_groups,
            claim_templates,
            scaled_roles,
        }
    }

    /// A watch of the objects the operator owns.
    fn owned(&self) -> watcher::Config {
        self.lists
            .config()
            .labels(&crate::controller::caches::owned_selector())
    }

    /// The namespace of each watch of a kind (`None`: the watch of every namespace).
    fn watches(&self) -> Vec<Option<&str>> {
        self.namespaces.watches()
    }

    /// Keeps the store `cache` of one kind, one watch per namespace watched, each on its own
    /// backoff; returns their events merged.
    fn watched<K>(
        &self,
        kind: &'static str,
        cache: crate::controller::caches::CacheWriter<K>,
        config: &watcher::Config,
        written: &crate::controller::written::Written,
    ) -> impl futures::Stream<Item = Result<watcher::Event<Incoming<K>>, watcher::Error>> + Send + 'static
    where
        K: Cached + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync,
        K::Api: k8s_openapi::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    {
        let namespaces = self.watches();
        let watches = cache
            .per_namespace(&namespaces)
            .into_iter()
            .zip(&namespaces);
        futures::stream::select_all(watches.map(|(cache, ns)| {
            let api = scoped(&self.client, *ns);
            on_own_backoff(kind, cached(cache, api, *ns, config.clone(), written)).boxed()
        }))
    }
}

/// Runs the controller loop with a prepared context (tests read its counters).
pub async fn run_with_context(
    ctx: Arc<Context>,
    namespaces: Namespaces,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let Some(writers) = ctx
        .cache_writers
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
    else {
        warn!("this context's controller loop already ran; not starting another");
        return;
    };
    let scope = Scope::resolve(&ctx, namespaces).await;
    let (mut feeders, triggers) = read_only_feeds(&ctx, &scope, writers);
    let filled = {
        let (ctx, pod_groups, claim_templates, scaled_roles) = (
            ctx.clone(),
            scope.pod_groups,
            scope.claim_templates,
            scope.scaled_roles,
        );
        tokio::spawn(async move {
            ctx.caches
                .fill(pod_groups, claim_templates, scaled_roles)
                .await
        })
    };
    let referrers = Referrers::default();
    let controller = triggered(
        deployments(&ctx, &scope, referrers.clone()),
        &ctx,
        &scope,
        triggers,
        &mut feeders,
        referrers,
    )
    .graceful_shutdown_on(shutdown);
    let due = ctx
        .awaiting_api_due
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    let controller = match due {
        Some(due) => controller.reconcile_on(due),
        None => controller,
    };
    let api_returns = {
        let ctx = ctx.clone();
        tokio::spawn(async move { ctx.awaiting_api.run(ctx.client.clone()).await })
    };
    // Deletions are not reconciled; drop deleted objects from the phase gauge once the cache has.
    let forget_deleted = tokio::spawn(forget_deleted(controller.store(), ctx.metrics.clone()));
    controller
        .run(reconcile, error_policy, ctx)
        .for_each(|res| async move {
            if let Err(e) = res {
                warn!("reconcile: {e}");
            }
        })
        .await;
    forget_deleted.abort();
    api_returns.abort();
    filled.abort();
    for feeder in feeders {
        feeder.abort();
    }
}

/// The stores whose watches also start passes.
struct Triggers {
    pods: crate::controller::caches::CacheWriter<cached::CachedPod>,
    jobs: crate::controller::caches::CacheWriter<cached::CachedJob>,
    services: crate::controller::caches::CacheWriter<
        cached::CachedMeta<k8s_openapi::api::core::v1::Service>,
    >,
    claims: crate::controller::caches::CacheWriter<cached::CachedClaim>,
    scaled_roles: crate::controller::caches::CacheWriter<cached::CachedRole>,
}

/// One watch per owned kind (and namespace) that passes read but that triggers nothing, its
/// objects cut down before they enter its cache; returns them and the stores of the kinds that
/// trigger passes.
fn read_only_feeds(
    ctx: &Context,
    scope: &Scope,
    writers: crate::controller::caches::CacheWriters,
) -> (Vec<tokio::task::JoinHandle<()>>, Triggers) {
    let written = &ctx.caches.written;
    let owned = scope.owned();
    let mut feeders = vec![
        feed(scope.watched("PodDisruptionBudget", writers.budgets, &owned, written)),
        feed(scope.watched("ControllerRevision", writers.revisions, &owned, written)),
        feed(
            scope.watched(
                "ConfigMap",
                writers.config_maps,
                &scope
                    .lists
                    .config()
                    .labels(&crate::controller::caches::config_map_selector()),
                written,
            ),
        ),
    ];
    if scope.pod_groups {
        feeders.push(feed(scope.watched(
            "PodGroup",
            writers.pod_groups,
            &owned,
            written,
        )));
    }
    if scope.claim_templates {
        feeders.push(feed(scope.watched(
            "ResourceClaimTemplate",
            writers.claim_templates,
            &owned,
            written,
        )));
    }
    let triggers = Triggers {
        pods: writers.pods,
        jobs: writers.jobs,
        services: writers.services,
        claims: writers.claims,
        scaled_roles: writers.scaled_roles,
    };
    (feeders, triggers)
}

/// The controller over the DeepInferDeployments, watched as dynamic objects so one malformed
/// resource cannot break the watch for all: one watch per namespace watched (or one of every
/// namespace), each on a backoff of its own, kept in one store by [`Merged`] with the index of
/// the objects they refer to (`referrers`).
fn deployments(ctx: &Context, scope: &Scope, referrers: Referrers) -> Controller<CachedDeployment> {
    let namespaces = scope.watches();
    let mut merged = Merged::new(
        kube::runtime::reflector::store::Writer::new(scope.ar.clone()),
        &namespaces,
    )
    .with_index(referrers);
    let cache = merged.reader();
    let watches = namespaces.iter().enumerate().map(|(i, ns)| {
        let dids: Api<CachedDeployment> = match ns {
            Some(ns) => Api::namespaced_with(scope.client.clone(), ns, &scope.ar),
            None => Api::all_with(scope.client.clone(), &scope.ar),
        };
        on_own_backoff("DeepInferDeployment", watcher(dids, scope.lists.config()))
            .map_ok(move |event| (i, event))
            .boxed()
    });
    let applied = futures::stream::select_all(watches)
        .map_ok(move |(i, event)| {
            futures::stream::iter(
                merged
                    .take(i, event)
                    .into_iter()
                    .map(Ok::<_, watcher::Error>),
            )
        })
        .try_flatten();
    Controller::for_stream_with(
        noted(applied, &ctx.metrics, |did: &CachedDeployment| {
            vec![phase_key(
                did.metadata.namespace.as_deref().unwrap_or_default(),
                did.metadata.name.as_deref().unwrap_or_default(),
            )]
        }),
        cache,
        scope.ar.clone(),
    )
    .with_config(
        kube::runtime::controller::Config::default().concurrency(ctx.max_concurrent_reconciles),
    )
}

/// The watches that start passes: Pods (of Jobs and workers), Jobs, Services and (where served)
/// DeepInferRoles through their owner; the ConfigMaps named by `spec.acceptance.promptsFrom`
/// (metadata only: an edit moves the resourceVersion) and the checkpoint claims through the
/// resources that name them. Every
/// event is noted for the resources it triggers, so that the pass it starts observes how long it
/// waited (`deepinfer_watch_event_to_reconcile_seconds`). Every watch (one per kind and
/// namespace watched) retries on its own backoff, so one kind's failing or re-listing watch
/// never holds up the others.
fn triggered(
    controller: Controller<CachedDeployment>,
    ctx: &Context,
    scope: &Scope,
    writers: Triggers,
    feeders: &mut Vec<tokio::task::JoinHandle<()>>,
    referrers: Referrers,
) -> Controller<CachedDeployment> {
    let written = &ctx.caches.written;
    let (ar, metrics) = (scope.ar.clone(), ctx.metrics.clone());
    let owned = scope.owned();
    let claims = triggering(
        scope.watched(
            "PersistentVolumeClaim",
            writers.claims,
            &scope.lists.config(),
            written,
        ),
        feeders,
    );
    let news = JobPodNews::default();
    let pods = triggering(scope.watched("Pod", writers.pods, &owned, written), feeders)
        .filter(move |pod| std::future::ready(pod.as_ref().map_or(true, |p| news.is_news(p))));
    let jobs = triggering(scope.watched("Job", writers.jobs, &owned, written), feeders);
    let services = triggering(
        scope.watched("Service", writers.services, &owned, written),
        feeders,
    );
    // A scale of a DeepInferRole (its spec.replicas) starts a pass of the deployment owning it.
    let controller = if scope.scaled_roles {
        let roles = scope.watched("DeepInferRole", writers.scaled_roles, &owned, written);
        controller.owns_stream(noted(triggering(roles, feeders), &metrics, owner_keys(&ar)))
    } else {
        controller
    };
    let config_maps = futures::stream::select_all(scope.watches().into_iter().map(|ns| {
        let config_maps: Api<PartialObjectMeta<ConfigMap>> = scoped(&scope.client, ns);
        on_own_backoff(
            "ConfigMap",
            watcher(config_maps, scope.lists.config()).touched_objects(),
        )
        .boxed()
    }));
    controller
        .watches_stream(
            noted(pods, &metrics, {
                let ar = ar.clone();
                move |pod: &Incoming<cached::CachedPod>| keys(pod_owner_refs(pod, &ar))
            }),
            {
                let ar = ar.clone();
                move |pod| pod_owner_refs(&pod, &ar)
            },
        )
        .owns_stream(noted(jobs, &metrics, owner_keys(&ar)))
        .owns_stream(noted(services, &metrics, owner_keys(&ar)))
        .watches_stream(config_maps, {
            let (referrers, ar, metrics) = (referrers.clone(), ar.clone(), metrics.clone());
            move |cm| referrers_noted(&referrers, Referred::ConfigMap, &cm.metadata, &ar, &metrics)
        })
        .watches_stream(claims, move |claim| {
            referrers_noted(&referrers, Referred::Claim, claim.meta(), &ar, &metrics)
        })
}

/// Notes every object of a trigger stream as a watch event of the resources `keys` names
/// (`namespace/name`), for the queue depth and the event-to-reconcile time.
fn noted<K>(
    stream: impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static,
    metrics: &Arc<crate::metrics::Metrics>,
    keys: impl Fn(&K) -> Vec<String> + Send + 'static,
) -> impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: Resource + Send + 'static,
{
    let metrics = metrics.clone();
    stream.inspect(move |item| {
        if let Ok(obj) = item {
            for key in keys(obj) {
                metrics.triggered(&key);
            }
        }
    })
}

/// The DeepInferDeployments an object's owner references name: the resources its watch event
/// triggers.
fn owner_refs(meta: &kube::core::ObjectMeta, ar: &ApiResource) -> Vec<ObjectRef<CachedDeployment>> {
    let ns = meta.namespace.as_deref();
    meta.owner_references
        .iter()
        .flatten()
        .filter_map(|o| ObjectRef::<CachedDeployment>::from_owner_ref(ns, o, ar.clone()))
        .collect()
}

/// The DeepInferDeployments a pod's watch event triggers: those its owner references name and,
/// for a pod of a Job (labelled with the resource it runs for), that resource. Which Job pods'
/// events reach here at all is [`JobPodNews`]'s call.
fn pod_owner_refs(
    pod: &Incoming<cached::CachedPod>,
    ar: &ApiResource,
) -> Vec<ObjectRef<CachedDeployment>> {
    let meta = pod.meta();
    let mut refs = owner_refs(meta, ar);
    let deployment = pod.shape().label(cached::KeptLabel::Deployment);
    if let (true, Some(name), Some(ns)) = (of_job(meta), deployment, meta.namespace.as_deref()) {
        let r = ObjectRef::new_with(name, ar.clone()).within(ns);
        if !refs.contains(&r) {
            refs.push(r);
        }
    }
    refs
}

fn of_job(meta: &kube::core::ObjectMeta) -> bool {
    meta.owner_references
        .iter()
        .flatten()
        .any(|o| o.api_version == "batch/v1" && o.kind == "Job")
}

/// Which pod events are news for a pass. Every event of a pod that is not a Job's is. A Job's
/// status says nothing of a pod that cannot make progress without a person (its image, its
/// configuration, no place to run: [`gates::jobs::pod_trouble`]), so a Job's pod's event is
/// news when the pod enters such trouble, changes its kind of trouble, or leaves it; the rest of
/// its life shows in its Job's status. The scheduler rewrites an unschedulable pod's message on
/// every retry; those rewrites are not news. A Job's pod getting its IP is news too: an
/// acceptance run's rank table lists its ranks' addresses, and its engines wait for the table
/// (the Job's status tells of a running pod only after the Job controller's batching, about a
/// second later). So is an acceptance pod's device allocation, the device plugin's annotation the
/// table lists beside the address, when it comes after the address. Remembers the trouble of the
/// Job pods that are in trouble now, the Job pods seen without an IP and the acceptance pods
/// seen without an allocation, nothing of the others.
#[derive(Default)]
struct JobPodNews(std::sync::Mutex<JobPodsSeen>);

#[derive(Default)]
struct JobPodsSeen {
    trouble: std::collections::HashMap<String, crate::api::Reason>,
    unaddressed: std::collections::HashSet<String>,
    unallocated: std::collections::HashSet<String>,
}

/// Whether `waits` (a pod waits for what `set` remembers): remembers the pod if so; if not,
/// whether it was remembered, which is the news that it came.
fn came(set: &mut std::collections::HashSet<String>, key: &str, waits: bool) -> bool {
    if waits {
        set.insert(key.to_string());
        false
    } else {
        set.remove(key)
    }
}

impl JobPodNews {
    fn is_news(&self, pod: &Incoming<cached::CachedPod>) -> bool {
        let meta = pod.meta();
        if !of_job(meta) {
            return true;
        }
        let key = phase_key(
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default(),
        );
        let api = pod.shape().to_api();
        let status = api.status.as_ref();
        let has_ip = status.and_then(|s| s.pod_ip.as_ref()).is_some();
        let allocated = [build::ASCEND_910_ANNOTATION, build::ASCEND_NPU_ANNOTATION]
            .iter()
            .any(|a| api.annotations().contains_key(*a));
        let live = meta.deletion_timestamp.is_none()
            && !matches!(
                status.and_then(|s| s.phase.as_deref()),
                Some("Succeeded" | "Failed")
            );
        let acceptance = pod.shape().label(cached::KeptLabel::Component)
            == Some(crate::api::Component::Acceptance.as_str());
        let trouble = match meta.deletion_timestamp {
            Some(_) => None,
            None => gates::jobs::pod_trouble(&api).map(|t| t.reason),
        };
        let mut seen = self.0.lock().unwrap_or_else(|e| e.into_inner());
        // Come now, waited for before (a pod that ended or went without it is forgotten too,
        // which is no news to a pass that waits for it).
        let addressed = came(&mut seen.unaddressed, &key, live && !has_ip) && has_ip && live;
        let devices_came = came(
            &mut seen.unallocated,
            &key,
            live && acceptance && !allocated,
        ) && allocated
            && live;
        let troubled = match trouble {
            Some(reason) => seen.trouble.insert(key, reason) != Some(reason),
            None => seen.trouble.remove(&key).is_some(),
        };
        troubled || addressed || devices_came
    }
}

/// The keys of the resources an object's owner references name, for [`noted`].
fn owner_keys<K: Resource>(ar: &ApiResource) -> impl Fn(&K) -> Vec<String> + Send + 'static {
    let ar = ar.clone();
    move |o| keys(owner_refs(o.meta(), &ar))
}

/// Keys (`namespace/name`) of resources, as the phase gauge and the trigger metrics name them.
fn keys(refs: Vec<ObjectRef<CachedDeployment>>) -> Vec<String> {
    refs.iter()
        .map(|r| phase_key(r.namespace.as_deref().unwrap_or_default(), &r.name))
        .collect()
}

/// How the watches read the state they start from (and re-read after a watch expires).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InitialLists {
    /// As one watch that first sends every object, then a bookmark (`sendInitialEvents`, served
    /// by default since Kubernetes 1.34): objects are decoded one at a time as they arrive.
    Streaming,
    /// As lists of [`InitialLists::PAGE`] objects, each page read whole before it is decoded.
    Paged,
}

impl InitialLists {
    /// Objects per page of a paged list. kube's default of 500 pods is about 4 MB of JSON held at
    /// once per kind; every kind lists at the same time when the operator starts.
    pub const PAGE: u32 = 100;

    /// Streaming when the API server serves it.
    pub fn of(streaming: bool) -> Self {
        if streaming {
            Self::Streaming
        } else {
            Self::Paged
        }
    }

    /// The watcher configuration every watch starts from.
    pub fn config(self) -> watcher::Config {
        match self {
            Self::Streaming => watcher::Config::default().streaming_lists(),
            Self::Paged => watcher::Config::default().page_size(Self::PAGE),
        }
    }

    /// Whether the API server serves streaming lists, asked with a watch of pods in scope that
    /// no pod matches: refused (4xx) when the `WatchList` feature is off; an error while it
    /// cannot answer, so that the caller asks again.
    pub async fn probe(client: &Client, namespace: Option<&str>) -> Result<bool, Error> {
        let api: Api<k8s_openapi::api::core::v1::Pod> = scoped(client, namespace);
        let params = kube::api::WatchParams::streaming_lists()
            .labels(&format!("{}=probe", labels::MANAGED_BY))
            .timeout(1);
        let first = match api.watch(&params, "0").await {
            Ok(events) => events.boxed().next().await,
            Err(e) => Some(Err(e)),
        };
        let refused = match first {
            Some(Ok(kube::api::WatchEvent::Error(status))) => kube::Error::Api(status),
            None | Some(Ok(_)) => return Ok(true),
            Some(Err(e)) => e,
        };
        match refused {
            kube::Error::Api(status) if (400..500).contains(&status.code) => {
                info!(error = %status, "streaming lists not served; watches start from paged lists");
                Ok(false)
            }
            e => Err(Error::Kube(e)),
        }
    }
}

/// Retries `resolve` every 5 seconds until the API server answers it.
async fn resolved<F, Fut>(what: &'static str, resolve: F) -> bool
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<bool, Error>>,
{
    loop {
        match resolve().await {
            Ok(answer) => return answer,
            Err(e) => {
                warn!(what, error = %e, "resolving before the watches start; retrying in 5 s");
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        }
    }
}

/// A watch of one owned kind in `namespace` (`None`: every namespace) feeding `cache`, each
/// event noted in `written` once the cache has it.
fn cached<K>(
    mut cache: crate::controller::caches::CacheWriter<K>,
    api: Api<Incoming<K>>,
    namespace: Option<&str>,
    config: watcher::Config,
    written: &crate::controller::written::Written,
) -> impl futures::Stream<Item = Result<watcher::Event<Incoming<K>>, watcher::Error>> + Send + 'static
where
    K: Cached + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync,
{
    let lag = written
        .of(<K::Api as k8s_openapi::Resource>::KIND)
        .unwrap_or_default();
    let progress = lag.watch(namespace);
    watcher(api, config)
        .then(move |event| {
            let lag = lag.clone();
            async move {
                lag.unheld().await;
                event
            }
        })
        .map_ok(move |event| {
            cache.take(&event);
            progress.stored(&event);
            event
        })
}

/// Keeps the store of a kind whose changes trigger their owner (its watches' `events`) in a
/// task of its own (so the store keeps up while passes run), and returns its changed objects as
/// a stream for the controller.
fn triggering<K>(
    events: impl futures::Stream<Item = Result<watcher::Event<Incoming<K>>, watcher::Error>>
        + Send
        + 'static,
    feeders: &mut Vec<tokio::task::JoinHandle<()>>,
) -> impl futures::Stream<Item = Result<Incoming<K>, watcher::Error>> + Send + 'static
where
    K: Cached + Send + Sync + std::fmt::Debug + 'static,
{
    let (changed, changes) = futures::channel::mpsc::unbounded();
    feeders.push(tokio::spawn(events.touched_objects().for_each(
        move |object| {
            // The controller has stopped when nobody receives.
            let _ = changed.unbounded_send(object);
            async {}
        },
    )));
    changes
}

/// Keeps the store of a kind that passes read but that triggers nothing (its watches' `events`).
fn feed<K: Send + 'static>(
    events: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(events.for_each(|_| async {}))
}

/// The resources that refer to an object (of `kind`, in their own namespace), each noted as
/// triggered by its event.
fn referrers_noted(
    referrers: &Referrers,
    kind: Referred,
    meta: &kube::core::ObjectMeta,
    ar: &ApiResource,
    metrics: &crate::metrics::Metrics,
) -> Vec<ObjectRef<CachedDeployment>> {
    let namespace = meta.namespace.as_deref().unwrap_or_default();
    let names = referrers.of(kind, namespace, meta.name.as_deref().unwrap_or_default());
    names
        .into_iter()
        .map(|name| {
            metrics.triggered(&phase_key(namespace, &name));
            ObjectRef::new_with(&name, ar.clone()).within(namespace)
        })
        .collect()
}

/// Backoff of the controller's watches after an error: 0.5 s, doubling, at most 5 s. After an
/// API server or etcd restart a re-watch can fail with `too old resource version` several times
/// in a row; kube-runtime's default (up to 30 s) then leaves changed resources unreconciled for a
/// minute, while a relist is cheap next to a reconcile pass.
#[derive(Clone, Copy, Debug)]
pub struct WatchBackoff {
    next: Duration,
}

impl WatchBackoff {
    const FIRST: Duration = Duration::from_millis(500);
    const MAX: Duration = Duration::from_secs(5);
}

impl Default for WatchBackoff {
    fn default() -> Self {
        Self { next: Self::FIRST }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let now = self.next;
        self.next = (now * 2).min(Self::MAX);
        Some(now)
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.next = Self::FIRST;
    }
}

/// One watch's stream on its own [`WatchBackoff`] (reset after a minute without errors): an
/// error is logged and the watch alone waits before retrying; no error reaches the controller's
/// merged trigger stream, which would pause every other watch too.
fn on_own_backoff<T>(
    kind: &'static str,
    stream: impl futures::Stream<Item = Result<T, watcher::Error>> + Send + 'static,
) -> impl futures::Stream<Item = Result<T, watcher::Error>> + Send + 'static
where
    T: Send + 'static,
{
    stream
        .backoff(kube::runtime::utils::ResetTimerBackoff::new(
            WatchBackoff::default(),
            Duration::from_secs(60),
        ))
        .filter_map(move |item| async move {
            match item {
                Ok(obj) => Some(Ok(obj)),
                Err(e) => {
                    warn!(kind, error = %e, "watch failed; retrying on its own backoff");
                    None
                }
            }
        })
}

/// Every few seconds, forgets the phase of objects no longer in the controller's cache.
///
/// No `wait_until_ready`: the store wakes only its last waiter, the controller's own. Before the
/// store is ready nothing has been reconciled, so there is nothing to forget either.
async fn forget_deleted(
    store: kube::runtime::reflector::Store<CachedDeployment>,
    metrics: Arc<crate::metrics::Metrics>,
) {
    loop {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let live: std::collections::HashSet<String> = store
            .state()
            .iter()
            .map(|o| phase_key(&o.namespace().unwrap_or_default(), &o.name_any()))
            .collect();
        metrics.retain(|key| live.contains(key));
    }
}

/// The API of a namespaced kind in `namespace`, or across every namespace.
pub(super) fn scoped<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watches_retry_within_five_seconds_and_start_over_after_a_reset() {
        use kube::runtime::utils::Backoff;
        let mut b = WatchBackoff::default();
        let waits: Vec<u64> = b.by_ref().take(6).map(|d| d.as_millis() as u64).collect();
        assert_eq!(waits, [500, 1000, 2000, 4000, 5000, 5000]);
        b.reset();
        assert_eq!(b.next(), Some(Duration::from_millis(500)));
    }

    #[test]
    fn an_owned_objects_event_counts_for_the_resources_its_owner_references_name() {
        let ar = api_resource();
        let meta: kube::core::ObjectMeta = serde_json::from_value(serde_json::json!({
            "name": "flash-0", "namespace": "team",
            "ownerReferences": [
                {"apiVersion": ar.api_version, "kind": ar.kind, "name": "flash", "uid": "1"},
                {"apiVersion": "batch/v1", "kind": "Job", "name": "flash-accept", "uid": "2"},
                {"apiVersion": "deepinfer.io/v0", "kind": ar.kind, "name": "old", "uid": "3"},
            ],
        }))
        .expect("meta");
        assert_eq!(keys(owner_refs(&meta, &ar)), ["team/flash"]);
        assert!(owner_refs(&kube::core::ObjectMeta::default(), &ar).is_empty());
    }

    #[test]
    fn a_job_pods_trouble_is_news_for_the_resource_it_runs_for_and_its_rewrites_are_not() {
        let ar = api_resource();
        let waiting = |reason: &str, message: &str| {
            serde_json::json!({"containerStatuses": [{
                "name": "verify", "ready": false, "restartCount": 0, "image": "x", "imageID": "",
                "state": {"waiting": {"reason": reason, "message": message}},
            }]})
        };
        let unschedulable = |message: &str| {
            serde_json::json!({"phase": "Pending", "conditions": [{
                "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
            }]})
        };
        let running = serde_json::json!({"phase": "Running", "podIP": "10.244.0.7"});
        let pod =
            |owners: serde_json::Value, deployment: Option<&str>, status: &serde_json::Value| {
                let mut meta = serde_json::json!({
                    "name": "flash-verify-x", "namespace": "team", "ownerReferences": owners,
                });
                if let Some(d) = deployment {
                    meta["labels"] = serde_json::json!({labels::DEPLOYMENT: d});
                }
                serde_json::from_value::<Incoming<cached::CachedPod>>(
                    serde_json::json!({"metadata": meta, "status": status}),
                )
                .expect("pod")
            };
        let job = serde_json::json!([{"apiVersion": "batch/v1", "kind": "Job", "name": "flash-verify", "uid": "2"}]);
        assert_eq!(
            keys(pod_owner_refs(
                &pod(job.clone(), Some("flash"), &running),
                &ar
            )),
            ["team/flash"]
        );
        let news = JobPodNews::default();
        let of_job =
            |status: &serde_json::Value| news.is_news(&pod(job.clone(), Some("flash"), status));
        assert!(
            !of_job(&running),
            "a Job's pod on its way: its Job's status tells"
        );
        assert!(of_job(&unschedulable("0/8 nodes are available")));
        assert!(
            !of_job(&unschedulable("0/9 nodes are available")),
            "the scheduler's retry"
        );
        assert!(
            of_job(&waiting("ImagePullBackOff", "not found")),
            "another trouble"
        );
        assert!(!of_job(&waiting("ImagePullBackOff", "still not found")));
        assert!(of_job(&running), "out of trouble");
        assert!(!of_job(&running));
        assert!(
            news.0.lock().expect("lock").trouble.is_empty(),
            "nothing kept of pods out of trouble"
        );

        // Not a Job's pod, or no resource named: only what owner references name.
        let rs = serde_json::json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "x", "uid": "3"}]);
        assert!(pod_owner_refs(&pod(rs, Some("flash"), &running), &ar).is_empty());
        assert!(pod_owner_refs(&pod(job, None, &running), &ar).is_empty());
        // A worker pod owned by the resource: every event is news, counted once.
        let worker = serde_json::json!([{"apiVersion": ar.api_version, "kind": ar.kind, "name": "flash", "uid": "1"}]);
        let worker = pod(worker, Some("flash"), &running);
        assert!(news.is_news(&worker) && news.is_news(&worker));
        assert_eq!(keys(pod_owner_refs(&worker, &ar)), ["team/flash"]);
    }

    #[test]
    fn a_job_pods_address_is_news_once() {
        let pod = |name: &str, status: serde_json::Value| {
            serde_json::from_value::<Incoming<cached::CachedPod>>(serde_json::json!({
                "metadata": {"name": name, "namespace": "team", "ownerReferences": [
                    {"apiVersion": "batch/v1", "kind": "Job", "name": "flash-accept-0", "uid": "2"}
                ]},
                "status": status,
            }))
            .expect("pod")
        };
        let news = JobPodNews::default();
        let bound = serde_json::json!({"phase": "Pending"});
        let addressed = serde_json::json!({"phase": "Pending", "podIP": "10.244.0.7"});
        let running = serde_json::json!({"phase": "Running", "podIP": "10.244.0.7"});
        assert!(
            !news.is_news(&pod("a", bound.clone())),
            "placed, not addressed"
        );
        assert!(!news.is_news(&pod("a", bound)), "still not addressed");
        assert!(
            news.is_news(&pod("a", addressed)),
            "its IP: a rank table may complete"
        );
        assert!(!news.is_news(&pod("a", running.clone())), "once");
        assert!(
            !news.is_news(&pod("b", running)),
            "first seen addressed (a restart's list): the list's pass reads it"
        );
        // A pod that ends without an address is forgotten.
        assert!(!news.is_news(&pod("c", serde_json::json!({"phase": "Pending"}))));
        assert!(!news.is_news(&pod("c", serde_json::json!({"phase": "Succeeded"}))));
        assert!(news.0.lock().expect("lock").unaddressed.is_empty());
    }

    #[test]
    fn an_acceptance_pods_device_allocation_after_its_address_is_news_once() {
        // A rank table lists each rank's address and the devices the device plugin wrote in
        // the pod's annotation; the plugin's write and the kubelet's may come in either order.
        let pod = |name: &str, status: serde_json::Value, allocated: bool| {
            let mut meta = serde_json::json!({
                "name": name, "namespace": "team",
                "labels": {labels::COMPONENT: "acceptance", labels::DEPLOYMENT: "flash"},
                "ownerReferences": [
                    {"apiVersion": "batch/v1", "kind": "Job", "name": "flash-accept-0", "uid": "2"}
                ],
            });
            if allocated {
                meta["annotations"] = serde_json::json!({
                    crate::controller::build::ASCEND_910_ANNOTATION: r#"{"server_id":"n","devices":[]}"#,
                });
            }
            serde_json::from_value::<Incoming<cached::CachedPod>>(
                serde_json::json!({"metadata": meta, "status": status}),
            )
            .expect("pod")
        };
        let news = JobPodNews::default();
        let pending = serde_json::json!({"phase": "Pending"});
        let running = serde_json::json!({"phase": "Running", "podIP": "10.244.0.7"});
        assert!(!news.is_news(&pod("a", pending.clone(), false)));
        assert!(news.is_news(&pod("a", running.clone(), false)), "its IP");
        assert!(
            news.is_news(&pod("a", running.clone(), true)),
            "its devices, after its IP: the table may complete now"
        );
        assert!(!news.is_news(&pod("a", running.clone(), true)), "once");
        // Devices first, then the address: the address is the news.
        assert!(!news.is_news(&pod("b", pending, true)));
        assert!(news.is_news(&pod("b", running.clone(), true)));
        // A pod that is not an acceptance run's is not remembered for devices.
        let verify = serde_json::from_value::<Incoming<cached::CachedPod>>(serde_json::json!({
            "metadata": {"name": "v", "namespace": "team", "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": "flash-verify", "uid": "3"}
            ]},
            "status": running,
        }))
        .expect("pod");
        assert!(!news.is_news(&verify));
        assert_eq!(news.0.lock().expect("lock").unallocated.len(), 0);
    }
}
