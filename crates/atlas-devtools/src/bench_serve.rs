//! `cargo xtask bench serve`: `atlas serve` under load on a benchmark space (100k memories by
//! default): writer and reader clients on loopback for a fixed time, each on its own
//! keep-alive connection; throughput and p50 / p95 / p99 of remember and recall, every error
//! (there must be none, and no "database is locked"), the server's peak RSS. Beside them, in
//! the same run on the same space: recall in process, and recall over HTTP by one client
//! without load, so that the HTTP overhead reads as a difference of medians. Then the cost of
//! tenant keys: readers only, alternately with the server's one token (naming each reader's
//! user in the body) and with one key per user (its scope forced by the server), the same
//! queries and the same work, as a ratio of recall throughput.

use crate::bench_recall::populate;
use crate::measure::{percentile, sorted};
use anyhow::{Result, bail};
use atlas_runtime::{Atlas, RecallRequest};
use atlas_testing::http::{HttpClient, free_port, wait_healthy};
use serde_json::json;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The server's own token in this benchmark.
const TOKEN: &str = "bench-serve-token";
/// The users of the benchmark space's memories.
const USERS: [&str; 5] = ["u0", "u1", "u2", "u3", "u4"];

#[derive(Default)]
struct Tally {
    millis: Vec<f64>,
    errors: Vec<String>,
}

