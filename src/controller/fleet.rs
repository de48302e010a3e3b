//! The fleet limit on acceptance runs (`--max-concurrent-acceptance-runs`): an operator upgrade or
//! a fleet-wide image change never starts every run at once. Runs beyond the limit wait in the
//! order they first asked, each told its place; a run is counted from its admission until its
//! leader Job finishes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
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
#[derive(Clone, Debug, Default)]
pub struct Queue {
    /// Admitted runs and when (at most the limit: a run is admitted only into a free place).
    admitted: BTreeMap<String, Timestamp>,
    /// Waiting runs: when they last asked, and their ticket in [`Self::line`].
    waiting: HashMap<String, Waiting>,
    /// The waiting runs in line, in the order they first asked.
    line: Line,
    /// When the waiting runs were last swept of those that stopped asking.
    swept: Option<Timestamp>,
}

/// A waiting run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Waiting {
    /// When it last asked.
    last: Timestamp,
    /// Its ticket: tickets are given in the order runs first ask.
    ticket: u64,
}

impl PartialEq for Queue {
    /// The same runs admitted and waiting, in the same order (when it was last swept aside).
    fn eq(&self, other: &Self) -> bool {
        fn line(q: &Queue) -> Vec<(&String, Timestamp)> {
            let mut line: Vec<(&String, Timestamp)> =
                q.waiting.iter().map(|(k, w)| (k, w.last)).collect();
            line.sort_by_key(|(k, _)| q.place(k));
            line
        }
        self.admitted == other.admitted && line(self) == line(other)
    }
}

/// The tickets of the waiting runs: a run's place in line is the number of tickets held up to
/// its own, counted in a Fenwick tree over the tickets `base..base + tree.len()`, so that it
/// costs the logarithm of the line's length and not the runs ahead of it.
#[derive(Clone, Debug, Default)]
struct Line {
    /// The ticket of the tree's first slot.
    base: u64,
    /// The next ticket to give.
    next: u64,
    /// The Fenwick tree: each slot sums the held tickets of its range.
    tree: Vec<u32>,
}

impl Line {
    /// The fewest slots the tree is made with.
    const LEAST: usize = 64;

    /// Gives the next ticket; `held` lists the tickets held, read only when the tree is full and
    /// made again from the oldest held ticket, with room for as many tickets again as it spans.
    fn give(&mut self, held: impl Iterator<Item = u64>) -> u64 {
        if self.next - self.base >= self.tree.len() as u64 {
            let held: Vec<u64> = held.collect();
            self.base = held.iter().copied().min().unwrap_or(self.next);
            let span = (self.next - self.base) as usize;
            self.tree = vec![0; (2 * span).max(Self::LEAST)];
            for ticket in held {
                self.add(ticket, 1);
            }
        }
        let ticket = self.next;
        self.next += 1;
        self.add(ticket, 1);
        ticket
    }

    /// Gives `ticket` back.
    fn give_back(&mut self, ticket: u64) {
        self.add(ticket, -1);
    }

    fn add(&mut self, ticket: u64, by: i32) {
        let Some(mut i) = ticket.checked_sub(self.base).map(|i| i as usize + 1) else {
            return;
        };
        while i <= self.tree.len() {
            self.tree[i - 1] = self.tree[i - 1].wrapping_add_signed(by);
            i += i & i.wrapping_neg();
        }
    }

    /// How many tickets up to `ticket` (itself included) are held.
    fn held_up_to(&self, ticket: u64) -> usize {
        let slots = self.tree.len() as u64;
        let mut i = ticket
            .saturating_sub(self.base)
            .saturating_add(1)
            .min(slots) as usize;
        let mut held = 0usize;
        while i > 0 {
            held += self.tree[i - 1] as usize;
            i &= i - 1;
        }
        held
    }
}

impl Eq for Queue {}

