//! The retry policy of calls to model servers: exponential backoff from a first wait, with
//! "full jitter" below a cap (so that clients failed by one outage do not return in step), and
//! the server's `Retry-After` honoured, within the cap.

use crate::Failure;
use std::future::Future;
use std::time::Duration;

/// How often and how long to retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    /// Retries after the first attempt (0: one attempt only).
    pub max_retries: u32,
    /// The first retry waits up to this long, the next up to twice as long, and so on.
    pub backoff: Duration,
    /// No wait is longer, whatever the server asks.
    pub max_wait: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Retry { max_retries: 3, backoff: Duration::from_millis(500), max_wait: Duration::from_secs(30) }
    }
}

impl Retry {
    /// The wait before retry number `attempt` (0 for the first retry): `Retry-After` when the
    /// server gave one, else a share `jitter` (in [0, 1]) of the exponential step, never less
    /// than half of it. Always within `max_wait`.
    pub fn wait(&self, attempt: u32, retry_after: Option<Duration>, jitter: f64) -> Duration {
        if let Some(asked) = retry_after {
            return asked.min(self.max_wait);
        }
        let step = self.backoff.saturating_mul(2u32.saturating_pow(attempt.min(30))).min(self.max_wait);
        step.mul_f64(0.5 + 0.5 * jitter.clamp(0.0, 1.0))
    }
}

/// Runs `attempt` until it succeeds, fails for good, or has been retried `retry.max_retries`
/// times; between tries it waits as [`Retry::wait`] says. `what` names the call in the log.
/// The error is the last failure's message with the number of attempts.
pub async fn with_retries<T, F, Fut>(retry: Retry, what: &str, mut attempt: F) -> Result<T, (Failure, u32)>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Failure>>,
{
    let mut tries = 0;
    loop {
        tries += 1;
        match attempt().await {
            Ok(value) => return Ok(value),
            Err(failure) if failure.retry && tries <= retry.max_retries => {
                let wait = retry.wait(tries - 1, failure.wait, fastrand::f64());
                tracing::warn!(call = what, attempt = tries, ?wait, error = %failure.message, "call failed; retrying");
                tokio::time::sleep(wait).await;
            }
            Err(failure) => return Err((failure, tries)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn policy(backoff_ms: u64, max_ms: u64) -> Retry {
        Retry { max_retries: 5, backoff: Duration::from_millis(backoff_ms), max_wait: Duration::from_millis(max_ms) }
    }

    proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]
        #[test]
        fn a_wait_is_never_longer_than_the_cap(backoff in 1u64..10_000, cap in 1u64..120_000, attempt in 0u32..64,
                                               jitter in 0.0f64..=1.0, asked in proptest::option::of(0u64..1_000_000)) {
            let wait = policy(backoff, cap).wait(attempt, asked.map(Duration::from_millis), jitter);
            prop_assert!(wait <= Duration::from_millis(cap));
        }

        #[test]
        fn the_servers_retry_after_is_kept_within_the_cap(asked in 0u64..100_000, jitter in 0.0f64..=1.0) {
            let wait = policy(500, 30_000).wait(3, Some(Duration::from_millis(asked)), jitter);
            prop_assert_eq!(wait, Duration::from_millis(asked.min(30_000)));
        }

        #[test]
        fn waits_grow_until_the_cap(backoff in 1u64..1_000, attempt in 0u32..20) {
            let p = policy(backoff, 60_000);
            // Same jitter: the next step is never shorter.
            prop_assert!(p.wait(attempt + 1, None, 0.3) >= p.wait(attempt, None, 0.3));
            // Jitter keeps at least half of the step.
            let step = Duration::from_millis(backoff).saturating_mul(2u32.saturating_pow(attempt)).min(p.max_wait);
            prop_assert!(p.wait(attempt, None, 0.0) >= step / 2);
        }
    }

    #[tokio::test]
    async fn a_call_is_retried_until_it_succeeds_and_a_permanent_failure_is_not() {
        let mut calls = 0;
        let retry = policy(1, 4);
        let result = with_retries(retry, "test", || {
            calls += 1;
            let n = calls;
            async move {
                if n < 3 {
                    Err(Failure {
                        message: "busy".into(),
                        retry: true,
                        wait: None,
                        status: Some(503),
                        timed_out: false,
                    })
                } else {
                    Ok(n)
                }
            }
        })
        .await;
        assert_eq!(result.unwrap(), 3);

        let mut calls = 0;
        let result: Result<(), _> = with_retries(retry, "test", || {
            calls += 1;
            async { Err(Failure::permanent("bad request")) }
        })
        .await;
        let (failure, tries) = result.unwrap_err();
        assert_eq!((failure.message.as_str(), tries, calls), ("bad request", 1, 1));

        let result: Result<(), _> = with_retries(retry, "test", || async {
            Err(Failure { message: "down".into(), retry: true, wait: None, status: None, timed_out: false })
        })
        .await;
        assert_eq!(result.unwrap_err().1, 6, "one attempt and max_retries retries");
    }
}
