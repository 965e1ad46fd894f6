//! The background embedder: fills vectors of new memories in batches, off the hot path.

use crate::Parts;
use atlas_domain::policy::embedding::embedding_text;
use atlas_domain::policy::model_answer::unit_vector;
use atlas_domain::ports::{Embedder, ProgressFn, VECTOR_SET_ASIDE_MS};
use atlas_domain::{AtlasError, Memory, MemoryId, Result, Timestamp};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
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
    /// Whether the embedder has given this process a usable vector: until it has, a refusal of
    /// every text it was given says more about the embedder (another model behind the URL, a
    /// broken model file) than about the texts, and nothing is set aside for it.
    answered: AtomicBool,
}

impl Background {
    /// Without `task`, nothing embeds until someone calls [`Background::drain`].
    pub fn start(parts: Arc<Parts>, batch: usize, task: bool) -> Self {
        let enabled = task && parts.embedder.is_some();
        let shared = Arc::new(Shared {
            parts,
            batch,
            wake: Notify::new(),
            draining: Mutex::new(()),
            answered: AtomicBool::new(false),
        });
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
        while let Some(left) = budget.checked_sub(started.elapsed()) {
            // The budget bounds the call too: an embedder that accepts and never answers (an
            // endpoint hung) costs a recall at most its budget, not the endpoint's timeouts and
            // retries. The claimed memories stay queued; their claim expires.
            let Ok(n) = tokio::time::timeout(left, self.shared.embed_batch(embedder.as_ref(), CATCH_UP_BATCH)).await
            else {
                break;
            };
            let n = n?;
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
                let vectors = self.settle(embedded).await?;
                let (store, n) = (&self.parts.vectors, vectors.len());
                writing = Some(Box::pin(async move { store.put_vectors(vectors).await.map(|()| n) }));
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
        let vectors = self.settle(embed(embedder, &pending).await?).await?;
        let n = vectors.len();
        self.parts.vectors.put_vectors(vectors).await?;
        // Set-aside memories count as done: the queue moved past them.
        Ok(n.max(pending.len()))
    }

    /// The vectors to store of `embedded`; its refused memories are set aside on a long backoff
    /// (once the embedder has shown that it answers), each with why.
    async fn settle(&self, embedded: Embedded) -> Result<Vec<(MemoryId, Vec<f32>)>> {
        if !embedded.vectors.is_empty() {
            self.answered.store(true, Ordering::Relaxed);
        }
        if !embedded.refused.is_empty() {
            if !self.answered.load(Ordering::Relaxed) {
                let (id, why) = &embedded.refused[0];
                return Err(AtlasError::EmbeddingRefused(format!(
                    "memory {id} and every other text so far: {why} (nothing is set aside until the embedder \
                     has given one usable vector)"
                )));
            }
            for (id, why) in &embedded.refused {
                tracing::warn!(memory = %id, %why, "a memory's vector was refused; it is set aside and tried again later");
            }
            let until = Timestamp(crate::now().millis() + VECTOR_SET_ASIDE_MS);
            self.parts.vectors.set_aside(embedded.refused, until).await?;
        }
        Ok(embedded.vectors)
    }
}

/// What one embedding of queued memories gave: their vectors, each checked for the space, and
/// the memories to set aside, with why.
#[derive(Default)]
struct Embedded {
    vectors: Vec<(MemoryId, Vec<f32>)>,
    refused: Vec<(MemoryId, String)>,
}

/// The vectors of `memories`' embedding texts, paired with their ids, each held to the space
/// (finite, its dimension, a direction: `policy::model_answer::unit_vector`), whichever embedder
/// made it. A batch the embedder refuses ([`AtlasError::EmbeddingRefused`]) is embedded by
/// halves, down to single memories, so that one memory it always refuses, or whose vector is
/// unusable, never holds up the others: such a memory is in `refused`. Any other error (an
/// outage) fails the call, and nothing is set aside for it.
async fn embed(embedder: &dyn Embedder, memories: &[Memory]) -> Result<Embedded> {
    let dimension = Some(embedder.model().dimension).filter(|d| *d > 0);
    let mut out = Embedded::default();
    let mut parts: Vec<&[Memory]> = vec![memories];
    while let Some(part) = parts.pop() {
        if part.is_empty() {
            continue;
        }
        let texts: Vec<String> = part.iter().map(embedding_text).collect();
        let refusal = match embedder.embed(texts).await {
            Ok(vectors) if vectors.len() == part.len() => {
                for (memory, vector) in part.iter().zip(vectors) {
                    match unit_vector(vector, dimension) {
                        Ok(unit) => out.vectors.push((memory.id, unit)),
                        Err(why) => out.refused.push((memory.id, format!("the embedder's vector is unusable: {why}"))),
                    }
                }
                continue;
            }
            Ok(vectors) => format!("the embedder returned {} vectors for {} texts", vectors.len(), part.len()),
            Err(AtlasError::EmbeddingRefused(why)) => why,
            Err(other) => return Err(other),
        };
        match part {
            [one] => out.refused.push((one.id, refusal)),
            _ => {
                let (first, second) = part.split_at(part.len() / 2);
                // The first half is embedded first: memories keep their queue's order.
                parts.push(second);
                parts.push(first);
            }
        }
    }
    Ok(out)
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
