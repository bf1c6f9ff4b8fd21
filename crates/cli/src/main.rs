//! `apiary`: the command-line shell, the TPC-H demo and the benchmark driver.
//!
//! ```text
//! apiary [DBPATH] [-c SQL] [-f FILE] [--format table|csv|json] [--timer]
//! apiary demo [--sf 0.1]                  generate TPC-H in memory, run the 22 queries
//! apiary tpch-gen --sf 0.1 --dir DIR      write TPC-H .tbl files
//! apiary bench tpch --sf 1 --threads 2 --runs 5 [--data DIR] [--queries 1,6]
//! apiary bench fuzz --seed 1 --queries 100000 [--emit workload.jsonl]
//! apiary bench replay workload.jsonl      run an emitted workload, JSON line per query
//! ```

mod bandwidth_bench;
mod bench;
mod concurrency_bench;
mod concurrent_bench;
mod format;
mod fuzz;
mod progress;
mod shell;
mod split;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use apiary::{Connection, Database};
use clap::{Parser, Subcommand};

use crate::format::{render_into, Format};

/// mimalloc keeps freed memory for reuse; the system allocator returns large blocks to the
/// kernel and pays page faults to get them back on the next query.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` and `mi_option_arena_eager_commit` in mimalloc's `mi_option_e`
/// (libmimalloc-sys has no constants for them).
const MIMALLOC_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
const MIMALLOC_ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;

#[derive(Parser)]
#[command(name = "apiary", version, about = "Apiary: an analytical SQL database", args_conflicts_with_subcommands = true)]
struct Cli {
    /// Database file to open (in memory when omitted).
    dbpath: Option<PathBuf>,
    /// Run these SQL statements and exit.
    #[arg(short = 'c', long = "command")]
    command: Vec<String>,
    /// Run the SQL statements in this file and exit.
    #[arg(short = 'f', long = "file")]
    file: Vec<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Report each statement's elapsed time on standard error.
    #[arg(long)]
    timer: bool,
    /// Generate the TPC-H tables at this scale factor before running anything.
    #[arg(long, value_name = "SF")]
    tpch: Option<f64>,
    #[command(subcommand)]
    subcommand: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the database to PostgreSQL clients (psql, JDBC, psycopg, ...):
    /// `apiary serve [DBPATH] --port 5432`, then `psql -h 127.0.0.1 -p 5432`.
    Serve(Box<ServeArgs>),
    /// Generate TPC-H data in memory and run the 22 queries, checking the answers.
    Demo {
        #[arg(long, default_value_t = 0.1)]
        sf: f64,
        #[arg(long)]
        threads: Option<usize>,
    },
    /// Benchmarks: `apiary bench tpch --sf 1 --threads 2 --runs 5`.
    Bench {
        #[command(subcommand)]
        suite: BenchSuite,
    },
    /// Write TPC-H `.tbl` files (dbgen format) into a directory.
    TpchGen {
        #[arg(long, default_value_t = 0.1)]
        sf: f64,
        #[arg(long)]
        dir: PathBuf,
    },
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Database file to serve (in memory when omitted).
    dbpath: Option<PathBuf>,
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    #[arg(long, default_value_t = 5432)]
    port: u16,
    /// Users file: one `name:password` or `name:SCRAM-SHA-256$...` per line.
    #[arg(long, value_name = "FILE")]
    users: Option<PathBuf>,
    /// Password of the one user --user (SCRAM-SHA-256); without --users or --password
    /// only loopback connections are accepted.
    #[arg(long, conflicts_with = "users")]
    password: Option<String>,
    /// The user --password is for.
    #[arg(long, default_value = "apiary")]
    user: String,
    /// PEM certificate chain for TLS (with --tls-key).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Refuse connections without TLS.
    #[arg(long, requires = "tls_cert")]
    require_tls: bool,
    #[arg(long, default_value_t = 100)]
    max_connections: usize,
    /// Longest message a client may send, in bytes.
    #[arg(long, default_value_t = 64 << 20)]
    max_message_size: usize,
    /// Close sessions idle inside a transaction block this long (seconds; 0: never).
    #[arg(long, default_value_t = 600)]
    idle_in_transaction_timeout: u64,
    /// Start-up and authentication must finish within this (seconds).
    #[arg(long, default_value_t = 60)]
    authentication_timeout: u64,
    /// Disconnect a client that accepts no output for this long (seconds).
    #[arg(long, default_value_t = 300)]
    write_timeout: u64,
    /// Worker threads (default: one per core).
    #[arg(long)]
    threads: Option<usize>,
    /// Generate the TPC-H tables at this scale factor before serving.
    #[arg(long, value_name = "SF")]
    tpch: Option<f64>,
}

