//! The TCP stream wrapper [`HandshakeWatch`], recording when the server answered the
//! ClientHello, and the [`HandshakeClock`] that reads it.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use super::eviction::ConnState;

/// Milliseconds value meaning "not answered yet".
const NOT_ANSWERED: u64 = u64::MAX;

/// When the server answered a connection's ClientHello, shared between a [`HandshakeWatch`]
/// stream and the pool.
#[derive(Clone, Debug)]
pub struct HandshakeClock {
    origin: Instant,
    answered_ms: Arc<AtomicU64>,
}

impl HandshakeClock {
    /// When the server first wrote to the connection (its answer to a complete ClientHello, or
    /// an alert), if it has.
    #[must_use]
    pub fn answered(&self) -> Option<Instant> {
        match self.answered_ms.load(Ordering::Relaxed) {
            NOT_ANSWERED => None,
            ms => Some(self.origin + Duration::from_millis(ms)),
        }
    }

    /// What the connection is doing while its TLS handshake has not completed.
    #[must_use]
    pub fn state(&self, accepted: Instant) -> ConnState<Instant> {
        match self.answered() {
            Some(since) => ConnState::Answered { since },
            None => ConnState::Handshake { since: accepted },
        }
    }
}

/// The accepted TCP stream under TLS, recording when the server first writes to it: the TLS
/// server writes only once a complete ClientHello has arrived, so a silent client, or one that
/// sends part of a ClientHello and stalls, is told from one whose handshake is under way.
#[derive(Debug)]
pub struct HandshakeWatch<S> {
    inner: S,
    clock: HandshakeClock,
}

impl<S> HandshakeWatch<S> {
    /// Wraps `inner`, accepted now.
    pub fn new(inner: S) -> (Self, HandshakeClock) {
        let clock = HandshakeClock {
            origin: Instant::now(),
            answered_ms: Arc::new(AtomicU64::new(NOT_ANSWERED)),
        };
        (
            Self {
                inner,
                clock: clock.clone(),
            },
            clock,
        )
    }

    /// The wrapped stream.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped stream.
    pub fn into_inner(self) -> S {
        self.inner
    }

    fn record_write(&self) {
        if self.clock.answered_ms.load(Ordering::Relaxed) == NOT_ANSWERED {
            let ms = u64::try_from(self.clock.origin.elapsed().as_millis())
                .unwrap_or(NOT_ANSWERED - 1)
                .min(NOT_ANSWERED - 1);
            self.clock.answered_ms.store(ms, Ordering::Relaxed);
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for HandshakeWatch<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for HandshakeWatch<S> {
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
