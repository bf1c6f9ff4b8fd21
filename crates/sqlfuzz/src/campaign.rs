//! A fuzzing campaign: schemas from a seed, oracle cases per schema, each case checked under
//! every configuration of the matrix, plus the configuration oracle (a random query's rows
//! under each configuration against the first configuration's). Findings are reduced to a
//! small SQL reproduction and reported; everything else is counted.
//!
//! ```text
//! seed ─┬─ schema s ── cases (same for every configuration)
//!       │        └─ for each configuration: Target::open ─▶ case.check ─▶ Verdict ─▶ Summary
//!       └─ ...                                                    └─ Finding ─▶ reduce ─▶ Report
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use crate::generator::{Features, Generator};
use crate::oracle::{judge, Case, Finding, Oracle, Verdict, OPTIMIZER_RULES_OFF, ORACLES};
use crate::reduce::{reduce, Checker};
use crate::rng::Rng;
use crate::schema::Schema;
use crate::target::{Config, Outcome, Storage, Target};

/// Findings of one signature (oracle and kind; for errors, the message) reduced at most;
/// later ones are reported as found.
const REDUCTIONS_PER_SIGNATURE: usize = 4;

#[derive(Debug, Clone)]
pub struct Options {
    pub seed: u64,
    pub schemas: usize,
    pub cases_per_schema: usize,
    pub configs: Vec<Config>,
    pub features: Features,
    /// A query running longer is cancelled and reported.
    pub timeout: Duration,
    /// How many findings are reduced (the rest are reported as found).
    pub reduce_limit: usize,
    /// Variants tried while reducing one finding.
    pub reduce_attempts: usize,
    /// Stop after this many findings.
    pub max_findings: usize,
}

