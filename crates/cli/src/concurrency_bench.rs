//! `apiary bench concurrency`: the scheduler's targets (issue 11), in memory.
//!
//! * **Fairness** (Quickstep §4): TPC-H Q6 alone, then Q6 while four clients run Q9,
//!   Q18, Q21 and Q13 in a loop, under FIFO (the baseline: Q6 waits for the long
//!   queries), fair share, and fair share with Q6 at `SET priority = 10` against 1 for
//!   the others. Reported as Q6's median time under load divided by its time alone.
//!   The load runs with `max_concurrent_queries = 8` (the default, threads x 2, would
//!   queue Q6 behind the four long queries at admission).
//! * **Cancellation**: Q18 is cancelled (`apiary_cancel`) after it ran 100 ms; the
//!   time from the cancel to the query's return, and the memory held afterwards.
//!
//! Prints one JSON line per measurement and a summary on stderr. Timings drift with the
//! machine: compare the ratios, measured in the same run.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use apiary::{tpch, ApiaryError, Database, Result};

pub struct ConcurrencyOptions {
    pub sf: f64,
    pub threads: usize,
    /// Q6 runs per measurement.
    pub runs: usize,
}

const BACKGROUND: [usize; 4] = [9, 18, 21, 13];

fn median(mut times: Vec<f64>) -> f64 {
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// Q6's times (seconds) on `conn` `runs` times.
fn time_q6(conn: &mut apiary::Connection, runs: usize) -> Result<Vec<f64>> {
    let sql = tpch::query(6).unwrap_or_default();
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let started = Instant::now();
        conn.query(sql)?;
        times.push(started.elapsed().as_secs_f64());
    }
    Ok(times)
}

/// Runs Q6 `runs` times while four clients loop over the long queries at `background`
/// priority; returns Q6's median.
fn q6_under_load(db: &Database, policy: &str, q6_priority: u32, background: u32, runs: usize) -> Result<f64> {
    let mut admin = db.connect();
    admin.execute(&format!("SET scheduler_policy = '{policy}'"))?;
    // Five queries at once: the default (threads x 2) would queue Q6 at admission.
    admin.execute("SET max_concurrent_queries = 8")?;
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for q in BACKGROUND {
        let mut conn = db.connect();
        conn.execute(&format!("SET priority = {background}"))?;
        let stop = Arc::clone(&stop);
        clients.push(thread::spawn(move || -> Result<usize> {
            let sql = tpch::query(q).unwrap_or_default();
            let mut done = 0;
            while !stop.load(Ordering::Relaxed) {
                match conn.query(sql) {
                    Ok(_) => done += 1,
                    Err(ApiaryError::Interrupted) => break,
                    Err(e) => return Err(e),
                }
            }
            Ok(done)
        }));
    }
    // Let the long queries get going.
    thread::sleep(Duration::from_millis(1500));
    let mut conn = db.connect();
    conn.execute(&format!("SET priority = {q6_priority}"))?;
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        times.extend(time_q6(&mut conn, 1)?);
        // Between runs the load changes phase (builds, probes, sorts).
        thread::sleep(Duration::from_millis(200));
    }
    // Where Q6's time goes under this load: wall time against worker time.
    let explain = conn.query(&format!("EXPLAIN ANALYZE {}", tpch::query(6).unwrap_or_default()))?;
    for row in explain.rows() {
        let line = row[0].to_string();
        if line.starts_with("Total") || line.starts_with("Pipeline") {
            eprintln!("  [{policy}, Q6 priority {q6_priority}] {line}");
        }
    }
    stop.store(true, Ordering::Relaxed);
    for query in db.queries() {
        db.cancel_query(query.id);
    }
    for client in clients {
        client.join().map_err(|_| apiary_common_internal("a background client panicked"))??;
    }
    admin.execute("RESET scheduler_policy")?;
    admin.execute("RESET max_concurrent_queries")?;
    Ok(median(times))
}

fn apiary_common_internal(message: &str) -> ApiaryError {
    ApiaryError::Internal(message.to_string())
}

/// Cancels Q18 after `after`; returns (seconds from cancel to return, bytes held after).
fn cancel_q18(db: &Database, after: Duration) -> Result<(f64, usize, usize)> {
    let mut conn = db.connect();
    let runner = thread::spawn(move || {
        let result = conn.query(tpch::query(18).unwrap_or_default());
        (result.map(|_| ()), Instant::now())
    });
    thread::sleep(after);
    let held_before = db.query_memory_bytes();
    let id = db.queries().first().map(|q| q.id);
    let cancelled = Instant::now();
    if let Some(id) = id {
        db.cancel_query(id);
    }
    let (outcome, returned) = runner.join().map_err(|_| apiary_common_internal("Q18 panicked"))?;
    match outcome {
        Err(ApiaryError::Interrupted) => {}
        Ok(()) => return Err(apiary_common_internal("Q18 finished before it was cancelled; lower the delay")),
        Err(e) => return Err(e),
    }
    Ok((returned.saturating_duration_since(cancelled).as_secs_f64(), held_before, db.query_memory_bytes()))
}

pub fn run(options: ConcurrencyOptions) -> Result<()> {
    let db = Database::open_in_memory()?;
    let mut conn = db.connect();
    conn.execute(&format!("SET threads = {}", options.threads))?;
    eprintln!("loading TPC-H SF{} in memory...", options.sf);
    tpch::load(&mut conn, options.sf)?;
    let runs = options.runs.max(1);
    time_q6(&mut conn, 2)?;
    let alone = median(time_q6(&mut conn, runs)?);
    let line = |name: &str, seconds: f64| {
        println!(
            "{{\"measure\":\"{name}\",\"sf\":{},\"threads\":{},\"q6_median_s\":{seconds:.6},\"ratio_to_alone\":{:.3}}}",
            options.sf,
            options.threads,
            seconds / alone
        );
    };
    line("q6_alone", alone);
    let fifo = q6_under_load(&db, "fifo", 5, 5, runs)?;
    line("q6_fifo", fifo);
    let fair = q6_under_load(&db, "fair", 5, 5, runs)?;
    line("q6_fair_share", fair);
    let priority = q6_under_load(&db, "fair", 10, 1, runs)?;
    line("q6_priority_10_vs_1", priority);
    let mut cancels = Vec::new();
    for _ in 0..runs {
        let (seconds, held, after) = cancel_q18(&db, Duration::from_millis(100))?;
        println!(
            "{{\"measure\":\"q18_cancel\",\"sf\":{},\"threads\":{},\"cancel_to_return_s\":{seconds:.6},\"memory_held_before\":{held},\"memory_held_after\":{after}}}",
            options.sf, options.threads
        );
        cancels.push(seconds);
    }
    eprintln!(
        "Q6 alone {:.1} ms; under load: FIFO {:.2}x, fair share {:.2}x, priority 10 vs 1 {:.2}x; Q18 cancel: median {:.1} ms to return",
        alone * 1e3,
        fifo / alone,
        fair / alone,
        priority / alone,
        median(cancels) * 1e3
    );
    Ok(())
}
