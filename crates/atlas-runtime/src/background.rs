//! The background embedder: fills vectors of new memories in batches, off the hot path.

use crate::Parts;
use atlas_domain::Result;
use atlas_domain::policy::embedding::embedding_text;
use atlas_domain::ports::ProgressFn;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Mutex, Notify};
use tokio::task::JoinHandle;

/// Wakes on every write and drains the store's durable queue of memories awaiting a vector.
/// Because the queue is in the store, work interrupted by a crash or exit resumes at next open.
pub struct Background {
    shared: Arc<Shared>,
    task: Option<JoinHandle<()>>,
}

struct Shared {
    parts: Arc<Parts>,
    batch: usize,
    wake: Notify,
    /// One drain at a time, so an `import` waiting for its vectors and the task never embed the
    /// same memories twice.
    draining: Mutex<()>,
}

impl Background {
    /// Without `task`, nothing embeds until someone calls [`Background::drain`].
    pub fn start(parts: Arc<Parts>, batch: usize, task: bool) -> Self {
        let enabled = task && parts.embedder.is_some();
        let shared = Arc::new(Shared { parts, batch, wake: Notify::new(), draining: Mutex::new(()) });
        let task = enabled.then(|| {
            let shared = Arc::clone(&shared);
            // Pending work from an earlier run starts at once.
            shared.wake.notify_one();
            tokio::spawn(async move {
                let mut failures = 0u32;
                loop {
                    shared.wake.notified().await;
                    match shared.drain(None).await {
                        Ok(_) => failures = 0,
                        Err(e) => {
                            // The memories stay queued in the store; an embedder that is away (an
                            // endpoint down) is asked again, less and less often, never given up on.
                            let wait = retry_wait(failures);
                            failures = failures.saturating_add(1);
                            tracing::warn!(error = %e, ?wait, "background embedding failed; the memories stay queued, will retry");
                            tokio::time::sleep(wait).await;
                            shared.wake.notify_one();
                        }
                    }
                }
            })
        });
        Background { shared, task }
    }

    pub fn wake(&self) {
        if self.task.is_some() {
            self.shared.wake.notify_one();
        }
    }

    pub async fn drain(&self, progress: Option<ProgressFn>) -> Result<usize> {
        self.shared.drain(progress).await
    }

    /// Embeds queued memories in small batches until `budget` has passed or nothing is left
    /// that another process has not claimed; returns how many it embedded. If this process is
    /// already draining (a long-lived host that just wrote), it waits for that drain, within
    /// the same budget, so that a recall after a write searches the write's vectors too.
    pub async fn catch_up(&self, budget: Duration) -> Result<usize> {
        let Some(embedder) = &self.shared.parts.embedder else {
            return Ok(0);
        };
        if budget.is_zero() {
            return Ok(0);
        }
        let started = std::time::Instant::now();
        let Ok(_one_at_a_time) = tokio::time::timeout(budget, self.shared.draining.lock()).await else {
            return Ok(0);
        };
        let mut done = 0;
        while started.elapsed() < budget {
            let n = self.shared.embed_batch(embedder.as_ref(), CATCH_UP_BATCH).await?;
            if n == 0 {
                break;
            }
            done += n;
        }
        Ok(done)
    }
}

/// The pause after the background embedder's `failures`-th failure in a row (0 for the first):
/// one second, doubling, at most a minute.
fn retry_wait(failures: u32) -> Duration {
    Duration::from_secs(1).saturating_mul(2u32.saturating_pow(failures.min(6))).min(Duration::from_secs(60))
}

/// Memories a bounded catch-up embeds at a time: small, so that the budget is kept closely.
const CATCH_UP_BATCH: usize = 8;

/// Batches one claim of a drain holds: each is embedded while the one before it is written, so
/// the embedder waits for the store only once per claim, not once per batch. (A claim cannot be
/// taken while the last is being written: a store hands this instance its own claims again.)
const BATCHES_PER_CLAIM: usize = 4;

type Writing<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = Result<usize>> + Send + 'a>>;

impl Shared {
    async fn drain(&self, progress: Option<ProgressFn>) -> Result<usize> {
        let Some(embedder) = &self.parts.embedder else {
            return Ok(0);
        };
        let _one_at_a_time = self.draining.lock().await;
        let mut done = 0;
        let report = |done: usize| {
            if let Some(p) = &progress {
                p(done);
            }
        };
        loop {
            let pending = self.parts.vectors.pending_vectors(self.batch * BATCHES_PER_CLAIM).await?;
            if pending.is_empty() {
                return Ok(done);
            }
            let mut writing: Option<Writing<'_>> = None;
            for batch in pending.chunks(self.batch) {
                let embedding = embed(embedder.as_ref(), batch);
                let embedded = match writing.take() {
                    Some(write) => {
                        let (embedded, written) = tokio::join!(embedding, write);
                        done += written?;
                        report(done);
                        embedded?
                    }
                    None => embedding.await?,
                };
                let (vectors, n) = (&self.parts.vectors, embedded.len());
                writing = Some(Box::pin(async move { vectors.put_vectors(embedded).await.map(|()| n) }));
            }
            if let Some(write) = writing {
                done += write.await?;
                report(done);
            }
        }
    }

    /// Claims up to `limit` queued memories, embeds and stores their vectors; returns how many
    /// (0: nothing left that this process may take).
    async fn embed_batch(&self, embedder: &dyn atlas_domain::ports::Embedder, limit: usize) -> Result<usize> {
        let pending = self.parts.vectors.pending_vectors(limit).await?;
        if pending.is_empty() {
            return Ok(0);
        }
        let embedded = embed(embedder, &pending).await?;
        let n = embedded.len();
        self.parts.vectors.put_vectors(embedded).await?;
        Ok(n)
    }
}

/// The vectors of `memories`' embedding texts, paired with their ids.
async fn embed(
    embedder: &dyn atlas_domain::ports::Embedder,
    memories: &[atlas_domain::Memory],
) -> Result<Vec<(atlas_domain::MemoryId, Vec<f32>)>> {
    let (ids, texts): (Vec<_>, Vec<_>) = memories.iter().map(|m| (m.id, embedding_text(m))).unzip();
    let vectors = embedder.embed(texts).await?;
    if vectors.len() != ids.len() {
        return Err(atlas_domain::AtlasError::Embedding(format!(
            "embedder returned {} vectors for {} texts",
            vectors.len(),
            ids.len()
        )));
    }
    Ok(ids.into_iter().zip(vectors).collect())
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::retry_wait;
    use std::time::Duration;

    #[test]
    fn the_background_embedder_waits_longer_after_each_failure_up_to_a_minute() {
        let waits: Vec<u64> = (0..9).map(|n| retry_wait(n).as_secs()).collect();
        assert_eq!(waits, vec![1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(retry_wait(u32::MAX), Duration::from_secs(60));
    }
}
