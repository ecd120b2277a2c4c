//! The open connections of the HTTPS listener: how many there are in all and per peer, and what
//! each is doing, so that a new connection can be admitted, refused or given the place of
//! another ([`crate::limits::admit`] decides; this module keeps the books and delivers the
//! eviction).

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::limits::{
    Admission, CloseReason, ConnState, ConnectionLimits, HandshakeClock, Open, TrafficClock, admit,
};

/// What the pool knows about one connection.
#[derive(Debug)]
struct Entry {
    accepted: Instant,
    /// When the server answered the ClientHello.
    handshake: HandshakeClock,
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
            None => self.handshake.state(self.accepted),
            Some(clock) => clock.state(),
        }
    }
}

#[derive(Debug, Default)]
struct Books {
    next_id: u64,
    /// Connections by peer, then by id (ids grow with accept time).
    peers: HashMap<IpAddr, BTreeMap<u64, Entry>>,
    /// The peer of each connection.
    owners: HashMap<u64, IpAddr>,
}

impl Books {
    fn entry_mut(&mut self, id: u64) -> Option<&mut Entry> {
        let peer = self.owners.get(&id)?;
        self.peers.get_mut(peer)?.get_mut(&id)
    }

    fn remove(&mut self, id: u64) -> Option<Entry> {
        let peer = self.owners.remove(&id)?;
        let connections = self.peers.get_mut(&peer)?;
        let entry = connections.remove(&id);
        if connections.is_empty() {
            self.peers.remove(&peer);
        }
        entry
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
    /// Admitted; `evicted` tells whether another connection was given up for it, and why.
    Yes {
        /// The new connection's place in the pool.
        lease: Lease,
        /// The cap that made another connection give up its place, if one did
        /// ([`CloseReason::PerPeerLimitEvicted`] or [`CloseReason::GlobalLimitEvictedIdle`]).
        evicted: Option<CloseReason>,
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

    /// Decides on a connection from `peer` accepted at `now` (`handshake` tells when the server
    /// answers its ClientHello); when another is given up for it, that one's task is told (it
    /// closes its connection) and its place is taken at once.
    pub fn admit(
        self: &Arc<Self>,
        peer: IpAddr,
        now: Instant,
        handshake: HandshakeClock,
    ) -> Admitted {
        let mut books = self.books();
        let open = books.owners.len();
        let peer_open = books.peers.get(&peer).map_or(0, BTreeMap::len);
        let cutoff = now.checked_sub(self.limits.eviction_grace).unwrap_or(now);
        let decision = {
            let books = &*books;
            admit(
                open,
                peer_open,
                &self.limits,
                || {
                    books
                        .peers
                        .get(&peer)
                        .into_iter()
                        .flatten()
                        .map(|(id, entry)| (*id, entry.state()))
                },
                || {
                    books.peers.values().flat_map(|connections| {
                        let peer_open = connections.len();
                        connections.iter().map(move |(id, entry)| Open {
                            id: *id,
                            peer_open,
                            state: entry.state(),
                        })
                    })
                },
                cutoff,
            )
        };
        let evicted = match decision {
            Admission::Refuse(reason) => return Admitted::No(reason),
            Admission::Accept => None,
            Admission::Evict { victim, reason } => {
                if let Some(entry) = books.remove(victim) {
                    entry.evicted.notify_one();
                }
                Some(reason)
            }
        };
        let id = books.next_id;
        books.next_id += 1;
        let notify = Arc::new(Notify::new());
        books.peers.entry(peer).or_default().insert(
            id,
            Entry {
                accepted: now,
                handshake,
                clock: None,
                closing: false,
                evicted: notify.clone(),
            },
        );
        books.owners.insert(id, peer);
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
        self.books().owners.len()
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
        if let Some(entry) = self.pool.books().entry_mut(self.id) {
            entry.clock = Some(clock);
        }
    }

    /// The last response is out; the connection is being closed and may be given up.
    pub fn closing(&self) {
        if let Some(entry) = self.pool.books().entry_mut(self.id) {
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
