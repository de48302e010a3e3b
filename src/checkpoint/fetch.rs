//! `fetch-checkpoint`: downloads one pinned hub revision into a directory, once.
//!
//! Uses the Hugging Face HTTP API: `GET {endpoint}/api/models/{repo}/revision/{rev}?blobs=true`
//! lists the files (with sizes and LFS SHA-256), `GET {endpoint}/{repo}/resolve/{rev}/{file}`
//! downloads one (following redirects to the CDN). Each file is written to a temporary name and
//! renamed when complete; files already present with the listed size are kept. A marker file
//! records the revision and file list at the end, so a re-run of a finished fetch needs no network
//! and the verifier can tell a complete fetch from an interrupted one.

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt as _;
use http_body_util::{BodyExt as _, Empty};
use hyper::body::{Bytes, Incoming};
use hyper::{header, Request, Response, StatusCode, Uri};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt as _;

use super::verify::is_safe_relative;

/// Records a fetch in the destination directory (a dot file: not part of the checkpoint).
pub const MARKER_FILE: &str = ".deepinfer-fetch.json";
/// Default hub endpoint when neither `--endpoint` nor `HF_ENDPOINT` is set.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

const PARALLEL_DOWNLOADS: usize = 4;
const ATTEMPTS: u32 = 3;
const MAX_REDIRECTS: u32 = 10;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest wait for a response head, or between two chunks of a body.
const IDLE_TIMEOUT: Duration = Duration::from_secs(120);
const MAX_LISTING_BYTES: usize = 64 << 20;

/// The marker written into the destination.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct FetchMarker {
    /// Hub repository id.
    pub repo: String,
    /// The 40-hex revision.
    pub revision: String,
    /// False while a fetch is under way or after it failed.
    pub complete: bool,
    /// Every file of the revision with its size.
    #[serde(default)]
    pub files: Vec<MarkerFile>,
}

/// One fetched file.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct MarkerFile {
    /// Path relative to the destination.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
}

/// Result of `fetch-checkpoint`, written as JSON to stdout and the termination message.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct FetchReport {
    /// True when every file is in place.
    pub ok: bool,
    /// Hub repository id.
    #[serde(default)]
    pub repo: String,
    /// The revision fetched.
    #[serde(default)]
    pub revision: String,
    /// Files in the revision.
    #[serde(default)]
    pub files: u64,
    /// Their total size in bytes.
    #[serde(default)]
    pub bytes: u64,
    /// Files downloaded by this run.
    #[serde(default)]
    pub downloaded: u64,
    /// Files already present with the right size.
    #[serde(default)]
    pub skipped: u64,
    /// What failed: the file or URL, the HTTP status, and what to do.
    #[serde(default)]
    pub problems: Vec<String>,
}

/// What to fetch and from where.
#[derive(Debug, Clone)]
pub struct FetchRequest {
    /// Hub repository id, `owner/name`.
    pub repo: String,
    /// Full 40-hex commit.
    pub revision: String,
    /// Destination directory (created if missing).
    pub dest: PathBuf,
    /// Hub base URL, `http` or `https`.
    pub endpoint: String,
    /// Bearer token for gated or private repositories.
    pub token: Option<String>,
}

impl FetchRequest {
    /// Checks the arguments; an error means "bad arguments" (exit code 2).
    pub fn validate(&self) -> Result<(), String> {
        if !is_repo_id(&self.repo) {
            return Err(format!(
                "--repo `{}` is not a hub repository id like `deepseek-ai/DeepSeek-V3`",
                self.repo
            ));
        }
        if self.revision.len() != 40 || !self.revision.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!(
                "--revision `{}` is not a full 40-hex commit: pin the checkpoint by commit, never a branch or tag",
                self.revision
            ));
        }
        let uri: Uri = self
            .endpoint
            .parse()
            .map_err(|e| format!("--endpoint `{}` is not a URL: {e}", self.endpoint))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.authority().is_none() {
            return Err(format!(
                "--endpoint `{}` must be an http:// or https:// URL",
                self.endpoint
            ));
        }
        Ok(())
    }
}

