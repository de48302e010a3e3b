//! `fetch-checkpoint`: downloads one pinned hub revision into a directory, once.
//!
//! Uses the Hugging Face HTTP API: `GET {endpoint}/api/models/{repo}/revision/{rev}?blobs=true`
//! lists the files (with sizes, git blob ids and LFS SHA-256), `GET
//! {endpoint}/{repo}/resolve/{rev}/{file}` downloads one (following redirects to the CDN).
//!
//! Integrity: every file is checked by hash as written to disk, LFS files by their SHA-256,
//! others by their git blob id; a file the listing gives no hash for is refused. Each download
//! goes to a temporary name of its own run and is renamed only once its hash matches. Files
//! already present are kept only when their hash matches too, never by size alone.
//!
//! One writer: a fetch holds an exclusive `flock(2)` on [`LOCK_FILE`] in the destination for its
//! whole run; a second fetch into the same directory waits for it (the kernel drops the lock when
//! its holder dies, so a killed run leaves no stale lock).
//!
//! The token goes only to the endpoint's own scheme, host and port, and never over plain http
//! (except to a loopback endpoint); a redirect from https to http is refused.
//!
//! A marker file records the revision and every file's hash at the end, so a re-run of a finished
//! fetch needs no network (it re-hashes the files) and the verifier can tell a complete fetch from
//! an interrupted one.

use std::io::Read as _;
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

use super::paths::is_safe_relative;

/// Records a fetch in the destination directory (a dot file: not part of the checkpoint).
pub const MARKER_FILE: &str = ".deepinfer-fetch.json";
/// Held locked by the fetch writing into a directory (a dot file: not part of the checkpoint).
pub const LOCK_FILE: &str = ".deepinfer-fetch.lock";
/// Suffix of the temporary files a download writes before renaming them.
const PARTIAL_SUFFIX: &str = ".deepinfer-partial";
/// Default hub endpoint when neither `--endpoint` nor `HF_ENDPOINT` is set.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

const PARALLEL_DOWNLOADS: usize = 4;
const ATTEMPTS: u32 = 3;
const MAX_REDIRECTS: u32 = 10;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest wait for a response head, or between two chunks of a body.
const IDLE_TIMEOUT: Duration = Duration::from_secs(120);
const MAX_LISTING_BYTES: usize = 64 << 20;
/// Most bytes taken for a file the listing gives no size for. The hub lists the size of every
/// LFS file (weights); files kept in git itself are limited to 10 MB there, so 1 GiB only stops a
/// server that streams without end.
pub const MAX_UNLISTED_FILE_BYTES: u64 = 1 << 30;

/// The marker written into the destination.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct FetchMarker {
    /// Hub repository id.
    pub repo: String,
    /// The 40-hex revision.
    pub revision: String,
    /// False while a fetch is under way or after it failed.
    pub complete: bool,
    /// Every file of the revision with its size and hash.
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
    /// The hub's hash of it; a marker without hashes makes a re-run check against the hub.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<FileDigest>,
}

/// The hash the hub lists for a file.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum FileDigest {
    /// LFS files: lower-case hex SHA-256 of the content (`lfs.sha256`).
    Sha256(String),
    /// Other files: the git blob id, lower-case hex SHA-1 of `blob <len>\0<content>` (`blobId`).
    GitBlobSha1(String),
}

impl FileDigest {
    fn algorithm(&self) -> &'static str {
        match self {
            Self::Sha256(_) => "SHA-256",
            Self::GitBlobSha1(_) => "git blob SHA-1",
        }
    }

    fn expected(&self) -> &str {
        match self {
            Self::Sha256(hex) | Self::GitBlobSha1(hex) => hex,
        }
    }

    /// Hashes the file at `path` as stored; `Err` says what differs or why it cannot be read.
    async fn check(&self, path: &Path) -> Result<(), String> {
        let digest = self.clone();
        let owned = path.to_path_buf();
        let got = tokio::task::spawn_blocking(move || hash_file(&owned, &digest))
            .await
            .map_err(|e| format!("{}: hashing failed: {e}", path.display()))?
            .map_err(|e| format!("{}: cannot be read: {e}", path.display()))?;
        if got.eq_ignore_ascii_case(self.expected()) {
            Ok(())
        } else {
            Err(format!(
                "{} of the file as written is {got}, the hub lists {}",
                self.algorithm(),
                self.expected()
            ))
        }
    }
}

