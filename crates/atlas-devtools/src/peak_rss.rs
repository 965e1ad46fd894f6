//! A child process's wall time and peak resident memory, read from `/usr/bin/time`: what the
//! benchmarks that run `atlas` (embed, ingest) share.

use anyhow::{Context, Result, bail};
use std::path::Path;
use std::process::Command;
use std::time::Instant;

/// What one measured run gave.
pub struct Measured {
    pub secs: f64,
    pub peak_rss_mb: f64,
    pub stderr: String,
}

/// `program` under `/usr/bin/time`, which prints its peak resident set as the last line of
/// standard error (`MAXRSS_KB=`).
pub fn command(program: impl AsRef<Path>) -> Command {
    let mut command = Command::new("/usr/bin/time");
    command.args(["-f", "MAXRSS_KB=%M"]).arg(program.as_ref());
    command
}

/// Runs a [`command`] to its end; a failure is an error with its standard error.
pub fn run(command: &mut Command) -> Result<Measured> {
    let started = Instant::now();
    let out = command.output()?;
    let secs = started.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        bail!("{command:?} failed: {stderr}");
    }
    let kb: f64 = stderr
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("MAXRSS_KB=").and_then(|v| v.trim().parse().ok()))
        .context("no MAXRSS_KB line from /usr/bin/time")?;
    Ok(Measured { secs, peak_rss_mb: kb / 1024.0, stderr })
}
