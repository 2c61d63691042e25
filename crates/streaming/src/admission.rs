//! Who may hold one of the server's connection slots.
//!
//! A connection is *unproven* until a request on it carries a valid token
//! and is upgraded; from then on it is a *session*. Anyone who can reach the
//! port can open unproven connections, only a holder of a token (minted by
//! a CRI call) can make a session. So:
//!
//! - the server holds at most `max` connections. When they are all taken, a
//!   new connection closes the oldest unproven one; when every slot is a
//!   session, the new connection is closed. Sessions are never closed to
//!   make room. A client that sends its token at once (kubelet does) is
//!   proven long before it is the oldest: to have it closed, others must
//!   open as many connections as there are unproven ones in the time it
//!   takes kubelet's request head to arrive;
//! - one peer address holds at most `per_peer` unproven connections; a new
//!   one past that closes that address's own oldest unproven connection, so
//!   one address cannot turn the server's connections over, only its own.
//!   The oldest, not the new one: refusing the new one would let whoever
//!   holds `per_peer` silent connections lock everyone else at that address
//!   out.
//!
//! Kubelet's own addresses (`exempt`: 127.0.0.1, ::1 and the address the
//! server listens on, where kubelet connects from) have no per-peer cap:
//! there kubelet shares the address with every local user and host-network
//! pod, and a cap would only shorten the race above from all unproven
//! connections to `per_peer` of them (a flooder on 127.0.0.1 that
//! reconnects whenever it is closed made kubelet's execs fail with a cap,
//! and none without: docs/security.md). Sessions never count against
//! the cap either (kubelet makes them all from one address).
//!
//! Closing the oldest unproven connection to make room takes the place of
//! a reserve of slots kept for valid tokens: every unproven slot is such a
//! reserve.

use berth_lock::MutexExt;
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::task::AbortHandle;

/// The slots of one server.
#[derive(Clone)]
pub(crate) struct Admission {
    shared: Arc<Shared>,
}

struct Shared {
    max: usize,
    per_peer: usize,
    /// Addresses without a per-peer cap.
    exempt: Vec<IpAddr>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    next_id: u64,
    /// Every connection holding a slot, with its task once spawned.
    live: HashMap<u64, Option<AbortHandle>>,
    /// The unproven ones, oldest first (ids grow), with their peer.
    unproven: BTreeMap<u64, IpAddr>,
    /// How many unproven connections each peer holds (no zeros kept).
    per_peer: HashMap<IpAddr, usize>,
}

impl State {
    /// Takes `id` out: its slot is free at once, its task is for the caller
    /// to abort.
    fn evict(&mut self, id: u64) -> Option<Evicted> {
        let peer = self.unproven.remove(&id)?;
        self.forget_unproven(peer);
        let task = self.live.remove(&id).flatten();
        Some(Evicted { peer, task })
    }

    fn forget_unproven(&mut self, peer: IpAddr) {
        if let Some(n) = self.per_peer.get_mut(&peer) {
            *n -= 1;
            if *n == 0 {
                self.per_peer.remove(&peer);
            }
        }
    }

    /// The oldest unproven connection of `peer`.
    fn oldest_of(&self, peer: IpAddr) -> Option<u64> {
        self.unproven
            .iter()
            .find(|(_, p)| **p == peer)
            .map(|(id, _)| *id)
    }
}

/// A connection closed to make room for a new one.
pub(crate) struct Evicted {
    pub(crate) peer: IpAddr,
    task: Option<AbortHandle>,
}

impl Evicted {
    /// Ends the connection's task (and with it the connection).
    pub(crate) fn close(self) {
        if let Some(task) = self.task {
            task.abort();
        }
    }
}

/// What [`Admission::admit`] decided.
pub(crate) enum Admit {
    /// The connection has a slot; `evicted` was closed to make room.
    Yes {
        slot: Slot,
        evicted: Option<Evicted>,
    },
    /// Every slot is a session: the new connection is to be closed.
    Full,
}

impl Admission {
    /// `max` connections at once, `per_peer` unproven ones per address
    /// other than the `exempt` ones.
    pub(crate) fn new(max: usize, per_peer: usize, exempt: &[IpAddr]) -> Admission {
        Admission {
            shared: Arc::new(Shared {
                max,
                per_peer,
                exempt: exempt.iter().map(|ip| ip.to_canonical()).collect(),
                state: Mutex::default(),
            }),
        }
    }

    /// A slot for a new connection from `peer`, if one can be had.
    pub(crate) fn admit(&self, peer: IpAddr) -> Admit {
        let peer = peer.to_canonical();
        let mut state = self.shared.lock();
        let at_cap = !self.shared.exempt.contains(&peer)
            && state.per_peer.get(&peer).copied().unwrap_or(0) >= self.shared.per_peer;
        let victim = if at_cap {
            state.oldest_of(peer)
        } else if state.live.len() >= self.shared.max {
            // The oldest unproven connection, whoever holds it.
            state.unproven.keys().next().copied()
        } else {
            None
        };
        let evicted = victim.and_then(|id| state.evict(id));
        if state.live.len() >= self.shared.max {
            return Admit::Full;
        }
        let id = state.next_id;
        state.next_id += 1;
        state.live.insert(id, None);
        state.unproven.insert(id, peer);
        *state.per_peer.entry(peer).or_insert(0) += 1;
        drop(state);
        Admit::Yes {
            slot: Slot {
                shared: self.shared.clone(),
                id,
            },
            evicted,
        }
    }