/// A hashing context for `digest`'s algorithm over content of `len` bytes.
fn hasher(digest: &FileDigest, len: u64) -> ring::digest::Context {
    match digest {
        FileDigest::Sha256(_) => ring::digest::Context::new(&ring::digest::SHA256),
        FileDigest::GitBlobSha1(_) => {
            let mut ctx = ring::digest::Context::new(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY);
            ctx.update(format!("blob {len}\0").as_bytes());
            ctx
        }
    }
}

fn hash_file(path: &Path, digest: &FileDigest) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    let mut ctx = hasher(digest, len);
    let mut buf = vec![0u8; 1 << 20];
    let mut read = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        ctx.update(&buf[..n]);
        read += n as u64;
    }
    if read != len {
        return Err(std::io::Error::other(format!(
            "changed size while being hashed ({len} then {read} bytes)"
        )));
    }
    Ok(hex(ctx.finish().as_ref()))
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
    /// Files already present whose hash matched.
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
    /// The outbound proxies (`HTTPS_PROXY`, `HTTP_PROXY`, `NO_PROXY` in the Job).
    pub proxies: super::proxy::Proxies,
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
        if self.token.is_some() && uri.scheme_str() == Some("http") && !is_loopback(&uri) {
            return Err(format!(
                "--endpoint `{}` is plain http, so the hub token would travel in clear text: use an https:// endpoint (plain http is only for a hub on the loopback address)",
                self.endpoint
            ));
        }
        Ok(())
    }
}

/// Whether `path` names a file of the fetch itself: its marker, its lock, or a temporary file of
/// a download (which a later run removes).
fn is_own_file(path: &str) -> bool {
    path == MARKER_FILE || path == LOCK_FILE || path.ends_with(PARTIAL_SUFFIX)
}

fn is_loopback(uri: &Uri) -> bool {
    let host = uri.host().unwrap_or_default();
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
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
    // Held until this function returns: no other fetch writes here meanwhile.
    let _lock = lock_dir(&req.dest).await?;
    remove_partials(&req.dest).await?;
    let previous = read_marker(&req.dest).await;
    let same_revision = previous
        .as_ref()
        .is_none_or(|m| m.repo == req.repo && m.revision.eq_ignore_ascii_case(&req.revision));
    // One directory holds one revision: fetching another into it would overwrite files that pods
    // of the revision already there may read (or restart on) while the new one is judged.
    if let Some(other) = previous.as_ref().filter(|_| !same_revision) {
        return Err(format!(
            "{} holds revision {} of {}, not {} of {}: a directory holds one revision; give this revision a directory of its own (spec.model.source.hub.path, default <model name>/<revision>), or delete the old one's files if nothing uses them",
            req.dest.display(),
            other.revision,
            other.repo,
            req.revision,
            req.repo
        ));
    }
    if let Some(done) = previous.as_ref().filter(|m| m.complete && same_revision) {
        if all_intact(&req.dest, &done.files).await {
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
    let entries = checked_entries(&hub, listing.siblings, report);
    if !report.problems.is_empty() {
        return Ok(());
    }

    let mut files = download(&hub, entries, &req.dest, report).await;
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

/// Fetches `entries` into `dest`, several at once: the files that are there and intact as
/// the marker records them, each download or check that failed a problem in `report`.
async fn download(
    hub: &Hub<'_>,
    entries: Vec<Entry>,
    dest: &Path,
    report: &mut FetchReport,
) -> Vec<MarkerFile> {
    report.files = entries.len() as u64;
    let results: Vec<(Entry, Outcome)> = futures::stream::iter(entries)
        .map(|entry| async move {
            let outcome = hub.ensure(&entry, dest).await;
            (entry, outcome)
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
                    digest: Some(entry.digest),
                });
            }
            Err(problem) => report.problems.push(problem),
        }
    }
    files
}