fn is_repo_id(repo: &str) -> bool {
    let part_ok = |p: &str| {
        !p.is_empty()
            && p.len() <= 96
            && !p.starts_with(['.', '-'])
            && !p.contains("..")
            && p.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    };
    let parts: Vec<&str> = repo.split('/').collect();
    matches!(parts.len(), 1 | 2) && parts.iter().all(|p| part_ok(p))
}

/// Fetches `req.revision` of `req.repo` into `req.dest`. Assumes [`FetchRequest::validate`] passed.
pub async fn fetch_checkpoint(req: &FetchRequest) -> FetchReport {
    let mut report = FetchReport {
        repo: req.repo.clone(),
        revision: req.revision.clone(),
        ..FetchReport::default()
    };
    if let Err(problem) = run(req, &mut report).await {
        report.problems.push(problem);
    }
    report.ok = report.problems.is_empty();
    report
}

async fn run(req: &FetchRequest, report: &mut FetchReport) -> Result<(), String> {
    tokio::fs::create_dir_all(&req.dest)
        .await
        .map_err(|e| format!("{}: cannot be created: {e}", req.dest.display()))?;
    let previous = read_marker(&req.dest).await;
    let same_revision = previous
        .as_ref()
        .is_none_or(|m| m.repo == req.repo && m.revision.eq_ignore_ascii_case(&req.revision));
    if let Some(done) = previous.as_ref().filter(|m| m.complete && same_revision) {
        if all_present(&req.dest, &done.files).await {
            report.files = done.files.len() as u64;
            report.bytes = done.files.iter().map(|f| f.size).sum();
            report.skipped = report.files;
            eprintln!("{MARKER_FILE}: revision {} already complete", req.revision);
            return Ok(());
        }
    }
    write_marker(
        &req.dest,
        &FetchMarker {
            repo: req.repo.clone(),
            revision: req.revision.clone(),
            complete: false,
            files: Vec::new(),
        },
    )
    .await?;

    let hub = Hub::new(req)?;
    let listing = hub.list().await?;
    if let Some(sha) = &listing.sha {
        if !sha.eq_ignore_ascii_case(&req.revision) {
            return Err(format!(
                "{} answered for commit {sha} instead of {}: check the revision",
                hub.listing_url(),
                req.revision
            ));
        }
    }
    let mut entries = Vec::new();
    for sibling in listing.siblings {
        if !is_safe_relative(&sibling.rfilename) || sibling.rfilename == MARKER_FILE {
            report.problems.push(format!(
                "{}: the hub lists a file named `{}`, which would land outside the destination; refusing it",
                hub.listing_url(),
                sibling.rfilename
            ));
            continue;
        }
        let size = sibling.lfs.as_ref().and_then(|l| l.size).or(sibling.size);
        let sha256 = sibling.lfs.and_then(|l| l.sha256);
        entries.push(Entry {
            path: sibling.rfilename,
            size,
            sha256,
        });
    }
    if !report.problems.is_empty() {
        return Ok(());
    }

    report.files = entries.len() as u64;
    let results: Vec<(Entry, Outcome)> = futures::stream::iter(entries)
        .map(|entry| {
            let hub = &hub;
            async move {
                let outcome = hub.ensure(&entry, &req.dest, same_revision).await;
                (entry, outcome)
            }
        })
        .buffer_unordered(PARALLEL_DOWNLOADS)
        .collect()
        .await;
    let mut files = Vec::new();
    for (entry, outcome) in results {
        match outcome {
            Ok((size, downloaded)) => {
                report.bytes += size;
                if downloaded {
                    report.downloaded += 1;
                } else {
                    report.skipped += 1;
                }
                files.push(MarkerFile {
                    path: entry.path,
                    size,
                });
            }
            Err(problem) => report.problems.push(problem),
        }
    }
    report.problems.sort();
    files.sort_by(|a, b| a.path.cmp(&b.path));
    if report.problems.is_empty() {
        write_marker(
            &req.dest,
            &FetchMarker {
                repo: req.repo.clone(),
                revision: req.revision.clone(),
                complete: true,
                files,
            },
        )
        .await?;
    }
    Ok(())
}

