//! fetch-checkpoint against the loopback fixture hub, then verify-checkpoint on the result.

use std::path::{Path, PathBuf};

use deepinfer_e2e::fixture_hub::{self, Fault, HubConfig, FIXTURE_REPO, FIXTURE_REVISION};
use deepinfer_operator::checkpoint::proxy::Proxies;
use deepinfer_operator::checkpoint::{
    self, fetch_checkpoint, verify_dir, Expectations, FetchReport, FetchRequest, VerifyReport,
    MARKER_FILE,
};

const SHARD1: &str = "model-00001-of-00002.safetensors";
const SHARD2: &str = "model-00002-of-00002.safetensors";

/// A destination directory, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("deepinfer-fetch-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        Self(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn request(hub: &fixture_hub::FixtureHub, dest: &Path, token: Option<&str>) -> FetchRequest {
    FetchRequest {
        repo: FIXTURE_REPO.into(),
        revision: FIXTURE_REVISION.into(),
        dest: dest.to_path_buf(),
        endpoint: hub.endpoint(),
        token: token.map(Into::into),
        proxies: Proxies::none(),
    }
}

fn verify(dir: &Path) -> VerifyReport {
    verify_dir(
        dir,
        &Expectations {
            license: "mit".into(),
            revision: FIXTURE_REVISION.into(),
            layouts: vec!["worker=8x1x2x16".parse().unwrap()],
        },
    )
}

#[tokio::test]
async fn fetches_verifies_and_is_idempotent() {
    let hub = fixture_hub::serve(HubConfig::fixture().token("hf_fixture"))
        .await
        .unwrap();
    let dest = Scratch::new("happy");
    let req = request(&hub, &dest.0, Some("hf_fixture"));
    req.validate().unwrap();

    let report = fetch_checkpoint(&req).await;
    assert!(report.ok, "{:#?}", report.problems);
    assert_eq!((report.files, report.downloaded, report.skipped), (6, 6, 0));
    // Shards came through the CDN stand-in, which refuses a forwarded token.
    let log = hub.requests();
    assert!(
        log.iter()
            .any(|l| l.starts_with("cdn GET") && l.contains(SHARD1) && l.ends_with(" 200")),
        "{log:#?}"
    );

    let verified = verify(&dest.0);
    assert!(verified.ok, "{:#?}", verified.problems);
    assert_eq!(
        (verified.files, verified.bytes),
        (report.files, report.bytes)
    );

    // A re-run of a completed fetch needs no network at all.
    let before = hub.requests().len();
    let again = fetch_checkpoint(&req).await;
    assert!(
        again.ok && again.downloaded == 0 && again.skipped == 6,
        "{again:#?}"
    );
    assert_eq!(hub.requests().len(), before);

    // A lost file is fetched again, the rest kept.
    std::fs::remove_file(dest.0.join(SHARD2)).unwrap();
    let repaired = fetch_checkpoint(&req).await;
    assert!(repaired.ok, "{:#?}", repaired.problems);
    assert_eq!((repaired.downloaded, repaired.skipped), (1, 5));
    assert!(verify(&dest.0).ok);
}

#[tokio::test]
async fn corrupt_shard_is_fetched_then_caught_by_verification() {
    let hub = fixture_hub::serve(HubConfig::fixture().fault(Fault::Truncate {
        file: SHARD2.into(),
        len: 100,
    }))
    .await
    .unwrap();
    let dest = Scratch::new("corrupt");
    let report = fetch_checkpoint(&request(&hub, &dest.0, None)).await;
    assert!(report.ok, "{:#?}", report.problems);
    let verified = verify(&dest.0);
    assert!(!verified.ok);
    assert_eq!(verified.problems.len(), 1, "{:#?}", verified.problems);
    assert!(
        verified.problems[0].starts_with(SHARD2),
        "{}",
        verified.problems[0]
    );
}

