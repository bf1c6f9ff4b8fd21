//! `apiary bench tpch`: loads TPC-H, runs queries hot, prints one JSON line per query.
//!
//! ```text
//! {"engine":"apiary","sf":1,"threads":2,"q":1,"median_s":0.05,"min_s":0.049,"rows":4,"correct":true}
//! ```
//! `correct` is `null` when the repository has no reference answer for the scale factor.

use std::path::Path;
use std::time::Instant;

use apiary::{tpch, Connection, Database, Result};

pub struct BenchOptions<'a> {
    pub sf: f64,
    pub threads: Option<usize>,
    pub runs: usize,
    pub data: Option<&'a Path>,
    pub queries: Vec<usize>,
    pub settings: Vec<String>,
}

/// Loads TPC-H from `<table>.tbl` or `<table>.parquet` files in `dir`.
fn load_files(conn: &mut Connection, dir: &Path) -> Result<()> {
    for table in tpch::TABLES {
        conn.execute(&format!("DROP TABLE IF EXISTS {table}"))?;
    }
    conn.execute(tpch::SCHEMA)?;
    for table in tpch::TABLES {
        let tbl = dir.join(format!("{table}.tbl"));
        let parquet = dir.join(format!("{table}.parquet"));
        if tbl.exists() {
            conn.execute(&format!("COPY {table} FROM '{}' (DELIMITER '|')", tbl.display()))?;
        } else {
            conn.execute(&format!("COPY {table} FROM '{}' (FORMAT parquet)", parquet.display()))?;
        }
    }
    Ok(())
}

pub fn run(options: BenchOptions) -> Result<bool> {
    let db = Database::open_in_memory()?;
    let mut conn = db.connect();
    if let Some(threads) = options.threads {
        conn.execute(&format!("SET threads = {threads}"))?;
    }
    for setting in &options.settings {
        conn.execute(setting)?;
    }
    let started = Instant::now();
    match options.data {
        Some(dir) => load_files(&mut conn, dir)?,
        None => tpch::load(&mut conn, options.sf)?,
    }
    eprintln!("loaded TPC-H SF{} in {:.2} s", options.sf, started.elapsed().as_secs_f64());
    let mut all_correct = true;
    for &q in &options.queries {
        let sql = tpch::query(q).ok_or_else(|| apiary::ApiaryError::Bind(format!("no TPC-H query {q}")))?;
        let warm = conn.query(sql)?;
        let correct = tpch::answer(options.sf, q).map(|expected| tpch::check_answer(&warm, expected));
        if let Some(Err(why)) = &correct {
            eprintln!("Q{q}: wrong answer: {why}");
            all_correct = false;
        }
        let mut times = Vec::with_capacity(options.runs);
        for _ in 0..options.runs.max(1) {
            let t = Instant::now();
            conn.query(sql)?;
            times.push(t.elapsed().as_secs_f64());
        }
        times.sort_by(|a, b| a.total_cmp(b));
        let median = times[times.len() / 2];
        let min = times[0];
        let correct_text = match correct {
            None => "null".to_string(),
            Some(r) => r.is_ok().to_string(),
        };
        println!(
            "{{\"engine\":\"apiary\",\"sf\":{},\"threads\":{},\"q\":{q},\"median_s\":{median:.6},\"min_s\":{min:.6},\"rows\":{},\"correct\":{correct_text}}}",
            options.sf,
            db.threads(),
            warm.row_count()
        );
    }
    Ok(all_correct)
}