async fn read_marker(dest: &Path) -> Option<FetchMarker> {
    let bytes = tokio::fs::read(dest.join(MARKER_FILE)).await.ok()?;
    serde_json::from_slice(&bytes).ok()
}

async fn write_marker(dest: &Path, marker: &FetchMarker) -> Result<(), String> {
    let path = dest.join(MARKER_FILE);
    let tmp = dest.join(format!("{MARKER_FILE}.partial"));
    let json = serde_json::to_vec_pretty(marker).map_err(|e| e.to_string())?;
    tokio::fs::write(&tmp, json)
        .await
        .map_err(|e| format!("{}: cannot be written: {e}", tmp.display()))?;
    tokio::fs::rename(&tmp, &path)
        .await
        .map_err(|e| format!("{}: cannot be written: {e}", path.display()))
}

async fn all_present(dest: &Path, files: &[MarkerFile]) -> bool {
    for file in files {
        match tokio::fs::metadata(dest.join(&file.path)).await {
            Ok(m) if m.is_file() && m.len() == file.size => {}
            _ => return false,
        }
    }
    true
}

/// A file's size and whether this run downloaded it, or the problem.
type Outcome = Result<(u64, bool), String>;

/// One file of the listing.
#[derive(Debug, Clone)]
struct Entry {
    path: String,
    size: Option<u64>,
    sha256: Option<String>,
}

#[derive(Deserialize)]
struct ModelInfo {
    #[serde(default)]
    sha: Option<String>,
    #[serde(default)]
    siblings: Vec<Sibling>,
}

#[derive(Deserialize)]
struct Sibling {
    rfilename: String,
    #[serde(default)]
    size: Option<u64>,
    #[serde(default)]
    lfs: Option<Lfs>,
}

#[derive(Deserialize)]
struct Lfs {
    #[serde(default)]
    size: Option<u64>,
    #[serde(default)]
    sha256: Option<String>,
}

/// A failed attempt: retried when transient.
struct Failure {
    message: String,
    transient: bool,
}

impl Failure {
    fn permanent(message: String) -> Self {
        Self {
            message,
            transient: false,
        }
    }
    fn transient(message: String) -> Self {
        Self {
            message,
            transient: true,
        }
    }
}

type HttpClient = Client<HttpsConnector<HttpConnector>, Empty<Bytes>>;

struct Hub<'a> {
    client: HttpClient,
    req: &'a FetchRequest,
    base: String,
}

impl<'a> Hub<'a> {
    fn new(req: &'a FetchRequest) -> Result<Self, String> {
        Ok(Self {
            client: http_client()?,
            req,
            base: req.endpoint.trim_end_matches('/').to_string(),
        })
    }

    fn listing_url(&self) -> String {
        format!(
            "{}/api/models/{}/revision/{}",
            self.base, self.req.repo, self.req.revision
        )
    }

    fn file_url(&self, path: &str) -> String {
        format!(
            "{}/{}/resolve/{}/{}",
            self.base,
            self.req.repo,
            self.req.revision,
            encode_path(path)
        )
    }

    async fn list(&self) -> Result<ModelInfo, String> {
        let url = format!("{}?blobs=true", self.listing_url());
        let mut last = String::new();
        for attempt in 0..ATTEMPTS {
            backoff(attempt).await;
            match self.get_json(&url).await {
                Ok(info) => return Ok(info),
                Err(f) if f.transient => last = f.message,
                Err(f) => return Err(f.message),
            }
        }
        Err(format!("{last} (after {ATTEMPTS} attempts)"))
    }