/// The files of a listing that can be fetched and checked: each inside the destination, not one
/// of the fetch's own files, with a content hash. Every other is a problem in `report`.
fn checked_entries(hub: &Hub, siblings: Vec<Sibling>, report: &mut FetchReport) -> Vec<Entry> {
    let mut entries = Vec::new();
    for sibling in siblings {
        if !is_safe_relative(&sibling.rfilename) || is_own_file(&sibling.rfilename) {
            report.problems.push(format!(
                "{}: the hub lists a file named `{}`, which would land outside the destination or on a file of the fetch itself; refusing it",
                hub.listing_url(),
                sibling.rfilename
            ));
            continue;
        }
        let size = sibling.lfs.as_ref().and_then(|l| l.size).or(sibling.size);
        // An LFS file's blob id is its pointer's, not its content's.
        let digest = match sibling.lfs {
            Some(lfs) => lfs.sha256.map(FileDigest::Sha256),
            None => sibling.blob_id.map(FileDigest::GitBlobSha1),
        };
        let Some(digest) = digest else {
            report.problems.push(format!(
                "{}: the hub lists `{}` with no hash (neither lfs.sha256 nor blobId), so it cannot be checked; refusing it (check --endpoint serves the hub API with ?blobs=true)",
                hub.listing_url(),
                sibling.rfilename
            ));
            continue;
        };
        entries.push(Entry {
            path: sibling.rfilename,
            size,
            digest,
        });
    }
    entries
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

/// Every file is there with its recorded size and hash.
async fn all_intact(dest: &Path, files: &[MarkerFile]) -> bool {
    for file in files {
        let path = dest.join(&file.path);
        let Some(digest) = &file.digest else {
            return false;
        };
        match tokio::fs::metadata(&path).await {
            Ok(m) if m.is_file() && m.len() == file.size => {}
            _ => return false,
        }
        if let Err(why) = digest.check(&path).await {
            eprintln!("{}: {why}; fetching again", file.path);
            return false;
        }
    }
    true
}

/// Holds a directory's fetch lock until dropped.
struct DirLock(#[allow(dead_code)] nix::fcntl::Flock<std::fs::File>);

/// Takes `dest`'s fetch lock, waiting while another fetch holds it.
async fn lock_dir(dest: &Path) -> Result<DirLock, String> {
    use nix::fcntl::{Flock, FlockArg};
    let path = dest.join(LOCK_FILE);
    let cannot = |e: &dyn std::fmt::Display| {
        format!(
            "{}: cannot be locked ({e}): the volume must support flock(2) file locks",
            path.display()
        )
    };
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| cannot(&e))?;
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => Ok(DirLock(lock)),
        Err((file, nix::errno::Errno::EWOULDBLOCK)) => {
            eprintln!(
                "{}: another fetch is writing into {}; waiting for it to finish",
                path.display(),
                dest.display()
            );
            tokio::task::spawn_blocking(move || Flock::lock(file, FlockArg::LockExclusive))
                .await
                .map_err(|e| cannot(&e))?
                .map(DirLock)
                .map_err(|(_, errno)| cannot(&errno))
        }
        Err((_, errno)) => Err(cannot(&errno)),
    }
}

/// Removes the temporary files of earlier, interrupted runs (only called under the lock).
async fn remove_partials(dest: &Path) -> Result<(), String> {
    fn walk(dir: &Path) -> std::io::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let kind = entry.file_type()?;
            if kind.is_dir() {
                walk(&entry.path())?;
            } else if entry
                .file_name()
                .to_string_lossy()
                .ends_with(PARTIAL_SUFFIX)
            {
                std::fs::remove_file(entry.path())?;
            }
        }
        Ok(())
    }
    let dir = dest.to_path_buf();
    tokio::task::spawn_blocking(move || walk(&dir))
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r.map_err(|e| e.to_string()))
        .map_err(|e| {
            format!(
                "{}: removing temporary files of an earlier run failed: {e}",
                dest.display()
            )
        })
}

/// A file's size and whether this run downloaded it, or the problem.
type Outcome = Result<(u64, bool), String>;

/// One file of the listing.
#[derive(Debug, Clone)]
struct Entry {
    path: String,
    size: Option<u64>,
    digest: FileDigest,
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
    #[serde(default, rename = "blobId")]
    blob_id: Option<String>,
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

type HttpClient = Client<HttpsConnector<super::proxy::ProxyConnector>, Empty<Bytes>>;

struct Hub<'a> {
    client: HttpClient,
    req: &'a FetchRequest,
    base: String,
    /// Tags this run's temporary files.
    run: String,
}