impl Options {
    pub fn new(seed: u64, schemas: usize, cases_per_schema: usize) -> Options {
        Options {
            seed,
            schemas,
            cases_per_schema,
            configs: Config::matrix(),
            features: Features::default(),
            timeout: Duration::from_secs(20),
            reduce_limit: 10,
            reduce_attempts: 3000,
            max_findings: usize::MAX,
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct OracleStats {
    pub checks: usize,
    pub passed: usize,
    pub both_failed: usize,
    pub one_sided_runtime: usize,
    pub not_implemented: usize,
    pub findings: usize,
}

/// A finding and its reproduction.
#[derive(Debug, Clone)]
pub struct Report {
    pub finding: Finding,
    pub config: String,
    /// A self-contained SQL script: settings, tables, the two queries.
    pub reproduction: String,
    pub reduced: bool,
}

#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub stats: BTreeMap<Oracle, OracleStats>,
    /// SQL queries run (both sides of every check).
    pub queries: usize,
    /// Error messages (digits removed) and how often they came.
    pub not_implemented: BTreeMap<String, usize>,
    pub both_failed: BTreeMap<String, usize>,
    pub one_sided_runtime: BTreeMap<String, usize>,
    /// The first query of the first check that gave each message above.
    pub examples: BTreeMap<String, String>,
    /// Configurations whose setup failed (the tables could not be created or loaded).
    pub setup_errors: Vec<String>,
    pub reports: Vec<Report>,
}

fn key(message: &str) -> String {
    let mut text: String = message.chars().map(|c| if c.is_ascii_digit() { '#' } else { c }).collect();
    text.truncate(160);
    text
}

impl Summary {
    fn record(&mut self, oracle: Oracle, verdict: &Verdict, sql: &str) {
        let stats = self.stats.entry(oracle).or_default();
        stats.checks += 1;
        let (map, message) = match verdict {
            Verdict::Pass => {
                stats.passed += 1;
                return;
            }
            Verdict::Finding(_) => {
                stats.findings += 1;
                return;
            }
            Verdict::BothFailed(m) => {
                stats.both_failed += 1;
                (&mut self.both_failed, m)
            }
            Verdict::OneSidedRuntimeError(m) => {
                stats.one_sided_runtime += 1;
                (&mut self.one_sided_runtime, m)
            }
            Verdict::NotImplemented(m) => {
                stats.not_implemented += 1;
                (&mut self.not_implemented, m)
            }
        };
        let key = key(message);
        *map.entry(key.clone()).or_default() += 1;
        self.examples.entry(key).or_insert_with(|| sql.to_string());
    }

    pub fn total(&self) -> OracleStats {
        let mut total = OracleStats::default();
        for s in self.stats.values() {
            total.checks += s.checks;
            total.passed += s.passed;
            total.both_failed += s.both_failed;
            total.one_sided_runtime += s.one_sided_runtime;
            total.not_implemented += s.not_implemented;
            total.findings += s.findings;
        }
        total
    }

    /// One JSON object (no newline).
    pub fn json(&self, options: &Options, seconds: f64) -> String {
        let total = self.total();
        let stats = |s: &OracleStats| {
            format!(
                "{{\"checks\":{},\"passed\":{},\"findings\":{},\"not_implemented\":{},\"both_failed\":{},\"one_sided_runtime_errors\":{}}}",
                s.checks, s.passed, s.findings, s.not_implemented, s.both_failed, s.one_sided_runtime
            )
        };
        let oracles: Vec<String> =
            ORACLES.iter().filter_map(|o| self.stats.get(o).map(|s| format!("{}:{}", json_string(o.name()), stats(s)))).collect();
        let top = |map: &BTreeMap<String, usize>| {
            let mut entries: Vec<(&String, &usize)> = map.iter().collect();
            entries.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            let items: Vec<String> = entries.iter().take(12).map(|(m, n)| format!("{}:{n}", json_string(m))).collect();
            format!("{{{}}}", items.join(","))
        };
        let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
        for report in &self.reports {
            *kinds.entry(format!("{} {}", report.finding.oracle.name(), report.finding.kind.name())).or_default() += 1;
        }
        let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{}:{n}", json_string(k))).collect();
        format!(
            "{{\"seed\":{},\"schemas\":{},\"cases_per_schema\":{},\"configs\":[{}],\"features_off\":[{}],\"queries\":{},\"checks\":{},\"passed\":{},\"findings\":{},\"not_implemented\":{},\"both_failed\":{},\"one_sided_runtime_errors\":{},\"setup_errors\":{},\"seconds\":{seconds:.2},\"oracles\":{{{}}},\"finding_kinds\":{{{}}},\"not_implemented_messages\":{},\"both_failed_messages\":{},\"one_sided_runtime_messages\":{}}}",
            options.seed,
            options.schemas,
            options.cases_per_schema,
            options.configs.iter().map(|c| json_string(&c.name)).collect::<Vec<_>>().join(","),
            options.features.disabled().iter().map(|f| json_string(f)).collect::<Vec<_>>().join(","),
            self.queries,
            total.checks,
            total.passed,
            total.findings,
            total.not_implemented,
            total.both_failed,
            total.one_sided_runtime,
            self.setup_errors.len(),
            oracles.join(","),
            kinds.join(","),
            top(&self.not_implemented),
            top(&self.both_failed),
            top(&self.one_sided_runtime),
        )
    }

    /// A short human-readable table.
    pub fn text(&self) -> String {
        let mut out = format!(
            "{:<15} {:>7} {:>7} {:>8} {:>8} {:>8} {:>8}\n",
            "oracle", "checks", "passed", "findings", "not-impl", "both-err", "1-sided"
        );
        let mut line = |name: &str, s: &OracleStats| {
            out.push_str(&format!(
                "{:<15} {:>7} {:>7} {:>8} {:>8} {:>8} {:>8}\n",
                name, s.checks, s.passed, s.findings, s.not_implemented, s.both_failed, s.one_sided_runtime
            ))
        };
        for (oracle, stats) in &self.stats {
            line(oracle.name(), stats);
        }
        line("total", &self.total());
        for (title, map) in [
            ("not implemented", &self.not_implemented),
            ("both failed", &self.both_failed),
            ("one-sided runtime errors", &self.one_sided_runtime),
        ] {
            if map.is_empty() {
                continue;
            }
            out.push_str(&format!("{title}:\n"));
            let mut entries: Vec<(&String, &usize)> = map.iter().collect();
            entries.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            for (message, count) in entries.iter().take(10) {
                out.push_str(&format!("  {count:>5}  {message}\n"));
                if title == "both failed" {
                    if let Some(example) = self.examples.get(*message) {
                        out.push_str(&format!("         e.g. {example}\n"));
                    }
                }
            }
        }
        for error in &self.setup_errors {
            out.push_str(&format!("setup failed: {error}\n"));
        }
        out
    }
}

pub fn json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The schema and cases of schema number `index` of a seed.
pub fn schema_and_cases(seed: u64, index: usize, cases: usize, features: &Features) -> (Schema, Vec<Case>) {
    let root = Rng::new(seed);
    let schema = Schema::random(&mut root.fork(2 * index as u64), features);
    let mut generator = Generator::new(root.fork(2 * index as u64 + 1), &schema, features);
    let cases = (0..cases).map(|_| Case::generate(&mut generator)).collect();
    (schema, cases)
}

/// Runs a campaign; `on_report` sees each finding as it is reported.
pub fn run(options: &Options, on_report: &mut dyn FnMut(&Report)) -> Summary {
    let mut summary = Summary::default();
    let mut reduced_signatures: Vec<String> = Vec::new();
    for schema_index in 0..options.schemas {
        let (schema, cases) = schema_and_cases(options.seed, schema_index, options.cases_per_schema, &options.features);
        // The first configuration's rows of each optimizer case, for the configuration oracle.
        let mut reference: Vec<Option<(usize, Outcome)>> = vec![None; cases.len()];
        // A case that failed under one configuration is counted, not reported again.
        let mut reported = vec![false; cases.len()];
        for (config_index, config) in options.configs.iter().enumerate() {
            let mut target = match Target::open(config, &schema, options.timeout) {
                Ok(target) => target,
                Err(e) => {
                    let mut message = e;
                    if message.len() > 400 {
                        let cut = (0..=400).rev().find(|i| message.is_char_boundary(*i)).unwrap_or(0);
                        message = format!("{} ... {}", &message[..cut], message.rsplit(": ").next().unwrap_or_default());
                    }
                    summary
                        .setup_errors
                        .push(format!("seed {} schema {schema_index}, configuration {}: {message}", options.seed, config.name));
                    continue;
                }
            };
            for (case_index, case) in cases.iter().enumerate() {
                let (verdict, first) = case.run(&mut target);
                summary.queries += 2;
                summary.record(case.oracle(), &verdict, &case.queries()[0]);
                let mut found: Vec<(Finding, Option<usize>)> = Vec::new();
                if let Verdict::Finding(finding) = verdict {
                    found.push((finding, None));
                }
                if let (Case::Optimizer { query }, Outcome::Rows(rows)) = (case, first) {
                    match &reference[case_index] {
                        None => reference[case_index] = Some((config_index, Outcome::Rows(rows))),
                        Some((reference_config, expected)) => {
                            let sql = query.sql();
                            let ordered = query.limit.is_none() && query.is_totally_ordered();
                            let verdict = judge(Oracle::Configuration, [sql.clone(), sql], expected, &Outcome::Rows(rows), ordered);
                            summary.record(Oracle::Configuration, &verdict, &query.sql());
                            if let Verdict::Finding(finding) = verdict {
                                found.push((finding, Some(*reference_config)));
                            }
                        }
                    }
                }
                for (finding, reference_config) in found {
                    if std::mem::replace(&mut reported[case_index], true) {
                        continue;
                    }
                    let reference_config = reference_config.and_then(|i| options.configs.get(i));
                    let signature = finding.signature();
                    let same = reduced_signatures.iter().filter(|s| **s == signature).count();
                    let report = if reduced_signatures.len() < options.reduce_limit && same < REDUCTIONS_PER_SIGNATURE {
                        reduced_signatures.push(signature);
                        reduce_and_report(options, case, &schema, finding, config, reference_config)
                    } else {
                        let reproduction = reproduction(&finding, case, &schema, config, reference_config);
                        Report { finding, config: config.name.clone(), reproduction, reduced: false }
                    };
                    on_report(&report);
                    summary.reports.push(report);
                    if summary.reports.len() >= options.max_findings {
                        return summary;
                    }
                }
            }
        }
    }
    summary
}

/// Checks a case under one configuration, keeping a loaded database while the data stays.
struct SingleChecker {
    config: Config,
    timeout: Duration,
    loaded: Option<(Schema, Target)>,
}

impl Checker for SingleChecker {
    fn check(&mut self, case: &Case, schema: &Schema) -> Option<Finding> {
        if self.loaded.as_ref().is_none_or(|(s, _)| s != schema) {
            self.loaded = None;
            self.loaded = Some((schema.clone(), Target::open(&self.config, schema, self.timeout).ok()?));
        }
        let (_, target) = self.loaded.as_mut()?;
        match case.check(target) {
            Verdict::Finding(f) => Some(f),
            _ => None,
        }
    }
}

/// Checks an optimizer case's query under two configurations.
struct PairChecker {
    reference: Config,
    config: Config,
    timeout: Duration,
    loaded: Option<(Schema, Target, Target)>,
}

impl Checker for PairChecker {
    fn check(&mut self, case: &Case, schema: &Schema) -> Option<Finding> {
        let Case::Optimizer { query } = case else { return None };
        if self.loaded.as_ref().is_none_or(|(s, _, _)| s != schema) {
            self.loaded = None;
            let a = Target::open(&self.reference, schema, self.timeout).ok()?;
            let b = Target::open(&self.config, schema, self.timeout).ok()?;
            self.loaded = Some((schema.clone(), a, b));
        }
        let (_, a, b) = self.loaded.as_mut()?;
        let sql = query.sql();
        let (first, second) = (a.run(&sql), b.run(&sql));
        let ordered = query.limit.is_none() && query.is_totally_ordered();
        match judge(Oracle::Configuration, [sql.clone(), sql], &first, &second, ordered) {
            Verdict::Finding(f) => Some(f),
            _ => None,
        }
    }
}

fn reduce_and_report(
    options: &Options,
    case: &Case,
    schema: &Schema,
    finding: Finding,
    config: &Config,
    reference: Option<&Config>,
) -> Report {
    let (case, schema, finding) = match reference {
        Some(reference) => {
            let mut checker = PairChecker { reference: reference.clone(), config: config.clone(), timeout: options.timeout, loaded: None };
            reduce(case.clone(), schema.clone(), finding, &mut checker, options.reduce_attempts)
        }
        None => {
            let mut checker = SingleChecker { config: config.clone(), timeout: options.timeout, loaded: None };
            reduce(case.clone(), schema.clone(), finding, &mut checker, options.reduce_attempts)
        }
    };
    let reproduction = reproduction(&finding, &case, &schema, config, reference);
    Report { finding, config: config.name.clone(), reproduction, reduced: true }
}

/// A self-contained SQL script that shows the finding.
pub fn reproduction(finding: &Finding, case: &Case, schema: &Schema, config: &Config, reference: Option<&Config>) -> String {
    let mut out = format!("-- sqlfuzz: {} oracle, {}, configuration '{}'", finding.oracle.name(), finding.kind.name(), config.name);
    match config.storage {
        Storage::Memory => out.push_str(" (in memory)\n"),
        Storage::File { checkpoint } => out.push_str(&format!(
            " (tables loaded into a database file{}, then reopened)\n",
            if checkpoint { " and checkpointed" } else { "" }
        )),
    }
    out.push_str(&format!("-- {}\n", finding.detail.replace('\n', " ")));
    if let Some(reference) = reference {
        out.push_str(&format!("-- expected: the rows under configuration '{}' ({})\n", reference.name, reference.settings.join("; ")));
    }
    out.push_str(&config.settings_sql());
    let queries = case.queries();
    let text = queries.join("\n");
    for table in &schema.tables {
        if text.contains(&format!("{} AS ", table.name)) {
            for statement in table.setup_sql() {
                out.push_str(&statement);
                out.push_str(";\n");
            }
        }
    }
    match (case, reference) {
        (Case::Optimizer { .. }, Some(_)) => out.push_str(&format!("{};\n", queries[0])),
        (Case::Optimizer { .. }, None) => out.push_str(&format!(
            "{};\nSET disabled_optimizers = '{OPTIMIZER_RULES_OFF}';\n{};\nRESET disabled_optimizers;\n",
            queries[0], queries[1]
        )),
        _ => out.push_str(&format!("{};\n{};\n", queries[0], queries[1])),
    }
    out
}
