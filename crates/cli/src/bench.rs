//! `apiary bench tpch`: loads TPC-H, runs queries hot, prints one JSON line per query.
//!
//! ```text
//! {"engine":"apiary","sf":1,"threads":2,"q":1,"median_s":0.05,"min_s":0.049,"rows":4,"correct":true}
//! ```
//! `correct` is `null` when the repository has no reference answer for the scale factor.
//!
//! With `--variant NAME=SQL` (repeatable) every query also runs under each named set of
//! settings (applied before, reset after), on the same loaded data; those lines carry
//! `"variant":"NAME"` (the plain run is `"default"`). This is how the ablations of
//! docs/performance.md are measured: `--variant "staging_off=SET staging = off"`.
//! `--results DIR` writes each query's answer to `DIR/qNN.csv` (`|`-separated, with a
//! header: the format of tpch/answers), so other engines' answers can be compared where
//! the repository has no reference answers (SF10).

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
    /// Named groups of SET statements every query also runs under.
    pub variants: Vec<(String, String)>,
    pub results: Option<&'a Path>,
    /// A database file to run against (loaded first if it has no tables).
    pub database: Option<&'a Path>,
}

/// Parses `NAME=SQL` for `--variant`.
pub fn parse_variant(text: &str) -> std::result::Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, sql)) if !name.trim().is_empty() && !sql.trim().is_empty() => Ok((name.trim().to_string(), sql.to_string())),
        _ => Err(format!("expected NAME=SQL, e.g. \"simd_off=SET simd = off\", got \"{text}\"")),
    }
}

/// The answer in the format of tpch/answers: a header line, then `|`-separated rows.
fn answer_text(result: &apiary::QueryResult) -> String {
    let mut text = result.columns.join("|");
    text.push('\n');
    for chunk in &result.chunks {
        for row in 0..chunk.row_count() {
            let cells: Vec<String> =
                (0..chunk.column_count()).map(|c| apiary::QueryResult::format_cell(chunk, row, c).unwrap_or_default()).collect();
            text.push_str(&cells.join("|"));
            text.push('\n');
        }
    }
    text
}

/// Runs `sql` `runs` times; returns the median and minimum seconds.
fn time_runs(conn: &mut Connection, sql: &str, runs: usize) -> Result<(f64, f64)> {
    let mut times = Vec::with_capacity(runs.max(1));
    for _ in 0..runs.max(1) {
        let t = Instant::now();
        conn.query(sql)?;
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(|a, b| a.total_cmp(b));
    Ok((times[times.len() / 2], times[0]))
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

/// The benchmark's own settings: `--threads` and `--set`.
fn apply_settings(conn: &mut Connection, options: &BenchOptions) -> Result<()> {
    if let Some(threads) = options.threads {
        conn.execute(&format!("SET threads = {threads}"))?;
    }
    for setting in &options.settings {
        conn.execute(setting)?;
    }
    Ok(())
}

pub fn run(options: BenchOptions) -> Result<bool> {
    let db = match options.database {
        Some(path) => Database::open(path)?,
        None => Database::open_in_memory()?,
    };
    let mut conn = db.connect();
    apply_settings(&mut conn, &options)?;
    let started = Instant::now();
    let loaded = options.database.is_some() && conn.query("SHOW TABLES")?.row_count() > 0;
    if loaded {
        eprintln!("using the tables in {}", options.database.map(|p| p.display().to_string()).unwrap_or_default());
    } else {
        match options.data {
            Some(dir) => load_files(&mut conn, dir)?,
            None => tpch::load(&mut conn, options.sf)?,
        }
        eprintln!("loaded TPC-H SF{} in {:.2} s", options.sf, started.elapsed().as_secs_f64());
    }
    if let Some(dir) = options.results {
        std::fs::create_dir_all(dir).map_err(|e| apiary::ApiaryError::Io(format!("cannot create \"{}\": {e}", dir.display())))?;
    }
    let mut all_correct = true;
    for &q in &options.queries {
        let sql = tpch::query(q).ok_or_else(|| apiary::ApiaryError::Bind(format!("no TPC-H query {q}")))?;
        let warm = conn.query(sql)?;
        let correct = tpch::answer(options.sf, q).map(|expected| tpch::check_answer(&warm, expected));
        if let Some(Err(why)) = &correct {
            eprintln!("Q{q}: wrong answer: {why}");
            all_correct = false;
        }
        if let Some(dir) = options.results {
            let path = dir.join(format!("q{q:02}.csv"));
            std::fs::write(&path, answer_text(&warm))
                .map_err(|e| apiary::ApiaryError::Io(format!("cannot write \"{}\": {e}", path.display())))?;
        }
        let (median, min) = time_runs(&mut conn, sql, options.runs)?;
        let correct_text = match correct {
            None => "null".to_string(),
            Some(r) => r.is_ok().to_string(),
        };
        let line = |variant: &str, threads: usize, median: f64, min: f64, rows: usize, correct: &str| {
            let variant = if variant.is_empty() { String::new() } else { format!(",\"variant\":\"{variant}\"") };
            println!(
                "{{\"engine\":\"apiary\",\"sf\":{},\"threads\":{threads},\"q\":{q}{variant},\"median_s\":{median:.6},\"min_s\":{min:.6},\"rows\":{rows},\"correct\":{correct}}}",
                options.sf,
            )
        };
        let default_name = if options.variants.is_empty() { "" } else { "default" };
        line(default_name, db.threads(), median, min, warm.row_count(), &correct_text);
        for (name, settings) in &options.variants {
            conn.execute(settings)?;
            let threads = db.threads();
            let outcome = (|| {
                let warm = conn.query(sql)?;
                let correct = tpch::answer(options.sf, q).map(|expected| tpch::check_answer(&warm, expected));
                if let Some(Err(why)) = &correct {
                    eprintln!("Q{q} ({name}): wrong answer: {why}");
                }
                let (median, min) = time_runs(&mut conn, sql, options.runs)?;
                Ok::<_, apiary::ApiaryError>((median, min, warm.row_count(), correct.map(|c| c.is_ok())))
            })();
            // Back to the benchmark's own settings for the next variant and query.
            conn.execute("RESET ALL")?;
            apply_settings(&mut conn, &options)?;
            let (median, min, rows, correct) = outcome?;
            if correct == Some(false) {
                all_correct = false;
            }
            line(name, threads, median, min, rows, &correct.map_or("null".to_string(), |c| c.to_string()));
        }
    }
    Ok(all_correct)
}
