//! A loopback stand-in for the Hugging Face hub, serving fixture checkpoints to
//! `deepinfer-runner fetch-checkpoint` in tests.
//!
//! It answers the two endpoints the fetcher uses, like the real hub:
//! - `GET /api/models/{repo}/revision/{rev}` → `{"id","sha","siblings":[{"rfilename","size","blobId","lfs"}]}`
//!   (`blobId` the git blob SHA-1, of the LFS pointer for LFS files; `lfs` with size and SHA-256
//!   for `*.safetensors`);
//! - `GET /{repo}/resolve/{rev}/{path}` → the file, except LFS files, which are redirected (302)
//!   to a second listener standing in for the CDN. That listener has another port, so it is
//!   another origin: like a signed CDN URL it refuses requests carrying `Authorization`.
//!
//! Minimal HTTP/1.1 on tokio: one request per connection, `Connection: close`.
//! Faults make it serve a corrupt checkpoint or fail on purpose.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use deepinfer_operator::checkpoint::fetch;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// Repository id under which [`HubConfig::fixture`] serves the fixture checkpoint.
pub const FIXTURE_REPO: &str = "deepinfer-fixtures/tiny-deepseek";
/// Its revision.
pub const FIXTURE_REVISION: &str = "5f1c0ffee0ddba11ab1e5eedcafe0123456789ab";

/// The committed fixture checkpoint, `e2e/fixtures/checkpoint`.
pub fn fixture_checkpoint_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/checkpoint")
}

/// A deliberate defect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Serve `file` cut to `len` bytes, consistently in the listing and the download: the fetch
    /// succeeds and verification must catch it.
    Truncate { file: String, len: usize },
    /// Answer downloads of `file` with this HTTP status.
    Status { file: String, status: u16 },
    /// Announce `file`'s full length but close the connection after `len` bytes.
    CutTransfer { file: String, len: usize },
    /// List `file` truly but serve it with its first byte changed (same length).
    CorruptDownload { file: String },
    /// List `file` without any hash (no `blobId`, no `lfs.sha256`).
    NoHash { file: String },
    /// List `file` truly but serve `extra` more bytes after it (a server that sends more than
    /// it lists).
    Oversize { file: String, extra: usize },
}

/// One repository at one revision, backed by a directory.
#[derive(Debug, Clone)]
pub struct HubRepo {
    /// Repository id, `owner/name`.
    pub id: String,
    /// The only revision served.
    pub revision: String,
    /// Directory holding the files.
    pub dir: PathBuf,
}

/// What the hub serves.
#[derive(Debug, Clone, Default)]
pub struct HubConfig {
    /// Repositories.
    pub repos: Vec<HubRepo>,
    /// Defects to inject.
    pub faults: Vec<Fault>,
    /// When set, hub requests need `Authorization: Bearer <token>` (401 otherwise).
    pub token: Option<String>,
}

impl HubConfig {
    /// The fixture checkpoint as [`FIXTURE_REPO`] at [`FIXTURE_REVISION`].
    pub fn fixture() -> Self {
        Self::default().repo(FIXTURE_REPO, FIXTURE_REVISION, fixture_checkpoint_dir())
    }

    /// Adds a repository.
    pub fn repo(mut self, id: &str, revision: &str, dir: impl Into<PathBuf>) -> Self {
        self.repos.push(HubRepo {
            id: id.into(),
            revision: revision.into(),
            dir: dir.into(),
        });
        self
    }

    /// Adds a fault.
    pub fn fault(mut self, fault: Fault) -> Self {
        self.faults.push(fault);
        self
    }

    /// Requires a bearer token.
    pub fn token(mut self, token: &str) -> Self {
        self.token = Some(token.into());
        self
    }
}

/// A running hub; stops when dropped.
pub struct FixtureHub {
    /// The hub's address (use [`FixtureHub::endpoint`] as `HF_ENDPOINT`).
    pub addr: SocketAddr,
    /// The CDN stand-in's address.
    pub cdn_addr: SocketAddr,
    log: Arc<Mutex<Vec<String>>>,
    tasks: Vec<JoinHandle<()>>,
}

impl FixtureHub {
    /// `http://127.0.0.1:<port>`, for `--endpoint` or `HF_ENDPOINT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Requests served so far, as `"<hub|cdn> <METHOD> <path> <status>"`.
    pub fn requests(&self) -> Vec<String> {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }
}