#[derive(Subcommand)]
enum BenchSuite {
    /// TPC-H: load (generated in-process, or from --data DIR with <table>.tbl or
    /// <table>.parquet), run each query once to warm up and --runs times more, print one
    /// JSON line per query.
    Tpch {
        #[arg(long, default_value_t = 1.0)]
        sf: f64,
        #[arg(long)]
        threads: Option<usize>,
        #[arg(long, default_value_t = 5)]
        runs: usize,
        #[arg(long)]
        data: Option<PathBuf>,
        /// Comma-separated query numbers (default: all 22).
        #[arg(long, value_delimiter = ',')]
        queries: Vec<usize>,
        /// Extra SET statements, e.g. --set "SET staging = off".
        #[arg(long = "set")]
        settings: Vec<String>,
        /// Also run every query under NAME's settings, e.g. --variant "simd_off=SET simd = off"
        /// (repeatable; lines carry "variant":"NAME").
        #[arg(long = "variant", value_parser = bench::parse_variant)]
        variants: Vec<(String, String)>,
        /// Write each query's answer to DIR/qNN.csv (`|`-separated, with a header).
        #[arg(long)]
        results: Option<PathBuf>,
        /// Run against this database file (loading TPC-H into it first if it is empty).
        #[arg(long)]
        db: Option<PathBuf>,
    },
    /// Random schemas and queries checked by the sqlfuzz oracles (TLP, NoREC, optimizer
    /// on/off, every configuration of the matrix); prints one JSON summary line and the
    /// reduced reproduction of each finding (standard error). With --emit, writes the
    /// workload (schemas, data, queries) as JSON lines instead, for other engines.
    Fuzz {
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Oracle cases (each runs under every configuration).
        #[arg(long, default_value_t = 10_000)]
        queries: usize,
        /// Schemas the cases are spread over (default: one per 200 cases).
        #[arg(long)]
        schemas: Option<usize>,
        /// Run every configuration with this many threads.
        #[arg(long)]
        threads: Option<usize>,
        /// Configurations of the matrix to run (default: all), e.g. --configs default,tiny.
        #[arg(long, value_delimiter = ',')]
        configs: Vec<String>,
        /// Feature classes to switch on / off, e.g. --disable full_join,nullif.
        #[arg(long, value_delimiter = ',')]
        enable: Vec<String>,
        #[arg(long, value_delimiter = ',')]
        disable: Vec<String>,
        /// Findings to reduce to a small reproduction.
        #[arg(long, default_value_t = 20)]
        reduce: usize,
        /// Seconds before a query is cancelled (and reported).
        #[arg(long, default_value_t = 30)]
        timeout: u64,
        /// Write the workload to this file (JSON lines) instead of running the oracles.
        #[arg(long)]
        emit: Option<PathBuf>,
        /// Also write the reproductions to this file.
        #[arg(long)]
        findings: Option<PathBuf>,
    },
    /// The scheduler's targets: Q6 alone and while four clients run Q9, Q18, Q21, Q13
    /// (FIFO, fair share, priority 10 vs 1), and how fast a cancelled Q18 returns; one
    /// JSON line per measurement.
    Concurrency {
        #[arg(long, default_value_t = 1.0)]
        sf: f64,
        #[arg(long, default_value_t = 2)]
        threads: usize,
        /// Q6 runs (and Q18 cancels) per measurement.
        #[arg(long, default_value_t = 7)]
        runs: usize,
    },
    /// Work sharing (issue 12): a mix of TPC-H queries run serially and then all at once,
    /// one client each; one JSON line per round with the serial sum, the makespan and
    /// their ratio.
    Concurrent {
        #[arg(long, default_value_t = 1.0)]
        sf: f64,
        #[arg(long, default_value_t = 2)]
        threads: usize,
        /// Concurrent clients; each runs one query of the mix (repeated as needed).
        #[arg(long, default_value_t = 8)]
        clients: usize,
        /// TPC-H query numbers, e.g. 1,3,5,6,9,10,12,14.
        #[arg(long, value_delimiter = ',', default_value = "1,3,5,6,9,10,12,14")]
        mix: Vec<usize>,
        /// Each client draws its own TPC-H substitution parameters.
        #[arg(long)]
        random_params: bool,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Serial-then-concurrent rounds (the summary is their median).
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Print the clients' query texts as JSON and exit.
        #[arg(long)]
        print_queries: bool,
        /// SET statements run on every connection, e.g. --set "SET shared_scans = off"
        #[arg(long = "set", value_name = "SQL")]
        settings: Vec<String>,
        /// Run against this database file (loading TPC-H into it first if it is empty).
        #[arg(long)]
        db: Option<PathBuf>,
        /// Late arrivals: each client starts after a random delay below this many seconds
        /// (the same delays whatever --set says, for the sharing on/off comparison).
        #[arg(long, default_value_t = 0.0)]
        arrival_spread: f64,
    },
    /// Queries per second of N clients, each running random queries of the mix with drawn
    /// TPC-H substitution parameters for a while, against one client (in memory).
    Throughput {
        #[arg(long, default_value_t = 1.0)]
        sf: f64,
        #[arg(long, default_value_t = 2)]
        threads: usize,
        #[arg(long, default_value_t = 32)]
        clients: usize,
        /// TPC-H query numbers to draw from (all 22 by default).
        #[arg(long, value_delimiter = ',', default_value = "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22")]
        mix: Vec<usize>,
        /// How long each of the two runs (one client, then N) lasts.
        #[arg(long, default_value_t = 60.0)]
        seconds: f64,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Print this many drawn texts of each query of the mix as JSON and exit.
        #[arg(long, value_name = "N")]
        print_pool: Option<usize>,
        /// SET statements run on every client's connection, e.g. --set "SET scheduler_policy = 'fifo'".
        #[arg(long = "set", value_name = "SQL")]
        settings: Vec<String>,
    },
    /// Memory bandwidth: sums of one buffer as u64, u32, u16 and u8 lanes and a copy of
    /// it, each thread over its own slice, best of --runs; one JSON line per kernel.
    Bandwidth {
        #[arg(long, default_value_t = 1024)]
        megabytes: usize,
        #[arg(long, default_value_t = 1)]
        threads: usize,
        #[arg(long, default_value_t = 5)]
        runs: usize,
    },
    /// Run a workload written by `bench fuzz --emit` (in memory, one database per schema);
    /// prints one JSON line per query with its rows or its error.
    Replay {
        workload: PathBuf,
        /// Skip queries with a smaller id (resume after a crash).
        #[arg(long, default_value_t = 0)]
        from: u64,
        /// SET statements run on each new database, e.g. --set "SET threads = 1".
        #[arg(long = "set")]
        settings: Vec<String>,
    },
}

