//! Leader election on a `coordination.k8s.io/v1` Lease, so that several operator replicas can run
//! and exactly one of them reconciles (and writes status) at a time.
//!
//! The protocol is the one client-go's leader election uses, so its timings read the same way:
//! - a candidate takes the Lease when it has no holder, or when the holder's record has not
//!   changed for `lease_duration` *as observed on the candidate's own clock* (never by comparing
//!   clocks across machines);
//! - the holder renews every `retry_period`; if it has not renewed for `renew_deadline` (API
//!   server unreachable, or another identity took the Lease), it has lost and must stop writing
//!   at once, before any other candidate may take over (`renew_deadline < lease_duration`);
//! - on a graceful shutdown the holder releases the Lease (empty holder), so a standby takes over
//!   without waiting for it to expire.
//!
//! Every write is an update carrying the `resourceVersion` that was read, so two candidates that
//! race for a free Lease cannot both win: one gets a conflict. The holder renews and releases its
//! own last-written copy without reading first; any other write since turns that into a conflict,
//! and a full read-decide-write round finds out who holds the Lease now.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use kube::Client;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{info, warn};

/// How long a Lease stays valid without renewal, how soon its holder gives up, how often it
/// tries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// A standby takes the Lease once its record has not changed for this long.
    pub lease_duration: Duration,
    /// The holder stops leading when it could not renew for this long (less than
    /// `lease_duration`, so it stops before anyone else may start).
    pub renew_deadline: Duration,
    /// Pause between attempts to acquire or renew.
    pub retry_period: Duration,
}

