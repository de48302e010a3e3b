//! A de-duplicating work queue, as in client-go: a key waits at most once in the queue, is
//! processed by at most one worker at a time, and is processed again if it was added while
//! being processed. This keeps the agent at one status computation per pod change, however
//! many watch events or process exits arrive.

use std::collections::{HashSet, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

struct State<K> {
    queue: VecDeque<K>,
    queued: HashSet<K>,
    active: HashSet<K>,
    again: HashSet<K>,
}

pub struct WorkQueue<K> {
    state: Mutex<State<K>>,
    notify: Notify,
}

impl<K: Clone + Eq + Hash + Send + 'static> WorkQueue<K> {
    pub fn new() -> Arc<Self> {
        Arc::new(WorkQueue {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                queued: HashSet::new(),
                active: HashSet::new(),
                again: HashSet::new(),
            }),
            notify: Notify::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<K>> {
        // The state is updated by plain collection operations that cannot panic half-way.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn add(&self, key: K) {
        let mut s = self.lock();
        if s.active.contains(&key) {
            s.again.insert(key);
        } else if s.queued.insert(key.clone()) {
            s.queue.push_back(key);
            drop(s);
            self.notify.notify_one();
        }
    }

    pub fn add_after(self: &Arc<Self>, key: K, delay: Duration) {
        let queue = Arc::clone(self);
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            queue.add(key);
        });
    }

    /// Waits for the next key; the caller must call [`WorkQueue::done`] with it afterwards.
    pub async fn next(&self) -> K {
        loop {
            let notified = self.notify.notified();
            {
                let mut s = self.lock();
                if let Some(key) = s.queue.pop_front() {
                    s.queued.remove(&key);
                    s.active.insert(key.clone());
                    if !s.queue.is_empty() {
                        // Wake another worker for the rest.
                        self.notify.notify_one();
                    }
                    return key;
                }
            }
            notified.await;
        }
    }

    pub fn done(&self, key: &K) {
        let mut s = self.lock();
        s.active.remove(key);
        if s.again.remove(key) && s.queued.insert(key.clone()) {
            s.queue.push_back(key.clone());
            drop(s);
            self.notify.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn keys_are_deduplicated_and_serialised() {
        let q = WorkQueue::new();
        q.add(1);
        q.add(2);
        q.add(1);
        assert_eq!(q.next().await, 1);
        // Added while active: not handed out again until done.
        q.add(1);
        assert_eq!(q.next().await, 2);
        q.done(&2);
        q.done(&1);
        assert_eq!(q.next().await, 1);
        q.done(&1);
        let pending = tokio::time::timeout(Duration::from_millis(50), q.next()).await;
        assert!(pending.is_err(), "queue should be empty");
    }

    #[tokio::test]
    async fn delayed_adds_arrive() {
        let q = WorkQueue::new();
        q.add_after("k", Duration::from_millis(10));
        let key = tokio::time::timeout(Duration::from_secs(2), q.next())
            .await
            .unwrap();
        assert_eq!(key, "k");
    }
}
