//! The retry contract for RunPodSandbox and CreateContainer (kubelet's
//! "name is reserved" loop, containerd #9947; berth does what CRI-O's
//! PR #5590 does).
//!
//! A creation whose client went away keeps running (the RPC layer runs
//! every call on its own task). A retry of the same request — same name,
//! equal request — finds the name taken by that creation: it waits for it
//! (within its own deadline) and gets its id, once. A request that differs
//! still gets AlreadyExists, and so does a second retry after the id has
//! been handed out. A creation that failed released its name: the retry then
//! simply makes the object anew.
//!
//! Only an abandoned creation that succeeded is kept (for [`CLAIM_TTL`],
//! with its request): one whose client got its id, one that failed and one
//! a retry claimed are forgotten as they end, so that a node that makes
//! pods all day keeps nothing of them (#28: each kept request was ~6 KiB of
//! the daemon's RSS per pod life cycle).

use berth_lock::MutexExt;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::caller;
use crate::error::Error;

/// How long a finished creation waits for a retry to claim it.
const CLAIM_TTL: Duration = Duration::from_secs(600);

/// How a creation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Created,
    Failed,
}

struct Entry<R> {
    request: R,
    id: String,
    done: watch::Receiver<Option<Outcome>>,
    finished: Option<Instant>,
}

/// Creations by name: in flight, or finished and not yet claimed by a retry.
pub struct Inflight<R> {
    entries: Mutex<HashMap<String, Entry<R>>>,
}

impl<R> Default for Inflight<R> {
    fn default() -> Self {
        Inflight {
            entries: Mutex::new(HashMap::new()),
        }
    }
}

/// Held by a creation while it runs; says how it ended.
pub struct Running {
    done: watch::Sender<Option<Outcome>>,
}

impl Running {
    pub fn finish(self, outcome: Outcome) {
        self.done.send_replace(Some(outcome));
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // A creation that ended without saying (a panic) failed.
        self.done.send_if_modified(|o| {
            if o.is_none() {
                *o = Some(Outcome::Failed);
                true
            } else {
                false
            }
        });
    }
}

/// What a call that found its name taken should do.
pub enum Retry {
    /// Wait for this creation of an equal request, then [`Inflight::claim`].
    Wait(watch::Receiver<Option<Outcome>>),
    /// A different request holds the name (or its id was handed out).
    Refuse,
}

impl<R: PartialEq + Clone> Inflight<R> {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry<R>>> {
        self.entries.lock_unpoisoned()
    }

    /// A creation of `request` as `id` under `name` begins.
    pub fn begin(&self, name: &str, request: &R, id: &str) -> Running {
        let (tx, rx) = watch::channel(None);
        let mut entries = self.lock();
        let now = Instant::now();
        entries.retain(|_, e| e.finished.is_none_or(|t| now.duration_since(t) < CLAIM_TTL));
        entries.insert(
            name.to_string(),
            Entry {
                request: request.clone(),
                id: id.to_string(),
                done: rx,
                finished: None,
            },
        );
        Running { done: tx }
    }

    /// Notes that the creation under `name` has ended (for the claim TTL).
    pub fn ended(&self, name: &str, id: &str) {
        if let Some(e) = self.lock().get_mut(name).filter(|e| e.id == id) {
            e.finished = Some(Instant::now());
        }
    }

    /// Forgets the creation of `id` under `name` (a retry would be refused
    /// without it as with it: its id was handed out, or it failed).
    pub fn forget(&self, name: &str, id: &str) {
        let mut entries = self.lock();
        if entries.get(name).is_some_and(|e| e.id == id) {
            entries.remove(name);
        }
    }

    /// How many creations are kept (in flight, or waiting for a claim).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// `name` is held by `holder`: may this equal `request` wait for it?
    pub fn retry(&self, name: &str, request: &R, holder: &str) -> Retry {
        match self.lock().get(name) {
            Some(e) if e.id == holder && e.request == *request => Retry::Wait(e.done.clone()),
            _ => Retry::Refuse,
        }
    }

    /// The id of the creation under `name`, handed out once: the entry
    /// goes with it (a later retry finds none and is refused).
    pub fn claim(&self, name: &str, holder: &str) -> Option<String> {
        let mut entries = self.lock();
        entries.get(name).filter(|e| e.id == holder)?;
        entries.remove(name).map(|e| e.id)
    }
}

