//! `apiary bench fuzz` and `apiary bench replay`: long runs of the sqlfuzz oracles, and
//! random workloads for other engines.
//!
//! ```text
//! apiary bench fuzz --seed 1 --queries 100000            oracle cases under the matrix;
//!                                                          one JSON summary line on stdout,
//!                                                          reduced reproductions on stderr
//! apiary bench fuzz --seed 1 --queries 20000 --emit w.jsonl
//!                                                          write the workload instead:
//!   {"kind":"schema","schema":0}
//!   {"kind":"setup","schema":0,"sql":"CREATE TABLE t0 (...)"}
//!   {"kind":"query","schema":0,"id":0,"source":"tlp_where","ordered":false,"sql":"SELECT ..."}
//! apiary bench replay w.jsonl [--from ID]                   run it on Apiary, one line per query:
//!   {"id":0,"columns":["c0"],"types":["INTEGER"],"rows":[[1],[null]]}
//!   {"id":1,"error":"...","class":"not_implemented|internal|error"}
//! ```
//! Replay cells: numbers as JSON numbers, except DECIMAL as a string ("1.50") and
//! non-finite floats as strings ("NaN", "Infinity"); dates and timestamps as text;
//! intervals as [months, days, microseconds].

use std::io::{BufRead, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use apiary::{ApiaryError, Database, QueryResult, ScalarValue};
use apiary_sqlfuzz::campaign::{self, json_string};
use apiary_sqlfuzz::target::{classify, ErrorKind};
use apiary_sqlfuzz::workload::workload;
use apiary_sqlfuzz::{Config, Features, Options};

/// Oracle cases per schema when `--schemas` is not given.
const CASES_PER_SCHEMA: usize = 200;

pub struct FuzzOptions<'a> {
    pub seed: u64,
    pub queries: usize,
    pub schemas: Option<usize>,
    pub threads: Option<usize>,
    /// Names of configurations of the matrix (empty: all).
    pub configs: Vec<String>,
    pub enable: Vec<String>,
    pub disable: Vec<String>,
    pub reduce: usize,
    pub timeout_s: u64,
    pub emit: Option<&'a Path>,
    /// Write every finding's reproduction here too.
    pub findings: Option<&'a Path>,
}

fn io_error(path: &Path, e: std::io::Error) -> ApiaryError {
    ApiaryError::Io(format!("\"{}\": {e}", path.display()))
}

/// Runs a campaign (or writes its workload); `Ok(false)` when something was found.
pub fn fuzz(options: FuzzOptions) -> apiary::Result<bool> {
    let mut features = Features::default();
    for (names, on) in [(&options.enable, true), (&options.disable, false)] {
        for name in names {
            features.set(name, on).map_err(ApiaryError::Bind)?;
        }
    }
    let schemas = options.schemas.unwrap_or_else(|| options.queries.div_ceil(CASES_PER_SCHEMA)).max(1);
    let per_schema = options.queries.div_ceil(schemas).max(1);
    if let Some(path) = options.emit {
        emit(path, options.seed, schemas, per_schema, &features)?;
        return Ok(true);
    }
    let mut configs = Config::matrix();
    if !options.configs.is_empty() {
        let known: Vec<String> = configs.iter().map(|c| c.name.clone()).collect();
        for name in &options.configs {
            if !known.contains(name) {
                return Err(ApiaryError::Bind(format!("unknown configuration '{name}' (known: {})", known.join(", "))));
            }
        }
        configs.retain(|c| options.configs.contains(&c.name));
    }
    if let Some(threads) = options.threads {
        for config in &mut configs {
            config.settings.retain(|s| !s.starts_with("SET threads"));
            config.settings.insert(0, format!("SET threads = {threads}"));
        }
    }
    let mut campaign = Options::new(options.seed, schemas, per_schema);
    campaign.configs = configs;
    campaign.features = features;
    campaign.reduce_limit = options.reduce;
    campaign.timeout = Duration::from_secs(options.timeout_s.max(1));
    let mut findings_file = match options.findings {
        Some(path) => Some(std::fs::File::create(path).map_err(|e| io_error(path, e))?),
        None => None,
    };
    let started = Instant::now();
    let summary = campaign::run(&campaign, &mut |report| {
        let text = format!(
            "=== {} oracle: {} ({}) ===\n{}\n",
            report.finding.oracle.name(),
            report.finding.kind.name(),
            if report.reduced { "reduced" } else { "as found" },
            report.reproduction
        );
        eprint!("{text}");
        if let Some(file) = findings_file.as_mut() {
            let _ = file.write_all(text.as_bytes());
        }
    });
    eprint!("{}", summary.text());
    println!("{}", summary.json(&campaign, started.elapsed().as_secs_f64()));
    Ok(summary.reports.is_empty() && summary.setup_errors.is_empty())
}