#[tokio::test]
async fn http_failures_name_the_url_and_status() {
    let hub = fixture_hub::serve(
        HubConfig::fixture()
            .token("hf_fixture")
            .fault(Fault::Status {
                file: SHARD1.into(),
                status: 404,
            }),
    )
    .await
    .unwrap();

    let dest = Scratch::new("unauthorised");
    let report = fetch_checkpoint(&request(&hub, &dest.0, None)).await;
    assert!(!report.ok);
    let problem = &report.problems[0];
    assert!(
        problem.contains("/api/models/deepinfer-fixtures/tiny-deepseek/revision/")
            && problem.contains("401")
            && problem.contains("HF_TOKEN"),
        "{problem}"
    );

    let dest = Scratch::new("missing-file");
    let report = fetch_checkpoint(&request(&hub, &dest.0, Some("hf_fixture"))).await;
    assert!(!report.ok);
    assert_eq!(report.problems.len(), 1, "{:#?}", report.problems);
    let problem = &report.problems[0];
    assert!(
        problem.contains(SHARD1) && problem.contains("404"),
        "{problem}"
    );
    // The other files landed, but the marker says the fetch is unfinished.
    assert!(dest.0.join("config.json").is_file());
    let verified = verify(&dest.0);
    assert!(
        verified
            .problems
            .iter()
            .any(|p| p.starts_with(MARKER_FILE) && p.contains("unfinished")),
        "{:#?}",
        verified.problems
    );

    // A directory of its own: one holding another revision is refused before the hub is asked.
    let dest = Scratch::new("wrong-revision");
    let mut wrong = request(&hub, &dest.0, Some("hf_fixture"));
    wrong.revision = "f".repeat(40);
    let report = fetch_checkpoint(&wrong).await;
    assert!(
        !report.ok && report.problems[0].contains("404"),
        "{report:#?}"
    );
}

#[tokio::test]
async fn cut_transfers_are_retried_then_reported() {
    let hub = fixture_hub::serve(HubConfig::fixture().fault(Fault::CutTransfer {
        file: SHARD1.into(),
        len: 50,
    }))
    .await
    .unwrap();
    let dest = Scratch::new("cut");
    let report = fetch_checkpoint(&request(&hub, &dest.0, None)).await;
    assert!(!report.ok);
    let problem = &report.problems[0];
    assert!(
        problem.contains(SHARD1) && problem.contains("attempts"),
        "{problem}"
    );
    let tries = hub
        .requests()
        .iter()
        .filter(|l| l.starts_with("cdn GET") && l.contains(SHARD1))
        .count();
    assert_eq!(tries, 3);
    assert!(
        !dest.0.join(SHARD1).exists(),
        "no partial file under the final name"
    );
}

#[tokio::test]
async fn cli_entrypoint_writes_the_termination_report() {
    let hub = fixture_hub::serve(HubConfig::fixture()).await.unwrap();
    let dest = Scratch::new("cli");
    let report_path =
        std::env::temp_dir().join(format!("deepinfer-fetch-report-{}", std::process::id()));
    let code = checkpoint::fetch(checkpoint::FetchArgs {
        repo: FIXTURE_REPO.into(),
        revision: FIXTURE_REVISION.into(),
        dest: dest.0.clone(),
        endpoint: hub.endpoint(),
        report: Some(report_path.clone()),
    })
    .await
    .unwrap();
    assert_eq!(code, checkpoint::EXIT_OK);
    let written: FetchReport =
        serde_json::from_slice(&std::fs::read(&report_path).unwrap()).unwrap();
    let _ = std::fs::remove_file(&report_path);
    assert!(written.ok && written.files == 6 && written.revision == FIXTURE_REVISION);

    let code = checkpoint::verify(checkpoint::VerifyArgs {
        dir: dest.0.clone(),
        license: "MIT".into(),
        revision: FIXTURE_REVISION.into(),
        layouts: vec!["decode=4x1x1x4".parse().unwrap()],
        report: Some(report_path.clone()),
    })
    .await
    .unwrap();
    let written: VerifyReport =
        serde_json::from_slice(&std::fs::read(&report_path).unwrap()).unwrap();
    let _ = std::fs::remove_file(&report_path);
    assert_eq!(code, checkpoint::EXIT_OK, "{written:#?}");
    assert_eq!(written.files, 6);
}

#[tokio::test]
async fn every_file_is_checked_by_hash_as_written() {
    // A non-LFS file corrupted in transfer, same length: only its git blob id can tell.
    let hub = fixture_hub::serve(HubConfig::fixture().fault(Fault::CorruptDownload {
        file: "config.json".into(),
    }))
    .await
    .unwrap();
    let dest = Scratch::new("corrupt-transfer");
    let report = fetch_checkpoint(&request(&hub, &dest.0, None)).await;
    assert!(!report.ok);
    assert_eq!(report.problems.len(), 1, "{:#?}", report.problems);
    let problem = &report.problems[0];
    assert!(
        problem.starts_with("config.json") && problem.contains("SHA-1"),
        "{problem}"
    );
    assert!(
        !dest.0.join("config.json").exists(),
        "nothing kept under the final name"
    );

    // Files already present are checked by hash too, never accepted by size alone.
    let hub = fixture_hub::serve(HubConfig::fixture()).await.unwrap();
    let dest = Scratch::new("tampered");
    let req = request(&hub, &dest.0, None);
    assert!(fetch_checkpoint(&req).await.ok);
    for file in [SHARD1, "config.json"] {
        let path = dest.0.join(file);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[0] ^= 0xff;
        std::fs::write(&path, bytes).unwrap();
    }
    let repaired = fetch_checkpoint(&req).await;
    assert!(repaired.ok, "{:#?}", repaired.problems);
    assert_eq!(
        (repaired.downloaded, repaired.skipped),
        (2, 4),
        "{repaired:#?}"
    );
    assert!(verify(&dest.0).ok);
    let original = fixture_hub::fixture_checkpoint_dir();
    for file in [SHARD1, "config.json"] {
        assert_eq!(
            std::fs::read(dest.0.join(file)).unwrap(),
            std::fs::read(original.join(file)).unwrap(),
            "{file} restored"
        );
    }
}

