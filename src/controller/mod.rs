//! The reconciler. One pass (`reconcile`) reads what is there ([`observe`]), plans every gate
//! from it ([`pass`]: one folder per gate under [`gates`], objects from [`build`]), carries the
//! plans out ([`act`]) and writes the status computed from what it found ([`status`]), only on
//! change.
//! [`watches`] feeds the caches and starts passes; [`context`] holds the settings and the state
//! passes share.

pub mod act;
pub mod apply;
pub mod build;
pub mod cached;
pub mod caches;
pub mod connection;
pub mod context;
pub mod error;
pub mod events;
pub mod executor;
pub mod fleet;
pub mod gang;
pub mod gates;
pub(crate) mod merged;
pub mod observe;
mod outage;
pub mod pass;
pub mod pods;
pub mod proof;
mod reconcile;
pub mod referrers;
pub mod status;
pub mod text;
pub mod validated;
pub mod watches;
pub mod written;

pub use crate::api::api_resource;
pub use context::{
    context, Context, Namespaces, RunArgs, Settings, DEFAULT_MAX_CONCURRENT_RECONCILES,
    DEFAULT_PARTIAL_GROUP_TIMEOUT,
};
pub use error::Error;
pub use text::truncate;
pub use watches::{run_with_context, InitialLists, WatchBackoff};

use kube::api::{Api, ListParams};
use kube::Client;
use tracing::info;

use crate::api::DeepInferDeployment;

/// `deepinfer-operator/<version> (<identity>)`: the User-Agent of every request, so the API
/// server's audit log tells which replica (pod name, else host and process id) wrote what.
pub fn user_agent(identity: &str) -> Option<http::HeaderValue> {
    let clean: String = identity
        .chars()
        .filter(|c| c.is_ascii_graphic() && !matches!(c, '(' | ')'))
        .take(128)
        .collect();
    http::HeaderValue::from_str(&format!(
        "deepinfer-operator/{} ({clean})",
        env!("CARGO_PKG_VERSION")
    ))
    .ok()
}

/// Builds a client whose requests are recorded in `requests` (by verb, resource and code, with
/// their latency), with the operator's [`user_agent`], on the [`connection`] stack.
pub fn counting_client(
    config: kube::Config,
    requests: &crate::metrics::ApiRequests,
) -> Result<Client, kube::Error> {
    use tower::util::MapRequestLayer;
    let agent = user_agent(&crate::leader::default_identity());
    let user_agent = MapRequestLayer::new(move |mut req: http::Request<kube::client::Body>| {
        if let Some(agent) = &agent {
            req.headers_mut()
                .insert(http::header::USER_AGENT, agent.clone());
        }
        req
    });
    Ok(connection::builder(&config, connection::POOL_IDLE)?
        .with_layer(&user_agent)
        .with_layer(&crate::metrics::ApiRequestsLayer(requests.clone()))
        .build())
}

async fn load_config(kubeconfig: Option<&std::path::Path>) -> anyhow::Result<kube::Config> {
    use anyhow::Context as _;
    match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            Ok(kube::Config::from_custom_kubeconfig(
                kc,
                &kube::config::KubeConfigOptions::default(),
            )
            .await?)
        }
        None => Ok(kube::Config::infer()
            .await
            .context("no kubeconfig given and no in-cluster config found")?),
    }
}

