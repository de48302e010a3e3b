//! What the operator's caches hold, by kind: the benchmark lists every kind the operator caches,
//! with the operator's own label selectors, and decodes each list into the operator's own cache
//! types, indexed by owner and stored as the operator's watches do
//! ([`caches::filled`]), on one thread, with the operator's allocator (jemalloc). The heap that
//! thread allocated and did not free is what the cache of that kind costs; it is set beside the
//! operator's whole heap (`deepinfer_heap_bytes{state="allocated"}`), so that the rest (tasks,
//! connections, the controller's queue, the event recorder) shows too. It is measured with every
//! resource Ready, so every finished Job's verdict is in status: the pods of the finished Jobs
//! with a time to live are left out, as the operator leaves them out of its pod cache
//! ([`retention::jobs_read_out`]).

use kube::api::ListParams;
use kube::core::{ObjectList, Request};
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher;
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

use deepinfer_operator::controller::cached::{
    Cached, CachedClaim, CachedDeployment, CachedJob, CachedMeta, CachedPod, CachedPodGroup,
    CachedRevision, Incoming, Slimmed,
};
use deepinfer_operator::controller::caches;
use deepinfer_operator::controller::gates::housekeeping::retention;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::resource::v1::ResourceClaimTemplate;

/// One kind's cache, as measured.
#[derive(serde::Serialize, Debug, Clone)]
#[serde(rename_all = "camelCase")]
pub struct KindFootprint {
    pub kind: String,
    pub objects: usize,
    /// Heap bytes the decoded, indexed and stored objects hold.
    pub bytes: usize,
}

/// Net heap bytes this thread has allocated so far (allocated minus freed, cumulative).
fn thread_heap() -> anyhow::Result<i128> {
    let unreadable = |e| anyhow::anyhow!("jemalloc's thread statistics: {e}");
    let allocated = tikv_jemalloc_ctl::thread::allocatedp::read()
        .map_err(unreadable)?
        .get();
    let freed = tikv_jemalloc_ctl::thread::deallocatedp::read()
        .map_err(unreadable)?
        .get();
    Ok(i128::from(allocated) - i128::from(freed))
}

/// Heap bytes `keep` leaves allocated on this thread (what it returns is held until the
/// second reading), and what it returned.
fn held<T>(keep: impl FnOnce() -> anyhow::Result<T>) -> anyhow::Result<(T, usize)> {
    let before = thread_heap()?;
    let kept = keep()?;
    let after = thread_heap()?;
    Ok((kept, usize::try_from(after - before).unwrap_or(0)))
}

/// The text of one list of `url` (a collection's path) selected by `selector`.
async fn list_text(client: &Client, url: &str, selector: Option<&str>) -> kube::Result<String> {
    let mut params = ListParams::default();
    if let Some(selector) = selector {
        params = params.labels(selector);
    }
    let request = Request::new(url)
        .list(&params)
        .map_err(kube::Error::BuildRequest)?;
    client.request_text(request).await
}

