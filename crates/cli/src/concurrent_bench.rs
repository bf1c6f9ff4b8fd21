//! `apiary bench concurrent`: what N concurrent queries cost against running them one
//! after another (issue 12's measure of work sharing, DataPath §9).
//!
//! ```text
//! apiary bench concurrent --sf 1 --threads 2 --clients 8 --mix 1,3,5,6,9,10,12,14 [--random-params]
//! ```
//!
//! The clients' queries are the mix repeated to `--clients` (so `--mix 1 --clients 8` is
//! eight Q1s); with `--random-params` each draws its own TPC-H substitution parameters
//! (`apiary::tpch_parameters`; the same `--seed` gives the same texts). Each round runs
//! the queries serially on one connection (the serial sum), then all at once, one
//! connection and thread per client, started together (the makespan: first start to
//! last end); admission lets all of them run at once. Prints one JSON line per round and
//! one summary line with the median ratio makespan / serial sum (lower is better: 1.0 is
//! no sharing, 1/clients would be free queries). `--print-queries` prints the texts as a
//! JSON array (for bench/concurrent_compare.py, which runs DuckDB and Hyper the same way).

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Instant;

use apiary::tpch_parameters::{random_query, ParameterRng};
use apiary::{tpch, ApiaryError, Database, Result};

pub struct ConcurrentOptions {
    pub sf: f64,
    pub threads: usize,
    pub clients: usize,
    pub mix: Vec<usize>,
    pub random_params: bool,
    pub seed: u64,
    pub rounds: usize,
    pub print_queries: bool,
    /// SET statements run on every connection (the ablation: `SET shared_scans = off`).
    pub settings: Vec<String>,
    /// A database file to run on (TPC-H is loaded into it first if it has no tables).
    pub database: Option<std::path::PathBuf>,
    /// Late arrivals: each client starts after a random delay below this many seconds
    /// (drawn from the seed and the round, so equal across runs with other settings).
    pub arrival_spread: f64,
}

/// A connection with `settings` run on it.
fn connect(db: &Database, settings: &[String]) -> Result<apiary::Connection> {
    let mut conn = db.connect();
    for statement in settings {
        conn.execute(statement)?;
    }
    Ok(conn)
}

fn check_mix_and_clients(mix: &[usize], clients: usize) -> Result<()> {
    if mix.is_empty() || clients == 0 {
        return Err(ApiaryError::Internal("--mix and --clients must not be empty".into()));
    }
    Ok(())
}

/// Prints (query number, text) pairs as a JSON array (read by the bench/ scripts).
fn print_texts(texts: &[(usize, String)]) {
    let items: Vec<String> = texts.iter().map(|(number, sql)| format!("{{\"query\":{number},\"sql\":{sql:?}}}")).collect();
    println!("[{}]", items.join(","));
}

/// Waits for every client thread; the first error (or panic) fails the measurement.
fn join_clients<T>(clients: Vec<thread::JoinHandle<Result<T>>>) -> Result<Vec<T>> {
    clients.into_iter().map(|client| client.join().map_err(|_| ApiaryError::Internal("a client panicked".into()))?).collect()
}

/// The clients' query texts.
pub fn client_queries(options: &ConcurrentOptions) -> Result<Vec<(usize, String)>> {
    check_mix_and_clients(&options.mix, options.clients)?;
    let mut rng = ParameterRng::new(options.seed);
    (0..options.clients)
        .map(|client| {
            let number = options.mix[client % options.mix.len()];
            let text = if options.random_params {
                random_query(number, &mut rng)?
            } else {
                tpch::query(number).ok_or_else(|| ApiaryError::Internal(format!("there is no TPC-H query {number}")))?.to_string()
            };
            Ok((number, text))
        })
        .collect()
}

