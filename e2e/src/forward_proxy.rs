//! A loopback forward proxy, as an outbound proxy of a cluster's network would be: `CONNECT
//! host:port` tunnels (or is refused, to see what was asked), and requests in absolute form
//! (`GET http://host:port/path`) are forwarded to their origin. It records the first line and
//! the `Proxy-Authorization` of each request it received, and may require credentials (407).
//! One request per connection.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// What the proxy saw of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// The request line, e.g. `CONNECT hub.example:443 HTTP/1.1`.
    pub line: String,
    /// The `Proxy-Authorization` header, if any.
    pub authorization: Option<String>,
}

/// A running proxy; stopped on drop.
pub struct ForwardProxy {
    pub address: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: JoinHandle<()>,
}

impl ForwardProxy {
    /// Starts a proxy that tunnels and forwards when `tunnel` (else answers every CONNECT with
    /// 403), and answers 407 to a request without `Proxy-Authorization: <required>` if given.
    pub async fn start(tunnel: bool, required: Option<&str>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding the proxy");
        let address = listener.local_addr().expect("its address");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let required = required.map(str::to_owned);
        let log = seen.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let log = log.clone();
                let required = required.clone();
                tokio::spawn(async move {
                    let _ = serve(client, tunnel, required.as_deref(), &log).await;
                });
            }
        });
        Self {
            address,
            seen,
            task,
        }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// The requests seen so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Drop for ForwardProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(
    mut client: TcpStream,
    tunnel: bool,
    required: Option<&str>,
    log: &Mutex<Vec<Seen>>,
) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if client.read(&mut byte).await? == 0 || head.len() > 64 * 1024 {
            return Ok(());
        }
        head.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let mut lines = text.split("\r\n");
    let line = lines.next().unwrap_or_default().to_owned();
    let headers: Vec<&str> = lines.filter(|l| !l.is_empty()).collect();
    let authorization = headers.iter().find_map(|h| {
        let (name, value) = h.split_once(':')?;
        name.eq_ignore_ascii_case("proxy-authorization")
            .then(|| value.trim().to_owned())
    });
    log.lock().unwrap_or_else(|e| e.into_inner()).push(Seen {
        line: line.clone(),
        authorization: authorization.clone(),
    });
    if required.is_some() && authorization.as_deref() != required {
        return client
            .write_all(b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            .await;
    }
    let mut words = line.split(' ');
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    if method == "CONNECT" {
        if !tunnel {
            return client
                .write_all(
                    b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                )
                .await;
        }
        let mut origin = TcpStream::connect(target).await?;
        client
            .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            .await?;
        tokio::io::copy_bidirectional(&mut client, &mut origin).await?;
        return Ok(());
    }
    // Absolute form: forward to the origin in origin form, one request per connection.
    let Some(rest) = target.strip_prefix("http://") else {
        return client
            .write_all(
                b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            )
            .await;
    };
    let (authority, path) = rest
        .split_once('/')
        .map_or((rest, "/".to_owned()), |(a, p)| (a, format!("/{p}")));
    let mut origin = TcpStream::connect(authority).await?;
    let mut forwarded = format!("{method} {path} HTTP/1.1\r\n");
    for h in headers.iter().filter(|h| {
        let name = h.split(':').next().unwrap_or("").trim();
        !name.eq_ignore_ascii_case("proxy-authorization")
            && !name.eq_ignore_ascii_case("connection")
            && !name.eq_ignore_ascii_case("proxy-connection")
    }) {
        forwarded.push_str(h);
        forwarded.push_str("\r\n");
    }
    forwarded.push_str("Connection: close\r\n\r\n");
    origin.write_all(forwarded.as_bytes()).await?;
    tokio::io::copy_bidirectional(&mut client, &mut origin).await?;
    Ok(())
}