fn emit(path: &Path, seed: u64, schemas: usize, per_schema: usize, features: &Features) -> apiary::Result<()> {
    let file = std::fs::File::create(path).map_err(|e| io_error(path, e))?;
    let mut out = std::io::BufWriter::new(file);
    let mut id = 0;
    for schema in 0..schemas {
        let workload = workload(seed, schema, per_schema, features);
        let mut lines = vec![format!("{{\"kind\":\"schema\",\"schema\":{schema}}}")];
        for sql in &workload.setup {
            lines.push(format!("{{\"kind\":\"setup\",\"schema\":{schema},\"sql\":{}}}", json_string(sql)));
        }
        for query in &workload.queries {
            lines.push(format!(
                "{{\"kind\":\"query\",\"schema\":{schema},\"id\":{id},\"source\":\"{}\",\"ordered\":{},\"sql\":{}}}",
                query.source,
                query.ordered,
                json_string(&query.sql)
            ));
            id += 1;
        }
        for line in lines {
            writeln!(out, "{line}").map_err(|e| io_error(path, e))?;
        }
    }
    out.flush().map_err(|e| io_error(path, e))?;
    eprintln!("wrote {id} queries over {schemas} schemas to {}", path.display());
    Ok(())
}

/// Runs a workload written by `--emit`, printing one JSON line per query. Queries before
/// `from` are skipped (their schema is still set up), so a run that crashed can resume.
pub fn replay(path: &Path, from: u64, settings: &[String]) -> apiary::Result<()> {
    let file = std::fs::File::open(path).map_err(|e| io_error(path, e))?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut db: Option<Database> = None;
    let mut conn = None;
    for (number, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| io_error(path, e))?;
        if line.trim().is_empty() {
            continue;
        }
        let record: serde_json::Value =
            serde_json::from_str(&line).map_err(|e| ApiaryError::Parse(format!("{}:{}: {e}", path.display(), number + 1)))?;
        let sql = record["sql"].as_str().unwrap_or_default();
        match record["kind"].as_str() {
            Some("schema") => {
                let fresh = Database::open_in_memory()?;
                let mut c = fresh.connect();
                for setting in settings {
                    c.execute(setting)?;
                }
                conn = Some(c);
                db = Some(fresh);
            }
            Some("setup") => {
                let Some(c) = conn.as_mut() else { continue };
                if let Err(e) = c.execute(sql) {
                    eprintln!("setup failed: {e}: {sql}");
                }
            }
            Some("query") => {
                let id = record["id"].as_u64().unwrap_or_default();
                if id < from {
                    continue;
                }
                let Some(c) = conn.as_mut() else { continue };
                let line = match c.query(sql) {
                    Ok(result) => result_line(id, &result),
                    Err(e) => {
                        let class = match classify(&e) {
                            ErrorKind::NotImplemented => "not_implemented",
                            ErrorKind::Internal => "internal",
                            ErrorKind::Timeout => "timeout",
                            ErrorKind::Runtime | ErrorKind::Rejected => "error",
                        };
                        format!("{{\"id\":{id},\"error\":{},\"class\":\"{class}\"}}", json_string(&e.to_string()))
                    }
                };
                writeln!(out, "{line}").map_err(|e| ApiaryError::Io(e.to_string()))?;
                // A crash must not lose the lines before it.
                out.flush().map_err(|e| ApiaryError::Io(e.to_string()))?;
            }
            _ => {}
        }
    }
    drop(conn);
    drop(db);
    Ok(())
}

fn result_line(id: u64, result: &QueryResult) -> String {
    let columns: Vec<String> = result.columns.iter().map(|c| json_string(c)).collect();
    let types: Vec<String> = result.types.iter().map(|t| json_string(&t.to_string())).collect();
    let rows: Vec<String> = result.rows().map(|row| format!("[{}]", row.iter().map(cell_json).collect::<Vec<_>>().join(","))).collect();
    format!("{{\"id\":{id},\"columns\":[{}],\"types\":[{}],\"rows\":[{}]}}", columns.join(","), types.join(","), rows.join(","))
}

fn float_json(value: f64) -> String {
    if value.is_finite() {
        format!("{value:?}")
    } else if value.is_nan() {
        "\"NaN\"".to_string()
    } else if value > 0.0 {
        "\"Infinity\"".to_string()
    } else {
        "\"-Infinity\"".to_string()
    }
}

fn cell_json(value: &ScalarValue) -> String {
    match value {
        ScalarValue::Null => "null".to_string(),
        ScalarValue::Boolean(b) => b.to_string(),
        ScalarValue::Int16(v) => v.to_string(),
        ScalarValue::Int32(v) => v.to_string(),
        ScalarValue::Int64(v) => v.to_string(),
        ScalarValue::Float32(v) => float_json(*v as f64),
        ScalarValue::Float64(v) => float_json(*v),
        ScalarValue::Interval(i) => format!("[{},{},{}]", i.months, i.days, i.micros),
        other => json_string(&other.to_string()),
    }
}
