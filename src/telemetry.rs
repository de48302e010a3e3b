//! How the operator reports on itself: logs, and the HTTP endpoints `/metrics` (OpenMetrics),
//! `/healthz` (the process runs) and `/readyz` (the controller has started). With
//! `--metrics-secure` they are served over HTTPS and `/metrics` only to a caller the API server
//! authenticates and authorises ([`crate::metrics::access`]); the probes need neither a token nor
//! a trusted certificate (the kubelet's HTTPS probes verify none). Without it, plain HTTP.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tracing::{debug, warn};

use crate::metrics::access::{Decision, Reviewer};
use crate::metrics::Metrics;

/// How the endpoints are exposed.
#[derive(Clone)]
pub enum Exposure {
    /// Plain HTTP, `/metrics` to anyone.
    Plain,
    /// HTTPS; `/metrics` to callers the API server authenticates and authorises
    /// (`--metrics-secure`).
    Secure {
        /// The TLS side of each connection.
        tls: tokio_rustls::TlsAcceptor,
        /// Who may read `/metrics`.
        reviewer: Arc<Reviewer>,
    },
}

impl std::fmt::Debug for Exposure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Exposure::Plain => "Plain",
            Exposure::Secure { .. } => "Secure",
        })
    }
}

/// The TLS side of the endpoints: the certificate and key of `cert_dir` (`tls.crt`, `tls.key`,
/// as a `kubernetes.io/tls` Secret mounts them, e.g. from cert-manager), else a self-signed
/// certificate made at start (scrapers then skip verification, as Prometheus does with
/// `insecureSkipVerify`; the bearer token is what authenticates).
pub fn tls_acceptor(
    cert_dir: Option<&std::path::Path>,
) -> anyhow::Result<tokio_rustls::TlsAcceptor> {
    use anyhow::Context as _;
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let (certs, key) = match cert_dir {
        Some(dir) => {
            let certs = CertificateDer::pem_file_iter(dir.join("tls.crt"))
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .with_context(|| {
                    format!("reading {}/tls.crt (--metrics-cert-dir)", dir.display())
                })?;
            let key = PrivateKeyDer::from_pem_file(dir.join("tls.key")).with_context(|| {
                format!("reading {}/tls.key (--metrics-cert-dir)", dir.display())
            })?;
            (certs, key)
        }
        None => {
            let made = rcgen::generate_simple_self_signed(vec!["localhost".to_string()])
                .context("making a self-signed certificate for the metrics endpoint")?;
            let key = PrivateKeyDer::try_from(made.key_pair.serialize_der())
                .map_err(|e| anyhow::anyhow!("the self-signed key: {e}"))?;
            (vec![made.cert.der().clone()], key)
        }
    };
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .context("TLS protocol versions")?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .context("the metrics certificate and key do not match")?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// Content type of `/metrics`.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Installs the global log subscriber (`RUST_LOG`, default `info,kube=warn`).
pub fn init_logging(json: bool) {
    use tracing_subscriber::EnvFilter;
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,kube=warn"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

/// What the endpoints report.
#[derive(Debug)]
pub struct Endpoints {
    /// Encoded on `/metrics`.
    pub metrics: Arc<Metrics>,
    /// `/readyz` answers 200 while set: after the CRD check, until shutdown begins.
    pub ready: AtomicBool,
}

impl Endpoints {
    /// Endpoints for `metrics`, not ready yet.
    pub fn new(metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(Self {
            metrics,
            ready: AtomicBool::new(false),
        })
    }

    /// Marks the controller ready or not.
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }
}

/// Binds the endpoints' address, so a taken or invalid one fails at startup.
pub async fn bind(address: SocketAddr) -> anyhow::Result<TcpListener> {
    use anyhow::Context as _;
    TcpListener::bind(address)
        .await
        .with_context(|| format!("binding the metrics address {address} (--metrics-address)"))
}

/// Serves the endpoints on `listener`, exposed as `exposure`, until `shutdown` resolves; open
/// connections are dropped then.
pub async fn serve(
    listener: TcpListener,
    endpoints: Arc<Endpoints>,
    exposure: Exposure,
    shutdown: impl Future<Output = ()>,
) {
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            () = &mut shutdown => break,
            // Reap finished connections so the set does not grow.
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Typically out of file descriptors: back off instead of spinning.
                    warn!(error = %e, "accepting a metrics connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let (endpoints, exposure) = (endpoints.clone(), exposure.clone());
        connections.spawn(async move {
            match &exposure {
                Exposure::Plain => connection(stream, endpoints, exposure.clone()).await,
                Exposure::Secure { tls, .. } => match tls.accept(stream).await {
                    Ok(stream) => connection(stream, endpoints, exposure.clone()).await,
                    Err(e) => debug!(error = %e, "a metrics connection failed its TLS handshake"),
                },
            }
        });
    }
    connections.shutdown().await;
}

/// Serves one connection.
async fn connection<S>(stream: S, endpoints: Arc<Endpoints>, exposure: Exposure)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let (endpoints, exposure) = (endpoints.clone(), exposure.clone());
        async move { Ok::<_, Infallible>(answer(&endpoints, &exposure, &req).await) }
    });
    let result = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(10))
        .serve_connection(TokioIo::new(stream), service)
        .await;
    if let Err(e) = result {
        debug!(error = %e, "metrics connection ended with an error");
    }
}

