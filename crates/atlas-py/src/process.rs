//! The one async runtime of the Python process, rebuilt in a child after `os.fork()` (its
//! threads are not copied), and the wait for a call's future that lets Ctrl-C through.

use pyo3::prelude::*;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

/// Every space's calls and background work run on this runtime, with the id of the process that
/// built it. [`shutdown`] takes it at interpreter exit; a later call builds another.
static RUNTIME: Mutex<Option<(u32, tokio::runtime::Runtime)>> = Mutex::new(None);

/// How often a call that is waited for lets Python look for a signal (Ctrl-C).
const SIGNAL_CHECK: Duration = Duration::from_millis(50);

/// The runtime of this process. In a child after `fork()`, the parent's runtime has no threads
/// here: it is left alone (never dropped: its drop would join threads that do not exist) and a
/// new one is built.
pub fn runtime() -> tokio::runtime::Handle {
    let mut runtime = RUNTIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let pid = std::process::id();
    if runtime.as_ref().is_some_and(|(owner, _)| *owner != pid) {
        std::mem::forget(runtime.take());
    }
    let (_, runtime) = runtime.get_or_insert_with(|| {
        let built = tokio::runtime::Builder::new_multi_thread()
            .thread_name("atlas")
            .enable_all()
            .build()
            .expect("a tokio runtime for the atlas module");
        (pid, built)
    });
    runtime.handle().clone()
}

/// Stops the runtime, waiting (up to 10 s) for work under way: a batch of vectors being
/// embedded finishes and is stored before the process's libraries are torn down. The package
/// registers it with `atexit`. A forked child's inherited runtime has nothing to wait for.
#[pyfunction]
pub fn shutdown(py: Python<'_>) {
    let taken = RUNTIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
    match taken {
        Some((owner, runtime)) if owner == std::process::id() => {
            py.detach(move || runtime.shutdown_timeout(Duration::from_secs(10)));
        }
        Some(inherited) => std::mem::forget(inherited),
        None => {}
    }
}

/// Runs `future` to its end on the runtime with the GIL released, looking for signals every
/// [`SIGNAL_CHECK`]: Ctrl-C (or any signal handler that raises) returns control to Python at
/// once, as an interrupted call of any Python library does. The call itself is not cut at an
/// await point (a write's steps after its commit, such as erasing a forgotten memory from the
/// cache files, must not be skipped): it finishes on the runtime in the background, its answer
/// dropped.
pub fn wait<T, F>(py: Python<'_>, future: F) -> PyResult<T>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: Send + 'static,
{
    let handle = runtime();
    let mut future = Box::pin(future);
    loop {
        // The timer is made inside the runtime (an async block), which it needs.
        let polled = py.detach(|| handle.block_on(async { tokio::time::timeout(SIGNAL_CHECK, future.as_mut()).await }));
        match polled {
            Ok(done) => return done,
            Err(_elapsed) => {
                if let Err(signal) = py.check_signals() {
                    handle.spawn(async move {
                        let _ = future.await;
                    });
                    return Err(signal);
                }
            }
        }
    }
}
