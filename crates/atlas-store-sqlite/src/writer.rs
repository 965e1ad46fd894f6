//! The single writer: one thread owns the only write connection and commits jobs in groups.
//!
//! Async callers send closures over a channel and await the reply. The thread takes every job
//! waiting in the queue, runs each inside its own savepoint of one `BEGIN IMMEDIATE`
//! transaction, commits once, and only then replies. So concurrent writers never see
//! "database is locked" from each other, a failing job rolls back alone, and no caller hears
//! "done" before its write is committed.

use crate::error::{duplicate, storage};
use atlas_domain::{AtlasError, Result};
use rusqlite::Connection;
use std::sync::mpsc;
use std::thread::JoinHandle;
use tokio::sync::oneshot;

/// Most jobs folded into one transaction; bounds the latency a long queue adds to its head.
const MAX_GROUP: usize = 512;

trait WriteJob: Send {
    fn run(&mut self, conn: &Connection);
    fn finish(self: Box<Self>, commit: std::result::Result<(), &AtlasError>);
}

struct Job<T, F> {
    op: Option<F>,
    result: Option<Result<T>>,
    reply: oneshot::Sender<Result<T>>,
}

impl<T: Send, F: FnOnce(&Connection) -> Result<T> + Send> WriteJob for Job<T, F> {
    fn run(&mut self, conn: &Connection) {
        let op = self.op.take().expect("a job runs once");
        let result = conn.execute_batch("SAVEPOINT job").map_err(storage).and_then(|()| {
            let out = op(conn);
            let end = if out.is_ok() { "RELEASE job" } else { "ROLLBACK TO job; RELEASE job" };
            conn.execute_batch(end).map_err(storage)?;
            out
        });
        self.result = Some(result);
    }

    fn finish(self: Box<Self>, commit: std::result::Result<(), &AtlasError>) {
        let outcome = match (self.result, commit) {
            (Some(Err(e)), _) => Err(e),
            (_, Err(e)) => Err(duplicate(e)),
            (Some(Ok(v)), Ok(())) => Ok(v),
            (None, Ok(())) => Err(AtlasError::Storage("write job was never run".into())),
        };
        // The caller may have gone away (a cancelled future); the write stands regardless.
        let _ = self.reply.send(outcome);
    }
}

/// Handle to the writer thread. Dropping it lets the thread drain its queue and close.
pub struct Writer {
    /// The database file, named in every storage error a write returns.
    path: String,
    sender: Option<mpsc::Sender<Box<dyn WriteJob>>>,
    thread: Option<JoinHandle<()>>,
}

impl Writer {
    pub fn spawn(conn: Connection, path: String) -> Self {
        let (sender, receiver) = mpsc::channel::<Box<dyn WriteJob>>();
        let thread = std::thread::Builder::new()
            .name("atlas-sqlite-writer".into())
            .spawn(move || writer_loop(conn, receiver))
            .expect("spawn the SQLite writer thread");
        Writer { path, sender: Some(sender), thread: Some(thread) }
    }

    /// Runs `op` in the write transaction; resolves after the commit.
    pub async fn write<T, F>(&self, op: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let job = Box::new(Job { op: Some(op), result: None, reply });
        let stopped = || AtlasError::Storage("the SQLite writer thread has stopped".into());
        self.sender.as_ref().ok_or_else(stopped)?.send(job).map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?.map_err(|e| crate::error::at_path(&self.path, e))
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        drop(self.sender.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn writer_loop(conn: Connection, receiver: mpsc::Receiver<Box<dyn WriteJob>>) {
    while let Ok(first) = receiver.recv() {
        let _inside = crate::fork_gate::hold();
        let mut jobs = vec![first];
        while jobs.len() < MAX_GROUP {
            match receiver.try_recv() {
                Ok(job) => jobs.push(job),
                Err(_) => break,
            }
        }
        let waiting = std::time::Instant::now();
        if let Err(e) = conn.execute_batch("BEGIN IMMEDIATE").map_err(storage) {
            // Say how long it really waited, not what the timeout was meant to be.
            let e = match e {
                AtlasError::Busy(_) => AtlasError::Busy(format!(
                    "locked by another process: waited {} ms for its write to finish, then gave up \
                     (ATLAS_BUSY_TIMEOUT_MS or busy_timeout_ms waits longer); nothing of this write was stored",
                    waiting.elapsed().as_millis()
                )),
                other => other,
            };
            jobs.into_iter().for_each(|j| j.finish(Err(&e)));
            continue;
        }
        for job in &mut jobs {
            job.run(&conn);
            if conn.is_autocommit() {
                // SQLite rolled the whole transaction back (disk full, I/O error): later jobs
                // must not run outside it, and earlier ones did not land.
                break;
            }
        }
        if conn.is_autocommit() {
            let e = AtlasError::Storage("SQLite rolled the write transaction back; nothing of it was stored".into());
            jobs.into_iter().for_each(|j| j.finish(Err(&e)));
            continue;
        }
        // Cache files made before this commit are stale from it on (crate::cache_file).
        if let Err(e) = crate::cache_file::count_write(&conn) {
            let _ = conn.execute_batch("ROLLBACK");
            jobs.into_iter().for_each(|j| j.finish(Err(&e)));
            continue;
        }
        match conn.execute_batch("COMMIT").map_err(storage) {
            Ok(()) => jobs.into_iter().for_each(|j| j.finish(Ok(()))),
            Err(e) => {
                let _ = conn.execute_batch("ROLLBACK");
                jobs.into_iter().for_each(|j| j.finish(Err(&e)));
            }
        }
    }
    // Checkpoint the WAL so that the file alone holds everything when the store closes.
    let _ = conn.execute_batch("PRAGMA wal_checkpoint(PASSIVE)");
}