impl<'a> Hub<'a> {
    fn new(req: &'a FetchRequest) -> Result<Self, String> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        Ok(Self {
            client: http_client(req.proxies.clone())?,
            req,
            base: req.endpoint.trim_end_matches('/').to_string(),
            run: format!("{}-{nanos:08x}", std::process::id()),
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

    /// Makes sure `entry` is in `dest` with its hash; returns its size and whether it was
    /// downloaded.
    async fn ensure(&self, entry: &Entry, dest: &Path) -> Outcome {
        let target = dest.join(&entry.path);
        if let Ok(m) = tokio::fs::metadata(&target).await {
            let size_ok = entry.size.is_none_or(|size| size == m.len());
            if m.is_file() && size_ok {
                match entry.digest.check(&target).await {
                    Ok(()) => return Ok((m.len(), false)),
                    Err(why) => eprintln!("{}: {why}; fetching again", entry.path),
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
        let tmp = parent.join(format!(".{name}.{}{PARTIAL_SUFFIX}", self.run));
        let mut file = tokio::fs::File::create(&tmp)
            .await
            .map_err(|e| io(&tmp, e))?;
        let mut body = response.into_body();
        let mut received = 0u64;
        // Never more than the listing says (or, without a listed size, the cap): a server that
        // sends more is cut off before it fills the volume.
        let limit = entry.size.unwrap_or(MAX_UNLISTED_FILE_BYTES);
        while let Some(chunk) = next_frame(&mut body, url).await? {
            received = received.saturating_add(chunk.len() as u64);
            if received > limit {
                drop(file);
                let _ = tokio::fs::remove_file(&tmp).await;
                return Err(Failure::permanent(format!(
                    "{}: {}: the server sent more than {limit} bytes, {}; refusing it",
                    entry.path,
                    display_url(url),
                    if entry.size.is_some() {
                        "the size the hub lists"
                    } else {
                        "the cap for a file the hub lists without a size"
                    }
                )));
            }
            file.write_all(&chunk).await.map_err(|e| io(&tmp, e))?;
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
        // Read back from disk: what is checked is what the verifier and the engine will read.
        if let Err(why) = entry.digest.check(&tmp).await {
            return fail(format!(
                "{}: {}: {why} (corrupted transfer or storage)",
                entry.path,
                display_url(url)
            ))
            .await;
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
            if let Some(token) = &self.req.token {
                if may_carry_token(&origin, &uri) {
                    request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
                }
            }
            if let Some(auth) = self.req.proxies.authorization_for(&uri) {
                request = request.header(header::PROXY_AUTHORIZATION, auth);
            }
            let request = request.body(Empty::new()).map_err(|e| {
                Failure::permanent(format!(
                    "{}: bad request: {e}",
                    display_url(&uri.to_string())
                ))
            })?;
            let shown = match self.req.proxies.shown_for(&uri) {
                Some(proxy) => format!("{} (through proxy {proxy})", display_url(&uri.to_string())),
                None => display_url(&uri.to_string()),
            };
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
                uri = follow(&uri, location)
                    .map_err(|e| Failure::permanent(format!("{shown}: HTTP {status}: {e}")))?;
                continue;
            }
            if status.is_success() {
                return Ok(response);
            }
            let hint = match status.as_u16() {
                401 | 403 => "the repository is gated or private: set HF_TOKEN to a token whose account accepted the model's terms",
                407 => "the proxy wants credentials: give them in the proxy URL (http://user:password@host:port)",
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

fn http_client(proxies: super::proxy::Proxies) -> Result<HttpClient, String> {
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
    let connector = builder
        .https_or_http()
        .enable_http1()
        .wrap_connector(super::proxy::ProxyConnector::new(http, proxies));
    Ok(Client::builder(TokioExecutor::new()).build(connector))
}

/// Lower-case hex SHA-256 of `data`, as the hub lists it for LFS files.
pub fn sha256_hex(data: &[u8]) -> String {
    hex(ring::digest::digest(&ring::digest::SHA256, data).as_ref())
}

/// Lower-case hex git blob id of `data` (SHA-1 of `blob <len>\0<data>`), as the hub lists it
/// in `blobId`.
pub fn git_blob_sha1_hex(data: &[u8]) -> String {
    let mut ctx = hasher(&FileDigest::GitBlobSha1(String::new()), data.len() as u64);
    ctx.update(data);
    hex(ctx.finish().as_ref())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// An error with its sources, `a: b: c`.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
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

/// Whether the hub token may go with a request to `uri`, given the `--endpoint` URL `origin`:
/// only to the endpoint's own scheme, host and port (never to the CDN a download redirects to),
/// and only over https, or plain http to a loopback endpoint, where it never leaves the machine.
fn may_carry_token(origin: &Uri, uri: &Uri) -> bool {
    let encrypted_or_local = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => is_loopback(uri),
        _ => false,
    };
    uri.scheme() == origin.scheme() && uri.authority() == origin.authority() && encrypted_or_local
}

/// Where a redirect from `from` with this Location leads; a downgrade from https to http is
/// refused.
fn follow(from: &Uri, location: &str) -> Result<Uri, String> {
    let to = resolve(from, location).map_err(|e| format!("a bad Location: {e}"))?;
    if from.scheme_str() == Some("https") && to.scheme_str() != Some("https") {
        return Err(format!(
            "redirects from https to http (`{}`); refusing the downgrade: the hub or a proxy in between is misconfigured",
            display_url(&to.to_string())
        ));
    }
    Ok(to)
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
    absolute
        .parse()
        .map_err(|e| format!("`{}`: {e}", display_url(location)))
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
            proxies: crate::checkpoint::proxy::Proxies::none(),
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
        let clear_text = with(&|r| {
            r.endpoint = "http://hub-mirror.internal".into();
            r.token = Some("hf_x".into());
        });
        assert!(
            clear_text.contains("--endpoint") && clear_text.contains("https://"),
            "{clear_text}"
        );
        let mut local = ok.clone();
        local.endpoint = "http://127.0.0.1:8080".into();
        local.token = Some("hf_x".into());
        assert!(local.validate().is_ok());
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
    fn the_token_goes_only_to_the_endpoint_and_never_in_clear_text() {
        let uri = |s: &str| s.parse::<Uri>().unwrap();
        let hub = uri("https://huggingface.co");
        let cases = [
            ("https://huggingface.co/api/models/x", true),
            ("https://cdn-lfs.huggingface.co/x", false),
            ("https://huggingface.co:8443/x", false),
            // A downgrade to the same host must not carry it.
            ("http://huggingface.co/x", false),
            ("http://huggingface.co:443/x", false),
        ];
        for (target, want) in cases {
            assert_eq!(may_carry_token(&hub, &uri(target)), want, "{target}");
        }
        // Plain http only where the token never leaves the machine.
        let local = uri("http://127.0.0.1:8080");
        assert!(may_carry_token(&local, &uri("http://127.0.0.1:8080/x")));
        assert!(!may_carry_token(&local, &uri("http://127.0.0.1:9090/x")));
        let mirror = uri("http://hub-mirror.internal");
        assert!(!may_carry_token(
            &mirror,
            &uri("http://hub-mirror.internal/x")
        ));
    }

    #[test]
    fn redirects_from_https_to_http_are_refused() {
        let from: Uri = "https://huggingface.co/org/m/resolve/abc/model.safetensors"
            .parse()
            .unwrap();
        for location in ["http://huggingface.co/x", "http://cdn.example/x?sig=1"] {
            let err = follow(&from, location).unwrap_err();
            assert!(err.contains("https to http"), "{location}: {err}");
            assert!(!err.contains("sig=1"), "no signed query in messages: {err}");
        }
        assert!(follow(&from, "https://cdn.example/x").is_ok());
        let plain: Uri = "http://127.0.0.1:1/x".parse().unwrap();
        assert!(follow(&plain, "http://127.0.0.1:2/y").is_ok());
    }

    #[test]
    fn git_blob_ids_match_git() {
        // `git hash-object` of an empty file and of "hello\n".
        assert_eq!(
            git_blob_sha1_hex(b""),
            "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
        );
        assert_eq!(
            git_blob_sha1_hex(b"hello\n"),
            "ce013625030ba8dba906f756967f9e9ca394464a"
        );
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
