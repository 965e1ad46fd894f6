//! The steps of a CI run: each command's output (standard output and error as one stream)
//! echoed as it comes, prefixed with its lane's name when lanes run side by side, scanned for
//! the number of tests it ran (nextest's and pytest's summaries); each step's wall time and
//! count kept for the table printed at the end.

use anyhow::{Context, Result, bail};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Tests a step ran, as its runners summarised them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub passed: usize,
    pub skipped: usize,
}

impl std::ops::AddAssign for Counts {
    fn add_assign(&mut self, other: Counts) {
        self.passed += other.passed;
        self.skipped += other.skipped;
    }
}

/// The count a runner's summary line gives, if `line` is one: nextest's
/// `Summary [ 12.3s] 483 tests run: 483 passed, 48 skipped`, pytest's
/// `40 passed, 2 skipped in 12.34s` (with or without its `=` rules), or node's test runner's
/// `# pass 12` and `# skipped 1` (TAP, as it reports when its output is not a terminal).
pub fn summary(line: &str) -> Option<Counts> {
    let line = line.trim().trim_matches('=').trim();
    // pytest adds the minutes of a long run: `... in 84.39s (0:01:24)`.
    let line = match line.rfind(" (") {
        Some(at) if line.ends_with(')') && line[..at].ends_with('s') => &line[..at],
        _ => line,
    };
    let node = |word: &str| {
        line.strip_prefix("# ").or_else(|| line.strip_prefix("ℹ "))?.strip_prefix(word)?.trim().parse().ok()
    };
    if let Some(passed) = node("pass ") {
        return Some(Counts { passed, skipped: 0 });
    }
    if let Some(skipped) = node("skipped ") {
        return Some(Counts { passed: 0, skipped });
    }
    let number_before = |word: &str| -> Option<usize> {
        let at = line.find(word)?;
        line[..at].trim_end().rsplit([' ', ',', ':', ']']).next()?.parse().ok()
    };
    let nextest = line.starts_with("Summary [") && (line.contains(" tests run: ") || line.contains(" test run: "));
    let pytest =
        !line.starts_with("Summary") && line.ends_with('s') && line.contains(" passed") && line.contains(" in ");
    if !(nextest || pytest) {
        return None;
    }
    let passed = number_before(" passed")?;
    Some(Counts { passed, skipped: number_before(" skipped").unwrap_or(0) })
}

/// Where a step's lines go: straight to standard output, or prefixed by a lane's name.
#[derive(Clone)]
pub struct Echo {
    prefix: Option<String>,
}

impl Echo {
    pub fn plain() -> Echo {
        Echo { prefix: None }
    }

    pub fn lane(name: &str) -> Echo {
        Echo { prefix: Some(format!("[{name}] ")) }
    }

    pub fn line(&self, line: &str) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{}{line}", self.prefix.as_deref().unwrap_or(""));
        let _ = out.flush();
    }
}

/// Runs `command` to its end, its output echoed through `echo`; fails naming `what` when it
/// does. Returns the tests its summaries counted.
pub fn run(command: &mut Command, what: &str, echo: &Echo) -> Result<Counts> {
    let (reader, writer) = std::io::pipe().context("a pipe for a step's output")?;
    command.stdin(Stdio::null()).stdout(writer.try_clone()?).stderr(writer);
    let mut child = command.spawn().with_context(|| format!("{what}: could not start it"))?;
    // The command holds the only writers now: the reader ends when the child (and whatever it
    // left running with the pipe) is done.
    command.stdout(Stdio::null()).stderr(Stdio::null());
    let mut counts = Counts::default();
    for line in BufReader::new(reader).split(b'\n') {
        let line = line.with_context(|| format!("{what}: reading its output"))?;
        let line = String::from_utf8_lossy(&line);
        let line = line.trim_end_matches('\r');
        if let Some(found) = summary(line) {
            counts += found;
        }
        echo.line(line);
    }
    let status = child.wait().with_context(|| format!("{what}: waiting for it"))?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(counts)
}