impl Drop for FixtureHub {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Serves `config` on two loopback ports (hub and CDN) until the returned value is dropped.
pub async fn serve(config: HubConfig) -> std::io::Result<FixtureHub> {
    let hub = TcpListener::bind("127.0.0.1:0").await?;
    let cdn = TcpListener::bind("127.0.0.1:0").await?;
    let state = Arc::new(State {
        config,
        cdn_addr: cdn.local_addr()?,
        log: Arc::default(),
    });
    let addr = hub.local_addr()?;
    let tasks = vec![
        tokio::spawn(accept_loop(hub, state.clone(), Origin::Hub)),
        tokio::spawn(accept_loop(cdn, state.clone(), Origin::Cdn)),
    ];
    Ok(FixtureHub {
        addr,
        cdn_addr: state.cdn_addr,
        log: state.log.clone(),
        tasks,
    })
}

struct State {
    config: HubConfig,
    cdn_addr: SocketAddr,
    log: Arc<Mutex<Vec<String>>>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Origin {
    Hub,
    Cdn,
}

struct Reply {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
    /// Close after this many body bytes despite the announced length.
    cut_at: Option<usize>,
}

impl Reply {
    fn json(status: u16, value: serde_json::Value) -> Self {
        Self {
            status,
            headers: vec![("Content-Type", "application/json".into())],
            body: value.to_string().into_bytes(),
            cut_at: None,
        }
    }
    fn error(status: u16, message: &str) -> Self {
        Self::json(status, serde_json::json!({ "error": message }))
    }
}

async fn accept_loop(listener: TcpListener, state: Arc<State>, origin: Origin) {
    while let Ok((stream, _)) = listener.accept().await {
        let state = state.clone();
        tokio::spawn(async move {
            let _ =
                tokio::time::timeout(Duration::from_secs(30), handle(stream, &state, origin)).await;
        });
    }
}

async fn handle(mut stream: TcpStream, state: &State, origin: Origin) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).await?;
        if n == 0 || head.len() > 64 * 1024 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&head);
    let mut lines = text.split("\r\n");
    let mut request_line = lines.next().unwrap_or_default().split(' ');
    let method = request_line.next().unwrap_or_default().to_string();
    let target = request_line.next().unwrap_or_default().to_string();
    let authorization = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("authorization"))
        .map(|(_, value)| value.trim().to_string());

    let reply = if method != "GET" && method != "HEAD" {
        Reply::error(405, "method not allowed")
    } else {
        route(state, origin, &target, authorization.as_deref())
    };
    if let Ok(mut log) = state.log.lock() {
        let side = if origin == Origin::Hub { "hub" } else { "cdn" };
        log.push(format!("{side} {method} {target} {}", reply.status));
    }

    let mut out = format!(
        "HTTP/1.1 {} {}\r\nContent-Length: {}\r\nConnection: close\r\n",
        reply.status,
        reason(reply.status),
        reply.body.len()
    );
    for (name, value) in &reply.headers {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    out.push_str("\r\n");
    stream.write_all(out.as_bytes()).await?;
    if method == "GET" {
        let end = reply
            .cut_at
            .unwrap_or(reply.body.len())
            .min(reply.body.len());
        stream.write_all(&reply.body[..end]).await?;
    }
    stream.shutdown().await
}

fn route(state: &State, origin: Origin, target: &str, authorization: Option<&str>) -> Reply {
    let path = percent_decode(target.split('?').next().unwrap_or_default());
    if origin == Origin::Cdn {
        // A signed CDN URL carries its own credentials; S3 refuses a second set.
        if authorization.is_some() {
            return Reply::error(400, "Only one auth mechanism allowed");
        }
        let Some(rest) = path.strip_prefix("/cdn/") else {
            return Reply::error(404, "not found");
        };
        return match split_repo_rev(state, rest) {
            Some((repo, file)) => file_reply(state, repo, file),
            None => Reply::error(404, "not found"),
        };
    }
    if let Some(token) = &state.config.token {
        if authorization != Some(format!("Bearer {token}").as_str()) {
            return Reply::error(401, "Invalid credentials in Authorization header");
        }
    }
    if let Some(rest) = path.strip_prefix("/api/models/") {
        let Some((id, revision)) = rest.rsplit_once("/revision/") else {
            return Reply::error(404, "not found");
        };
        return match find_repo(state, id, revision) {
            Ok(repo) => listing(state, repo),
            Err(reply) => reply,
        };
    }
    let Some((id, rest)) = path.trim_start_matches('/').split_once("/resolve/") else {
        return Reply::error(404, "not found");
    };
    let Some((revision, file)) = rest.split_once('/') else {
        return Reply::error(404, "not found");
    };
    let repo = match find_repo(state, id, revision) {
        Ok(repo) => repo,
        Err(reply) => return reply,
    };
    if is_lfs(file) && served_bytes(state, repo, file).is_some() {
        let location = format!(
            "http://{}/cdn/{}/{}/{}?X-Amz-Signature=fixture",
            state.cdn_addr, repo.id, repo.revision, file
        );
        return Reply {
            status: 302,
            headers: vec![("Location", location)],
            body: Vec::new(),
            cut_at: None,
        };
    }
    file_reply(state, repo, file)
}