    async fn get_json(&self, url: &str) -> Result<ModelInfo, Failure> {
        let response = self.get(url).await?;
        let mut body = response.into_body();
        let mut buf = Vec::new();
        while let Some(frame) = next_frame(&mut body, url).await? {
            buf.extend_from_slice(&frame);
            if buf.len() > MAX_LISTING_BYTES {
                return Err(Failure::permanent(format!(
                    "{}: listing larger than {MAX_LISTING_BYTES} bytes",
                    display_url(url)
                )));
            }
        }
        serde_json::from_slice(&buf).map_err(|e| {
            Failure::permanent(format!(
                "{}: the answer is not a model listing ({e}): check --endpoint",
                display_url(url)
            ))
        })
    }

    /// Makes sure `entry` is in `dest`; returns its size and whether it was downloaded.
    async fn ensure(&self, entry: &Entry, dest: &Path, trust_existing: bool) -> Outcome {
        let target = dest.join(&entry.path);
        if let (true, Some(size)) = (trust_existing, entry.size) {
            if let Ok(m) = tokio::fs::metadata(&target).await {
                if m.is_file() && m.len() == size {
                    return Ok((size, false));
                }
            }
        }
        let url = self.file_url(&entry.path);
        let mut last = String::new();
        for attempt in 0..ATTEMPTS {
            backoff(attempt).await;
            match self.download(&url, entry, &target).await {
                Ok(size) => {
                    eprintln!("fetched {} ({size} bytes)", entry.path);
                    return Ok((size, true));
                }
                Err(f) if f.transient => last = f.message,
                Err(f) => return Err(f.message),
            }
        }
        Err(format!("{last} (after {ATTEMPTS} attempts)"))
    }

    async fn download(&self, url: &str, entry: &Entry, target: &Path) -> Result<u64, Failure> {
        let io = |what: &Path, e: std::io::Error| {
            Failure::permanent(format!("{}: cannot be written: {e}", what.display()))
        };
        let response = self.get(url).await?;
        let declared = response
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let parent = target.parent().unwrap_or(target);
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(|e| io(parent, e))?;
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = parent.join(format!(".{name}.deepinfer-partial"));
        let mut file = tokio::fs::File::create(&tmp)
            .await
            .map_err(|e| io(&tmp, e))?;
        let mut hasher = entry
            .sha256
            .as_ref()
            .map(|_| ring::digest::Context::new(&ring::digest::SHA256));
        let mut body = response.into_body();
        let mut received = 0u64;
        while let Some(chunk) = next_frame(&mut body, url).await? {
            file.write_all(&chunk).await.map_err(|e| io(&tmp, e))?;
            if let Some(h) = hasher.as_mut() {
                h.update(&chunk);
            }
            received += chunk.len() as u64;
        }
        file.sync_all().await.map_err(|e| io(&tmp, e))?;
        drop(file);
        let fail = |message: String| {
            let tmp = tmp.clone();
            async move {
                let _ = tokio::fs::remove_file(&tmp).await;
                Err(Failure::transient(message))
            }
        };
        if let Some(len) = declared.filter(|len| *len != received) {
            return fail(format!(
                "{}: {}: received {received} of {len} bytes (connection cut)",
                entry.path,
                display_url(url)
            ))
            .await;
        }
        if let Some(size) = entry.size.filter(|size| *size != received) {
            return fail(format!(
                "{}: {}: received {received} bytes but the hub lists {size}",
                entry.path,
                display_url(url)
            ))
            .await;
        }
        if let (Some(want), Some(h)) = (&entry.sha256, hasher) {
            let got = hex(h.finish().as_ref());
            if !got.eq_ignore_ascii_case(want) {
                return fail(format!(
                    "{}: {}: SHA-256 {got} differs from the hub's {want} (corrupted transfer)",
                    entry.path,
                    display_url(url)
                ))
                .await;
            }
        }
        tokio::fs::rename(&tmp, target)
            .await
            .map_err(|e| io(target, e))?;
        Ok(received)
    }

