//! How the operator reports on itself: logs, and the HTTP endpoints `/metrics` (OpenMetrics),
//! `/healthz` (the process runs) and `/readyz` (the controller has started).

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
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tracing::{debug, warn};

use crate::metrics::Metrics;

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

/// Serves the endpoints on `listener` until `shutdown` resolves; open connections are dropped then.
pub async fn serve(
    listener: TcpListener,
    endpoints: Arc<Endpoints>,
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
        let endpoints = endpoints.clone();
        connections.spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let response = respond(&endpoints, &req);
                async move { Ok::<_, Infallible>(response) }
            });
            let result = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .serve_connection(TokioIo::new(stream), service)
                .await;
            if let Err(e) = result {
                debug!(error = %e, "metrics connection ended with an error");
            }
        });
    }
    connections.shutdown().await;
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
        let server = tokio::spawn(serve(listener, endpoints, async {
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
