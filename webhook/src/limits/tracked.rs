//! The plaintext stream wrapper [`Tracked`], recording the last traffic and the request head
//! in progress, and the [`TrafficClock`] that reads them.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::eviction::ConnState;
use super::head::{HeadChange, HeadScanner};

/// Milliseconds value meaning "no head in progress".
const NO_HEAD: u64 = u64::MAX;

/// Traffic facts shared between a [`Tracked`] stream and the task watching it.
#[derive(Debug)]
struct Shared {
    /// When the connection was set up; the other fields count milliseconds from here.
    origin: Instant,
    last_traffic_ms: AtomicU64,
    head_started_ms: AtomicU64,
    /// A request head has been read and its response not started yet.
    in_request: AtomicBool,
    /// The connection has delivered a review the webhook could read.
    proven: AtomicBool,
    /// A request has started on the connection.
    requested: AtomicBool,
    /// Wakes the watcher when a head starts: its deadline is then nearer than the one it
    /// sleeps for.
    head_start: Notify,
}

impl Shared {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX - 1)
    }
}

/// Reads the traffic facts of a [`Tracked`] stream from the task that enforces the limits.
#[derive(Clone, Debug)]
pub struct TrafficClock {
    shared: Arc<Shared>,
}

impl TrafficClock {
    /// When a byte was last read or written (the setup time if none yet).
    #[must_use]
    pub fn last_traffic(&self) -> Instant {
        self.shared.origin
            + Duration::from_millis(self.shared.last_traffic_ms.load(Ordering::Relaxed))
    }

    /// Completes when a request head starts (at once if one started since the last call).
    pub async fn head_start(&self) {
        self.shared.head_start.notified().await;
    }

    /// When the request head being read started, if one is in progress.
    #[must_use]
    pub fn head_started(&self) -> Option<Instant> {
        match self.shared.head_started_ms.load(Ordering::Relaxed) {
            NO_HEAD => None,
            ms => Some(self.shared.origin + Duration::from_millis(ms)),
        }
    }

    /// Notes that the connection delivered a review the webhook could read (see [`Tier`]).
    ///
    /// [`Tier`]: super::eviction::Tier
    pub fn mark_proven(&self) {
        self.shared.proven.store(true, Ordering::Relaxed);
    }

    /// What the connection is doing, for [`admit`].
    ///
    /// [`admit`]: super::eviction::admit
    #[must_use]
    pub fn state(&self) -> ConnState<Instant> {
        if let Some(since) = self.head_started() {
            ConnState::Head { since }
        } else if self.shared.in_request.load(Ordering::Relaxed) {
            ConnState::Busy
        } else if !self.shared.requested.load(Ordering::Relaxed) {
            ConnState::Established {
                since: self.shared.origin,
            }
        } else {
            ConnState::Idle {
                since: self.last_traffic(),
                proven: self.shared.proven.load(Ordering::Relaxed),
            }
        }
    }
}

/// A stream that records its traffic for [`TrafficClock`]: the last byte in either direction
/// and whether a request head is being read.
#[derive(Debug)]
pub struct Tracked<S> {
    inner: S,
    scanner: HeadScanner,
    shared: Arc<Shared>,
}

impl<S> Tracked<S> {
    /// Wraps `inner`; the connection counts as active from now.
    pub fn new(inner: S) -> (Self, TrafficClock) {
        let shared = Arc::new(Shared {
            origin: Instant::now(),
            last_traffic_ms: AtomicU64::new(0),
            head_started_ms: AtomicU64::new(NO_HEAD),
            in_request: AtomicBool::new(false),
            proven: AtomicBool::new(false),
            requested: AtomicBool::new(false),
            head_start: Notify::new(),
        });
        let clock = TrafficClock {
            shared: shared.clone(),
        };
        (
            Self {
                inner,
                scanner: HeadScanner::default(),
                shared,
            },
            clock,
        )
    }

    /// The wrapped stream (to close it once HTTP is done with it).
    pub fn into_inner(self) -> S {
        self.inner
    }

    fn record_read(&mut self, bytes: &[u8]) {
        let now = self.shared.now_ms();
        self.shared.last_traffic_ms.store(now, Ordering::Relaxed);
        match self.scanner.on_read(bytes) {
            HeadChange::Started => {
                self.shared.requested.store(true, Ordering::Relaxed);
                self.shared.head_started_ms.store(now, Ordering::Relaxed);
                self.shared.head_start.notify_one();
            }
            HeadChange::Completed => {
                self.shared.requested.store(true, Ordering::Relaxed);
                self.shared.in_request.store(true, Ordering::Relaxed);
                self.shared
                    .head_started_ms
                    .store(NO_HEAD, Ordering::Relaxed);
            }
            HeadChange::None => {}
        }
    }

    fn record_write(&mut self) {
        let now = self.shared.now_ms();
        self.shared.last_traffic_ms.store(now, Ordering::Relaxed);
        self.scanner.on_write();
        self.shared.in_request.store(false, Ordering::Relaxed);
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Tracked<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let result = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.record_read(&buf.filled()[before..]);
        }
        result
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tracked<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(result, Poll::Ready(Ok(written)) if written > 0) {
            self.record_write();
        }
        result
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(result, Poll::Ready(Ok(written)) if written > 0) {
            self.record_write();
        }
        result
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