    /// GET with redirects; a non-success status is a failure naming the URL and status.
    async fn get(&self, url: &str) -> Result<Response<Incoming>, Failure> {
        let origin: Uri = self.base.parse().map_err(|e| {
            Failure::permanent(format!("--endpoint `{}` is not a URL: {e}", self.base))
        })?;
        let mut uri: Uri = url
            .parse()
            .map_err(|e| Failure::permanent(format!("{url}: not a URL: {e}")))?;
        for _ in 0..=MAX_REDIRECTS {
            let mut request = Request::get(uri.clone()).header(
                header::USER_AGENT,
                concat!("deepinfer-operator/", env!("CARGO_PKG_VERSION")),
            );
            // The token goes to the hub only, never to the CDN a download redirects to.
            if let Some(token) = &self.req.token {
                if uri.authority() == origin.authority() {
                    request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
                }
            }
            let request = request.body(Empty::new()).map_err(|e| {
                Failure::permanent(format!(
                    "{}: bad request: {e}",
                    display_url(&uri.to_string())
                ))
            })?;
            let shown = display_url(&uri.to_string());
            let response =
                match tokio::time::timeout(IDLE_TIMEOUT, self.client.request(request)).await {
                    Err(_) => {
                        return Err(Failure::transient(format!(
                            "{shown}: no answer within {}s",
                            IDLE_TIMEOUT.as_secs()
                        )))
                    }
                    Ok(Err(e)) => {
                        return Err(Failure::transient(format!(
                            "{shown}: request failed: {}",
                            error_chain(&e)
                        )))
                    }
                    Ok(Ok(response)) => response,
                };
            let status = response.status();
            if status.is_redirection() && status != StatusCode::NOT_MODIFIED {
                let location = response
                    .headers()
                    .get(header::LOCATION)
                    .and_then(|l| l.to_str().ok())
                    .ok_or_else(|| {
                        Failure::permanent(format!("{shown}: HTTP {status} without a Location"))
                    })?;
                uri = resolve(&uri, location).map_err(|e| {
                    Failure::permanent(format!("{shown}: HTTP {status} to a bad Location: {e}"))
                })?;
                continue;
            }
            if status.is_success() {
                return Ok(response);
            }
            let hint = match status.as_u16() {
                401 | 403 => "the repository is gated or private: set HF_TOKEN to a token whose account accepted the model's terms",
                404 => "check spec.model.name and the revision exist on the hub (and --endpoint)",
                429 => "rate limited by the hub: the Job retries",
                _ if status.is_server_error() => "the hub failed: the Job retries",
                _ => "unexpected answer from the hub",
            };
            let message = format!("{shown}: HTTP {status}: {hint}");
            return Err(
                if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
                    Failure::transient(message)
                } else {
                    Failure::permanent(message)
                },
            );
        }
        Err(Failure::permanent(format!(
            "{}: more than {MAX_REDIRECTS} redirects",
            display_url(url)
        )))
    }
}

async fn next_frame(body: &mut Incoming, url: &str) -> Result<Option<Bytes>, Failure> {
    loop {
        match tokio::time::timeout(IDLE_TIMEOUT, body.frame()).await {
            Err(_) => {
                return Err(Failure::transient(format!(
                    "{}: stalled for {}s",
                    display_url(url),
                    IDLE_TIMEOUT.as_secs()
                )))
            }
            Ok(None) => return Ok(None),
            Ok(Some(Err(e))) => {
                return Err(Failure::transient(format!(
                    "{}: transfer failed: {}",
                    display_url(url),
                    error_chain(&e)
                )))
            }
            Ok(Some(Ok(frame))) => {
                if let Ok(data) = frame.into_data() {
                    return Ok(Some(data));
                }
            }
        }
    }
}

async fn backoff(attempt: u32) {
    if attempt > 0 {
        tokio::time::sleep(Duration::from_millis(500 << attempt)).await;
    }
}