/// The response to `req`: `/metrics` of a secure exposure only to a caller allowed to read it.
async fn answer<B>(
    endpoints: &Endpoints,
    exposure: &Exposure,
    req: &Request<B>,
) -> Response<Full<Bytes>> {
    let Exposure::Secure { reviewer, .. } = exposure else {
        return respond(endpoints, req);
    };
    if req.uri().path() != "/metrics" {
        return respond(endpoints, req);
    }
    let authorization = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok());
    match reviewer.decide(authorization).await {
        Ok(Decision::Allowed) => respond(endpoints, req),
        Ok(Decision::Unauthenticated) => {
            let mut response = text(
                StatusCode::UNAUTHORIZED,
                "/metrics needs a bearer token the API server authenticates (a ServiceAccount token)\n",
            );
            response.headers_mut().insert(
                hyper::header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer"),
            );
            response
        }
        Ok(Decision::Forbidden(user)) => {
            debug!(%user, "refused /metrics");
            text(
                StatusCode::FORBIDDEN,
                "the caller may not get /metrics: bind it to the ClusterRole the chart names <release>-deepinfer-operator-metrics-reader (nonResourceURLs /metrics, verb get)\n",
            )
        }
        Err(e) => {
            warn!(error = %e, "reviewing a /metrics caller failed");
            text(
                StatusCode::SERVICE_UNAVAILABLE,
                "the API server could not review the caller; try again\n",
            )
        }
    }
}

/// Routes one request. Bodies are ignored; nothing here can fail.
fn respond<B>(endpoints: &Endpoints, req: &Request<B>) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    if !matches!(path, "/metrics" | "/healthz" | "/readyz") {
        return text(
            StatusCode::NOT_FOUND,
            "not found; try /metrics, /healthz or /readyz\n",
        );
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut response = text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n");
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return response;
    }
    match path {
        "/metrics" => match endpoints.metrics.encode() {
            Ok(body) => {
                let mut response = Response::new(Full::new(Bytes::from(body)));
                response
                    .headers_mut()
                    .insert(CONTENT_TYPE, HeaderValue::from_static(OPENMETRICS));
                response
            }
            Err(_) => text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "encoding the metrics failed\n",
            ),
        },
        "/readyz" if !endpoints.ready.load(Ordering::Relaxed) => text(
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: the controller has not started (or is shutting down)\n",
        ),
        _ => text(StatusCode::OK, "ok\n"),
    }
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn request(method: &str, path: &str) -> Request<()> {
        Request::builder()
            .method(method)
            .uri(path)
            .body(())
            .unwrap()
    }

    #[test]
    fn routes_answer_by_path_method_and_readiness() {
        let endpoints = Endpoints::new(Arc::new(Metrics::new(
            crate::metrics::ApiRequests::default(),
        )));
        let status = |m: &str, p: &str| respond(&endpoints, &request(m, p)).status();
        assert_eq!(status("GET", "/healthz"), StatusCode::OK);
        assert_eq!(status("GET", "/readyz"), StatusCode::SERVICE_UNAVAILABLE);
        endpoints.set_ready(true);
        assert_eq!(status("GET", "/readyz"), StatusCode::OK);
        assert_eq!(status("HEAD", "/readyz"), StatusCode::OK);
        assert_eq!(status("GET", "/"), StatusCode::NOT_FOUND);
        assert_eq!(status("GET", "/metrics/extra"), StatusCode::NOT_FOUND);
        assert_eq!(status("POST", "/metrics"), StatusCode::METHOD_NOT_ALLOWED);
        let metrics = respond(&endpoints, &request("GET", "/metrics"));
        assert_eq!(metrics.status(), StatusCode::OK);
        assert_eq!(metrics.headers()[CONTENT_TYPE], OPENMETRICS);
    }

    /// Sends raw bytes and returns the whole response (the server closes after one exchange).
    async fn exchange(address: SocketAddr, raw: &[u8]) -> String {
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        stream.write_all(raw).await.unwrap();
        let mut out = Vec::new();
        stream.read_to_end(&mut out).await.unwrap();
        String::from_utf8_lossy(&out).into_owned()
    }

    #[tokio::test]
    async fn serves_http_rejects_garbage_and_stops_on_shutdown() {
        let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let address = listener.local_addr().unwrap();
        let endpoints = Endpoints::new(Arc::new(Metrics::new(
            crate::metrics::ApiRequests::default(),
        )));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(listener, endpoints, Exposure::Plain, async {
            let _ = stopped.await;
        }));

        let ok = exchange(
            address,
            b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        .await;
        assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
        assert!(ok.contains("deepinfer_reconciles_total 0"), "{ok}");
        let bad = exchange(address, b"\x00\x01 nonsense\r\n\r\n").await;
        assert!(bad.starts_with("HTTP/1.1 400"), "{bad}");
        let health = exchange(
            address,
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        .await;
        assert!(
            health.starts_with("HTTP/1.1 200"),
            "served after a bad request"
        );

        stop.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("server stops on shutdown")
            .unwrap();
        assert!(tokio::net::TcpStream::connect(address).await.is_err());
    }
}
