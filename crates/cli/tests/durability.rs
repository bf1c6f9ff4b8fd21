//! Durability of database files, end to end through the `apiary` program: processes killed
//! with SIGKILL at random moments during COPY, INSERT ... SELECT, CHECKPOINT, CREATE TABLE
//! AS and DROP, and during transaction blocks (BEGIN ... COMMIT / ROLLBACK with UPDATE,
//! DELETE, upserts and MERGE); a full disk (simulated with a file-size limit) during COPY
//! and CHECKPOINT; and the one-process lock.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

fn apiary() -> Command {
    Command::new(env!("CARGO_BIN_EXE_apiary"))
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).to_string()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).to_string()
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("apiary-durability-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("UTF-8 path")
}

/// Runs `sql` on the database file `db` (CSV output) and returns standard output; the run
/// must succeed.
fn run_ok(db: &Path, sql: &str) -> String {
    let out = apiary().args([path_str(db), "--format", "csv", "-c", sql]).output().expect("run apiary");
    assert!(out.status.success(), "`{sql}` failed ({}): {}", out.status, stderr(&out));
    stdout(&out)
}

/// Sizes of the database file and its write-ahead log.
fn file_sizes(db: &Path) -> (u64, u64) {
    let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    (size(db), size(&wal_path(db)))
}

fn wal_path(db: &Path) -> PathBuf {
    let mut wal = db.as_os_str().to_owned();
    wal.push(".wal");
    PathBuf::from(wal)
}

/// Reads a child's standard output (or error) to the end on a thread.
fn read_all<R: Read + Send + 'static>(mut from: R) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = from.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).to_string()
    })
}

/// Splits CSV output of several queries into sections keyed by their header line (the
/// queries give their columns distinct names). A header seen twice keeps both sections'
/// rows, in order.
fn sections(output: &str, headers: &[&str]) -> BTreeMap<String, Vec<Vec<String>>> {
    let mut result: BTreeMap<String, Vec<Vec<String>>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in output.lines() {
        if headers.contains(&line) {
            current = Some(line.to_string());
            result.entry(line.to_string()).or_default();
            continue;
        }
        let header = current.as_ref().unwrap_or_else(|| panic!("output before any header: {output}"));
        // No value in these tests contains a comma or a quote.
        result.get_mut(header).expect("section").push(line.split(',').map(str::to_string).collect());
    }
    result
}

fn int(cell: &str) -> i64 {
    if cell.is_empty() {
        return 0; // sum() of no rows is NULL
    }
    cell.parse().unwrap_or_else(|_| panic!("not an integer: {cell:?}"))
}

/// A 64-bit linear congruential generator (Knuth's MMIX constants).
struct Lcg(u64);

impl Lcg {
    fn new(seed: u64) -> Lcg {
        let mut lcg = Lcg(seed ^ 0x9E37_79B9_7F4A_7C15);
        lcg.next();
        lcg
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

// ---------------------------------------------------------------------------------------
// 1. SIGKILL at random moments
// ---------------------------------------------------------------------------------------

/// Rows of a "large" statement: more than a block (65,536), so it commits by checkpoint.
const LARGE_ROWS: i64 = 70_000;
/// Rows of a "medium" INSERT ... SELECT: less than a block, so it goes to the log.
const MEDIUM_ROWS: i64 = 1_000;

fn large_row(i: i64) -> (i64, String) {
    (i, format!("large-{:04}", i % 5_000))
}

fn medium_row(i: i64) -> (i64, String) {
    (i * 3, format!("medium-{:02}", i % 100))
}

/// What one batch holds: rows, sum(v), max(s).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Content {
    rows: i64,
    sum: i64,
    max_s: String,
}

fn content_of(rows: impl Iterator<Item = (i64, String)>) -> Content {
    let mut content = Content { rows: 0, sum: 0, max_s: String::new() };
    for (v, s) in rows {
        content.rows += 1;
        content.sum += v;
        content.max_s = content.max_s.max(s);
    }
    content
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    /// COPY of a per-batch CSV file of LARGE_ROWS rows (checkpoint path).
    CopyLarge,
    /// INSERT ... SELECT of LARGE_ROWS rows from read_csv (checkpoint path).
    InsertLarge,
    /// INSERT ... SELECT of MEDIUM_ROWS rows from read_csv (log path).
    InsertMedium,
    /// INSERT ... VALUES of two rows (log path).
    InsertValues,
    Checkpoint,
    /// CREATE TABLE tmp_<b> AS SELECT the rows of batch b (a checkpoint when b is large).
    CreateTmp,
    DropTmp,
}

#[derive(Clone, Debug)]
enum Effect {
    Batch(u64, Content),
    None,
    CreateTmp(u64),
    DropTmp(u64),
}

struct Step {
    kind: Kind,
    sql: String,
    effect: Effect,
}

/// What the database must hold: the contents of batches 1..=n and the tmp tables.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Model {
    batches: Vec<Content>,
    tmps: BTreeSet<u64>,
}