/// The text of one cached kind's list (`None`: the API server does not serve the kind).
async fn owned_text<K: Cached>(
    client: &Client,
    namespace: Option<&str>,
    selector: Option<&str>,
) -> anyhow::Result<Option<String>> {
    match list_text(client, &Incoming::<K>::url_path(&(), namespace), selector).await {
        Ok(text) => Ok(Some(text)),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// One cached kind's list decoded into a cache as the operator keeps it.
async fn owned<K>(
    client: &Client,
    namespace: Option<&str>,
    selector: Option<&str>,
) -> anyhow::Result<KindFootprint>
where
    K: Cached + DeserializeOwned,
{
    owned_kept::<K>(client, namespace, selector, |_| true).await
}

/// [`owned`], of the objects `kept` keeps.
async fn owned_kept<K>(
    client: &Client,
    namespace: Option<&str>,
    selector: Option<&str>,
    kept: impl Fn(&K) -> bool,
) -> anyhow::Result<KindFootprint>
where
    K: Cached + DeserializeOwned,
{
    let kind = Incoming::<K>::kind(&()).to_string();
    // A kind the API server does not serve is not cached.
    let Some(text) = owned_text::<K>(client, namespace, selector).await? else {
        return Ok(KindFootprint {
            kind,
            objects: 0,
            bytes: 0,
        });
    };
    let ((objects, cache), bytes) = held(|| {
        let mut list: ObjectList<Incoming<K>> = serde_json::from_str(&text)?;
        list.items.retain(|o| kept(o.shape()));
        let objects = list.items.len();
        Ok((objects, caches::filled(list.items)))
    })?;
    drop(cache);
    Ok(KindFootprint {
        kind,
        objects,
        bytes,
    })
}

/// The operator's own resources, decoded and stored as its controller's reflector keeps them.
async fn deployments(client: &Client, namespace: Option<&str>) -> anyhow::Result<KindFootprint> {
    let ar = deepinfer_operator::controller::api_resource();
    let url = CachedDeployment::url_path(&ar, namespace);
    let text = list_text(client, &url, None).await?;
    let ((objects, store), bytes) = held(|| {
        let list: ObjectList<CachedDeployment> = serde_json::from_str(&text)?;
        let objects = list.items.len();
        let mut writer = Writer::<CachedDeployment>::new(ar.clone());
        for object in list.items {
            writer.apply_watcher_event(&watcher::Event::Apply(object));
        }
        Ok((objects, writer))
    })?;
    drop(store);
    Ok(KindFootprint {
        kind: ar.kind.clone(),
        objects,
        bytes,
    })
}

/// Every cache of the operator, measured over the objects of `namespace` (of every namespace if
/// `None`), as the operator watching that scope caches them.
pub async fn measure(
    client: &Client,
    namespace: Option<&str>,
) -> anyhow::Result<Vec<KindFootprint>> {
    let owned_selector = caches::owned_selector();
    let owned_selector = Some(owned_selector.as_str());
    let config_maps = caches::config_map_selector();
    let jobs: Vec<_> = match owned_text::<CachedJob>(client, namespace, owned_selector).await? {
        Some(text) => serde_json::from_str::<ObjectList<Incoming<CachedJob>>>(&text)?
            .items
            .iter()
            .map(|j| j.shape().to_api())
            .collect(),
        None => Vec::new(),
    };
    let done: std::collections::HashSet<&str> =
        retention::jobs_read_out(&jobs, &[]).into_iter().collect();
    let of_done_job = |pod: &CachedPod| pod.slim().owner_uids().any(|uid| done.contains(uid));
    Ok(vec![
        deployments(client, namespace).await?,
        owned_kept::<CachedPod>(client, namespace, owned_selector, |p| !of_done_job(p)).await?,
        owned::<CachedJob>(client, namespace, owned_selector).await?,
        owned::<CachedMeta<Service>>(client, namespace, owned_selector).await?,
        owned::<CachedMeta<PodDisruptionBudget>>(client, namespace, owned_selector).await?,
        owned::<CachedRevision>(client, namespace, owned_selector).await?,
        owned::<CachedPodGroup>(client, namespace, owned_selector).await?,
        owned::<CachedMeta<ResourceClaimTemplate>>(client, namespace, owned_selector).await?,
        owned::<CachedMeta<ConfigMap>>(client, namespace, Some(config_maps.as_str())).await?,
        owned::<CachedClaim>(client, namespace, None).await?,
    ])
}

/// Prints the caches beside the operator's heap (MiB allocated), and returns them.
pub fn printed(kinds: Vec<KindFootprint>, operator_heap_mib: f64) -> Vec<KindFootprint> {
    const MIB: f64 = 1024.0 * 1024.0;
    let total: usize = kinds.iter().map(|k| k.bytes).sum();
    let each: Vec<String> = kinds
        .iter()
        .filter(|k| k.objects > 0)
        .map(|k| {
            format!(
                "{} {} x {:.0} B = {:.1} MiB",
                k.kind,
                k.objects,
                k.bytes as f64 / k.objects as f64,
                k.bytes as f64 / MIB
            )
        })
        .collect();
    println!(
        "bench: caches (the operator's cache types decoded from the same lists, same allocator): {}; in all {:.1} MiB of the operator's {:.1} MiB heap",
        each.join(", "),
        total as f64 / MIB,
        operator_heap_mib
    );
    kinds
}
