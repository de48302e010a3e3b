//! The fleet limit on acceptance runs (`--max-concurrent-acceptance-runs`): an operator upgrade or
//! a fleet-wide image change never starts every run at once. Runs beyond the limit wait in the
//! order they first asked, each told its place; a run is counted from its admission until its
//! leader Job finishes.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

/// How long an admitted run counts before its Job is seen in the cache (the cache then counts it).
const ADMITTED_UNTIL_SEEN: Duration = Duration::from_secs(60);
/// How long a waiting run keeps its place without asking again (its deployment went away, or no
/// longer needs the run).
const WAITING_UNTIL_FORGOTTEN: Duration = Duration::from_secs(300);

/// The key of one acceptance run over the fleet: its deployment and the whole hash of what it
/// judges (the same spec in two deployments is two runs).
pub fn run_key(namespace: &str, deployment: &str, judges: &str) -> String {
    format!("{namespace}/{deployment}/{judges}")
}

/// Runs admitted and runs waiting, by [`run_key`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Queue {
    /// Admitted runs and when.
    admitted: BTreeMap<String, Timestamp>,
    /// Waiting runs: when they first and last asked.
    waiting: BTreeMap<String, (Timestamp, Timestamp)>,
}

/// The acceptance runs the cache holds, by [`run_key`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Runs {
    /// Runs with a Job that has not finished.
    pub under_way: BTreeSet<String>,
    /// Every run with a Job, finished or not.
    pub seen: BTreeSet<String>,
}

/// What the queue reads of the acceptance runs the cache holds.
pub trait RunsSeen {
    /// Whether run `key` has a Job that has not finished.
    fn under_way(&self, key: &str) -> bool;
    /// Whether run `key` has a Job, finished or not.
    fn seen(&self, key: &str) -> bool;
    /// How many runs have a Job that has not finished.
    fn under_way_count(&self) -> usize;
}

impl RunsSeen for Runs {
    fn under_way(&self, key: &str) -> bool {
        self.under_way.contains(key)
    }

    fn seen(&self, key: &str) -> bool {
        self.seen.contains(key)
    }

    fn under_way_count(&self) -> usize {
        self.under_way.len()
    }
}

/// Whether a run may start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Start it.
    Start,
    /// Wait: `position` in the queue (1 is next), `under_way` runs hold the `limit`.
    Queued {
        /// Place in the queue, from 1.
        position: usize,
        /// Runs under way.
        under_way: usize,
        /// The limit.
        limit: u16,
    },
}

impl Queue {
    /// Asks for `run` to start, given the `runs` the cache holds and the `limit` (`None`: no
    /// limit). An admitted run counts as such until the cache shows it (under way or already
    /// finished); a queued one keeps its first place.
    pub fn ask(
        &mut self,
        run: &str,
        runs: &(impl RunsSeen + ?Sized),
        limit: Option<u16>,
        now: Timestamp,
    ) -> Admission {
        let older_than =
            |t: &Timestamp, d: Duration| now.duration_since(*t).as_secs_f64() > d.as_secs_f64();
        self.admitted
            .retain(|key, at| !runs.seen(key) && !older_than(at, ADMITTED_UNTIL_SEEN));
        self.waiting
            .retain(|_, (_, last)| !older_than(last, WAITING_UNTIL_FORGOTTEN));
        let Some(limit) = limit else {
            self.waiting.remove(run);
            return Admission::Start;
        };
        if runs.under_way(run) || self.admitted.contains_key(run) {
            self.waiting.remove(run);
            return Admission::Start;
        }
        let first = self.waiting.get(run).map_or(now, |(first, _)| *first);
        self.waiting.insert(run.to_string(), (first, now));
        let busy = runs.under_way_count() + self.admitted.len();
        let mut order: Vec<(&Timestamp, &String)> = self
            .waiting
            .iter()
            .map(|(k, (first, _))| (first, k))
            .collect();
        order.sort();
        let position = order.iter().position(|(_, k)| *k == run).unwrap_or(0) + 1;
        let free = usize::from(limit).saturating_sub(busy);
        if position <= free {
            self.waiting.remove(run);
            self.admitted.insert(run.to_string(), now);
            return Admission::Start;
        }
        Admission::Queued {
            position,
            under_way: busy,
            limit,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).expect("time")
    }

    /// Runs under way (each also seen).
    fn set(keys: &[&str]) -> Runs {
        let under_way: BTreeSet<String> = keys.iter().map(|k| k.to_string()).collect();
        Runs {
            seen: under_way.clone(),
            under_way,
        }
    }

    #[test]
    fn runs_beyond_the_limit_wait_in_the_order_they_asked_and_start_as_others_end() {
        let mut q = Queue::default();
        let none = set(&[]);
        assert_eq!(q.ask("ns/a", &none, Some(2), at(0)), Admission::Start);
        assert_eq!(q.ask("ns/b", &none, Some(2), at(1)), Admission::Start);
        let queued = |position, under_way| Admission::Queued {
            position,
            under_way,
            limit: 2,
        };
        assert_eq!(q.ask("ns/c", &none, Some(2), at(2)), queued(1, 2));
        assert_eq!(q.ask("ns/d", &none, Some(2), at(3)), queued(2, 2));
        // Asking again keeps the place; the admitted runs show up in the cache.
        let running = set(&["ns/a", "ns/b"]);
        assert_eq!(q.ask("ns/d", &running, Some(2), at(4)), queued(2, 2));
        assert_eq!(
            q.ask("ns/a", &running, Some(2), at(4)),
            Admission::Start,
            "under way"
        );
        // a finishes: c, first in line, starts; d does not overtake it.
        let running = set(&["ns/b"]);
        assert_eq!(q.ask("ns/d", &running, Some(2), at(5)), queued(2, 1));
        assert_eq!(q.ask("ns/c", &running, Some(2), at(6)), Admission::Start);
        assert_eq!(q.ask("ns/d", &running, Some(2), at(7)), queued(1, 2));
    }

    #[test]
    fn without_a_limit_everything_starts_and_stale_entries_are_forgotten() {
        let mut q = Queue::default();
        assert_eq!(q.ask("ns/a", &set(&[]), None, at(0)), Admission::Start);
        assert_eq!(q.ask("ns/a", &set(&[]), Some(1), at(1)), Admission::Start);
        assert!(matches!(
            q.ask("ns/gone", &set(&[]), Some(1), at(2)),
            Admission::Queued { position: 1, .. }
        ));
        // The admitted run never showed up (its deployment went away): it stops counting.
        assert_eq!(q.ask("ns/b", &set(&[]), Some(1), at(400)), Admission::Start);
        // One that finished before any pass saw it under way stops counting at once.
        let finished = Runs {
            under_way: BTreeSet::new(),
            seen: ["ns/b".to_string()].into(),
        };
        assert_eq!(q.ask("ns/c", &finished, Some(1), at(401)), Admission::Start);
        assert_eq!(q, {
            let mut expected = Queue::default();
            expected.admitted.insert("ns/c".into(), at(401));
            expected
        });
    }
}