fn peak_rss_mb(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// One client's loop until `stop`: `next(i)` gives the i-th request (path, body, idempotency
/// key); every answer is timed, and every non-2xx answer or I/O error kept as an error.
fn client_loop(
    addr: SocketAddr,
    token: &str,
    stop: Arc<AtomicBool>,
    mut next: impl FnMut(usize) -> (String, serde_json::Value, Option<String>) + Send + 'static,
) -> std::thread::JoinHandle<Tally> {
    let token = token.to_owned();
    std::thread::spawn(move || {
        let mut client = HttpClient::new(addr, Some(token));
        let mut tally = Tally::default();
        for i in 0.. {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let (path, body, key) = next(i);
            let mut headers = vec![("content-type", "application/json")];
            if let Some(key) = &key {
                headers.push(("idempotency-key", key));
            }
            let started = Instant::now();
            match client.request("POST", &path, Some(&body.to_string()), &headers) {
                Ok(answer) if (200..300).contains(&answer.status) => {
                    tally.millis.push(started.elapsed().as_secs_f64() * 1e3)
                }
                Ok(answer) => tally.errors.push(format!("{} {}", answer.status, answer.text())),
                Err(e) => tally.errors.push(e.to_string()),
            }
        }
        tally
    })
}

pub fn run(size: usize, secs: u64, writers: usize, readers: usize) -> Result<()> {
    crate::fetch_default_model()?;
    let atlas_binary = crate::atlas_binary()?;
    let dir = tempfile::tempdir()?;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    println!("building a space of {size} memories…");
    let space = rt.block_on(populate(dir.path(), size))?;

    // In process, the same space and queries: the baseline of this run.
    let in_process = rt.block_on(async {
        let atlas = Atlas::open(space.config.clone()).await?;
        atlas.recall(RecallRequest { query: space.queries[0].clone(), k: 10, ..RecallRequest::default() }).await?;
        let mut millis = Vec::new();
        for q in &space.queries {
            let started = Instant::now();
            atlas.recall(RecallRequest { query: q.clone(), k: 10, ..RecallRequest::default() }).await?;
            millis.push(started.elapsed().as_secs_f64() * 1e3);
        }
        anyhow::Ok(sorted(millis))
    })?;
    drop(rt);

    // One read key per user of the space (its memories belong to users u0..u4), and the
    // server's own token beside them.
    let mut tenant_tokens = Vec::new();
    for user in USERS {
        let made = crate::atlas_json(
            &atlas_binary,
            &["--db", &space.db.display().to_string(), "keys", "add", "--user", user, "--role", "read"],
        )?;
        tenant_tokens.push(made["token"].as_str().unwrap_or_default().to_owned());
    }
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut server = std::process::Command::new(&atlas_binary)
        .arg("--db")
        .arg(&space.db)
        .args(["serve", "--listen", &addr.to_string(), "--max-in-flight", "1024"])
        .env("ATLAS_LOG", "warn")
        .env("ATLAS_TOKEN", TOKEN)
        .spawn()?;
    if !wait_healthy(addr, "/healthz", Duration::from_secs(300)) {
        let _ = server.kill();
        bail!("atlas serve did not answer /healthz within 300 s");
    }
    let result = measure(addr, &space.queries, &in_process, secs, writers, readers, server.id())
        .and_then(|()| tenant_cost(addr, &space.queries, &tenant_tokens, secs, readers));
    let _ = server.kill();
    let _ = server.wait();
    result
}

fn measure(
    addr: SocketAddr,
    queries: &[String],
    in_process: &[f64],
    secs: u64,
    writers: usize,
    readers: usize,
    pid: u32,
) -> Result<()> {
    // Without load: one client, the same queries, after one warming call.
    let mut client = HttpClient::new(addr, Some(TOKEN.into()));
    let recall = |q: &str| json!({"query": q, "k": 10});
    client.post_json("/v1/recall", &recall(&queries[0]))?;
    let mut unloaded = Vec::new();
    for q in queries {
        let started = Instant::now();
        let answer = client.post_json("/v1/recall", &recall(q))?;
        if answer.status != 200 {
            bail!("recall answered {}: {}", answer.status, answer.text());
        }
        unloaded.push(started.elapsed().as_secs_f64() * 1e3);
    }
    let unloaded = sorted(unloaded);

    println!("load: {writers} writers and {readers} readers for {secs} s…");
    let stop = Arc::new(AtomicBool::new(false));
    let queries: Arc<Vec<String>> = Arc::new(queries.to_vec());
    let write_threads: Vec<_> = (0..writers)
        .map(|w| {
            client_loop(addr, TOKEN, Arc::clone(&stop), move |i| {
                let body = json!({"text": format!("writer {w} turn {i}: the keeper logged ship {} at dusk", i * 7 + w),
                                  "session": format!("load-{w}-{}", i / 20), "speaker": "keeper"});
                ("/v1/remember".into(), body, Some(format!("load-{w}-{i}")))
            })
        })
        .collect();
    let read_threads: Vec<_> = (0..readers)
        .map(|r| {
            let queries = Arc::clone(&queries);
            client_loop(addr, TOKEN, Arc::clone(&stop), move |i| {
                ("/v1/recall".into(), json!({"query": queries[(r * 31 + i) % queries.len()], "k": 10}), None)
            })
        })
        .collect();
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs(secs));
    stop.store(true, Ordering::Relaxed);
    let join = |threads: Vec<std::thread::JoinHandle<Tally>>| {
        threads.into_iter().map(|t| t.join().expect("a client thread")).fold(Tally::default(), |mut all, t| {
            all.millis.extend(t.millis);
            all.errors.extend(t.errors);
            all
        })
    };
    let (writes, reads) = (join(write_threads), join(read_threads));
    let elapsed = started.elapsed().as_secs_f64();
    let rss = peak_rss_mb(pid);

    let p = |v: &[f64], q: f64| percentile(v, q);
    println!();
    println!("| measure | requests | per second | p50 (ms) | p95 (ms) | p99 (ms) | errors |");
    println!("|---|---|---|---|---|---|---|");
    for (name, tally) in [("remember (HTTP, under load)", &writes), ("recall (HTTP, under load)", &reads)] {
        let millis = sorted(tally.millis.clone());
        println!(
            "| {name} | {} | {:.0} | {:.2} | {:.2} | {:.2} | {} |",
            millis.len(),
            millis.len() as f64 / elapsed,
            p(&millis, 0.5),
            p(&millis, 0.95),
            p(&millis, 0.99),
            tally.errors.len()
        );
    }
    for (name, millis) in
        [("recall (HTTP, one client, no load)", &unloaded), ("recall (in process, same space)", &in_process.to_vec())]
    {
        println!(
            "| {name} | {} | | {:.2} | {:.2} | {:.2} | 0 |",
            millis.len(),
            p(millis, 0.5),
            p(millis, 0.95),
            p(millis, 0.99)
        );
    }
    println!();
    println!(
        "HTTP recall p50 − in-process recall p50 (no load, same run): {:+.2} ms (target ≤ 1 ms); ratio {:.2}",
        p(&unloaded, 0.5) - p(in_process, 0.5),
        p(&unloaded, 0.5) / p(in_process, 0.5)
    );
    println!("server peak RSS: {rss:.0} MB");
    let locked = writes.errors.iter().chain(&reads.errors).filter(|e| e.contains("locked")).count();
    println!("errors: {} (\"database is locked\": {locked})", writes.errors.len() + reads.errors.len());
    for e in writes.errors.iter().chain(&reads.errors).take(5) {
        println!("  e.g. {e:.200}");
    }
    if !writes.errors.is_empty() || !reads.errors.is_empty() {
        bail!("the load saw errors");
    }
    Ok(())
}