/// Reserves `name` (through `reserve`, which says who holds it otherwise)
/// for a new creation of `request`: `None`. When an equal request's
/// creation holds the name, waits for it and hands out its id once:
/// `Some(id)`. Otherwise AlreadyExists naming the holder.
pub async fn reserve_or_join<R: PartialEq + Clone>(
    inflight: &Inflight<R>,
    kind: &str,
    name: &str,
    request: &R,
    reserve: impl Fn() -> Result<(), String>,
) -> Result<Option<String>, Error> {
    let mut failed: Option<String> = None;
    loop {
        let holder = match reserve() {
            Ok(()) => return Ok(None),
            Err(holder) => holder,
        };
        let refuse = || {
            Error::AlreadyExists(format!(
                "{kind} name {name:?} is already in use by {holder}"
            ))
        };
        if failed.as_deref() == Some(holder.as_str()) {
            // It failed and still holds the name (kept for a cleanup retry).
            return Err(refuse());
        }
        let Retry::Wait(done) = inflight.retry(name, request, &holder) else {
            return Err(refuse());
        };
        tracing::info!(%name, id = %holder, "a {kind} of an equal request is being made: waiting for it");
        let outcome = tokio::select! {
            outcome = wait(done) => outcome,
            _ = caller::wait_gone() => {
                return Err(Error::DeadlineExceeded(format!(
                    "the client went away while {kind} {name:?} was being made"
                )))
            }
        };
        if outcome == Outcome::Failed {
            failed = Some(holder);
            continue;
        }
        return match inflight.claim(name, &holder) {
            Some(id) => {
                tracing::info!(%name, %id, "a retry gets the {kind} its abandoned call made");
                Ok(Some(id))
            }
            None => Err(refuse()),
        };
    }
}

/// Ends the creation of `id` under `name`: its own client, if still there,
/// has its id, so no retry will be handed it, and a failed creation has
/// nothing to hand out: both are forgotten. Only a creation whose client
/// went away is kept, for a retry to claim within [`CLAIM_TTL`].
pub fn end<R: PartialEq + Clone>(
    inflight: &Inflight<R>,
    running: Running,
    name: &str,
    id: &str,
    created: bool,
) {
    running.finish(if created {
        Outcome::Created
    } else {
        Outcome::Failed
    });
    if created && caller::gone() {
        inflight.ended(name, id);
    } else {
        inflight.forget(name, id);
    }
}

/// Waits until the creation behind `done` has ended.
pub async fn wait(mut done: watch::Receiver<Option<Outcome>>) -> Outcome {
    loop {
        if let Some(outcome) = done.borrow_and_update().clone() {
            return outcome;
        }
        if done.changed().await.is_err() {
            return done.borrow().clone().unwrap_or(Outcome::Failed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_equal_retry_gets_the_id_once_a_different_one_never() {
        let inflight = Inflight::<u32>::default();
        let running = inflight.begin("web", &1, "id1");
        assert!(matches!(inflight.retry("web", &2, "id1"), Retry::Refuse));
        let Retry::Wait(done) = inflight.retry("web", &1, "id1") else {
            panic!("an equal request waits");
        };
        running.finish(Outcome::Created);
        inflight.ended("web", "id1");
        assert_eq!(wait(done).await, Outcome::Created);
        assert_eq!(inflight.claim("web", "id1").as_deref(), Some("id1"));
        assert_eq!(inflight.claim("web", "id1"), None);
        assert!(matches!(inflight.retry("web", &1, "id1"), Retry::Refuse));
    }

    #[tokio::test]
    async fn only_an_abandoned_creation_is_kept_until_claimed() {
        let inflight = Inflight::<u32>::default();
        // Its client got its id (outside a call: the client is there).
        let running = inflight.begin("a", &1, "id-a");
        end(&inflight, running, "a", "id-a", true);
        assert_eq!(inflight.len(), 0);
        // It failed.
        let running = inflight.begin("b", &1, "id-b");
        end(&inflight, running, "b", "id-b", false);
        assert_eq!(inflight.len(), 0);
        // Its client went away: kept for a retry, until claimed.
        let (client, body) = caller::track(async {
            let running = inflight.begin("c", &1, "id-c");
            caller::wait_gone().await;
            end(&inflight, running, "c", "id-c", true);
        });
        drop(client);
        body.await;
        assert_eq!(inflight.len(), 1);
        assert!(matches!(inflight.retry("c", &1, "id-c"), Retry::Wait(_)));
        assert_eq!(inflight.claim("c", "id-c").as_deref(), Some("id-c"));
        assert_eq!(inflight.len(), 0);
        assert!(matches!(inflight.retry("c", &1, "id-c"), Retry::Refuse));
    }

    #[tokio::test]
    async fn a_creation_dropped_without_an_outcome_failed() {
        let inflight = Inflight::<u32>::default();
        let running = inflight.begin("web", &1, "id1");
        let Retry::Wait(done) = inflight.retry("web", &1, "id1") else {
            panic!()
        };
        drop(running);
        assert_eq!(wait(done).await, Outcome::Failed);
    }
}