impl Default for Timing {
    /// client-go's defaults: 15 s, 10 s, 2 s.
    fn default() -> Self {
        Self {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// Which Lease, and who this instance is.
#[derive(Clone, Debug)]
pub struct Config {
    /// Namespace of the Lease (the operator's own).
    pub namespace: String,
    /// Name of the Lease; every replica of one installation uses the same.
    pub name: String,
    /// Unique among the candidates (the pod name).
    pub identity: String,
    /// Timings.
    pub timing: Timing,
}

/// What a candidate does with the Lease it just read.
#[derive(Debug, Clone, PartialEq)]
enum Step {
    /// Create the Lease (it does not exist).
    Create(LeaseSpec),
    /// Write this record (take over a free or expired Lease, or renew our own).
    Write(LeaseSpec),
    /// Someone else holds it and renews it; try again later.
    Held { holder: String },
}

/// The last record seen and when (on this machine's monotonic clock) it last changed.
#[derive(Debug, Default)]
struct Observed {
    record: Option<LeaseSpec>,
    since: Option<Instant>,
}

impl Observed {
    /// Notes the record just read; a changed record restarts the expiry clock.
    fn note(&mut self, record: Option<&LeaseSpec>, now: Instant) {
        if self.record.as_ref() != record || self.since.is_none() {
            self.record = record.cloned();
            self.since = Some(now);
        }
    }
}

/// Decides what to do with the current record. Pure: `now_wall` only goes into the record,
/// expiry is judged on `now` against when the record was last seen to change.
fn decide(
    current: Option<&LeaseSpec>,
    observed: &Observed,
    identity: &str,
    timing: Timing,
    now: Instant,
    now_wall: MicroTime,
) -> Step {
    let seconds = i32::try_from(timing.lease_duration.as_secs()).unwrap_or(i32::MAX);
    let fresh = |transitions: i32| LeaseSpec {
        holder_identity: Some(identity.to_string()),
        lease_duration_seconds: Some(seconds),
        acquire_time: Some(now_wall.clone()),
        renew_time: Some(now_wall.clone()),
        lease_transitions: Some(transitions),
        ..LeaseSpec::default()
    };
    let Some(current) = current else {
        return Step::Create(fresh(0));
    };
    let transitions = current.lease_transitions.unwrap_or(0);
    match current.holder_identity.as_deref().filter(|h| !h.is_empty()) {
        Some(holder) if holder == identity => Step::Write(LeaseSpec {
            lease_duration_seconds: Some(seconds),
            renew_time: Some(now_wall.clone()),
            acquire_time: current.acquire_time.clone().or(Some(now_wall)),
            ..current.clone()
        }),
        Some(holder) => {
            // The holder's own lease duration counts, not ours: it promised to renew within it.
            let held_for = current
                .lease_duration_seconds
                .map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(0)))
                .unwrap_or(timing.lease_duration);
            let expired = observed
                .since
                .is_some_and(|since| now.saturating_duration_since(since) >= held_for);
            if expired {
                Step::Write(fresh(transitions.saturating_add(1)))
            } else {
                Step::Held {
                    holder: holder.to_string(),
                }
            }
        }
        None => Step::Write(fresh(transitions.saturating_add(1))),
    }
}

/// Where the holder stands after one renewal attempt.
#[derive(Debug, PartialEq)]
enum Standing {
    /// Still leading; the renew deadline counts from this instant.
    Leading(Instant),
    /// Lost, for this reason: stop writing at once.
    Lost(String),
}

/// The holder's standing after an attempt whose request was sent at `sent` and that ended at
/// `now` with `outcome` (`None`: no answer within the deadline); `renewed` is when the last
/// successful renewal was sent. Pure.
///
/// A renewal counts from when its request was sent, never from when the answer came: the server
/// may have stored the record any time in between, and a standby times the Lease from when it
/// sees that record, so counting from the answer would let a slow answer stretch the holder's
/// term past the point where a standby may take over.
fn after_attempt(
    renewed: Instant,
    sent: Instant,
    outcome: Option<Result<(), Miss>>,
    last_miss: &mut String,
    timing: Timing,
    now: Instant,
) -> Standing {
    let mut renewed = renewed;
    match outcome {
        Some(Ok(())) => renewed = sent,
        // Someone else took it: nothing to wait for.
        Some(Err(Miss::Held(holder))) => {
            return Standing::Lost(format!("{holder} holds the Lease now"))
        }
        Some(Err(miss)) => *last_miss = miss.to_string(),
        None => {}
    }
    if now.saturating_duration_since(renewed) >= timing.renew_deadline {
        Standing::Lost(format!(
            "not renewed for {:?} (last failed attempt: {last_miss})",
            timing.renew_deadline
        ))
    } else {
        Standing::Leading(renewed)
    }
}

/// Whether this instance may still write: while leading, until the renew deadline after its last
/// renewal (counted from when that renewal was sent). Checked before every write, so a holder
/// that was paused (SIGSTOP, a long GC, a frozen VM) past its deadline writes nothing when it
/// wakes, even before its renewal task finds out that it lost. An instance that does not elect a
/// leader always may.
#[derive(Clone, Debug, Default)]
pub struct Fence(Option<std::sync::Arc<std::sync::Mutex<Instant>>>);

impl Fence {
    /// A fence that closes at `deadline` unless extended.
    pub fn until(deadline: Instant) -> Self {
        Self(Some(std::sync::Arc::new(std::sync::Mutex::new(deadline))))
    }

    /// Whether a write may go out now.
    pub fn holds(&self) -> bool {
        self.0.as_ref().is_none_or(|deadline| {
            let deadline = *deadline.lock().unwrap_or_else(|e| e.into_inner());
            Instant::now() < deadline
        })
    }

    /// Moves the deadline to `deadline` (a renewal, or `now` on loss).
    fn set(&self, deadline: Instant) {
        if let Some(d) = &self.0 {
            *d.lock().unwrap_or_else(|e| e.into_inner()) = deadline;
        }
    }
}

/// A candidate for the Lease.
pub struct Elector {
    api: Api<Lease>,
    config: Config,
    observed: Observed,
    /// The Lease as this instance last wrote it, while it holds it.
    held: Option<Lease>,
}

/// Why an attempt did not end with this instance holding the Lease.
#[derive(Debug)]
enum Miss {
    /// Another identity holds it.
    Held(String),
    /// The write lost a race (conflict or already exists).
    Raced,
    /// The API server refused or could not be reached.
    Api(kube::Error),
}

impl std::fmt::Display for Miss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Miss::Held(holder) => write!(f, "held by {holder}"),
            Miss::Raced => f.write_str("another candidate wrote it first"),
            // The API server's own sentence, not the whole Status structure.
            Miss::Api(kube::Error::Api(status)) => {
                write!(f, "{} ({})", status.message, status.code)
            }
            Miss::Api(e) => write!(f, "{e}"),
        }
    }
}

