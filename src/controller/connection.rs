//! The HTTP stack under the operator's client.
//!
//! It is kube's default stack, built from the same public parts: TLS and credentials from the
//! kubeconfig, its connect, read and write timeouts, the base URI, extra headers, and the retry
//! of 429, 503 and 504. One setting differs: a pooled connection is let go after [`POOL_IDLE`]
//! idle instead of hyper-util's 90 s. Two parts are left out: kube's tracing span per request
//! (the operator records every request, its code and latency in its metrics instead), and the
//! expiry of a client certificate from an exec plugin (`Client::valid_until`, which the operator
//! does not read).
//!
//! The API server closes a keep-alive connection after 90 s idle (the `IdleTimeout` of its
//! `http.Server`). With the client's pool keeping it for 90 s too, a request can go out on a
//! connection the server is closing at that very moment and fail without an answer (`peer closed
//! connection without sending TLS close_notify`). kube's `ClientBuilder::try_from(Config)` does
//! not expose the pool's settings, hence this module.
//!
//! Proxies are refused, as kube refuses them without its `socks5` and `http-proxy` features.

use std::time::Duration;

use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::retry::RetryPolicy;
use kube::client::{Body, ClientBuilder, ConfigExt as _};
use tower::retry::RetryLayer;
use tower::util::BoxService;
use tower::{BoxError, ServiceBuilder, ServiceExt as _};

/// How long an idle connection to the API server stays in the pool: half the API server's own
/// 90 s, so that the client always lets go of a connection well before the server closes it.
pub const POOL_IDLE: Duration = Duration::from_secs(45);
const _: () = assert!(
    POOL_IDLE.as_secs() < 90,
    "below the API server's idle timeout"
);

/// The service under [`builder`]: requests in, the API server's responses out.
pub type Stack = BoxService<http::Request<Body>, http::Response<hyper::body::Incoming>, BoxError>;

/// A client builder on kube's default stack whose pool lets go of a connection after `idle`
/// without a request. The operator passes [`POOL_IDLE`].
pub fn builder(config: &kube::Config, idle: Duration) -> Result<ClientBuilder<Stack>, kube::Error> {
    if let Some(proxy_url) = &config.proxy_url {
        return Err(kube::Error::ProxyProtocolDisabled {
            proxy_url: Box::new(proxy_url.clone()),
            protocol_feature: "kube/http-proxy or kube/socks5",
        });
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    let mut connector =
        hyper_timeout::TimeoutConnector::new(config.rustls_https_connector_with_connector(http)?);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let pool = hyper_util::client::legacy::Builder::new(TokioExecutor::new())
        .pool_idle_timeout(idle)
        .pool_timer(TokioTimer::new())
        .build(connector);
    let stack = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then(|| RetryLayer::new(RetryPolicy::server_retry())),
        )
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(pool)
        .boxed();
    Ok(ClientBuilder::new(stack, config.default_namespace.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    /// A plain-HTTP server that answers every request on a connection with an empty JSON
    /// object and keeps the connection open; it counts the connections it accepted.
    async fn server() -> (String, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buffer = vec![0u8; 8192];
                    let mut seen = Vec::new();
                    loop {
                        let Ok(n) = stream.read(&mut buffer).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        seen.extend_from_slice(&buffer[..n]);
                        while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                            seen.drain(..end + 4);
                            let answer = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
                            if stream.write_all(answer.as_bytes()).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        (url, accepted)
    }

    async fn get(client: &kube::Client) {
        let request = http::Request::get("/version").body(Vec::new()).unwrap();
        let _: serde_json::Value = client.request(request).await.expect("answered");
    }

    #[tokio::test]
    async fn a_connection_idle_longer_than_the_pool_allows_is_not_used_again() {
        let (url, accepted) = server().await;
        let config = kube::Config::new(url.parse().unwrap());
        let client = builder(&config, Duration::from_secs(1)).unwrap().build();

        get(&client).await;
        // The first connection goes back to the pool once its answer was read.
        tokio::time::sleep(Duration::from_millis(100)).await;
        get(&client).await;
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            1,
            "a connection idle for less than the pool allows is used again"
        );

        tokio::time::sleep(Duration::from_millis(2500)).await;
        get(&client).await;
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            2,
            "a connection idle past the pool's limit is let go, and the next request opens a new one"
        );
    }
}