/// How often the waiting runs are swept of those that stopped asking: a sweep reads every
/// waiting run, so it is not done on each ask.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

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
        // At most `limit` entries: read on each ask, so that the runs counted are exact.
        self.admitted
            .retain(|key, at| !runs.seen(key) && !older_than(at, ADMITTED_UNTIL_SEEN));
        if self.swept.is_none_or(|t| older_than(&t, SWEEP_EVERY)) {
            self.forget_waiting(|last| older_than(last, WAITING_UNTIL_FORGOTTEN));
            self.swept = Some(now);
        }
        let Some(limit) = limit else {
            self.forget_waiting_run(run);
            return Admission::Start;
        };
        if runs.under_way(run) || self.admitted.contains_key(run) {
            self.forget_waiting_run(run);
            return Admission::Start;
        }
        match self.waiting.get_mut(run) {
            Some(waiting) => waiting.last = now,
            None => {
                let ticket = self.line.give(self.waiting.values().map(|w| w.ticket));
                self.waiting
                    .insert(run.to_string(), Waiting { last: now, ticket });
            }
        }
        let busy = runs.under_way_count() + self.admitted.len();
        let position = self.place(run);
        let free = usize::from(limit).saturating_sub(busy);
        if position <= free {
            self.forget_waiting_run(run);
            self.admitted.insert(run.to_string(), now);
            return Admission::Start;
        }
        Admission::Queued {
            position,
            under_way: busy,
            limit,
        }
    }

    /// The place in line of waiting run `run` (1 is next; 0 for a run not waiting).
    fn place(&self, run: &str) -> usize {
        self.waiting
            .get(run)
            .map_or(0, |w| self.line.held_up_to(w.ticket))
    }

    /// Forgets the waiting runs whose last ask `stale` says stopped.
    fn forget_waiting(&mut self, stale: impl Fn(&Timestamp) -> bool) {
        let line = &mut self.line;
        self.waiting.retain(|_, waiting| {
            let keep = !stale(&waiting.last);
            if !keep {
                line.give_back(waiting.ticket);
            }
            keep
        });
    }

    /// Forgets `run` among the waiting.
    fn forget_waiting_run(&mut self, run: &str) {
        if let Some(waiting) = self.waiting.remove(run) {
            self.line.give_back(waiting.ticket);
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
    fn a_long_line_keeps_each_runs_place_and_forgets_those_that_stopped_asking() {
        let mut q = Queue::default();
        let busy = set(&["ns/running"]);
        for i in 0..1000 {
            let asked = q.ask(&format!("ns/r{i:04}"), &busy, Some(1), at(i / 10));
            assert!(
                matches!(asked, Admission::Queued { position, .. } if position == i as usize + 1),
                "{i}: {asked:?}"
            );
        }
        // Asking again keeps the place, whoever asked since.
        assert!(matches!(
            q.ask("ns/r0500", &busy, Some(1), at(200)),
            Admission::Queued { position: 501, .. }
        ));
        // The running one ends: the first in line starts, the rest move up.
        assert_eq!(
            q.ask("ns/r0000", &set(&[]), Some(1), at(201)),
            Admission::Start
        );
        assert!(matches!(
            q.ask("ns/r0500", &set(&["ns/r0000"]), Some(1), at(202)),
            Admission::Queued { position: 500, .. }
        ));
        // Those that stopped asking for 5 minutes leave the line: one asking again starts over.
        assert!(matches!(
            q.ask("ns/r0999", &set(&["ns/r0000"]), Some(1), at(503)),
            Admission::Queued { position: 1, .. }
        ));
        assert_eq!((q.waiting.len(), q.line.held_up_to(u64::MAX)), (1, 1));
    }

    #[test]
    fn a_place_is_the_count_of_runs_ahead_through_every_remaking_of_the_line() {
        // Runs join, leave from anywhere in line and start from its head, over many times the
        // tree's first size: each waiting run's place is one more than the runs that first asked
        // before it and still wait.
        let mut q = Queue::default();
        let busy = set(&["ns/running"]);
        let mut order: Vec<String> = Vec::new();
        let mut state = 7u64;
        for i in 0..3000u64 {
            let run = format!("ns/r{i}");
            q.ask(&run, &busy, Some(1), at(0));
            order.push(run);
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            if state >> 62 == 0 {
                let gone = order.remove((state >> 33) as usize % order.len());
                q.forget_waiting_run(&gone);
            }
            if i % 97 == 0 {
                for (k, run) in order.iter().enumerate() {
                    assert_eq!(q.place(run), k + 1, "{run} after {i} runs");
                }
            }
        }
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
