//! The write gate: a switch in the controllers' API clients that refuses every mutating request
//! (POST, PUT, PATCH, DELETE) while this replica does not lead.
//!
//! When the Lease is lost the manager stops its controllers (cancels them and aborts their tasks),
//! but a reconcile may be between two awaits, a creation flow or an event may be about to write.
//! Closing the gate first, at the moment the loss is decided, makes sure nothing this replica
//! sends after the loss changes anything, whatever task sends it: the request fails in the client
//! with [`GateClosed`] before it leaves the process (a request already on the wire is the API
//! server's to finish, as for client-go). Reads go through, so caches stay warm for the next term.
//!
//! The leader-election client has no gate: it must keep renewing and campaigning.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use axum::http;
use tower::{Layer, Service};

/// A shared open/closed switch. Cheap to clone; every clone is the same switch.
#[derive(Clone, Debug)]
pub struct WriteGate {
    open: Arc<AtomicBool>,
}

impl WriteGate {
    /// A gate that starts open (no leader election) or closed (waiting for the Lease).
    pub fn new(open: bool) -> Self {
        Self {
            open: Arc::new(AtomicBool::new(open)),
        }
    }

    /// Lets writes through (this replica leads).
    pub fn open(&self) {
        self.open.store(true, Ordering::SeqCst);
    }

    /// Refuses writes from now on (the Lease was lost or is not held).
    pub fn close(&self) {
        self.open.store(false, Ordering::SeqCst);
    }

    /// Whether writes go through.
    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::SeqCst)
    }
}

/// Why a write was refused.
#[derive(Debug, thiserror::Error)]
#[error("{method} refused: this replica does not hold the leader Lease (write gate closed)")]
pub struct GateClosed {
    /// The refused request's method.
    pub method: http::Method,
}

/// Whether a request with this method changes anything on the API server.
pub fn is_write(method: &http::Method) -> bool {
    !matches!(
        *method,
        http::Method::GET | http::Method::HEAD | http::Method::OPTIONS
    )
}

impl<S> Layer<S> for WriteGate {
    type Service = Gated<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Gated {
            inner,
            gate: self.clone(),
        }
    }
}

/// A service whose writes fail while its [`WriteGate`] is closed.
#[derive(Clone)]
pub struct Gated<S> {
    inner: S,
    gate: WriteGate,
}

impl<S, B> Service<http::Request<B>> for Gated<S>
where
    S: Service<http::Request<B>>,
    S::Future: Send + 'static,
    S::Error: From<GateClosed>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, context: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(context)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let write = is_write(request.method());
        let method = request.method().clone();
        let gate = self.gate.clone();
        if write && !gate.is_open() {
            return Box::pin(async move { Err(GateClosed { method }.into()) });
        }
        // The inner future sends nothing until polled: check again then, so a write that waited
        // (for example for a throttle token) across the loss is refused too.
        let response = self.inner.call(request);
        Box::pin(async move {
            if write && !gate.is_open() {
                return Err(GateClosed { method }.into());
            }
            response.await
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::convert::Infallible;

    type BoxError = Box<dyn std::error::Error + Send + Sync>;

    fn echo() -> impl Service<
        http::Request<()>,
        Response = &'static str,
        Error = BoxError,
        Future = std::future::Ready<Result<&'static str, BoxError>>,
    > + Clone {
        tower::service_fn(|_request: http::Request<()>| {
            std::future::ready(Ok::<_, Infallible>("sent").map_err(BoxError::from))
        })
    }

    fn request(method: http::Method) -> http::Request<()> {
        http::Request::builder()
            .method(method)
            .uri("/api/v1/nodes")
            .body(())
            .unwrap()
    }

    #[tokio::test]
    async fn a_closed_gate_refuses_writes_and_lets_reads_through() {
        let gate = WriteGate::new(false);
        let mut service = gate.layer(echo());
        for method in [
            http::Method::POST,
            http::Method::PUT,
            http::Method::PATCH,
            http::Method::DELETE,
        ] {
            let error = service.call(request(method.clone())).await.unwrap_err();
            assert!(error.to_string().contains("write gate closed"), "{error}");
            assert!(error.to_string().contains(method.as_str()), "{error}");
        }
        assert_eq!(
            service.call(request(http::Method::GET)).await.unwrap(),
            "sent"
        );
        gate.open();
        assert_eq!(
            service.call(request(http::Method::PATCH)).await.unwrap(),
            "sent"
        );
    }

    #[tokio::test]
    async fn a_write_issued_before_the_loss_but_sent_after_it_is_refused() {
        let gate = WriteGate::new(true);
        let mut service = gate.layer(echo());
        let pending = service.call(request(http::Method::PUT));
        gate.close();
        assert!(pending.await.is_err());
    }
}