impl Model {
    fn apply(&mut self, effect: &Effect) {
        match effect {
            Effect::Batch(b, content) => {
                assert_eq!(*b, self.batches.len() as u64 + 1, "batches are numbered consecutively");
                self.batches.push(content.clone());
            }
            Effect::None => {}
            Effect::CreateTmp(b) => assert!(self.tmps.insert(*b)),
            Effect::DropTmp(b) => assert!(self.tmps.remove(b)),
        }
    }

    /// The observable state: per batch (count, sum), and each table's row count.
    fn observed(&self) -> Observed {
        let batches = self.batches.iter().enumerate().map(|(i, c)| (i as u64 + 1, c.rows, c.sum)).collect();
        let mut tables: BTreeMap<String, i64> =
            self.tmps.iter().map(|&b| (format!("tmp_{b}"), self.batches[b as usize - 1].rows)).collect();
        tables.insert("t".to_string(), self.batches.iter().map(|c| c.rows).sum());
        Observed { batches, tables }
    }

    fn max_s(&self) -> String {
        self.batches.iter().map(|c| c.max_s.clone()).max().unwrap_or_default()
    }
}

#[derive(Debug, PartialEq, Eq)]
struct Observed {
    /// (batch, count(*), sum(v)) in batch order.
    batches: Vec<(u64, i64, i64)>,
    /// Table name -> row count (from apiary_storage_info()).
    tables: BTreeMap<String, i64>,
}

/// Files the statements read.
struct Inputs {
    dir: PathBuf,
    large: PathBuf,
    medium: PathBuf,
    large_content: Content,
    medium_content: Content,
}

impl Inputs {
    fn create(dir: &Path) -> Inputs {
        let large = dir.join("large.csv");
        let medium = dir.join("medium.csv");
        let lines = |rows: &mut dyn Iterator<Item = (i64, String)>| rows.map(|(v, s)| format!("{v},{s}\n")).collect::<String>();
        std::fs::write(&large, lines(&mut (0..LARGE_ROWS).map(large_row))).expect("write large.csv");
        std::fs::write(&medium, lines(&mut (0..MEDIUM_ROWS).map(medium_row))).expect("write medium.csv");
        Inputs {
            dir: dir.to_path_buf(),
            large,
            medium,
            large_content: content_of((0..LARGE_ROWS).map(large_row)),
            medium_content: content_of((0..MEDIUM_ROWS).map(medium_row)),
        }
    }

    /// A CSV file with all three columns for `COPY t FROM` (batch `b`).
    fn copy_file(&self, b: u64) -> PathBuf {
        let path = self.dir.join(format!("copy-{b}.csv"));
        let text: String = (0..LARGE_ROWS).map(large_row).map(|(v, s)| format!("{b},{v},{s}\n")).collect();
        std::fs::write(&path, text).expect("write copy file");
        path
    }
}

/// A script of `count` random statements continuing `model`.
/// `INSERT ... SELECT` of a CSV file's rows as batch `batch`.
fn insert_select(kind: Kind, batch: u64, file: &Path, content: &Content) -> Step {
    let sql = format!("INSERT INTO t SELECT {batch}, column1, column2 FROM read_csv('{}', header => false)", path_str(file));
    Step { kind, sql, effect: Effect::Batch(batch, content.clone()) }
}

fn make_script(rng: &mut Lcg, model: &Model, inputs: &Inputs, count: usize) -> Vec<Step> {
    let mut model = model.clone();
    let mut steps = Vec::new();
    while steps.len() < count {
        let next_batch = model.batches.len() as u64 + 1;
        let roll = rng.below(100);
        let step = match roll {
            0..=14 => {
                let file = inputs.copy_file(next_batch);
                let sql = format!("COPY t FROM '{}' (HEADER false)", path_str(&file));
                Step { kind: Kind::CopyLarge, sql, effect: Effect::Batch(next_batch, inputs.large_content.clone()) }
            }
            15..=39 => insert_select(Kind::InsertLarge, next_batch, &inputs.large, &inputs.large_content),
            40..=49 => insert_select(Kind::InsertMedium, next_batch, &inputs.medium, &inputs.medium_content),
            50..=69 => Step {
                kind: Kind::InsertValues,
                sql: format!("INSERT INTO t VALUES ({next_batch}, 1, 'small-a'), ({next_batch}, 2, 'small-b')"),
                effect: Effect::Batch(next_batch, content_of([(1, "small-a".to_string()), (2, "small-b".to_string())].into_iter())),
            },
            70..=79 => Step { kind: Kind::Checkpoint, sql: "CHECKPOINT".to_string(), effect: Effect::None },
            80..=89 => {
                let last = model.batches.len() as u64;
                if last == 0 || model.tmps.contains(&last) {
                    continue;
                }
                Step {
                    kind: Kind::CreateTmp,
                    sql: format!("CREATE TABLE tmp_{last} AS SELECT * FROM t WHERE batch = {last}"),
                    effect: Effect::CreateTmp(last),
                }
            }
            _ => {
                let Some(&b) = model.tmps.iter().next() else { continue };
                Step { kind: Kind::DropTmp, sql: format!("DROP TABLE tmp_{b}"), effect: Effect::DropTmp(b) }
            }
        };
        model.apply(&step.effect);
        steps.push(step);
    }
    steps
}

