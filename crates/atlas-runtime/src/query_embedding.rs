//! A recall's query embedding, which an outage must never stall: each call has its own deadline
//! (`recall.query_embedding_timeout_ms`), its vector is held to the space like every vector
//! (`policy::model_answer::unit_vector`), and a circuit breaker stops asking an embedder that just
//! failed, so that while an endpoint is away every recall answers from full text at once and
//! says why, instead of each waiting out the deadline. After a pause (one second, doubling with
//! each failure in a row, at most [`MAX_PAUSE`]) one recall tries again; its success closes the
//! breaker.

use atlas_domain::policy::model_answer::unit_vector;
use atlas_domain::ports::Embedder;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The longest pause of the breaker between tries of a failing embedder.
pub const MAX_PAUSE: Duration = Duration::from_secs(30);

/// The breaker of one space's query embeddings.
#[derive(Default)]
pub struct Breaker {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Failures in a row.
    failures: u32,
    /// No call until then.
    open_until: Option<Instant>,
    /// Why the last call failed (already free of secrets: adapters' errors are redacted).
    last_error: String,
}

/// The pause after `failures` failures in a row (1 for the first).
fn pause(failures: u32) -> Duration {
    Duration::from_secs(1).saturating_mul(2u32.saturating_pow(failures.saturating_sub(1).min(16))).min(MAX_PAUSE)
}

impl Breaker {
    /// `Some(why)` while the breaker is open: the call is not made.
    fn refuses(&self, now: Instant) -> Option<String> {
        let state = self.state.lock().expect("breaker lock");
        let until = state.open_until.filter(|until| *until > now)?;
        let left = until.duration_since(now).as_secs_f64();
        Some(format!(
            "the embedder failed {} time{} in a row ({}); the query is not embedded until it is tried again in {left:.1} s",
            state.failures,
            if state.failures == 1 { "" } else { "s" },
            state.last_error
        ))
    }

    fn failed(&self, why: &str, now: Instant) {
        let mut state = self.state.lock().expect("breaker lock");
        state.failures = state.failures.saturating_add(1);
        state.open_until = Some(now + pause(state.failures));
        state.last_error = why.to_owned();
    }

    fn succeeded(&self) {
        let mut state = self.state.lock().expect("breaker lock");
        state.failures = 0;
        state.open_until = None;
    }
}

/// The unit vector of `query`, or why there is none (the vector signal is then skipped and the
/// recall answers from full text): the breaker is open, the embedder failed or took longer than
/// `deadline`, or its vector is unusable.
pub async fn embed_query(
    embedder: &dyn Embedder,
    breaker: &Breaker,
    query: String,
    deadline: Duration,
) -> Result<Vec<f32>, String> {
    if let Some(why) = breaker.refuses(Instant::now()) {
        return Err(why);
    }
    let dimension = Some(embedder.model().dimension).filter(|d| *d > 0);
    let outcome = match tokio::time::timeout(deadline, embedder.embed_query(query)).await {
        Err(_) => {
            Err(format!("no query vector within {} ms (recall.query_embedding_timeout_ms)", deadline.as_millis()))
        }
        Ok(Err(e)) => Err(format!("the embedder failed ({e})")),
        Ok(Ok(vector)) => {
            unit_vector(vector, dimension).map_err(|why| format!("the query's vector is unusable: {why}"))
        }
    };
    match &outcome {
        Ok(_) => breaker.succeeded(),
        Err(why) => breaker.failed(why, Instant::now()),
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_breaker_opens_on_a_failure_and_closes_on_a_success() {
        let breaker = Breaker::default();
        let t0 = Instant::now();
        assert!(breaker.refuses(t0).is_none());
        breaker.failed("HTTP 503", t0);
        let why = breaker.refuses(t0).unwrap();
        assert!(why.contains("failed 1 time in a row (HTTP 503)"), "{why}");
        assert!(breaker.refuses(t0 + Duration::from_millis(1001)).is_none(), "tried again after a second");
        breaker.failed("HTTP 503", t0);
        assert!(breaker.refuses(t0 + Duration::from_millis(1500)).is_some(), "two seconds after a second failure");
        breaker.succeeded();
        assert!(breaker.refuses(t0).is_none());
    }

    proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]
        #[test]
        fn pauses_grow_with_failures_up_to_the_cap(failures in 1u32..u32::MAX) {
            prop_assert!(pause(failures) <= MAX_PAUSE);
            prop_assert!(pause(failures) >= Duration::from_secs(1));
            prop_assert!(pause(failures.saturating_add(1)) >= pause(failures));
        }
    }
}
