//! Connection limits of the HTTPS listener: how long a client may take for the TLS handshake and
//! for a request's headers, how long a connection may stay idle, and how many may be open.
//!
//! hyper's own header-read timer also runs while a keep-alive connection waits for its next
//! request, so it would close every idle connection after the header timeout and make an idle
//! timeout longer than that meaningless. The header timeout is therefore measured here: from the
//! first byte of a request to the blank line that ends its headers ([`HeadScanner`], pure), on
//! the plaintext seen by [`Tracked`], a stream wrapper that also records the last traffic.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::Instant;

/// Bounds on the connections of the HTTPS listener, so idle or slow clients cannot hold the
/// server's sockets and memory (a client that connects and sends nothing, one that trickles its
/// headers, or thousands of keep-alive connections left open).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Time a client has to complete the TLS handshake after connecting.
    pub tls_handshake_timeout: Duration,
    /// Time from the first byte of a request to the end of its headers.
    pub header_read_timeout: Duration,
    /// Time a connection may stay without any byte read or written before it is closed
    /// (gracefully: a request in progress is answered first, within one more idle period).
    pub idle_timeout: Duration,
    /// Most open connections; connections beyond it are closed right after accept.
    pub max_connections: usize,
}

impl Default for ConnectionLimits {
    /// 10 s handshake, 10 s header read, 90 s idle (as long as the API server's Go client keeps
    /// idle connections, so the server rarely closes one the client is about to reuse), 1,000
    /// connections.
    fn default() -> Self {
        Self {
            tls_handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(90),
            max_connections: 1000,
        }
    }
}

/// Finds where request heads start and end in the bytes a server reads (HTTP/1.1, one request
/// at a time): a head starts with the first byte read after a response was written (or on a new
/// connection) and ends with the blank line `\r\n\r\n`. Pure: no I/O, no clock.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeadScanner {
    /// A head has started and its end has not been seen.
    in_head: bool,
    /// The head of the current request has been read (its body may follow).
    in_request: bool,
    /// The last four bytes of the head so far, to find `\r\n\r\n` across reads.
    window: u32,
}

/// What one read changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadChange {
    /// Nothing about heads.
    None,
    /// A head started and is not complete yet.
    Started,
    /// The head in progress (or one that started and ended in this read) is complete.
    Completed,
}

impl HeadScanner {
    /// Feeds bytes that were read.
    pub fn on_read(&mut self, bytes: &[u8]) -> HeadChange {
        if bytes.is_empty() || self.in_request {
            return HeadChange::None;
        }
        let started = !self.in_head;
        self.in_head = true;
        for byte in bytes {
            self.window = (self.window << 8) | u32::from(*byte);
            if self.window == u32::from_be_bytes(*b"\r\n\r\n") {
                self.in_head = false;
                self.in_request = true;
                self.window = 0;
                return HeadChange::Completed;
            }
        }
        if started {
            HeadChange::Started
        } else {
            HeadChange::None
        }
    }

    /// Notes that bytes were written: a response, so the next byte read starts a new request.
    pub fn on_write(&mut self) {
        if self.in_request {
            self.in_request = false;
            self.window = 0;
        }
    }
}

/// Milliseconds value meaning "no head in progress".
const NO_HEAD: u64 = u64::MAX;

/// Traffic facts shared between a [`Tracked`] stream and the task watching it.
#[derive(Debug)]
struct Shared {
    /// When the connection was set up; the other fields count milliseconds from here.
    origin: Instant,
    last_traffic_ms: AtomicU64,
    head_started_ms: AtomicU64,
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

    fn record_read(&mut self, bytes: &[u8]) {
        let now = self.shared.now_ms();
        self.shared.last_traffic_ms.store(now, Ordering::Relaxed);
        match self.scanner.on_read(bytes) {
            HeadChange::Started => {
                self.shared.head_started_ms.store(now, Ordering::Relaxed);
                self.shared.head_start.notify_one();
            }
            HeadChange::Completed => self
                .shared
                .head_started_ms
                .store(NO_HEAD, Ordering::Relaxed),
            HeadChange::None => {}
        }
    }

    fn record_write(&mut self) {
        let now = self.shared.now_ms();
        self.shared.last_traffic_ms.store(now, Ordering::Relaxed);
        self.scanner.on_write();
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const REQUEST: &[u8] = b"POST /convert HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}";

    #[test]
    fn a_head_starts_with_its_first_byte_and_ends_with_the_blank_line() {
        let mut scanner = HeadScanner::default();
        assert_eq!(scanner.on_read(b"POST / HTTP/1.1\r\n"), HeadChange::Started);
        assert_eq!(scanner.on_read(b"host: x\r\n"), HeadChange::None);
        assert_eq!(scanner.on_read(b"\r"), HeadChange::None);
        assert_eq!(scanner.on_read(b"\n{\"a\""), HeadChange::Completed);
        // The body is not a new head, even if it contains a blank line.
        assert_eq!(scanner.on_read(b"x\r\n\r\n"), HeadChange::None);
        scanner.on_write();
        assert_eq!(scanner.on_read(REQUEST), HeadChange::Completed);
    }

    #[test]
    fn a_write_before_the_head_ends_does_not_end_it() {
        let mut scanner = HeadScanner::default();
        assert_eq!(scanner.on_read(b"GET / HTTP/1.1\r\n"), HeadChange::Started);
        scanner.on_write();
        assert_eq!(scanner.on_read(b"\r\n"), HeadChange::Completed);
    }

    proptest! {
        /// However a request is split into reads, its head completes exactly once, and never
        /// before the blank line has been read.
        #[test]
        fn any_split_of_a_request_completes_its_head_once(cuts in proptest::collection::btree_set(1..REQUEST.len(), 0..8)) {
            let mut scanner = HeadScanner::default();
            let mut start = 0;
            let mut completions = Vec::new();
            for end in cuts.into_iter().chain([REQUEST.len()]) {
                if scanner.on_read(&REQUEST[start..end]) == HeadChange::Completed {
                    completions.push(end);
                }
                start = end;
            }
            let head_end = REQUEST.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
            prop_assert_eq!(completions.len(), 1);
            prop_assert!(completions[0] >= head_end);
        }
    }
}
