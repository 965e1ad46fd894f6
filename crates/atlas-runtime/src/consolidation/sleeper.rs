//! The sleep cycle in the background of a long-lived process: by count, idleness and session
//! end, with the bank written after each cycle and the decay pass on its schedule.

use super::run_cycle;
use crate::Parts;
use crate::config::ConsolidationConfig;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::Notify;

/// The sleep cycle in the background of a long-lived process (a server, an agent's host): it
/// runs after every `every` new episodes, after `idle_secs` without one when some wait, and at
/// the end of a session. A CLI process is too short-lived and runs `atlas consolidate` instead.
pub(crate) struct Sleeper {
    shared: Arc<SleepShared>,
    task: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

#[derive(Default)]
struct SleepShared {
    new_episodes: AtomicUsize,
    wake: Notify,
    /// A session ended: the next cycle closes (summarises) every session.
    ending: std::sync::atomic::AtomicBool,
}

impl Sleeper {
    pub fn new() -> Self {
        Sleeper { shared: Arc::new(SleepShared::default()), task: std::sync::Mutex::new(None) }
    }

    /// Counts `n` new episodes; wakes the cycle once `every` have come in.
    pub fn written(&self, n: usize, every: usize) {
        let total = self.shared.new_episodes.fetch_add(n, Ordering::SeqCst) + n;
        if every > 0 && total >= every {
            self.shared.wake.notify_one();
        }
    }

    pub fn session_ended(&self) {
        self.shared.ending.store(true, Ordering::SeqCst);
        self.shared.wake.notify_one();
    }

    /// Starts the task once; later calls do nothing.
    pub fn start(
        &self,
        parts: Arc<Parts>,
        config: ConsolidationConfig,
        max_text_bytes: usize,
        decay_every_hours: f64,
        bank_dir: Option<std::path::PathBuf>,
    ) {
        let mut task = self.task.lock().expect("sleeper lock");
        if task.is_some() {
            return;
        }
        let shared = Arc::clone(&self.shared);
        *task = Some(tokio::spawn(async move {
            let idle = std::time::Duration::from_secs(config.idle_secs.max(1));
            let mut last_decay: Option<std::time::Instant> = None;
            loop {
                let woken = tokio::select! {
                    () = shared.wake.notified() => true,
                    () = tokio::time::sleep(idle) => false,
                };
                if !woken && shared.new_episodes.load(Ordering::SeqCst) == 0 {
                    continue;
                }
                shared.new_episodes.store(0, Ordering::SeqCst);
                let ending = shared.ending.swap(false, Ordering::SeqCst);
                let config = ConsolidationConfig {
                    session_idle_secs: if ending { 0 } else { config.session_idle_secs },
                    ..config.clone()
                };
                // Full batches follow each other; a cycle that deferred or failed anything
                // waits for the next occasion, so a model's budget is never run through.
                loop {
                    let outcome = run_cycle(&parts, &config, max_text_bytes, crate::now()).await;
                    if outcome.is_ok()
                        && let Some(dir) = &bank_dir
                    {
                        match crate::bank::write(&parts, dir).await {
                            Ok(written) => {
                                for s in &written.skipped {
                                    tracing::warn!(bank = %dir.display(), path = %s.path, reason = %s.reason, "the bank left a file alone");
                                }
                            }
                            Err(e) => {
                                tracing::warn!(error = %e, bank = %dir.display(), "writing the bank after a sleep cycle failed; the next cycle writes it whole")
                            }
                        }
                    }
                    match outcome {
                        Ok(r) if r.episodes_seen >= config.batch && r.deferred == 0 && r.failed == 0 => continue,
                        Ok(_) => break,
                        Err(e) => {
                            tracing::warn!(error = %e, "background consolidation failed; it runs again at the next occasion");
                            break;
                        }
                    }
                }
                let due = decay_every_hours > 0.0
                    && last_decay.is_none_or(|t| t.elapsed().as_secs_f64() >= decay_every_hours * 3600.0);
                if due {
                    last_decay = Some(std::time::Instant::now());
                    match crate::forgetting::decay_pass(parts.store.as_ref(), crate::now()).await {
                        Ok(r) => tracing::info!(soft_deleted = r.ids.len(), "decay pass"),
                        Err(e) => tracing::warn!(error = %e, "background decay pass failed; it runs again later"),
                    }
                }
            }
        }));
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        if let Some(task) = self.task.lock().expect("sleeper lock").take() {
            task.abort();
        }
    }
}