impl Elector {
    /// A candidate for the Lease `config.namespace/config.name`.
    pub fn new(client: Client, config: Config) -> Self {
        Self {
            api: Api::namespaced(client, &config.namespace),
            config,
            observed: Observed::default(),
            held: None,
        }
    }

    /// `namespace/name` of the Lease.
    pub fn lease(&self) -> String {
        format!("{}/{}", self.config.namespace, self.config.name)
    }

    /// One attempt: `Ok` when this instance holds the Lease afterwards. A holder renews its own
    /// copy directly; otherwise, or when that copy is stale, a read-decide-write round.
    async fn try_acquire_or_renew(&mut self) -> Result<(), Miss> {
        if let Some(mut lease) = self.held.take() {
            if let Some(spec) = lease.spec.as_mut() {
                spec.renew_time = Some(now_wall());
            }
            match self.write(&lease).await {
                Ok(()) => return Ok(()),
                // Written by someone else since: read it below.
                Err(Miss::Raced) => {}
                Err(miss) => {
                    self.held = Some(lease);
                    return Err(miss);
                }
            }
        }
        let lease = self
            .api
            .get_opt(&self.config.name)
            .await
            .map_err(Miss::Api)?;
        let now = Instant::now();
        let current = lease.as_ref().and_then(|l| l.spec.as_ref());
        self.observed.note(current, now);
        let step = decide(
            current,
            &self.observed,
            &self.config.identity,
            self.config.timing,
            now,
            now_wall(),
        );
        match step {
            Step::Held { holder } => Err(Miss::Held(holder)),
            Step::Create(spec) => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.config.name.clone()),
                        namespace: Some(self.config.namespace.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(spec),
                };
                let created = self.api.create(&PostParams::default(), &lease).await;
                self.written(created)
            }
            Step::Write(spec) => {
                let mut lease = lease.unwrap_or_default();
                lease.spec = Some(spec);
                self.write(&lease).await
            }
        }
    }

    /// Updates the Lease to `lease`, whose `resourceVersion` is the one read or last written: a
    /// concurrent writer makes this a conflict ([`Miss::Raced`]).
    async fn write(&mut self, lease: &Lease) -> Result<(), Miss> {
        let replaced = self
            .api
            .replace(&self.config.name, &PostParams::default(), lease)
            .await;
        self.written(replaced)
    }

    /// Records a successful write as the held copy.
    fn written(&mut self, result: Result<Lease, kube::Error>) -> Result<(), Miss> {
        match result {
            Ok(lease) => {
                self.observed.note(lease.spec.as_ref(), Instant::now());
                self.held = Some(lease);
                Ok(())
            }
            Err(kube::Error::Api(e)) if e.code == 409 => Err(Miss::Raced),
            Err(e) => Err(Miss::Api(e)),
        }
    }

    /// Waits until this instance holds the Lease, then keeps renewing it in the background.
    pub async fn acquire(mut self) -> Leadership {
        let lease = self.lease();
        info!(lease = %lease, identity = %self.config.identity, "waiting to lead");
        let mut last_reported = String::new();
        let acquired = loop {
            let sent = Instant::now();
            match self.try_acquire_or_renew().await {
                Ok(()) => break sent,
                Err(miss) => {
                    // Each new reason once, not every retry period.
                    let reason = match &miss {
                        Miss::Api(_) => format!("cannot read or write the Lease: {miss} (the operator needs get, create and update on leases.coordination.k8s.io in {})", self.config.namespace),
                        other => other.to_string(),
                    };
                    if reason != last_reported {
                        match miss {
                            Miss::Api(_) => warn!(lease = %lease, "not leading yet: {reason}"),
                            _ => info!(lease = %lease, "not leading yet: {reason}"),
                        }
                        last_reported = reason;
                    }
                }
            }
            tokio::time::sleep(jittered(self.config.timing.retry_period)).await;
        };
        info!(lease = %lease, identity = %self.config.identity, "leading");
        let (stop, stopped) = oneshot::channel();
        let (lose, lost) = oneshot::channel();
        let fence = Fence::until(acquired + self.config.timing.renew_deadline);
        let task = tokio::spawn(self.keep(acquired, stopped, lose, fence.clone()));
        Leadership {
            lease,
            stop,
            lost,
            task,
            fence,
        }
    }

    /// Renews until told to stop (then releases) or until the renew deadline passes (then
    /// reports the loss and returns without touching the Lease). `acquired` is when the request
    /// that took the Lease was sent.
    async fn keep(
        mut self,
        acquired: Instant,
        mut stop: oneshot::Receiver<()>,
        lose: oneshot::Sender<String>,
        fence: Fence,
    ) {
        let timing = self.config.timing;
        let mut renewed = acquired;
        let mut last_miss = String::from("no renewal attempt finished");
        loop {
            tokio::select! {
                _ = &mut stop => {
                    fence.set(Instant::now());
                    self.release().await;
                    return;
                }
                () = tokio::time::sleep(timing.retry_period) => {}
            }
            // An attempt may only use what is left of the deadline.
            let sent = Instant::now();
            let left = timing
                .renew_deadline
                .saturating_sub(sent.saturating_duration_since(renewed));
            let outcome = if left.is_zero() {
                None
            } else {
                tokio::time::timeout(left, self.try_acquire_or_renew())
                    .await
                    .ok()
            };
            match after_attempt(
                renewed,
                sent,
                outcome,
                &mut last_miss,
                timing,
                Instant::now(),
            ) {
                Standing::Leading(since) => {
                    renewed = since;
                    fence.set(since + timing.renew_deadline);
                }
                Standing::Lost(reason) => {
                    fence.set(Instant::now());
                    let _ = lose.send(reason);
                    return;
                }
            }
        }
    }

    /// Gives the Lease up if this instance still holds it: empty holder, so a standby takes it at
    /// once. Best effort: on failure the Lease simply expires.
    async fn release(&mut self) {
        let Some(mut lease) = self.held.take() else {
            return;
        };
        if let Some(spec) = lease.spec.as_mut() {
            spec.holder_identity = None;
            spec.lease_duration_seconds = Some(1);
            spec.renew_time = Some(now_wall());
        }
        match self.write(&lease).await {
            Ok(()) => info!(lease = %self.lease(), "released the Lease"),
            // Someone else wrote it since: it is not ours to release.
            Err(Miss::Raced) => {}
            Err(miss) => {
                warn!(lease = %self.lease(), "releasing the Lease: {miss}; it expires on its own")
            }
        }
        self.held = None;
    }
}