#[tokio::test]
async fn a_file_the_hub_lists_without_a_hash_is_refused() {
    let hub = fixture_hub::serve(HubConfig::fixture().fault(Fault::NoHash {
        file: "generation_config.json".into(),
    }))
    .await
    .unwrap();
    let dest = Scratch::new("no-hash");
    let report = fetch_checkpoint(&request(&hub, &dest.0, None)).await;
    assert!(!report.ok);
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.contains("generation_config.json") && p.contains("no hash")),
        "{:#?}",
        report.problems
    );
}

#[tokio::test]
async fn concurrent_fetches_into_one_directory_write_each_file_once() {
    let hub = fixture_hub::serve(HubConfig::fixture()).await.unwrap();
    let dest = Scratch::new("concurrent");
    let req = request(&hub, &dest.0, None);
    let (a, b) = tokio::join!(fetch_checkpoint(&req), fetch_checkpoint(&req));
    assert!(a.ok && b.ok, "{a:#?} {b:#?}");
    // One run downloads everything; the other waits for it, then finds every file intact.
    let mut downloaded = [a.downloaded, b.downloaded];
    downloaded.sort_unstable();
    assert_eq!(downloaded, [0, 6], "{a:#?} {b:#?}");
    let file_gets = hub
        .requests()
        .iter()
        .filter(|l| l.contains("/resolve/") || l.starts_with("cdn GET"))
        .filter(|l| l.ends_with(" 200"))
        .count();
    assert_eq!(file_gets, 6, "{:#?}", hub.requests());
    assert!(verify(&dest.0).ok);
    let leftovers: Vec<_> = std::fs::read_dir(&dest.0)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("partial"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// A server that sends more bytes than the listing gives for a file is cut off at the listed
/// size, and nothing of it is kept.
#[tokio::test]
async fn a_download_longer_than_its_listed_size_is_cut_off() {
    let hub = fixture_hub::serve(HubConfig::fixture().fault(Fault::Oversize {
        file: "config.json".into(),
        extra: 1 << 20,
    }))
    .await
    .unwrap();
    let dest = Scratch::new("oversize");
    let report = fetch_checkpoint(&request(&hub, &dest.0, None)).await;
    assert!(!report.ok);
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.contains("config.json") && p.contains("sent more than")),
        "{:#?}",
        report.problems
    );
    assert!(!dest.0.join("config.json").exists());
}

/// A listing that names the fetch's own lock (or marker) is refused: the download would replace
/// the file another fetch holds its lock on.
#[tokio::test]
async fn a_listing_that_names_the_fetch_lock_is_refused() {
    let repo = Scratch::new("lock-repo");
    deepinfer_e2e::support::copy_dir(&fixture_hub::fixture_checkpoint_dir(), &repo.0);
    std::fs::write(repo.0.join(checkpoint::fetch::LOCK_FILE), b"x").unwrap();
    let hub = fixture_hub::serve(HubConfig::default().repo(
        FIXTURE_REPO,
        FIXTURE_REVISION,
        repo.0.clone(),
    ))
    .await
    .unwrap();
    let dest = Scratch::new("lock-dest");
    let report = fetch_checkpoint(&request(&hub, &dest.0, None)).await;
    assert!(!report.ok);
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.contains(checkpoint::fetch::LOCK_FILE) && p.contains("refusing")),
        "{:#?}",
        report.problems
    );
}