const VERIFY_HEADERS: [&str; 5] =
    ["batch,n,total", "all_rows,all_total,max_s", "table_name,table_rows", "phase_one", "tmp_name,tmp_rows,tmp_total,tmp_min,tmp_max"];

/// What a verifying process read from the database.
struct Verified {
    observed: Observed,
    all_rows: i64,
    all_total: i64,
    max_s: String,
    /// tmp table -> (rows, sum(v), min(batch), max(batch)), read from the tables (only
    /// when the process was closed normally).
    tmp_contents: BTreeMap<String, (i64, i64, i64, i64)>,
}

/// Opens the database in a new process and reads its state. With `kill_after`, the
/// process is killed once it has answered (so it never folds the log into the file and
/// the next process replays it again); otherwise it also reads every tmp table and exits
/// normally.
fn verify(db: &Path, kill_after: bool) -> Verified {
    let phase_one = "SELECT batch, count(*) AS n, sum(v) AS total FROM t GROUP BY batch ORDER BY batch;\n\
                     SELECT count(*) AS all_rows, sum(v) AS all_total, max(s) AS max_s FROM t;\n\
                     SELECT table_name, max(row_count) AS table_rows FROM apiary_storage_info() GROUP BY table_name ORDER BY table_name;\n\
                     SELECT 'done' AS phase_one;";
    // `-f /dev/stdin` runs after `-c` and waits for the end of standard input: the
    // process keeps the database open until we close or kill it.
    let mut child = apiary()
        .args([path_str(db), "--format", "csv", "-c", phase_one, "-f", "/dev/stdin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn verifier");
    let errors = read_all(child.stderr.take().expect("stderr"));
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut text = String::new();
    let mut complete = false;
    for line in lines.by_ref() {
        let line = line.expect("read verifier output");
        text.push_str(&line);
        text.push('\n');
        if text.ends_with("phase_one\ndone\n") {
            complete = true;
            break;
        }
    }
    if !complete {
        let _ = child.kill();
        let status = child.wait().expect("wait");
        panic!("the database cannot be read after a crash ({status}):\n{}\noutput so far:\n{text}", errors.join().unwrap_or_default());
    }
    let parsed = sections(&text, &VERIFY_HEADERS);
    let batches: Vec<(u64, i64, i64)> = parsed["batch,n,total"].iter().map(|r| (int(&r[0]) as u64, int(&r[1]), int(&r[2]))).collect();
    let totals = &parsed["all_rows,all_total,max_s"][0];
    let tables: BTreeMap<String, i64> = parsed["table_name,table_rows"].iter().map(|r| (r[0].clone(), int(&r[1]))).collect();
    let mut tmp_contents = BTreeMap::new();
    if kill_after {
        child.kill().expect("kill verifier");
        child.wait().expect("wait");
    } else {
        let mut script = String::new();
        for name in tables.keys().filter(|n| n.starts_with("tmp_")) {
            script.push_str(&format!(
                "SELECT '{name}' AS tmp_name, count(*) AS tmp_rows, sum(v) AS tmp_total, min(batch) AS tmp_min, max(batch) AS tmp_max FROM {name};\n"
            ));
        }
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(script.as_bytes()).expect("write verifier script");
        drop(stdin);
        let mut rest = String::new();
        for line in lines {
            rest.push_str(&line.expect("read verifier output"));
            rest.push('\n');
        }
        let status = child.wait().expect("wait");
        assert!(status.success(), "verifier failed ({status}): {}", errors.join().unwrap_or_default());
        for row in sections(&rest, &VERIFY_HEADERS).get("tmp_name,tmp_rows,tmp_total,tmp_min,tmp_max").into_iter().flatten() {
            tmp_contents.insert(row[0].clone(), (int(&row[1]), int(&row[2]), int(&row[3]), int(&row[4])));
        }
    }
    Verified {
        observed: Observed { batches, tables },
        all_rows: int(&totals[0]),
        all_total: int(&totals[1]),
        max_s: totals[2].clone(),
        tmp_contents,
    }
}

/// Where a kill landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Landing {
    /// While this kind of statement was running (it had started and was not acknowledged).
    During(Kind),
    /// After the script's last statement (the process may have been exiting).
    AfterScript,
}

