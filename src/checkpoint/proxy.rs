//! The hub fetch behind an outbound proxy, configured as curl reads it from the environment:
//! `HTTPS_PROXY` for https URLs (a CONNECT tunnel through which TLS runs to the hub itself, so the
//! proxy sees only the host and port), `HTTP_PROXY` for http URLs (requests in absolute form to
//! the proxy), `ALL_PROXY` for either when its own is unset, and `NO_PROXY` for the hosts reached
//! directly (names with their subdomains, IP addresses, CIDR blocks, `*` for every host);
//! lower-case names too. A proxy URL may carry `user:password@`, sent as
//! `Proxy-Authorization: Basic`. The operator gives the fetch Job these variables from its
//! `--hub-https-proxy`, `--hub-http-proxy` and `--hub-no-proxy`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper::rt::{Read, ReadBufCursor, Write};
use hyper::Uri;
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::TokioIo;
use tower::ServiceExt as _;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Which proxy, if any, each hub URL goes through.
#[derive(Clone)]
pub struct Proxies(Arc<Matcher>);

impl Proxies {
    /// The settings of this process's environment.
    pub fn from_env() -> Self {
        Self(Arc::new(Matcher::from_env()))
    }

    /// No proxy for any URL.
    pub fn none() -> Self {
        Self(Arc::new(Matcher::builder().build()))
    }

    /// `https` for https URLs, `http` for http URLs, neither for the hosts of `no` (the syntax of
    /// `NO_PROXY`); an empty value is unset.
    pub fn new(https: &str, http: &str, no: &str) -> Self {
        Self(Arc::new(
            Matcher::builder()
                .https(https.to_owned())
                .http(http.to_owned())
                .no(no.to_owned())
                .build(),
        ))
    }

    /// The proxy `uri` goes through (without its credentials), for messages.
    pub fn shown_for(&self, uri: &Uri) -> Option<String> {
        let proxy = self.0.intercept(uri)?;
        let proxy = proxy.uri();
        Some(format!(
            "{}://{}",
            proxy.scheme_str().unwrap_or("http"),
            proxy
                .authority()
                .map_or("", |a| a.as_str().rsplit('@').next().unwrap_or(""))
        ))
    }

    /// The `Proxy-Authorization` of a plain http request `uri` sent through its proxy.
    pub fn authorization_for(&self, uri: &Uri) -> Option<hyper::header::HeaderValue> {
        if uri.scheme_str() != Some("http") {
            return None;
        }
        self.0.intercept(uri)?.basic_auth().cloned()
    }
}

impl std::fmt::Debug for Proxies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// Connects to a hub URL directly, through a CONNECT tunnel (https through a proxy), or to the
/// proxy itself (http through a proxy: the connection is marked proxied, so requests name the
/// whole URL).
#[derive(Clone)]
pub struct ProxyConnector {
    direct: HttpConnector,
    proxies: Proxies,
}

impl ProxyConnector {
    pub fn new(direct: HttpConnector, proxies: Proxies) -> Self {
        Self { direct, proxies }
    }
}

impl tower::Service<Uri> for ProxyConnector {
    type Response = Proxied;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Proxied, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let direct = self.direct.clone();
        let intercept = self.proxies.0.intercept(&dst);
        Box::pin(async move {
            let Some(proxy) = intercept else {
                let io = direct.oneshot(dst).await?;
                return Ok(Proxied {
                    io,
                    absolute_form: false,
                });
            };
            if dst.scheme_str() == Some("https") {
                let mut tunnel = Tunnel::new(proxy.uri().clone(), direct);
                if let Some(auth) = proxy.basic_auth() {
                    tunnel = tunnel.with_auth(auth.clone());
                }
                let io = tunnel.oneshot(dst).await?;
                Ok(Proxied {
                    io,
                    absolute_form: false,
                })
            } else {
                let io = direct.oneshot(proxy.uri().clone()).await?;
                Ok(Proxied {
                    io,
                    absolute_form: true,
                })
            }
        })
    }
}

/// A connection to the hub, or to the proxy that forwards plain http requests to it.
pub struct Proxied {
    io: TokioIo<tokio::net::TcpStream>,
    absolute_form: bool,
}

impl Connection for Proxied {
    fn connected(&self) -> Connected {
        self.io.connected().proxy(self.absolute_form)
    }
}

impl Read for Proxied {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl Write for Proxied {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uri(s: &str) -> Uri {
        s.parse().unwrap()
    }

    #[test]
    fn each_scheme_takes_its_proxy_and_no_proxy_hosts_go_direct() {
        let proxies = Proxies::new(
            "http://user:secret@proxy.corp:3128",
            "http://plain.corp:8080",
            "mirror.internal, 10.0.0.0/8",
        );
        let shown = |u: &str| proxies.shown_for(&uri(u));
        assert_eq!(
            shown("https://huggingface.co/api/models"),
            Some("http://proxy.corp:3128".into()),
            "credentials are never shown"
        );
        assert_eq!(
            shown("http://hub.lab/x"),
            Some("http://plain.corp:8080".into())
        );
        assert_eq!(shown("https://mirror.internal/x"), None);
        assert_eq!(
            shown("https://cdn.mirror.internal/x"),
            None,
            "subdomains too"
        );
        assert_eq!(shown("https://10.1.2.3/x"), None);
        assert_eq!(
            Proxies::none().shown_for(&uri("https://huggingface.co/")),
            None
        );
        assert!(
            proxies
                .authorization_for(&uri("https://huggingface.co/"))
                .is_none(),
            "https authenticates on the CONNECT, not the request"
        );
        assert!(Proxies::new("", "http://u:p@plain.corp:8080", "")
            .authorization_for(&uri("http://hub.lab/x"))
            .is_some());
    }
}
