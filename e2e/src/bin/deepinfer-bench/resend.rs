//! Sending a request again when its connection failed: the floor's requests and the benchmark's
//! own writes that start a phase, so that one connection the API server dropped does not end a
//! run of hours (the operator's pass is retried in the same case).

use std::time::Duration;

/// How many times a request is sent again, the first after [`RESEND_FIRST`], each wait twice the
/// last, at most [`RESEND_LAST`].
const RESENDS: u32 = 8;
const RESEND_FIRST: Duration = Duration::from_millis(100);
const RESEND_LAST: Duration = Duration::from_secs(2);

/// Which failed requests [`sent`] sends again.
#[derive(Clone, Copy, Debug)]
pub enum Repeat {
    /// Only one whose connection failed before it went out (refused, or a TLS handshake the
    /// server closed: one delete of an N = 1000 `floor-ready` ended so, and the whole run with
    /// it). For a create: sent twice, it could meet its own object (409).
    Unsent,
    /// Also one whose connection closed before its answer came (a delete of another N = 1000
    /// `floor-ready` met `peer closed connection without sending TLS close_notify`). For a
    /// request that does the same when done twice: a delete (404 the second time, taken as
    /// done), a patch, a read.
    Unanswered,
}

impl Repeat {
    /// Whether a request that failed with `error` may be sent again under this rule.
    fn resends(self, error: &kube::Error) -> bool {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
        while let Some(e) = source {
            if let Some(client) = e.downcast_ref::<hyper_util::client::legacy::Error>() {
                if client.is_connect() {
                    return true;
                }
            } else if e.is::<hyper::Error>() {
                return matches!(self, Repeat::Unanswered);
            }
            source = e.source();
        }
        false
    }
}

/// The request `send`, sent again while it fails as `repeat` allows (up to [`RESENDS`] times).
/// Any answer, and any other error, is returned as it is.
pub async fn sent<T, F, Fut>(repeat: Repeat, send: F) -> kube::Result<T>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = kube::Result<T>>,
{
    let mut wait = RESEND_FIRST;
    let mut resent = 0;
    loop {
        match send().await {
            Err(e) if resent < RESENDS && repeat.resends(&e) => {
                resent += 1;
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(RESEND_LAST);
            }
            answered => return answered,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use kube::{Api, Client};
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A client (of `scheme`) of a server that takes each connection to `hang_up`.
    fn client_of(scheme: &str, hang_up: fn(std::net::TcpStream)) -> Client {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for connection in listener.incoming() {
                hang_up(connection.unwrap());
            }
        });
        let config = kube::Config::new(format!("{scheme}://{address}").parse().unwrap());
        Client::try_from(config).unwrap()
    }

    /// A server that closes each connection during the TLS handshake: the request never went out.
    fn during_the_handshake() -> Client {
        client_of("https", drop)
    }

    /// A server (plain HTTP) that reads each request and closes the connection without an answer.
    fn unanswered() -> Client {
        client_of("http", |mut connection| {
            use std::io::Read;
            let _ = connection.read(&mut [0; 4096]);
        })
    }

    /// Sends through `repeat` a get to `client`'s server the first two times, then takes an
    /// answer; what came back, and how many times it was sent.
    async fn sends(client: Client, repeat: Repeat) -> (kube::Result<&'static str>, u32) {
        let pods: Api<Pod> = Api::namespaced(client, "floor");
        let sends = AtomicU32::new(0);
        let got = sent(repeat, || async {
            match sends.fetch_add(1, Ordering::SeqCst) {
                0 | 1 => pods.get("p").await.map(|_| "hung up"),
                _ => Ok("answered"),
            }
        })
        .await;
        (got, sends.load(Ordering::SeqCst))
    }

    #[tokio::test]
    async fn a_request_whose_connection_failed_is_sent_again() {
        let (got, sends) = sends(during_the_handshake(), Repeat::Unsent).await;
        assert_eq!(got.unwrap(), "answered");
        assert_eq!(sends, 3);
    }

    #[tokio::test]
    async fn a_repeatable_request_whose_connection_closed_unanswered_is_sent_again() {
        let (got, sends) = sends(unanswered(), Repeat::Unanswered).await;
        assert_eq!(got.unwrap(), "answered");
        assert_eq!(sends, 3);
    }

    #[tokio::test]
    async fn a_create_whose_connection_closed_unanswered_is_not_sent_again() {
        let (got, sends) = sends(unanswered(), Repeat::Unsent).await;
        assert!(got.is_err());
        assert_eq!(sends, 1);
    }

    #[tokio::test]
    async fn an_answer_is_not_sent_again() {
        let sends = AtomicU32::new(0);
        let got: kube::Result<()> = sent(Repeat::Unanswered, || async {
            sends.fetch_add(1, Ordering::SeqCst);
            Err(kube::Error::Api(Box::new(
                kube::core::Status::failure("pods \"p\" already exists", "AlreadyExists")
                    .with_code(409),
            )))
        })
        .await;
        assert!(matches!(got, Err(kube::Error::Api(s)) if s.code == 409));
        assert_eq!(sends.load(Ordering::SeqCst), 1);
    }
}