/// Recall throughput of `readers` clients for `secs` seconds, in eight alternating phases: the
/// server's token with the user named in the body, then each reader with its user's key (the
/// server forces the same scope), four times each, so that drift over the run (the background
/// embedder catching up, the caches) falls on both alike.
fn tenant_cost(
    addr: SocketAddr,
    queries: &[String],
    tenant_tokens: &[String],
    secs: u64,
    readers: usize,
) -> Result<()> {
    println!();
    println!("tenant keys against one token: {readers} readers, 8 phases of {} s…", (secs / 8).max(5));
    let queries: Arc<Vec<String>> = Arc::new(queries.to_vec());
    let phase = |with_keys: bool| -> (usize, usize, f64) {
        let stop = Arc::new(AtomicBool::new(false));
        let threads: Vec<_> = (0..readers)
            .map(|r| {
                let queries = Arc::clone(&queries);
                let user = USERS[r % USERS.len()];
                let (token, scope) = if with_keys {
                    (tenant_tokens[r % tenant_tokens.len()].as_str(), json!({}))
                } else {
                    (TOKEN, json!({"user": user}))
                };
                client_loop(addr, token, Arc::clone(&stop), move |i| {
                    let query = &queries[(r * 31 + i) % queries.len()];
                    ("/v1/recall".into(), json!({"query": query, "k": 10, "scope": scope}), None)
                })
            })
            .collect();
        let started = Instant::now();
        std::thread::sleep(Duration::from_secs((secs / 8).max(5)));
        stop.store(true, Ordering::Relaxed);
        let (mut done, mut errors) = (0, 0);
        for t in threads {
            let tally = t.join().expect("a client thread");
            done += tally.millis.len();
            errors += tally.errors.len();
        }
        (done, errors, started.elapsed().as_secs_f64())
    };
    let mut totals = [(0usize, 0usize, 0f64); 2];
    for with_keys in [false, true, true, false, false, true, true, false] {
        let (done, errors, took) = phase(with_keys);
        let total = &mut totals[usize::from(with_keys)];
        total.0 += done;
        total.1 += errors;
        total.2 += took;
    }
    println!("| caller | recalls | per second | errors |");
    println!("|---|---|---|---|");
    for (name, (done, errors, took)) in
        [("one token, user in the body", totals[0]), ("a key per user, scope forced", totals[1])]
    {
        println!("| {name} | {done} | {:.1} | {errors} |", done as f64 / took);
    }
    let ratio = (totals[1].0 as f64 / totals[1].2) / (totals[0].0 as f64 / totals[0].2);
    println!("tenant keys / one token, recall throughput: {ratio:.3} (target ≥ 0.95)");
    if totals[0].1 + totals[1].1 > 0 {
        bail!("the tenant phases saw errors");
    }
    Ok(())
}