#[test]
fn kill_during_copy_and_checkpoint() {
    const ITERATIONS: u64 = 25;
    let started = Instant::now();
    let dir = temp_dir("kill");
    let db = dir.join("db.apiary");
    let inputs = Inputs::create(&dir);
    run_ok(&db, "CREATE TABLE t (batch INTEGER, v INTEGER, s VARCHAR)");
    let mut model = Model::default();
    let mut landings: BTreeMap<Landing, usize> = BTreeMap::new();
    let mut committed_unacknowledged = 0;
    for iteration in 0..ITERATIONS {
        let mut rng = Lcg::new(0xA91A_5EED + iteration);
        // Mostly scripts that run longer than the kill delay; a few short ones end before it
        // (the kill then finds the process exiting, or gone).
        let statements = if rng.below(5) == 0 { 3 + rng.below(8) as usize } else { 40 + rng.below(40) as usize };
        let steps = make_script(&mut rng, &model, &inputs, statements);
        // After each statement a marker query: statement i is acknowledged (returned, so
        // it must be durable) once the process printed "i".
        let script: String = steps.iter().enumerate().map(|(i, step)| format!("{};\nSELECT {i} AS ack;\n", step.sql)).collect();
        let script_path = dir.join("script.sql");
        std::fs::write(&script_path, &script).expect("write script");
        let delay = Duration::from_millis(rng.below(600));

        let mut child = apiary()
            .args([path_str(&db), "--format", "csv", "-f", path_str(&script_path)])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        let out = read_all(child.stdout.take().expect("stdout"));
        let errors = read_all(child.stderr.take().expect("stderr"));
        std::thread::sleep(delay);
        let exited_by_itself = child.try_wait().expect("try_wait").is_some();
        let _ = child.kill();
        let status = child.wait().expect("wait");
        let out = out.join().expect("stdout reader");
        let errors = errors.join().expect("stderr reader");
        assert!(status.code().is_none() || status.success(), "iteration {iteration}: the script failed ({status}): {errors}");

        let acks: Vec<usize> = out.lines().filter(|l| *l != "ack").map(|l| l.parse().expect("ack number")).collect();
        assert_eq!(acks, (0..acks.len()).collect::<Vec<_>>(), "iteration {iteration}: acknowledgements in order");
        let acknowledged = acks.len();
        let landing = match steps.get(acknowledged) {
            Some(step) => Landing::During(step.kind),
            None => Landing::AfterScript,
        };
        assert!(!exited_by_itself || landing == Landing::AfterScript, "a process that exited by itself ran everything");
        *landings.entry(landing).or_default() += 1;

        // The database holds every acknowledged statement and possibly the one in flight
        // (it may have committed just before the kill), and nothing else.
        let mut acknowledged_state = model.clone();
        steps[..acknowledged].iter().for_each(|s| acknowledged_state.apply(&s.effect));
        let mut with_in_flight = acknowledged_state.clone();
        if let Some(step) = steps.get(acknowledged) {
            with_in_flight.apply(&step.effect);
        }
        let kill_verifier = iteration % 2 == 1;
        let verified = verify(&db, kill_verifier);
        let actual = &verified.observed;
        let in_flight_committed = *actual != acknowledged_state.observed();
        model = if !in_flight_committed {
            acknowledged_state
        } else if *actual == with_in_flight.observed() {
            committed_unacknowledged += 1;
            with_in_flight
        } else {
            panic!(
                "iteration {iteration}: after a kill {landing:?} with {acknowledged} of {} statements acknowledged, the database holds\n{actual:?}\n\
                 expected (acknowledged statements)\n{:?}\nor (with the statement in flight)\n{:?}",
                steps.len(),
                acknowledged_state.observed(),
                with_in_flight.observed()
            );
        };
        let expected = model.observed();
        assert_eq!(verified.all_rows, expected.tables["t"], "iteration {iteration}: full scan row count");
        assert_eq!(verified.all_total, expected.batches.iter().map(|b| b.2).sum::<i64>(), "iteration {iteration}: full scan sum");
        assert_eq!(verified.max_s, model.max_s(), "iteration {iteration}: full scan max(s)");
        if !kill_verifier {
            let tmp_contents: BTreeMap<String, (i64, i64, i64, i64)> = model
                .tmps
                .iter()
                .map(|&b| {
                    let c = &model.batches[b as usize - 1];
                    (format!("tmp_{b}"), (c.rows, c.sum, b as i64, b as i64))
                })
                .collect();
            assert_eq!(verified.tmp_contents, tmp_contents, "iteration {iteration}: contents of the tmp tables");
        }
        eprintln!(
            "iteration {iteration}: killed after {delay:?} {landing:?}{}; {acknowledged} of {} statements acknowledged; {} batches, {} rows",
            if in_flight_committed { " (it had committed)" } else { "" },
            steps.len(),
            model.batches.len(),
            expected.tables["t"]
        );
        for entry in std::fs::read_dir(&dir).expect("read dir") {
            let path = entry.expect("entry").path();
            if path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("copy-")) {
                std::fs::remove_file(path).expect("remove copy file");
            }
        }
    }
    eprintln!(
        "kill landings: {landings:?}; {committed_unacknowledged} in-flight statements had committed; {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let mid_statement: usize = landings.iter().filter(|(l, _)| matches!(l, Landing::During(_))).map(|(_, n)| n).sum();
    // The delays are drawn to cover the scripts' run time; if the statements became so fast
    // that the processes mostly finish first, the test no longer tests much.
    assert!(mid_statement * 4 >= ITERATIONS as usize, "too few kills landed while a statement ran: {landings:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------------------------------
// 2. Full disk
// ---------------------------------------------------------------------------------------

/// Runs `sql` with a file-size limit of `limit` bytes (writes past it fail with EFBIG).
fn run_with_file_limit(db: &Path, sql: &str, limit: u64) -> Output {
    let mut command = apiary();
    command.args([path_str(db), "-c", sql]);
    // SAFETY: setrlimit is async-signal-safe; the closure allocates nothing.
    unsafe {
        command.pre_exec(move || {
            let rlimit = libc::rlimit { rlim_cur: limit as libc::rlim_t, rlim_max: limit as libc::rlim_t };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &rlimit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    command.output().expect("run apiary with a file-size limit")
}

fn assert_disk_full_error(out: &Output, what: &str) {
    let message = stderr(out);
    assert_eq!(out.status.code(), Some(1), "{what}: a failed write exits with status 1, without a crash ({}): {message}", out.status);
    assert!(message.contains("Error:") && message.contains("File too large"), "{what}: {message}");
}

#[test]
fn full_disk_during_copy() {
    let dir = temp_dir("full");
    let db = dir.join("db.apiary");
    let line = |i: i64| format!("{i},{},row {i} of the file {}\n", i * 7 % 1_000_003, i % 977);
    let large = dir.join("large.csv");
    let medium = dir.join("medium.csv");
    std::fs::write(&large, (0..70_000).map(line).collect::<String>()).expect("write");
    std::fs::write(&medium, (0..60_000).map(|i| line(i + 1_000_000)).collect::<String>()).expect("write");
    let copy = |file: &Path| format!("COPY t FROM '{}' (HEADER false)", path_str(file));
    let state = "SELECT count(*) AS n, sum(a) AS a, sum(b) AS b, max(s) AS s FROM t";

    run_ok(&db, &format!("CREATE TABLE t (a BIGINT, b INTEGER, s VARCHAR); {}; INSERT INTO t VALUES (-1, -2, 'small')", copy(&large)));
    let before = run_ok(&db, state);
    assert!(before.starts_with("n,a,b,s\n70001,"), "{before}");

    // (a) A COPY of more than a block commits by checkpoint: writing its column blocks
    // into the database file fails.
    let (db_size, wal_size) = file_sizes(&db);
    let limit = db_size.max(wal_size) + 32 * 1024;
    let out = run_with_file_limit(&db, &copy(&large), limit);
    assert_disk_full_error(&out, "COPY of a large file");
    assert_eq!(run_ok(&db, state), before, "the failed COPY left the table unchanged");

    // (b) A smaller COPY goes to the write-ahead log: appending its record fails.
    let (_, wal_size) = file_sizes(&db);
    let out = run_with_file_limit(&db, &copy(&medium), wal_size + 4096);
    assert_disk_full_error(&out, "COPY into the log");
    assert_eq!(run_ok(&db, state), before, "the failed logged COPY left the table unchanged");

    // (c) The logged COPY succeeds, the CHECKPOINT after it cannot write the file: the
    // COPY was committed when it returned and stays.
    let (db_size, wal_size) = file_sizes(&db);
    let limit = db_size.max(wal_size) + 32 * 1024;
    let out = run_with_file_limit(&db, &format!("{}; CHECKPOINT", copy(&medium)), limit);
    assert!(stdout(&out).contains("60000 rows affected"), "the COPY succeeds: {} {}", stdout(&out), stderr(&out));
    assert_disk_full_error(&out, "CHECKPOINT");
    let after_checkpoint = run_ok(&db, state);
    assert!(after_checkpoint.starts_with("n,a,b,s\n130001,"), "the committed COPY is in the database: {after_checkpoint}");

    // Without the limit everything works again.
    let out = run_ok(&db, &format!("{}; {state}", copy(&large)));
    assert!(out.starts_with("n,a,b,s\n200001,"), "{out}");
    let out = run_ok(&db, "SELECT count(*) AS n, count(DISTINCT a) AS distinct_a FROM t");
    assert_eq!(out, "n,distinct_a\n200001,130001\n");
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------------------------------
// 3. One process at a time
// ---------------------------------------------------------------------------------------

#[test]
fn second_process_gets_a_lock_error() {
    let dir = temp_dir("lock");
    let db = dir.join("db.apiary");
    run_ok(&db, "CREATE TABLE t (a INTEGER); INSERT INTO t VALUES (1), (2)");
    // The first process runs its -c statement, then waits for the end of standard input
    // (`-f /dev/stdin`) with the database open.
    let mut first = apiary()
        .args([path_str(&db), "--format", "csv", "-c", "SELECT count(*) AS ready FROM t", "-f", "/dev/stdin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn first");
    let mut first_out = BufReader::new(first.stdout.take().expect("stdout"));
    let mut seen = String::new();
    while !seen.ends_with("ready\n2\n") {
        let mut line = String::new();
        if first_out.read_line(&mut line).expect("read") == 0 {
            let _ = first.kill();
            panic!("the first process stopped: {seen}");
        }
        seen.push_str(&line);
    }

    let second = apiary().args([path_str(&db), "-c", "SELECT count(*) FROM t"]).output().expect("run second");
    assert_eq!(second.status.code(), Some(1), "{}", stderr(&second));
    assert!(stderr(&second).contains("already open"), "{}", stderr(&second));
    assert_eq!(stdout(&second), "");

    let mut stdin = first.stdin.take().expect("stdin");
    stdin.write_all(b"INSERT INTO t VALUES (3);").expect("write");
    drop(stdin);
    let status = first.wait().expect("wait");
    assert!(status.success(), "{status}");
    let mut rest = String::new();
    first_out.read_to_string(&mut rest).expect("read");
    assert_eq!(rest, "");

    assert_eq!(run_ok(&db, "SELECT count(*) AS n FROM t"), "n\n3\n");
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------------------------------
// 3. Views
// ---------------------------------------------------------------------------------------

/// Runs `sql` in a process on `db`, waits until it has answered, and kills it with
/// SIGKILL, so its log is never folded into the file by closing.
fn run_then_kill(db: &Path, sql: &str) {
    let script = format!("{sql}; SELECT 'done' AS ack");
    let mut child = apiary()
        .args([path_str(db), "--format", "csv", "-c", &script, "-f", "/dev/stdin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let errors = read_all(child.stderr.take().expect("stderr"));
    let answered = BufReader::new(child.stdout.take().expect("stdout")).lines().map_while(|l| l.ok()).any(|line| line == "done");
    // SIGKILL: `Child::kill` sends it.
    let _ = child.kill();
    let status = child.wait().expect("wait");
    assert!(answered, "`{sql}` did not complete ({status}): {}", errors.join().unwrap_or_default());
}

/// A committed CREATE VIEW, CREATE OR REPLACE VIEW, DROP VIEW or DROP TABLE ... CASCADE
/// survives the process being killed right after it (the log is replayed), and the views
/// come back from a checkpoint too.
#[test]
fn views_survive_kill_after_commit() {
    let dir = temp_dir("views");
    let db = dir.join("db.apiary");
    run_then_kill(
        &db,
        "CREATE TABLE t (a INTEGER, b VARCHAR); INSERT INTO t VALUES (1, 'x'), (2, 'y'), (3, 'z'); \
         CREATE VIEW big AS SELECT a, b FROM t WHERE a > 1; CREATE VIEW big_count (n) AS SELECT count(*) FROM big",
    );
    assert!(file_sizes(&db).1 > 200, "the views are in the log, not folded into the file");
    // This process replays the log and, closing normally, folds it into the file.
    assert_eq!(run_ok(&db, "SELECT n FROM big_count; SELECT * FROM big ORDER BY a"), "n\n2\na,b\n2,y\n3,z\n");
    run_then_kill(&db, "CREATE OR REPLACE VIEW big AS SELECT a, b, a * 10 AS c FROM t WHERE a > 2; DROP VIEW big_count");
    assert_eq!(run_ok(&db, "SELECT * FROM big; SHOW TABLES"), "a,b,c\n3,z,30\nname\nbig\nt\n");
    let refused = apiary().args([path_str(&db), "-c", "DROP TABLE t"]).output().expect("run apiary");
    assert!(!refused.status.success() && stderr(&refused).contains("view big depends on table t"), "{}", stderr(&refused));
    run_then_kill(&db, "CREATE VIEW again AS SELECT c FROM big; DROP TABLE t CASCADE");
    assert_eq!(run_ok(&db, "SHOW TABLES"), "name\n");
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------------------------------
// 4. SIGKILL during transactions
// ---------------------------------------------------------------------------------------

/// Accounts of the transaction test (ids 0..ACCOUNTS, each starting with 1,000).
const ACCOUNTS: usize = 8;

/// What the transaction test's database must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Bank {
    balances: Vec<i64>,
    /// Committed transactions, by number (each writes one ledger row).
    ledger: BTreeSet<u64>,
    /// Rows of `bulk` per transaction that inserted them (and did not delete them since).
    bulk: BTreeMap<u64, i64>,
    /// The tables named `side_*` (each DDL transaction replaces the last one's).
    side_tables: BTreeSet<String>,
}

/// One step of the transaction test: a whole transaction block or a CHECKPOINT.
struct TransactionStep {
    sql: String,
    /// The state after the step, if it commits (`None`: it changes nothing).
    commits: Option<Bank>,
    what: &'static str,
}

fn transaction_script(rng: &mut Lcg, bank: &Bank, first: u64, count: usize) -> Vec<TransactionStep> {
    let mut bank = bank.clone();
    let mut steps = Vec::new();
    for n in 0..count as u64 {
        let txn = first + n;
        let x = rng.below(ACCOUNTS as u64) as usize;
        let y = (x + 1 + rng.below(ACCOUNTS as u64 - 1) as usize) % ACCOUNTS;
        let amount = 1 + rng.below(50) as i64;
        let transfer = format!(
            "UPDATE acct SET balance = balance - {amount} WHERE id = {x}; UPDATE acct SET balance = balance + {amount} WHERE id = {y}; \
             INSERT INTO ledger VALUES ({txn}, {amount})"
        );
        let mut next = bank.clone();
        let (sql, commits, what) = match rng.below(100) {
            0..=34 => {
                next.balances[x] -= amount;
                next.balances[y] += amount;
                next.ledger.insert(txn);
                (format!("BEGIN; {transfer}; COMMIT"), Some(next), "transfer")
            }
            35..=49 => (format!("BEGIN; {transfer}; ROLLBACK"), None, "rolled-back transfer"),
            50..=69 => {
                // More than a block's rows (a checkpoint at commit) or a few thousand (the log).
                let rows = if rng.below(2) == 0 { 70_000 } else { 3_000 };
                next.balances[x] += 1;
                next.ledger.insert(txn);
                next.bulk.insert(txn, rows);
                let sql = format!(
                    "BEGIN; INSERT INTO bulk SELECT {txn}, g FROM generate_series(1, {rows}) AS s(g); \
                     INSERT INTO acct VALUES ({x}, 0) ON CONFLICT (id) DO UPDATE SET balance = acct.balance + 1; \
                     INSERT INTO ledger VALUES ({txn}, 1); COMMIT"
                );
                (sql, Some(next), "bulk insert")
            }
            70..=84 => {
                let Some((&victim, _)) = bank.bulk.iter().nth(rng.below(bank.bulk.len().max(1) as u64) as usize) else {
                    continue;
                };
                next.bulk.remove(&victim);
                next.balances[y] -= 1;
                next.ledger.insert(txn);
                let sql = format!(
                    "BEGIN; DELETE FROM bulk WHERE txn = {victim}; \
                     MERGE INTO acct USING (SELECT {y} AS id) AS s ON acct.id = s.id WHEN MATCHED THEN UPDATE SET balance = acct.balance - 1; \
                     INSERT INTO ledger VALUES ({txn}, 1); COMMIT"
                );
                (sql, Some(next), "bulk delete")
            }
            85..=92 => {
                // DDL in a block: a new table filled, the previous one dropped, a rename.
                let drop_previous: String = bank.side_tables.iter().map(|t| format!("DROP TABLE {t}; ")).collect();
                next.side_tables = BTreeSet::from([format!("side_{txn}")]);
                next.ledger.insert(txn);
                let sql = format!(
                    "BEGIN; CREATE TABLE side_new AS SELECT {txn} AS txn, g FROM generate_series(1, 100) AS s(g); {drop_previous}\
                     ALTER TABLE side_new RENAME TO side_{txn}; INSERT INTO ledger VALUES ({txn}, 1); COMMIT"
                );
                (sql, Some(next), "ddl")
            }
            _ => ("CHECKPOINT".to_string(), None, "checkpoint"),
        };
        if let Some(state) = &commits {
            bank = state.clone();
        }
        steps.push(TransactionStep { sql, commits, what });
    }
    steps
}

/// The state of the transaction test's database, read by a new process.
fn read_bank(db: &Path) -> Bank {
    let out = run_ok(
        db,
        "SELECT id AS acct_id, balance AS acct_balance FROM acct ORDER BY id; SELECT txn AS ledger_txn FROM ledger ORDER BY txn; \
         SELECT txn AS bulk_txn, count(*) AS bulk_rows FROM bulk GROUP BY txn ORDER BY txn; \
         SELECT table_name AS side_table FROM information_schema.tables WHERE table_name LIKE 'side%' ORDER BY 1",
    );
    let parsed = sections(&out, &["acct_id,acct_balance", "ledger_txn", "bulk_txn,bulk_rows", "side_table"]);
    let ids: Vec<i64> = parsed["acct_id,acct_balance"].iter().map(|r| int(&r[0])).collect();
    assert_eq!(ids, (0..ACCOUNTS as i64).collect::<Vec<_>>(), "accounts");
    Bank {
        balances: parsed["acct_id,acct_balance"].iter().map(|r| int(&r[1])).collect(),
        ledger: parsed.get("ledger_txn").into_iter().flatten().map(|r| int(&r[0]) as u64).collect(),
        bulk: parsed.get("bulk_txn,bulk_rows").into_iter().flatten().map(|r| (int(&r[0]) as u64, int(&r[1]))).collect(),
        side_tables: parsed.get("side_table").into_iter().flatten().map(|r| r[0].clone()).collect(),
    }
}

/// Transaction blocks (transfers, bulk inserts and deletes, upserts, MERGE, DDL,
/// rollbacks) killed at random moments: after reopening, the database holds exactly the committed
/// transactions — every acknowledged COMMIT, possibly the one in flight, nothing of a
/// rolled-back or unfinished block — and the log replays again after a later kill.
#[test]
fn kill_during_transactions() {
    const ITERATIONS: u64 = 40;
    let started = Instant::now();
    let dir = temp_dir("kill-transactions");
    let db = dir.join("db.apiary");
    let accounts: Vec<String> = (0..ACCOUNTS).map(|id| format!("({id}, 1000)")).collect();
    run_ok(
        &db,
        &format!(
            "CREATE TABLE acct (id INTEGER PRIMARY KEY, balance BIGINT NOT NULL); INSERT INTO acct VALUES {}; \
             CREATE TABLE ledger (txn BIGINT PRIMARY KEY, amount BIGINT); CREATE TABLE bulk (txn BIGINT, g BIGINT)",
            accounts.join(", ")
        ),
    );
    let mut bank = Bank { balances: vec![1000; ACCOUNTS], ..Bank::default() };
    let mut next_txn = 1;
    let (mut mid_transaction, mut in_flight_committed) = (0, 0);
    for iteration in 0..ITERATIONS {
        let mut rng = Lcg::new(0x7A11_5EED + iteration);
        let count = 20 + rng.below(30) as usize;
        let steps = transaction_script(&mut rng, &bank, next_txn, count);
        next_txn += count as u64;
        let script: String = steps.iter().enumerate().map(|(i, step)| format!("{};\nSELECT {i} AS ack;\n", step.sql)).collect();
        let script_path = dir.join("transactions.sql");
        std::fs::write(&script_path, &script).expect("write script");
        // The kill comes a random few milliseconds after a random step was acknowledged:
        // timing alone would mostly miss the scripts, which run in a fraction of a second.
        let kill_after_step = rng.below(steps.len() as u64) as usize;
        let delay = Duration::from_micros(rng.below(8_000));
        let mut child = apiary()
            .args([path_str(&db), "--format", "csv", "-f", path_str(&script_path)])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        let errors = read_all(child.stderr.take().expect("stderr"));
        let mut out = String::new();
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        for line in lines.by_ref() {
            let line = line.expect("read script output");
            out.push_str(&line);
            out.push('\n');
            if line == kill_after_step.to_string() {
                break;
            }
        }
        std::thread::sleep(delay);
        let _ = child.kill();
        let status = child.wait().expect("wait");
        for line in lines {
            out.push_str(&line.expect("read script output"));
            out.push('\n');
        }
        let errors = errors.join().expect("stderr reader");
        assert!(status.code().is_none() || status.success(), "iteration {iteration}: the script failed ({status}): {errors}");
        let acks: Vec<usize> = out.lines().filter(|l| *l != "ack").map(|l| l.parse().expect("ack number")).collect();
        assert_eq!(acks, (0..acks.len()).collect::<Vec<_>>(), "iteration {iteration}: acknowledgements in order");
        let acknowledged = acks.len();
        let mut expected = bank.clone();
        for step in &steps[..acknowledged] {
            if let Some(state) = &step.commits {
                expected = state.clone();
            }
        }
        let in_flight = steps.get(acknowledged);
        let actual = read_bank(&db);
        bank = if actual == expected {
            expected
        } else if let Some(state) = in_flight.and_then(|s| s.commits.as_ref()).filter(|state| actual == **state) {
            in_flight_committed += 1;
            state.clone()
        } else {
            panic!(
                "iteration {iteration}: killed during step {acknowledged} ({:?}); the database holds\n{actual:?}\nexpected\n{expected:?}\nor, \
                 with the transaction in flight committed,\n{:?}",
                in_flight.map(|s| s.what),
                in_flight.and_then(|s| s.commits.as_ref())
            )
        };
        if in_flight.is_some_and(|s| s.what != "checkpoint") {
            mid_transaction += 1;
        }
        eprintln!(
            "iteration {iteration}: killed after {delay:?} during {:?}; {acknowledged} of {} steps acknowledged; {} transactions committed",
            in_flight.map(|s| s.what),
            steps.len(),
            bank.ledger.len()
        );
    }
    eprintln!(
        "{mid_transaction} of {ITERATIONS} kills landed in a transaction, {in_flight_committed} in-flight commits had committed; {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(mid_transaction * 2 >= ITERATIONS as usize, "too few kills landed in a transaction");
    let _ = std::fs::remove_dir_all(&dir);
}
