//! `eventually`: poll a probe until it is satisfied. The limits are generous upper bounds that
//! only keep a broken system from hanging the suite; they are never a performance assertion.
//! `MCM_E2E_TIME_SCALE` (a factor, default 1) stretches every limit on slow machines.

use std::future::Future;
use std::time::Duration;

use crate::error::{E2eError, Result};

/// What a probe saw.
#[derive(Debug)]
pub enum Probe<T> {
    /// The condition holds; the value is handed back.
    Done(T),
    /// Not yet; the text describes what was seen (reported when the limit is reached).
    Waiting(String),
}

/// How often probes run.
pub const POLL: Duration = Duration::from_millis(500);

/// A limit scaled by `MCM_E2E_TIME_SCALE`.
pub fn limit(seconds: u64) -> Duration {
    let scale = std::env::var("MCM_E2E_TIME_SCALE")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .unwrap_or(1.0);
    Duration::from_secs_f64(seconds as f64 * scale)
}

/// Runs `probe` every [`POLL`] until it answers [`Probe::Done`], for at most `limit(seconds)`.
/// Probe errors count as "not yet" (an API call may fail transiently while processes restart)
/// and are reported as the last observation when the limit is reached.
pub async fn eventually<T, F, Fut>(what: &str, seconds: u64, mut probe: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Probe<T>>>,
{
    let limit = limit(seconds);
    let deadline = tokio::time::Instant::now() + limit;
    let mut last: String;
    loop {
        match probe().await {
            Ok(Probe::Done(value)) => return Ok(value),
            Ok(Probe::Waiting(seen)) => last = seen,
            Err(e) => last = format!("error: {e}"),
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(E2eError::Timeout {
                what: what.to_owned(),
                seconds: limit.as_secs(),
                last,
            });
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Runs `probe` every [`POLL`] for `seconds` and fails as soon as it answers `Waiting` (an
/// invariant that must keep holding, e.g. "no machine was replaced"). Returns the number of
/// probes made.
pub async fn consistently<F, Fut>(what: &str, seconds: u64, mut probe: F) -> Result<u32>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Probe<()>>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(seconds);
    let mut probes = 0;
    loop {
        match probe().await {
            Ok(Probe::Done(())) => probes += 1,
            Ok(Probe::Waiting(seen)) => {
                return Err(E2eError::Assertion(format!("{what}: violated: {seen}")));
            }
            Err(e) => {
                return Err(E2eError::Assertion(format!("{what}: probe failed: {e}")));
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(probes);
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn eventually_returns_the_value_once_the_probe_is_done() {
        let mut calls = 0;
        let value = eventually("third probe", 60, || {
            calls += 1;
            let n = calls;
            async move {
                if n < 3 {
                    Ok(Probe::Waiting(format!("call {n}")))
                } else {
                    Ok(Probe::Done(n))
                }
            }
        })
        .await
        .unwrap();
        assert_eq!(value, 3);
    }

    #[tokio::test(start_paused = true)]
    async fn eventually_reports_the_last_observation_at_the_limit() {
        let error = eventually::<(), _, _>("never", 2, || async {
            Err(E2eError::Assertion("boom".to_owned()))
        })
        .await
        .unwrap_err();
        let text = error.to_string();
        assert!(text.contains("never: not reached within 2s"), "{text}");
        assert!(text.contains("error: boom"), "{text}");
    }

    #[tokio::test(start_paused = true)]
    async fn consistently_fails_on_the_first_violation() {
        let mut calls = 0;
        let error = consistently("holds", 60, || {
            calls += 1;
            let n = calls;
            async move {
                if n < 2 {
                    Ok(Probe::Done(()))
                } else {
                    Ok(Probe::Waiting("broken".to_owned()))
                }
            }
        })
        .await
        .unwrap_err();
        assert!(error.to_string().contains("holds: violated: broken"));
        assert_eq!(calls, 2);
    }
}