    /// Records the task serving `slot`'s connection, so that it can be
    /// closed to make room.
    pub(crate) fn spawned(&self, slot: u64, task: AbortHandle) {
        if let Some(entry) = self.shared.lock().live.get_mut(&slot) {
            *entry = Some(task);
        }
    }

    /// Connections holding a slot, and how many of them are unproven.
    #[cfg(test)]
    fn counts(&self) -> (usize, usize) {
        let state = self.shared.lock();
        (state.live.len(), state.unproven.len())
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock_unpoisoned()
    }
}

/// One connection's slot, given back when dropped.
pub(crate) struct Slot {
    shared: Arc<Shared>,
    id: u64,
}

impl Slot {
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// The connection carries a valid token and becomes a session: it is
    /// no longer closed to make room nor counted against its peer. False
    /// when it has already been chosen to make room (its task is ending).
    pub(crate) fn prove(&self) -> bool {
        let mut state = self.shared.lock();
        if !state.live.contains_key(&self.id) {
            return false;
        }
        if let Some(peer) = state.unproven.remove(&self.id) {
            state.forget_unproven(peer);
        }
        true
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        state.live.remove(&self.id);
        if let Some(peer) = state.unproven.remove(&self.id) {
            state.forget_unproven(peer);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
    }

    /// Admits one connection from `peer` with a task that never ends.
    fn admit(a: &Admission, peer: IpAddr) -> Option<(Slot, Option<IpAddr>)> {
        match a.admit(peer) {
            Admit::Yes { slot, evicted } => {
                a.spawned(
                    slot.id(),
                    tokio::spawn(std::future::pending::<()>()).abort_handle(),
                );
                Some((slot, evicted.map(|e| e.peer)))
            }
            Admit::Full => None,
        }
    }

    #[tokio::test]
    async fn a_peer_past_its_cap_loses_its_oldest_unproven_connection() {
        let a = Admission::new(10, 2, &[]);
        let (first, _) = admit(&a, ip(1)).unwrap();
        let (second, _) = admit(&a, ip(1)).unwrap();
        let (_other, none) = admit(&a, ip(2)).unwrap();
        assert_eq!(none, None);
        let (_third, evicted) = admit(&a, ip(1)).unwrap();
        assert_eq!(evicted, Some(ip(1)));
        // The oldest went: proving it fails, the second still can.
        assert!(!first.prove());
        assert!(second.prove());
        // A session does not count against the cap.
        let (_fourth, evicted) = admit(&a, ip(1)).unwrap();
        assert_eq!(evicted, None);
        assert_eq!(a.counts(), (4, 3));
    }

    #[tokio::test]
    async fn a_full_server_makes_room_from_the_oldest_unproven_never_from_sessions() {
        let a = Admission::new(4, 3, &[]);
        let (session, _) = admit(&a, ip(1)).unwrap();
        assert!(session.prove());
        let (lone, _) = admit(&a, ip(2)).unwrap();
        let (big1, _) = admit(&a, ip(3)).unwrap();
        let (big2, _) = admit(&a, ip(3)).unwrap();
        let (_new, evicted) = admit(&a, ip(4)).unwrap();
        assert_eq!(evicted, Some(ip(2)));
        assert!(!lone.prove());
        let (_newer, evicted) = admit(&a, ip(5)).unwrap();
        assert_eq!(evicted, Some(ip(3)));
        assert!(!big1.prove());
        assert!(big2.prove());
        assert_eq!(a.counts(), (4, 2));
    }

    #[tokio::test]
    async fn exempt_addresses_have_no_per_peer_cap() {
        let a = Admission::new(
            10,
            2,
            &[ip(1), IpAddr::from([0u16, 0, 0, 0, 0, 0xffff, 0x7f00, 2])],
        );
        let held: Vec<_> = (0..5).map(|_| admit(&a, ip(1)).unwrap()).collect();
        assert!(held.iter().all(|(_, evicted)| evicted.is_none()));
        // Exempt given as IPv4-mapped IPv6, met as IPv4.
        let held2: Vec<_> = (0..5).map(|_| admit(&a, ip(2)).unwrap()).collect();
        assert!(held2.iter().all(|(_, evicted)| evicted.is_none()));
        // Past the server's limit the oldest goes all the same.
        let (_, evicted) = admit(&a, ip(1)).unwrap();
        assert_eq!(evicted, Some(ip(1)));
    }

    #[tokio::test]
    async fn a_server_full_of_sessions_refuses_and_dropped_slots_come_back() {
        let a = Admission::new(2, 2, &[]);
        let (s1, _) = admit(&a, ip(1)).unwrap();
        let (s2, _) = admit(&a, ip(1)).unwrap();
        assert!(s1.prove() && s2.prove());
        assert!(admit(&a, ip(2)).is_none());
        drop(s1);
        let (_s3, evicted) = admit(&a, ip(2)).unwrap();
        assert_eq!(evicted, None);
        assert_eq!(a.counts(), (2, 1));
        drop(s2);
        assert_eq!(a.counts(), (1, 1));
    }

    #[tokio::test]
    async fn an_evicted_connections_task_is_aborted() {
        let a = Admission::new(1, 1, &[]);
        let Admit::Yes { slot, .. } = a.admit(ip(1)) else {
            panic!("no slot")
        };
        let task = tokio::spawn(async move {
            let _slot = slot;
            std::future::pending::<()>().await
        });
        a.spawned(0, task.abort_handle());
        let Admit::Yes { evicted, slot } = a.admit(ip(2)) else {
            panic!("no room made")
        };
        evicted.expect("one evicted").close();
        assert!(task.await.unwrap_err().is_cancelled());
        drop(slot);
        assert_eq!(a.counts(), (0, 0));
    }
}