/// `apiary serve`.
fn serve(args: ServeArgs) -> ExitCode {
    use std::time::Duration;
    let fail = |message: String| {
        eprintln!("Error: {message}");
        ExitCode::FAILURE
    };
    let users = match (&args.users, &args.password) {
        (Some(path), _) => match apiary_server::Users::from_file(path) {
            Ok(users) => Some(users),
            Err(e) => return fail(e),
        },
        (None, Some(password)) => Some(apiary_server::Users::single(&args.user, password)),
        (None, None) => None,
    };
    let db = match &args.dbpath {
        Some(path) => Database::open(path),
        None => Database::open_in_memory(),
    };
    let db = match db {
        Ok(db) => db,
        Err(e) => return fail(e.to_string()),
    };
    let mut conn = db.connect();
    if let Some(threads) = args.threads {
        if let Err(e) = conn.execute(&format!("SET threads = {threads}")) {
            return fail(e.to_string());
        }
    }
    if let Some(sf) = args.tpch {
        if let Err(e) = apiary::tpch::load(&mut conn, sf) {
            return fail(e.to_string());
        }
    }
    drop(conn);
    let seconds = |s: u64| if s == 0 { None } else { Some(Duration::from_secs(s)) };
    let config = apiary_server::ServerConfig {
        host: args.host,
        port: args.port,
        users,
        tls: args.tls_cert.zip(args.tls_key),
        require_tls: args.require_tls,
        max_connections: args.max_connections,
        max_message_bytes: args.max_message_size,
        idle_in_transaction_timeout: seconds(args.idle_in_transaction_timeout),
        authentication_timeout: Duration::from_secs(args.authentication_timeout.max(1)),
        write_timeout: Duration::from_secs(args.write_timeout.max(1)),
    };
    match apiary_server::serve(db, config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}

/// The exit code of a command that ended with `result`; an error is printed on stderr.
fn exit_code(result: apiary::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    // A file-size limit (ulimit -f) must fail the write that hits it with an error, as a
    // full disk does, instead of killing the process mid-statement.
    // SAFETY: setting a signal's disposition to "ignore" has no preconditions.
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    // Keep freed memory instead of returning it to the kernel after 10 ms (mimalloc's
    // default): loads and queries allocate and free large buffers again and again, and
    // every page returned costs a page fault and zeroing when it is used again (COPY of
    // TPC-H lineitem spent a third of its time zeroing pages).
    // Also commit arena memory as it is used, not all at once: eager commit zeroed a whole
    // new 1 GiB arena (in huge pages) whenever the heap outgrew the last one.
    // SAFETY: setting a mimalloc option has no preconditions.
    unsafe {
        libmimalloc_sys::mi_option_set(MIMALLOC_PURGE_DELAY, -1);
        libmimalloc_sys::mi_option_set(MIMALLOC_ARENA_EAGER_COMMIT, 0);
    }
    let cli = Cli::parse();
    match cli.subcommand {
        Some(Command::Bench { suite: BenchSuite::Tpch { sf, threads, runs, data, queries, settings, variants, results, db } }) => {
            let queries = if queries.is_empty() { (1..=22).collect() } else { queries };
            let options = bench::BenchOptions {
                sf,
                threads,
                runs,
                data: data.as_deref(),
                queries,
                settings,
                variants,
                results: results.as_deref(),
                database: db.as_deref(),
            };
            return match bench::run(options) {
                Ok(true) => ExitCode::SUCCESS,
                Ok(false) => ExitCode::FAILURE,
                Err(e) => {
                    eprintln!("Error: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        Some(Command::Bench {
            suite: BenchSuite::Fuzz { seed, queries, schemas, threads, configs, enable, disable, reduce, timeout, emit, findings },
        }) => {
            let options = fuzz::FuzzOptions {
                seed,
                queries,
                schemas,
                threads,
                configs,
                enable,
                disable,
                reduce,
                timeout_s: timeout,
                emit: emit.as_deref(),
                findings: findings.as_deref(),
            };
            return match fuzz::fuzz(options) {
                Ok(true) => ExitCode::SUCCESS,
                Ok(false) => ExitCode::FAILURE,
                Err(e) => {
                    eprintln!("Error: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        Some(Command::Bench { suite: BenchSuite::Concurrency { sf, threads, runs } }) => {
            return exit_code(concurrency_bench::run(concurrency_bench::ConcurrencyOptions { sf, threads, runs }));
        }
        Some(Command::Bench {
            suite:
                BenchSuite::Concurrent { sf, threads, clients, mix, random_params, seed, rounds, print_queries, settings, db, arrival_spread },
        }) => {
            let options = concurrent_bench::ConcurrentOptions {
                sf,
                threads,
                clients,
                mix,
                random_params,
                seed,
                rounds,
                print_queries,
                settings,
                database: db,
                arrival_spread,
            };
            return exit_code(concurrent_bench::run(options));
        }
        Some(Command::Bench { suite: BenchSuite::Throughput { sf, threads, clients, mix, seconds, seed, print_pool, settings } }) => {
            let options = concurrent_bench::ThroughputOptions { sf, threads, clients, mix, seconds, seed, print_pool, settings };
            return exit_code(concurrent_bench::throughput(options));
        }
        Some(Command::Bench { suite: BenchSuite::Bandwidth { megabytes, threads, runs } }) => {
            return exit_code(bandwidth_bench::run(bandwidth_bench::BandwidthOptions { megabytes, threads, runs }));
        }
        Some(Command::Bench { suite: BenchSuite::Replay { workload, from, settings } }) => {
            return exit_code(fuzz::replay(&workload, from, &settings));
        }
        Some(Command::Serve(args)) => return serve(*args),
        Some(Command::Demo { sf, threads }) => return demo(sf, threads),
        Some(Command::TpchGen { sf, dir }) => return exit_code(apiary::tpch::write_tbl(&dir, sf)),
        None => {}
    }
    let db = match &cli.dbpath {
        Some(path) => Database::open(path),
        None => Database::open_in_memory(),
    };
    let db = match db {
        Ok(db) => db,
        Err(e) => {
            eprintln!("Error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut conn = db.connect();
    // Ctrl-C cancels the running statement. Installed before the TPC-H data is generated,
    // so that a Ctrl-C then stops the program instead of killing it mid-load.
    let interrupt = conn.interrupt_flag();
    let _ = ctrlc::set_handler(move || interrupt.store(true, std::sync::atomic::Ordering::Relaxed));
    if let Some(sf) = cli.tpch {
        if let Err(e) = apiary::tpch::load(&mut conn, sf) {
            eprintln!("Error: {e}");
            return ExitCode::FAILURE;
        }
        if conn.interrupt_flag().load(std::sync::atomic::Ordering::Relaxed) {
            eprintln!("Error: interrupted while loading the TPC-H data");
            return ExitCode::FAILURE;
        }
    }

    let mut ran_something = false;
    for sql in &cli.command {
        ran_something = true;
        if !run_script(&mut conn, sql, cli.format, cli.timer) {
            return ExitCode::FAILURE;
        }
    }
    for path in &cli.file {
        ran_something = true;
        let sql = match std::fs::read_to_string(path) {
            Ok(sql) => sql,
            Err(e) => {
                eprintln!("Error: cannot read \"{}\": {e}", path.display());
                return ExitCode::FAILURE;
            }
        };
        if !run_script(&mut conn, &sql, cli.format, cli.timer) {
            return ExitCode::FAILURE;
        }
    }
    if ran_something {
        return ExitCode::SUCCESS;
    }
    if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        shell::run(&mut conn, cli.format, cli.timer);
        return ExitCode::SUCCESS;
    }
    let mut sql = String::new();
    if let Err(e) = std::io::stdin().read_to_string(&mut sql) {
        eprintln!("Error: cannot read standard input: {e}");
        return ExitCode::FAILURE;
    }
    if run_script(&mut conn, &sql, cli.format, cli.timer) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Runs each statement of `sql` in order, printing results; stops at the first error.
pub fn run_script(conn: &mut Connection, sql: &str, format: Format, timer: bool) -> bool {
    let (pieces, _) = split::split_statements(sql);
    for piece in pieces {
        if !run_one(conn, &piece.positioned(), format, timer) {
            return false;
        }
    }
    true
}

/// Runs one statement; prints its result or the error. Returns success. A statement that
/// runs longer than [`progress::PROGRESS_AFTER`] shows a progress bar on a terminal's stderr; Ctrl-C
/// cancels the statement, or stops printing its result.
pub fn run_one(conn: &mut Connection, sql: &str, format: Format, timer: bool) -> bool {
    let started = Instant::now();
    let progress = progress::ProgressBar::start(conn);
    let outcome = conn.execute(sql);
    drop(progress);
    let elapsed = started.elapsed();
    let interrupted = conn.interrupt_flag();
    let ok = match outcome {
        Ok(results) => {
            let mut stdout = std::io::stdout().lock();
            let mut complete = true;
            for result in &results {
                complete = render_into(result, format, &mut |piece| {
                    !interrupted.load(std::sync::atomic::Ordering::Relaxed) && stdout.write_all(piece.as_bytes()).is_ok()
                });
                if !complete {
                    break;
                }
            }
            let _ = stdout.flush();
            if !complete && interrupted.load(std::sync::atomic::Ordering::Relaxed) {
                eprintln!("\n(output stopped)");
            }
            true
        }
        Err(e) => {
            eprintln!("Error: {e}");
            false
        }
    };
    if timer {
        // Microseconds: file and window benchmarks time queries of a few milliseconds.
        eprintln!("Run Time: {:.6} s", elapsed.as_secs_f64());
    }
    ok
}

fn demo(sf: f64, threads: Option<usize>) -> ExitCode {
    let db = match Database::open_in_memory() {
        Ok(db) => db,
        Err(e) => {
            eprintln!("Error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut conn = db.connect();
    if let Some(threads) = threads {
        if let Err(e) = conn.execute(&format!("SET threads = {threads}")) {
            eprintln!("Error: {e}");
            return ExitCode::FAILURE;
        }
    }
    println!("Generating TPC-H SF{sf} in memory on {} threads...", db.threads());
    let started = Instant::now();
    if let Err(e) = apiary::tpch::load(&mut conn, sf) {
        eprintln!("Error: {e}");
        return ExitCode::FAILURE;
    }
    println!("Generated in {:.2} s", started.elapsed().as_secs_f64());
    let mut total = 0.0;
    let mut failures = 0;
    for q in 1..=22 {
        let sql = apiary::tpch::query(q).unwrap_or_default();
        let started = Instant::now();
        let result = conn.query(sql);
        let seconds = started.elapsed().as_secs_f64();
        total += seconds;
        let status = match (&result, apiary::tpch::answer(sf, q)) {
            (Err(e), _) => {
                failures += 1;
                format!("ERROR {e}")
            }
            (Ok(r), Some(expected)) => match apiary::tpch::check_answer(r, expected) {
                Ok(()) => format!("{} rows, correct", r.row_count()),
                Err(why) => {
                    failures += 1;
                    format!("WRONG: {why}")
                }
            },
            (Ok(r), None) => format!("{} rows (no reference answer at this scale)", r.row_count()),
        };
        println!("Q{q:02} {:>9.3} ms  {status}", seconds * 1e3);
    }
    println!("Total {:.3} s, {failures} failures", total);
    if failures == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