/// One row of the table: a step, how long it took, the tests it ran, whether it passed.
#[derive(Debug, Clone)]
pub struct Row {
    pub step: String,
    pub lane: Option<String>,
    pub took: Duration,
    pub counts: Option<Counts>,
    pub failed: bool,
}

/// The rows of a run, shared by the lanes that run side by side.
#[derive(Clone, Default)]
pub struct Table {
    rows: Arc<Mutex<Vec<Row>>>,
    started: Option<Instant>,
}

impl Table {
    pub fn new() -> Table {
        Table { rows: Arc::default(), started: Some(Instant::now()) }
    }

    /// Runs `step`, timing it and recording its row (failed or not); returns its result.
    pub fn step<T>(
        &self,
        name: &str,
        lane: Option<&str>,
        step: impl FnOnce() -> Result<(T, Option<Counts>)>,
    ) -> Result<T> {
        let started = Instant::now();
        let result = step();
        let row = Row {
            step: name.to_owned(),
            lane: lane.map(str::to_owned),
            took: started.elapsed(),
            counts: result.as_ref().ok().and_then(|(_, c)| *c),
            failed: result.is_err(),
        };
        self.rows.lock().expect("the table's lock").push(row);
        result.map(|(value, _)| value).with_context(|| format!("step `{name}`"))
    }

    /// The table: each step's wall time and tests, in the order they finished, and the total.
    pub fn render(&self) -> String {
        let rows = self.rows.lock().expect("the table's lock").clone();
        let mut out = String::from("\nCI steps (wall time; steps of different lanes ran side by side)\n");
        out += &format!("{:<34} {:>9}  {:>8} {:>8}  {}\n", "step", "seconds", "passed", "skipped", "lane");
        let mut total = Counts::default();
        for row in &rows {
            let (passed, skipped) = match row.counts {
                Some(c) => {
                    total += c;
                    (c.passed.to_string(), c.skipped.to_string())
                }
                None => ("-".into(), "-".into()),
            };
            let mark = if row.failed { " FAILED" } else { "" };
            out += &format!(
                "{:<34} {:>9.1}  {passed:>8} {skipped:>8}  {}{mark}\n",
                row.step,
                row.took.as_secs_f64(),
                row.lane.as_deref().unwrap_or("main")
            );
        }
        let wall = self.started.map_or(0.0, |s| s.elapsed().as_secs_f64());
        out += &format!("{:<34} {wall:>9.1}  {:>8} {:>8}\n", "total (wall)", total.passed, total.skipped);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nextest_and_pytest_summaries_are_counted() {
        let nextest = "     Summary [ 612.331s] 483 tests run: 483 passed (2 slow), 48 skipped";
        assert_eq!(summary(nextest), Some(Counts { passed: 483, skipped: 48 }));
        assert_eq!(
            summary("     Summary [   1.0s] 1 test run: 1 passed, 0 skipped"),
            Some(Counts { passed: 1, skipped: 0 })
        );
        assert_eq!(summary("41 passed, 3 skipped in 12.34s"), Some(Counts { passed: 41, skipped: 3 }));
        assert_eq!(
            summary("134 passed, 19 skipped, 13 warnings in 84.39s (0:01:24)"),
            Some(Counts { passed: 134, skipped: 19 })
        );
        assert_eq!(summary("========== 7 passed in 0.51s =========="), Some(Counts { passed: 7, skipped: 0 }));
        assert_eq!(summary("# pass 12"), Some(Counts { passed: 12, skipped: 0 }));
        assert_eq!(summary("ℹ skipped 2"), Some(Counts { passed: 0, skipped: 2 }));
        assert_eq!(summary("# passed the gate"), None);
        assert_eq!(summary("ok  schemathesis: every operation passed in the end"), None);
        assert_eq!(summary("        PASS [   0.012s] atlas-domain policy::tests::it_passed"), None);
    }
}