fn http_client() -> Result<HttpClient, String> {
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let builder = match hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_native_roots(provider.clone())
    {
        Ok(builder) => builder,
        // No CA certificates on this machine: plain http still works, https will fail to verify.
        Err(_) => hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(
            rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| format!("TLS setup failed: {e}"))?
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth(),
        ),
    };
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(Some(CONNECT_TIMEOUT));
    let connector = builder.https_or_http().enable_http1().wrap_connector(http);
    Ok(Client::builder(TokioExecutor::new()).build(connector))
}

/// Lower-case hex SHA-256 of `data`, as the hub lists it for LFS files.
pub fn sha256_hex(data: &[u8]) -> String {
    hex(ring::digest::digest(&ring::digest::SHA256, data).as_ref())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// A URL without its query (signed CDN URLs carry credentials there).
fn display_url(url: &str) -> String {
    url.split('?').next().unwrap_or(url).to_string()
}

/// Percent-encodes a repository path, keeping `/` separators.
fn encode_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Resolves a redirect's Location against the URL that answered it.
fn resolve(base: &Uri, location: &str) -> Result<Uri, String> {
    let scheme = base.scheme_str().unwrap_or("https");
    let authority = base.authority().map(|a| a.as_str()).unwrap_or_default();
    let absolute = if location.starts_with("http://") || location.starts_with("https://") {
        location.to_string()
    } else if let Some(rest) = location.strip_prefix("//") {
        format!("{scheme}://{rest}")
    } else if location.starts_with('/') {
        format!("{scheme}://{authority}{location}")
    } else {
        let path = base.path();
        let dir = &path[..path.rfind('/').map_or(0, |i| i + 1)];
        format!("{scheme}://{authority}{dir}{location}")
    };
    absolute.parse().map_err(|e| format!("`{location}`: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates_arguments() {
        let ok = FetchRequest {
            repo: "deepseek-ai/DeepSeek-V3".into(),
            revision: "a".repeat(40),
            dest: PathBuf::from("/tmp/x"),
            endpoint: DEFAULT_ENDPOINT.into(),
            token: None,
        };
        assert!(ok.validate().is_ok());
        let with = |f: &dyn Fn(&mut FetchRequest)| {
            let mut r = ok.clone();
            f(&mut r);
            r.validate().unwrap_err()
        };
        assert!(with(&|r| r.revision = "main".into()).contains("40-hex"));
        assert!(with(&|r| r.revision = "g".repeat(40)).contains("40-hex"));
        assert!(with(&|r| r.repo = "../etc".into()).contains("--repo"));
        assert!(with(&|r| r.repo = "a/b/c".into()).contains("--repo"));
        assert!(with(&|r| r.endpoint = "ftp://x".into()).contains("--endpoint"));
        assert!(with(&|r| r.endpoint = "not a url".into()).contains("--endpoint"));
    }

    #[test]
    fn resolves_redirects() {
        let base: Uri = "https://huggingface.co/org/m/resolve/abc/model.safetensors"
            .parse()
            .unwrap();
        let cases = [
            ("https://cdn.example/x?sig=1", "https://cdn.example/x?sig=1"),
            (
                "/api/resolve-cache/x",
                "https://huggingface.co/api/resolve-cache/x",
            ),
            ("//cdn.example/y", "https://cdn.example/y"),
            (
                "other.bin",
                "https://huggingface.co/org/m/resolve/abc/other.bin",
            ),
        ];
        for (location, want) in cases {
            assert_eq!(resolve(&base, location).unwrap().to_string(), want);
        }
    }

    #[test]
    fn encodes_paths_and_hides_queries() {
        assert_eq!(encode_path("a dir/model+1.bin"), "a%20dir/model%2B1.bin");
        assert_eq!(
            display_url("https://cdn/x?X-Amz-Signature=s"),
            "https://cdn/x"
        );
    }
}