fn json_list(values: &[f64]) -> String {
    let items: Vec<String> = values.iter().map(|v| format!("{v:.6}")).collect();
    format!("[{}]", items.join(","))
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Runs every query on one connection, one after another; their times in seconds.
fn serial(db: &Database, queries: &[(usize, String)], settings: &[String]) -> Result<Vec<f64>> {
    let mut conn = connect(db, settings)?;
    queries
        .iter()
        .map(|(_, sql)| {
            let started = Instant::now();
            conn.query(sql)?;
            Ok(started.elapsed().as_secs_f64())
        })
        .collect()
}

/// Runs all queries at once; (makespan, each query's latency) in seconds.
fn concurrent(db: &Database, queries: &[(usize, String)], settings: &[String], delays: &[f64]) -> Result<(f64, Vec<f64>)> {
    let barrier = Arc::new(Barrier::new(queries.len() + 1));
    let clients: Vec<_> = queries
        .iter()
        .zip(delays)
        .map(|((_, sql), &delay)| -> Result<_> {
            let (mut conn, sql, barrier) = (connect(db, settings)?, sql.clone(), Arc::clone(&barrier));
            Ok(thread::spawn(move || -> Result<(Instant, Instant)> {
                barrier.wait();
                thread::sleep(std::time::Duration::from_secs_f64(delay));
                let started = Instant::now();
                conn.query(&sql)?;
                Ok((started, Instant::now()))
            }))
        })
        .collect::<Result<_>>()?;
    barrier.wait();
    let spans = join_clients(clients)?;
    let first = spans.iter().map(|s| s.0).min().expect("at least one client");
    let last = spans.iter().map(|s| s.1).max().expect("at least one client");
    Ok(((last - first).as_secs_f64(), spans.iter().map(|(start, end)| (*end - *start).as_secs_f64()).collect()))
}

pub fn run(options: ConcurrentOptions) -> Result<()> {
    let queries = client_queries(&options)?;
    if options.print_queries {
        print_texts(&queries);
        return Ok(());
    }
    let db = match &options.database {
        Some(path) => Database::open(path)?,
        None => Database::open_in_memory()?,
    };
    let mut conn = db.connect();
    conn.execute(&format!("SET threads = {}", options.threads))?;
    // Every client runs at once: none waits at admission.
    conn.execute(&format!("SET max_concurrent_queries = {}", options.clients.max(1)))?;
    if conn.query("SHOW TABLES")?.row_count() == 0 {
        eprintln!("loading TPC-H SF{}...", options.sf);
        tpch::load(&mut conn, options.sf)?;
    }
    // Warm up: each text once.
    serial(&db, &queries, &options.settings)?;
    let mix: Vec<String> = options.mix.iter().map(|q| q.to_string()).collect();
    let mut ratios = Vec::new();
    // Blocks read from a database file (`apiary_storage_info().loads`; 0 in memory).
    let loads = |conn: &mut apiary::Connection| -> Result<i64> {
        match conn.query("SELECT sum(loads)::BIGINT FROM apiary_storage_info()")?.value(0, 0) {
            Some(apiary::ScalarValue::Int64(loads)) => Ok(loads),
            _ => Ok(0),
        }
    };
    for round in 0..options.rounds.max(1) {
        let before = loads(&mut conn)?;
        let serial_times = serial(&db, &queries, &options.settings)?;
        let serial_loads = loads(&mut conn)? - before;
        let serial_sum: f64 = serial_times.iter().sum();
        let mut rng = ParameterRng::new(options.seed.wrapping_mul(1_000_003).wrapping_add(round as u64));
        let delays: Vec<f64> = queries.iter().map(|_| options.arrival_spread * rng.below(1_000_000) as f64 / 1_000_000.0).collect();
        let before = loads(&mut conn)?;
        let (makespan, latencies) = concurrent(&db, &queries, &options.settings, &delays)?;
        let concurrent_loads = loads(&mut conn)? - before;
        let ratio = makespan / serial_sum;
        ratios.push(ratio);
        let mean_latency = latencies.iter().sum::<f64>() / latencies.len() as f64;
        println!(
            "{{\"measure\":\"concurrent\",\"engine\":\"apiary\",\"round\":{round},\"sf\":{},\"threads\":{},\"clients\":{},\"mix\":\"{}\",\"random_params\":{},\"arrival_spread_s\":{},\"serial_sum_s\":{serial_sum:.6},\"makespan_s\":{makespan:.6},\"ratio\":{ratio:.3},\"mean_latency_s\":{mean_latency:.6},\"serial_loads\":{serial_loads},\"concurrent_loads\":{concurrent_loads},\"serial_s\":{},\"arrival_delay_s\":{},\"concurrent_latency_s\":{}}}",
            options.sf,
            options.threads,
            options.clients,
            mix.join(","),
            options.random_params,
            options.arrival_spread,
            json_list(&serial_times),
            json_list(&delays),
            json_list(&latencies)
        );
    }
    eprintln!(
        "{} clients, mix {}{}: makespan / serial sum, median of {} rounds: {:.2}",
        options.clients,
        mix.join(","),
        if options.random_params { ", random parameters" } else { "" },
        ratios.len(),
        median(ratios)
    );
    Ok(())
}

/// `apiary bench throughput`: queries per second of `clients` connections, each running
/// queries of the mix (chosen at random, with drawn substitution parameters) one after
/// another for `seconds`, against one client doing the same (issue 12's 32-client
/// target).
pub struct ThroughputOptions {
    pub sf: f64,
    pub threads: usize,
    pub clients: usize,
    pub mix: Vec<usize>,
    pub seconds: f64,
    pub seed: u64,
    /// Print this many drawn texts of each query of the mix as JSON and exit (the pool
    /// bench/throughput_compare.py draws from for DuckDB and Hyper).
    pub print_pool: Option<usize>,
    /// SET statements run on every client's connection (ablations).
    pub settings: Vec<String>,
}

/// Queries completed by `clients` connections in `seconds`, and the span they took (the
/// last query started before the deadline is run to its end and counted).
fn closed_loop(db: &Database, options: &ThroughputOptions, clients: usize) -> Result<(usize, f64)> {
    let barrier = Arc::new(Barrier::new(clients + 1));
    let started = Instant::now();
    let workers: Vec<_> = (0..clients)
        .map(|client| {
            let (mut conn, barrier, mix) = (db.connect(), Arc::clone(&barrier), options.mix.clone());
            let settings = options.settings.clone();
            let mut rng = ParameterRng::new(options.seed.wrapping_mul(1000).wrapping_add(client as u64));
            let seconds = options.seconds;
            thread::spawn(move || -> Result<usize> {
                for statement in &settings {
                    conn.execute(statement)?;
                }
                barrier.wait();
                let begin = Instant::now();
                let mut done = 0;
                while begin.elapsed().as_secs_f64() < seconds {
                    let number = mix[rng.below(mix.len())];
                    conn.query(&random_query(number, &mut rng)?)?;
                    done += 1;
                }
                Ok(done)
            })
        })
        .collect();
    barrier.wait();
    let total = join_clients(workers)?.into_iter().sum();
    Ok((total, started.elapsed().as_secs_f64()))
}

pub fn throughput(options: ThroughputOptions) -> Result<()> {
    check_mix_and_clients(&options.mix, options.clients)?;
    if let Some(per_query) = options.print_pool {
        let mut rng = ParameterRng::new(options.seed);
        let mut texts = Vec::new();
        for &number in &options.mix {
            for _ in 0..per_query {
                texts.push((number, random_query(number, &mut rng)?));
            }
        }
        print_texts(&texts);
        return Ok(());
    }
    let db = Database::open_in_memory()?;
    let mut conn = db.connect();
    conn.execute(&format!("SET threads = {}", options.threads))?;
    conn.execute(&format!("SET max_concurrent_queries = {}", options.clients))?;
    for statement in &options.settings {
        conn.execute(statement)?;
    }
    eprintln!("loading TPC-H SF{} in memory...", options.sf);
    tpch::load(&mut conn, options.sf)?;
    let mix: Vec<String> = options.mix.iter().map(|q| q.to_string()).collect();
    let mut rates = Vec::new();
    for clients in [1, options.clients] {
        let (queries, span) = closed_loop(&db, &options, clients)?;
        let rate = queries as f64 / span;
        rates.push(rate);
        println!(
            "{{\"measure\":\"throughput\",\"engine\":\"apiary\",\"sf\":{},\"threads\":{},\"clients\":{clients},\"mix\":\"{}\",\"seconds\":{span:.3},\"queries\":{queries},\"queries_per_s\":{rate:.3}}}",
            options.sf,
            options.threads,
            mix.join(",")
        );
    }
    eprintln!("{} clients: {:.2} queries/s, {:.2}x one client ({:.2} queries/s)", options.clients, rates[1], rates[1] / rates[0], rates[0]);
    Ok(())
}