/// Runs the controller until SIGTERM / Ctrl-C.
pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    crate::telemetry::init_logging(args.json_logs);
    let listener = crate::telemetry::bind(args.metrics_address).await?;
    let config = load_config(args.kubeconfig.as_deref()).await?;
    let requests = crate::metrics::ApiRequests::default();
    let client = counting_client(config, &requests)?;
    let settings = Settings::from(&args);
    let ctx = context(client, &settings, requests);
    // Health answers from the start; readiness waits for the CRD check.
    let endpoints = crate::telemetry::Endpoints::new(ctx.metrics.clone());
    let exposure = if !args.metrics_secure {
        crate::telemetry::Exposure::Plain
    } else {
        crate::telemetry::Exposure::Secure {
            tls: crate::telemetry::tls_acceptor(args.metrics_cert_dir.as_deref())?,
            reviewer: std::sync::Arc::new(crate::metrics::access::Reviewer::new(
                ctx.client.clone(),
            )),
        }
    };
    let (stop_server, server_stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(crate::telemetry::serve(
        listener,
        endpoints.clone(),
        exposure,
        async move {
            let _ = server_stopped.await;
        },
    ));
    check_crd_installed(&ctx.client, &settings.namespaces).await?;
    // `--gang-scheduling=native` on a cluster without PodGroups stops here, with the fix.
    ctx.pod_groups().await?;
    // A standby is ready too: it is healthy, and serves as soon as the leader goes.
    endpoints.set_ready(true);
    let stop_endpoints = || async {
        let _ = stop_server.send(());
        let _ = server.await;
    };
    let leadership = if args.leader_elect {
        let namespace = args
            .leader_election_namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| ctx.client.default_namespace().to_string());
        let elector = crate::leader::Elector::new(
            ctx.client.clone(),
            crate::leader::Config {
                namespace,
                name: args.leader_election_id.clone(),
                identity: crate::leader::default_identity(),
                timing: crate::leader::Timing::default(),
            },
        );
        tokio::select! {
            leadership = elector.acquire() => Some(leadership),
            () = shutdown_signal() => {
                info!("stopping before leading");
                stop_endpoints().await;
                return Ok(());
            }
        }
    } else {
        None
    };
    if let Some(leadership) = &leadership {
        let _ = ctx.fence.set(leadership.fence());
    }
    info!(namespaces = %settings.namespaces, licenses = ?settings.accepted_licenses, metrics = %args.metrics_address, "starting controller");
    ctx.metrics.set_leader(true);
    let metrics = ctx.metrics.clone();
    let ready = endpoints.clone();
    let controller = run_with_context(ctx, settings.namespaces, async move {
        shutdown_signal().await;
        ready.set_ready(false);
    });
    match leadership {
        None => controller.await,
        Some(mut leadership) => {
            tokio::select! {
                () = controller => leadership.release().await,
                reason = leadership.lost() => {
                    // Stop at once: in-flight reconciles are dropped, not finished, because
                    // another replica may be leading already.
                    metrics.set_leader(false);
                    let lease = leadership.lease().to_string();
                    stop_endpoints().await;
                    anyhow::bail!("lost the leader Lease {lease}: {reason}; exiting so that two replicas never reconcile at once (the pod restarts as a standby)");
                }
            }
        }
    }
    metrics.set_leader(false);
    stop_endpoints().await;
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => return ctrl_c.await.unwrap_or(()),
            };
        tokio::select! { _ = ctrl_c => {}, _ = term.recv() => {} }
    }
    #[cfg(not(unix))]
    ctrl_c.await.unwrap_or(());
}

/// Fails with instructions when the CRD is not installed, or naming the namespace where the
/// operator may not list DeepInferDeployments.
pub async fn check_crd_installed(client: &Client, namespaces: &Namespaces) -> anyhow::Result<()> {
    for namespace in namespaces.watches() {
        let api: Api<DeepInferDeployment> = watches::scoped(client, namespace);
        crd_listed(
            api.list_metadata(&ListParams::default().limit(1)).await,
            namespace,
        )?;
    }
    Ok(())
}

fn crd_listed<T>(listed: Result<T, kube::Error>, namespace: Option<&str>) -> anyhow::Result<()> {
    match listed {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 403 => anyhow::bail!(
            "the operator may not list DeepInferDeployments {}: {}; bind its rules there (a Role \
             and RoleBinding in each namespace of --namespace/--namespaces, a ClusterRole and \
             ClusterRoleBinding when it watches every namespace)",
            namespace.map_or_else(|| "across namespaces".to_string(), |ns| format!("in namespace {ns}")),
            e.message
        ),
        Err(kube::Error::Api(e)) if e.code == 404 => anyhow::bail!(
            "the DeepInferDeployment CRD (deepinferdeployments.deepinfer.io) is not installed; install both \
             CRDs, deepinferdeployments.deepinfer.io and deepinferroles.deepinfer.io, with \
             `kubectl apply --server-side -f crds/` (or `kubectl apply -f crds/`; Kubernetes >= 1.29), \
             or install the Helm chart, which carries them"
        ),
        Err(e) => Err(anyhow::anyhow!("checking that the DeepInferDeployment CRD is installed: {e}")),
    }
}

/// Runs the controller loop until `shutdown` resolves.
pub async fn controller(
    client: Client,
    settings: Settings,
    requests: crate::metrics::ApiRequests,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let ctx = context(client, &settings, requests);
    run_with_context(ctx, settings.namespaces, shutdown).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_agent_names_the_replica_and_never_breaks_on_odd_identities() {
        assert_eq!(
            user_agent("deepinfer-operator-7c9d-x2")
                .and_then(|v| v.to_str().ok().map(String::from)),
            Some(format!(
                "deepinfer-operator/{} (deepinfer-operator-7c9d-x2)",
                env!("CARGO_PKG_VERSION")
            ))
        );
        let odd = user_agent("host (1)\n\u{7f}é").expect("still a header");
        assert!(
            odd.to_str().is_ok_and(|s| s.ends_with("(host1)")),
            "{odd:?}"
        );
    }
}
