//! The fork gate: `fork()` waits until no thread of the process is inside SQLite, and SQLite
//! is not entered again until the fork is done.
//!
//! SQLite keeps process-wide state behind pthread mutexes (its allocator's, the VFS's list of
//! open files and their lock state). A child made by `fork()` has only the thread that forked;
//! a mutex another thread held at that instant stays locked in the child forever, and the
//! child's first SQLite call hangs (Python's `os.fork()` and `multiprocessing` under the fork
//! start method, issue 48). Every use of a connection holds the gate ([`hold`]); a
//! `pthread_atfork` handler closes it before the fork and opens it after, in both processes.
//! The gate is atomics only: no lock of its own can be left held in the child. Every access is
//! sequentially consistent: a holder counts itself then looks for a fork while the fork marks
//! itself then counts the holders, and one of the two must see the other's write.

use std::cell::Cell;
use std::sync::Once;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

/// Threads inside SQLite now (each counted once, however deeply its holds nest).
static INSIDE: AtomicUsize = AtomicUsize::new(0);
/// A fork is being prepared or made: no thread enters.
static FORKING: AtomicBool = AtomicBool::new(false);
static REGISTERED: Once = Once::new();

thread_local! {
    /// This thread's nested holds: an inner hold never waits for a fork that waits for its
    /// outer one.
    static DEPTH: Cell<usize> = const { Cell::new(0) };
}

/// How long a waiting thread sleeps between looks: forks are rare, and a hold is taken in
/// nanoseconds when none is under way.
const PAUSE: Duration = Duration::from_micros(200);

/// This thread is inside SQLite until the hold is dropped.
pub struct Hold(());

/// Installs the fork handlers (once per process; the store calls it at open, before any thread
/// of its own exists, so that no fork happens during the registration).
pub fn install() {
    REGISTERED.call_once(register);
}

/// Enters the gate, waiting while a fork is under way.
pub fn hold() -> Hold {
    install();
    let depth = DEPTH.with(Cell::get);
    if depth == 0 {
        loop {
            while FORKING.load(Ordering::SeqCst) {
                std::thread::sleep(PAUSE);
            }
            INSIDE.fetch_add(1, Ordering::SeqCst);
            if !FORKING.load(Ordering::SeqCst) {
                break;
            }
            // A fork began between the look and the count: step back out and wait for it.
            INSIDE.fetch_sub(1, Ordering::SeqCst);
        }
    }
    DEPTH.with(|d| d.set(depth + 1));
    Hold(())
}

impl Drop for Hold {
    fn drop(&mut self) {
        let depth = DEPTH.with(Cell::get) - 1;
        DEPTH.with(|d| d.set(depth));
        if depth == 0 {
            INSIDE.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

fn register() {
    // SAFETY: the handlers are plain functions touching only atomics and this thread's
    // thread-local, which is what pthread_atfork handlers may do.
    let registered = unsafe { libc::pthread_atfork(Some(before_fork), Some(after_fork), Some(after_fork)) };
    if registered != 0 {
        tracing::warn!(code = registered, "pthread_atfork failed: a fork() while SQLite is in use may hang the child");
    }
}

/// Closes the gate and waits for every thread inside SQLite to leave (not for this thread's
/// own holds, if it forks from inside one).
extern "C" fn before_fork() {
    FORKING.store(true, Ordering::SeqCst);
    let own = usize::from(DEPTH.with(Cell::get) > 0);
    while INSIDE.load(Ordering::SeqCst) > own {
        std::thread::sleep(PAUSE);
    }
}

/// Opens the gate again: in the parent, and in the child, whose only thread is this one.
extern "C" fn after_fork() {
    FORKING.store(false, Ordering::SeqCst);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fork_waits_for_the_threads_inside_and_keeps_new_ones_out_until_it_is_done() {
        let inside = hold();
        let nested = hold();
        assert_eq!(INSIDE.load(Ordering::SeqCst), 1, "a nested hold counts its thread once");
        let forking = std::thread::spawn(|| {
            before_fork();
            let waited_for_all = INSIDE.load(Ordering::SeqCst) == 0;
            after_fork();
            waited_for_all
        });
        std::thread::sleep(Duration::from_millis(20));
        assert!(!forking.is_finished(), "the fork waits while a thread is inside");
        drop(nested);
        std::thread::sleep(Duration::from_millis(20));
        assert!(!forking.is_finished(), "until its outermost hold ends");
        drop(inside);
        assert!(forking.join().unwrap());
        let again = hold();
        assert_eq!(INSIDE.load(Ordering::SeqCst), 1);
        drop(again);
        assert_eq!(INSIDE.load(Ordering::SeqCst), 0);
    }
}
