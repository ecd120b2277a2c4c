//! Client-side request throttling for `--kube-api-qps` and `--kube-api-burst`, as client-go's token
//! bucket does for upstream: kube-rs has no rate limiter of its own, and a manager that floods the
//! API server during a mass rollout hurts every other client of the shoot's control plane.
//!
//! Each request reserves a token; when the bucket is empty it waits for its reservation (requests
//! keep their order), so a burst of work is smoothed to `qps` without failing anything. Watches
//! take one token when they start, like any request.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;
use tower::{Layer, Service};

/// A shared token bucket.
#[derive(Clone)]
pub struct Throttle {
    bucket: Arc<Mutex<Bucket>>,
}

struct Bucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    refreshed: Instant,
}

impl Throttle {
    /// A bucket refilled at `qps` tokens per second holding at most `burst` (at least 1) tokens,
    /// full at the start.
    pub fn new(qps: f32, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            bucket: Arc::new(Mutex::new(Bucket {
                qps: f64::from(qps).max(f64::MIN_POSITIVE),
                burst,
                tokens: burst,
                refreshed: Instant::now(),
            })),
        }
    }

    /// Takes a token at `now` and returns how long the caller must wait before using it.
    pub fn reserve_at(&self, now: Instant) -> Duration {
        let mut bucket = self
            .bucket
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let elapsed = now
            .saturating_duration_since(bucket.refreshed)
            .as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * bucket.qps).min(bucket.burst);
        bucket.refreshed = now.max(bucket.refreshed);
        bucket.tokens -= 1.0;
        if bucket.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-bucket.tokens / bucket.qps)
        }
    }
}

impl<S> Layer<S> for Throttle {
    type Service = Throttled<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Throttled {
            inner,
            throttle: self.clone(),
        }
    }
}

/// A service whose requests wait for a token of its [`Throttle`].
pub struct Throttled<S> {
    inner: S,
    throttle: Throttle,
}

impl<S, Request> Service<Request> for Throttled<S>
where
    S: Service<Request>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, context: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(context)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let wait = self.throttle.reserve_at(Instant::now());
        // The inner future does no work until polled, so the request is sent after the wait.
        let response = self.inner.call(request);
        Box::pin(async move {
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            response.await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_bucket_serves_the_burst_then_spaces_requests_at_qps() {
        let throttle = Throttle::new(10.0, 3);
        let start = Instant::now();
        let waits: Vec<Duration> = (0..5).map(|_| throttle.reserve_at(start)).collect();
        assert_eq!(&waits[..3], &[Duration::ZERO; 3]);
        assert_eq!(waits[3], Duration::from_millis(100));
        assert_eq!(waits[4], Duration::from_millis(200));
    }

    #[test]
    fn the_bucket_refills_but_never_beyond_the_burst() {
        let throttle = Throttle::new(10.0, 2);
        let start = Instant::now();
        throttle.reserve_at(start);
        throttle.reserve_at(start);
        // An hour later the bucket holds `burst` tokens, not 36,000.
        let later = start + Duration::from_secs(3600);
        assert_eq!(throttle.reserve_at(later), Duration::ZERO);
        assert_eq!(throttle.reserve_at(later), Duration::ZERO);
        assert_eq!(throttle.reserve_at(later), Duration::from_millis(100));
    }
}