/// One directory holds one revision: a fetch of another revision into a directory holding one
/// is refused and leaves its files as they are.
#[tokio::test]
async fn a_second_revision_is_refused_in_a_directory_holding_another() {
    let hub = fixture_hub::serve(HubConfig::fixture()).await.unwrap();
    let dest = Scratch::new("two-revisions");
    assert!(fetch_checkpoint(&request(&hub, &dest.0, None)).await.ok);
    let other = "b".repeat(40);
    let second = fixture_hub::serve(HubConfig::default().repo(
        FIXTURE_REPO,
        &other,
        fixture_hub::fixture_checkpoint_dir(),
    ))
    .await
    .unwrap();
    let mut req = request(&second, &dest.0, None);
    req.revision = other.clone();
    let report = fetch_checkpoint(&req).await;
    assert!(!report.ok);
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.contains("holds revision") && p.contains(FIXTURE_REVISION)),
        "{:#?}",
        report.problems
    );
    assert!(
        second.requests().is_empty(),
        "nothing was asked of the hub: {:?}",
        second.requests()
    );
    assert!(verify(&dest.0).ok, "the first revision is intact");
}

/// With `HTTP_PROXY` the whole fetch (the listing, the files and the CDN redirects) goes through
/// the proxy, whose credentials go with each request; with the hub's host in `NO_PROXY` it goes
/// straight to the hub.
#[tokio::test]
async fn a_fetch_goes_through_the_proxy_unless_no_proxy_names_the_hub() {
    use deepinfer_e2e::forward_proxy::ForwardProxy;
    let hub = fixture_hub::serve(HubConfig::fixture()).await.unwrap();
    // "user:secret", as Basic credentials.
    let proxy = ForwardProxy::start(true, Some("Basic dXNlcjpzZWNyZXQ=")).await;
    let through = format!("http://user:secret@{}", proxy.address);

    let dest = Scratch::new("proxied");
    let mut req = request(&hub, &dest.0, None);
    req.proxies = Proxies::new("", &through, "");
    let report = fetch_checkpoint(&req).await;
    assert!(report.ok, "{:#?}", report.problems);
    assert!(verify(&dest.0).ok);
    let seen = proxy.seen();
    let hub_host = hub.endpoint().trim_start_matches("http://").to_owned();
    assert!(
        seen.iter().any(|s| s
            .line
            .starts_with(&format!("GET http://{hub_host}/api/models/"))),
        "the listing went through the proxy: {seen:#?}"
    );
    assert!(
        seen.iter().filter(|s| s.line.contains("/resolve/")).count() >= 6,
        "every file went through the proxy: {seen:#?}"
    );
    assert!(
        seen.iter()
            .all(|s| s.authorization.as_deref() == Some("Basic dXNlcjpzZWNyZXQ=")),
        "{seen:#?}"
    );

    let direct = Scratch::new("unproxied");
    let mut req = request(&hub, &direct.0, None);
    req.proxies = Proxies::new("", &through, "127.0.0.1");
    let before = proxy.seen().len();
    let report = fetch_checkpoint(&req).await;
    assert!(report.ok, "{:#?}", report.problems);
    assert_eq!(
        proxy.seen().len(),
        before,
        "NO_PROXY hosts are reached directly"
    );
}

/// An https hub is reached through `HTTPS_PROXY` by a CONNECT tunnel to its host and port (TLS
/// runs inside, to the hub itself): the proxy sees only `CONNECT host:443`, with the proxy's
/// credentials. When the proxy refuses, the fetch fails naming the URL and the proxy, without
/// its credentials.
#[tokio::test]
async fn https_hub_urls_are_tunnelled_through_the_https_proxy() {
    use deepinfer_e2e::forward_proxy::ForwardProxy;
    let proxy = ForwardProxy::start(false, None).await;
    let dest = Scratch::new("tunnelled");
    let req = FetchRequest {
        repo: FIXTURE_REPO.into(),
        revision: FIXTURE_REVISION.into(),
        dest: dest.0.clone(),
        endpoint: "https://hub.example.test".into(),
        token: None,
        proxies: Proxies::new(&format!("http://user:secret@{}", proxy.address), "", ""),
    };
    req.validate().unwrap();
    let report = fetch_checkpoint(&req).await;
    assert!(!report.ok);
    let seen = proxy.seen();
    assert!(!seen.is_empty(), "the proxy was asked");
    assert!(
        seen.iter()
            .all(|s| s.line == "CONNECT hub.example.test:443 HTTP/1.1"
                && s.authorization.as_deref() == Some("Basic dXNlcjpzZWNyZXQ=")),
        "{seen:#?}"
    );
    let problems = report.problems.join("\n");
    assert!(
        problems.contains(&format!("(through proxy http://{})", proxy.address))
            && problems.contains("https://hub.example.test/api/models/"),
        "{problems}"
    );
    assert!(!problems.contains("secret"), "{problems}");
}