fn find_repo<'a>(state: &'a State, id: &str, revision: &str) -> Result<&'a HubRepo, Reply> {
    let repo = state
        .config
        .repos
        .iter()
        .find(|r| r.id == id)
        .ok_or_else(|| Reply::error(404, "Repository not found"))?;
    if repo.revision != revision {
        return Err(Reply::error(404, &format!("Invalid rev id: {revision}")));
    }
    Ok(repo)
}

/// `{repo id}/{revision}/{file}` of a CDN path.
fn split_repo_rev<'a>(state: &'a State, rest: &'a str) -> Option<(&'a HubRepo, &'a str)> {
    state.config.repos.iter().find_map(|repo| {
        let file = rest
            .strip_prefix(repo.id.as_str())?
            .strip_prefix('/')?
            .strip_prefix(repo.revision.as_str())?
            .strip_prefix('/')?;
        Some((repo, file))
    })
}

fn is_lfs(file: &str) -> bool {
    file.ends_with(".safetensors")
}

/// Every file below `dir`, relative, `/`-separated, sorted.
fn list_files(dir: &Path) -> Vec<String> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(base, &path, out);
            } else if let Ok(rel) = path.strip_prefix(base) {
                out.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// The bytes served for `file`, faults applied; `None` when it does not exist.
fn served_bytes(state: &State, repo: &HubRepo, file: &str) -> Option<Vec<u8>> {
    if file.split('/').any(|part| part == ".." || part.is_empty()) {
        return None;
    }
    let mut bytes = std::fs::read(repo.dir.join(file)).ok()?;
    for fault in &state.config.faults {
        if let Fault::Truncate { file: f, len } = fault {
            if f == file {
                bytes.truncate(*len);
            }
        }
    }
    Some(bytes)
}

fn listing(state: &State, repo: &HubRepo) -> Reply {
    let siblings: Vec<serde_json::Value> = list_files(&repo.dir)
        .into_iter()
        .filter_map(|file| {
            let bytes = served_bytes(state, repo, &file)?;
            let mut entry = serde_json::json!({ "rfilename": file, "size": bytes.len() });
            let unhashed = state
                .config
                .faults
                .contains(&Fault::NoHash { file: file.clone() });
            if is_lfs(&file) {
                let sha256 = fetch::sha256_hex(&bytes);
                let pointer = format!(
                    "version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {}\n",
                    bytes.len()
                );
                entry["lfs"] = serde_json::json!({
                    "size": bytes.len(),
                    "pointerSize": pointer.len(),
                });
                if !unhashed {
                    entry["lfs"]["sha256"] = sha256.into();
                    entry["blobId"] = fetch::git_blob_sha1_hex(pointer.as_bytes()).into();
                }
            } else if !unhashed {
                entry["blobId"] = fetch::git_blob_sha1_hex(&bytes).into();
            }
            Some(entry)
        })
        .collect();
    Reply::json(
        200,
        serde_json::json!({ "id": repo.id, "sha": repo.revision, "siblings": siblings }),
    )
}

fn file_reply(state: &State, repo: &HubRepo, file: &str) -> Reply {
    let mut cut_at = None;
    for fault in &state.config.faults {
        match fault {
            Fault::Status { file: f, status } if f == file => {
                return Reply::error(*status, "injected fault");
            }
            Fault::CutTransfer { file: f, len } if f == file => cut_at = Some(*len),
            _ => {}
        }
    }
    let extra = state
        .config
        .faults
        .iter()
        .find_map(|f| match f {
            Fault::Oversize { file: f, extra } if f == file => Some(*extra),
            _ => None,
        })
        .unwrap_or(0);
    let corrupt = state
        .config
        .faults
        .contains(&Fault::CorruptDownload { file: file.into() });
    match served_bytes(state, repo, file) {
        Some(mut body) => Reply {
            status: 200,
            headers: vec![("Content-Type", "application/octet-stream".into())],
            body: {
                if let Some(first) = body.first_mut().filter(|_| corrupt) {
                    *first ^= 0xff;
                }
                body.extend(std::iter::repeat_n(b' ', extra));
                body
            },
            cut_at,
        },
        None => Reply::error(404, "Entry not found"),
    }
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        302 => "Found",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        500 => "Internal Server Error",
        _ => "Status",
    }
}