/// The current time as a Lease records it.
fn now_wall() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

/// Up to a fifth more than `period`, so candidates that started together drift apart.
fn jittered(period: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    period + period.mul_f64(f64::from(nanos % 1000) / 5000.0)
}

/// This instance holds the Lease (and renews it) until [`Leadership::lost`] resolves or
/// [`Leadership::release`] is called.
pub struct Leadership {
    lease: String,
    stop: oneshot::Sender<()>,
    lost: oneshot::Receiver<String>,
    task: JoinHandle<()>,
    fence: Fence,
}

impl Leadership {
    /// The fence every write of this instance checks.
    pub fn fence(&self) -> Fence {
        self.fence.clone()
    }

    /// `namespace/name` of the Lease.
    pub fn lease(&self) -> &str {
        &self.lease
    }

    /// Resolves when leadership is lost, with the reason. From then on this instance must not
    /// write.
    pub async fn lost(&mut self) -> String {
        match (&mut self.lost).await {
            Ok(reason) => reason,
            Err(_) => "the renewal task ended".to_string(),
        }
    }

    /// Stops renewing and gives the Lease up, so a standby takes over at once.
    pub async fn release(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

/// This instance's identity: the pod name when the manifests pass it, else host and process.
pub fn default_identity() -> String {
    if let Some(pod) = std::env::var("POD_NAME").ok().filter(|p| !p.is_empty()) {
        return pod;
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string());
    format!("{host}-{}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: &str = "operator-a";

    fn timing() -> Timing {
        Timing::default()
    }

    fn wall(s: &str) -> MicroTime {
        MicroTime(s.parse().expect("timestamp"))
    }

    fn held_by(holder: Option<&str>, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: holder.map(str::to_string),
            lease_duration_seconds: Some(15),
            acquire_time: Some(wall("2026-01-01T00:00:00Z")),
            renew_time: Some(wall("2026-01-01T00:00:10Z")),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    fn observed_at(record: &LeaseSpec, since: Instant) -> Observed {
        let mut o = Observed::default();
        o.note(Some(record), since);
        o
    }

    /// `decide` for `record`, first seen now and judged `after` later, at wall time `at`.
    fn decide_after(record: &LeaseSpec, after: Duration, at: &str) -> Step {
        let seen = Instant::now();
        decide(
            Some(record),
            &observed_at(record, seen),
            ME,
            timing(),
            seen + after,
            wall(at),
        )
    }

    #[test]
    fn a_missing_lease_is_created_with_this_holder() {
        let now = Instant::now();
        let step = decide(
            None,
            &Observed::default(),
            ME,
            timing(),
            now,
            wall("2026-01-01T00:01:00Z"),
        );
        let Step::Create(spec) = step else {
            panic!("expected a create, got {step:?}")
        };
        assert_eq!(spec.holder_identity.as_deref(), Some(ME));
        assert_eq!(spec.lease_duration_seconds, Some(15));
        assert_eq!(spec.lease_transitions, Some(0));
        assert_eq!(spec.acquire_time, spec.renew_time);
    }

    #[test]
    fn a_lease_held_and_renewed_by_another_is_left_alone() {
        let record = held_by(Some("operator-b"), 3);
        // Just short of the holder's 15 s since the record last changed here.
        let step = decide_after(&record, Duration::from_secs(14), "2030-01-01T00:00:00Z");
        assert_eq!(
            step,
            Step::Held {
                holder: "operator-b".into()
            },
            "a wall clock far ahead must not expire it: only the local observation counts"
        );
    }

    #[test]
    fn a_lease_whose_record_stood_still_for_its_duration_is_taken_over() {
        let record = held_by(Some("operator-b"), 3);
        let step = decide_after(&record, Duration::from_secs(15), "2026-01-01T00:01:00Z");
        let Step::Write(spec) = step else {
            panic!("expected a takeover, got {step:?}")
        };
        assert_eq!(spec.holder_identity.as_deref(), Some(ME));
        assert_eq!(spec.lease_transitions, Some(4));
        assert_eq!(spec.acquire_time, Some(wall("2026-01-01T00:01:00Z")));
    }

    #[test]
    fn a_renewal_by_the_holder_restarts_the_expiry_clock() {
        let record = held_by(Some("operator-b"), 3);
        let start = Instant::now();
        let mut observed = observed_at(&record, start);
        let renewed = LeaseSpec {
            renew_time: Some(wall("2026-01-01T00:00:20Z")),
            ..record.clone()
        };
        observed.note(Some(&renewed), start + Duration::from_secs(10));
        let step = decide(
            Some(&renewed),
            &observed,
            ME,
            timing(),
            start + Duration::from_secs(20),
            wall("2026-01-01T00:00:30Z"),
        );
        assert!(matches!(step, Step::Held { .. }), "{step:?}");
    }

    #[test]
    fn the_holder_renews_keeping_its_acquire_time_and_transitions() {
        let record = held_by(Some(ME), 2);
        let step = decide_after(&record, Duration::ZERO, "2026-01-01T00:00:12Z");
        let Step::Write(spec) = step else {
            panic!("expected a renewal, got {step:?}")
        };
        assert_eq!(spec.holder_identity.as_deref(), Some(ME));
        assert_eq!(spec.renew_time, Some(wall("2026-01-01T00:00:12Z")));
        assert_eq!(spec.acquire_time, record.acquire_time);
        assert_eq!(spec.lease_transitions, Some(2));
    }

    #[test]
    fn a_released_lease_is_taken_at_once() {
        for holder in [None, Some("")] {
            let record = held_by(holder, 5);
            let step = decide_after(&record, Duration::ZERO, "2026-01-01T00:00:12Z");
            let Step::Write(spec) = step else {
                panic!("expected a takeover, got {step:?}")
            };
            assert_eq!(spec.holder_identity.as_deref(), Some(ME));
            assert_eq!(spec.lease_transitions, Some(6));
        }
    }

    #[test]
    fn a_renewal_counts_from_when_its_request_was_sent() {
        let t = timing();
        let s = Duration::from_secs;
        let start = Instant::now();
        let mut last_miss = String::new();
        // Sent at 1 s, answered at 9 s: the server may have stored it right at 1 s.
        let standing = after_attempt(
            start,
            start + s(1),
            Some(Ok(())),
            &mut last_miss,
            t,
            start + s(9),
        );
        assert_eq!(standing, Standing::Leading(start + s(1)));
        // The next attempt, sent at 9 s, has no answer by 11 s: 10 s since the last renewal
        // was sent, so the holder stops, as a standby may count from then.
        let standing = after_attempt(
            start + s(1),
            start + s(9),
            None,
            &mut last_miss,
            t,
            start + s(11),
        );
        assert!(matches!(standing, Standing::Lost(_)), "{standing:?}");
        // A refused attempt is named in the reason.
        let refused = Miss::Raced;
        let standing = after_attempt(
            start,
            start + s(9),
            Some(Err(refused)),
            &mut last_miss,
            t,
            start + s(10),
        );
        let Standing::Lost(reason) = standing else {
            panic!("expected a loss, got {standing:?}")
        };
        assert!(
            reason.contains("another candidate wrote it first"),
            "{reason}"
        );
        // Someone else holding it ends leadership at once.
        let standing = after_attempt(
            start,
            start + s(1),
            Some(Err(Miss::Held("operator-b".into()))),
            &mut last_miss,
            t,
            start + s(2),
        );
        assert_eq!(
            standing,
            Standing::Lost("operator-b holds the Lease now".into())
        );
    }

    #[test]
    fn default_timing_stops_the_holder_before_a_standby_may_start() {
        let t = Timing::default();
        assert!(t.renew_deadline < t.lease_duration);
        assert!(t.retry_period < t.renew_deadline);
    }

    #[test]
    fn the_fence_closes_at_its_deadline_unless_moved() {
        let step = Duration::from_millis(200);
        let fence = Fence::until(Instant::now() + step);
        assert!(fence.holds(), "inside the deadline");
        // A renewal moves the deadline on.
        fence.set(Instant::now() + 3 * step);
        std::thread::sleep(step + step / 2);
        assert!(fence.holds(), "renewed: still inside");
        // No renewal for longer than the deadline (a paused holder): no write may go out.
        std::thread::sleep(2 * step);
        assert!(!fence.holds(), "past the deadline");
        // A loss closes it at once.
        let lost = Fence::until(Instant::now() + 10 * step);
        lost.set(Instant::now());
        assert!(!lost.holds());
        assert!(Fence::default().holds(), "no election: always open");
    }

    #[test]
    fn jitter_stays_within_a_fifth() {
        let p = Duration::from_secs(2);
        let j = jittered(p);
        assert!(j >= p && j <= p + p / 5, "{j:?}");
    }
}
