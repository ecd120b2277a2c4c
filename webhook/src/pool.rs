//! The open connections of the HTTPS listener: how many there are in all and per peer, and what
//! each is doing, so that a new connection can be admitted, refused or given the place of an
//! idle one ([`crate::limits::admit`] decides; this module keeps the books and delivers the
//! eviction).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::limits::{Admission, CloseReason, ConnState, ConnectionLimits, TrafficClock, admit};

/// What the pool knows about one connection.
#[derive(Debug)]
struct Entry {
    peer: IpAddr,
    accepted: Instant,
    /// Set once the TLS handshake completed.
    clock: Option<TrafficClock>,
    closing: bool,
    /// Told when the connection was given up for a new one.
    evicted: Arc<Notify>,
}

impl Entry {
    fn state(&self) -> ConnState<Instant> {
        if self.closing {
            return ConnState::Closing;
        }
        match &self.clock {
            None => ConnState::Handshake {
                since: self.accepted,
            },
            Some(clock) => clock.state(),
        }
    }
}

#[derive(Debug, Default)]
struct Books {
    next_id: u64,
    connections: HashMap<u64, Entry>,
    per_peer: HashMap<IpAddr, usize>,
}

impl Books {
    fn remove(&mut self, id: u64) -> Option<Entry> {
        let entry = self.connections.remove(&id)?;
        if let Some(count) = self.per_peer.get_mut(&entry.peer) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.per_peer.remove(&entry.peer);
            }
        }
        Some(entry)
    }
}

/// The books of the open connections, shared by the accept loop and the connection tasks.
#[derive(Debug)]
pub struct Pool {
    limits: ConnectionLimits,
    books: Mutex<Books>,
}

/// What admitting a connection did.
#[derive(Debug)]
pub enum Admitted {
    /// Admitted; `evicted` tells whether another connection was given up for it.
    Yes {
        /// The new connection's place in the pool.
        lease: Lease,
        /// Another connection was given up to make room.
        evicted: bool,
    },
    /// Refused, for this reason.
    No(CloseReason),
}

impl Pool {
    /// An empty pool enforcing `limits`.
    #[must_use]
    pub fn new(limits: ConnectionLimits) -> Arc<Self> {
        Arc::new(Self {
            limits,
            books: Mutex::new(Books::default()),
        })
    }

    fn books(&self) -> MutexGuard<'_, Books> {
        // The books stay consistent at every await-free step, so a panic elsewhere cannot have
        // left them half-updated.
        self.books.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Decides on a connection from `peer` accepted at `now`; when another is given up for it,
    /// that one's task is told (it closes its connection) and its place is taken at once.
    pub fn admit(self: &Arc<Self>, peer: IpAddr, now: Instant) -> Admitted {
        let mut books = self.books();
        let open = books.connections.len();
        let peer_open = books.per_peer.get(&peer).copied().unwrap_or(0);
        let cutoff = now.checked_sub(self.limits.eviction_grace).unwrap_or(now);
        let decision = admit(
            open,
            peer_open,
            &self.limits,
            || {
                books
                    .connections
                    .iter()
                    .map(|(id, entry)| (*id, entry.state()))
                    .collect()
            },
            cutoff,
        );
        let evicted = match decision {
            Admission::Refuse(reason) => return Admitted::No(reason),
            Admission::Accept => false,
            Admission::Evict { victim } => {
                if let Some(entry) = books.remove(victim) {
                    entry.evicted.notify_one();
                }
                true
            }
        };
        let id = books.next_id;
        books.next_id += 1;
        let notify = Arc::new(Notify::new());
        books.connections.insert(
            id,
            Entry {
                peer,
                accepted: now,
                clock: None,
                closing: false,
                evicted: notify.clone(),
            },
        );
        *books.per_peer.entry(peer).or_insert(0) += 1;
        Admitted::Yes {
            lease: Lease {
                pool: self.clone(),
                id,
                evicted: notify,
            },
            evicted,
        }
    }

    /// Connections in the books (evicted ones leave at once, before their sockets close).
    #[must_use]
    pub fn len(&self) -> usize {
        self.books().connections.len()
    }

    /// Whether no connection is in the books.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A connection's place in the [`Pool`]; dropping it frees the place.
#[derive(Debug)]
pub struct Lease {
    pool: Arc<Pool>,
    id: u64,
    evicted: Arc<Notify>,
}

impl Lease {
    /// The TLS handshake completed: from now on the connection's traffic tells what it does.
    pub fn established(&self, clock: TrafficClock) {
        if let Some(entry) = self.pool.books().connections.get_mut(&self.id) {
            entry.clock = Some(clock);
        }
    }

    /// The last response is out; the connection is being closed and may be given up.
    pub fn closing(&self) {
        if let Some(entry) = self.pool.books().connections.get_mut(&self.id) {
            entry.closing = true;
        }
    }

    /// Completes when the connection was given up for a new one (at once if it already was).
    pub async fn evicted(&self) {
        self.evicted.notified().await;
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.pool.books().remove(self.id);
    }
}
