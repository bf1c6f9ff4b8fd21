//! Fuzzing the database-file reader: damaged copies of a real database file and its
//! write-ahead log are opened and read back.
//!
//! The fixture is a file written by `Database::open` with tables of every stored type
//! spread over many small blocks (so every encoding appears: frame of reference,
//! dictionaries, zstd strings, plain), two checkpoints (both root slots in use) and a log of
//! statements after the last one. The state after each logged statement is remembered.
//!
//! Each case damages a copy and opens it:
//!
//! * **Raw damage** to the file and/or the log: flipped bits, truncation, zeroed ranges,
//!   swapped and duplicated blocks, garbage appended. Pass: a clean error, or data equal
//!   to a committed state: with the file damaged, the last one; with the log damaged, any
//!   state after a whole number of logged statements (a damaged last record looks like a
//!   torn write, which recovery drops). Every table either reads exactly that state or
//!   fails with a clean error; wrong data is never returned.
//! * **Forged damage**: the catalog metadata or a log record is altered and its checksum
//!   recomputed, so the parsers behind the checksums see hostile bytes; and encoded
//!   column stripes are altered and decoded directly. Pass: no panic, no internal error,
//!   no hang and no runaway allocation (which would abort the process).
//!
//! ```text
//! cargo test -p apiary --test fuzz_file                                   # the seeded run
//! APIARY_FUZZ_ITERATIONS=100000 cargo test -p apiary --test fuzz_file    # longer
//! APIARY_FUZZ_SEED=7 APIARY_FUZZ_FIRST=123 APIARY_FUZZ_ITERATIONS=1 ... # replay a case
//! ```

mod fuzz_support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use apiary::{ApiaryError, DataType, Database, ScalarValue};
use fuzz_support::{catch, excerpt, is_bug, FuzzConfig, Rng, Watchdog};

/// Cases in the default `cargo test` run.
const DEFAULT_CASES: u64 = 600;

/// The file layout the forging cases rely on (see crates/storage/src/file.rs).
const SLOT_SIZE: u64 = 4096;
const DATA_START: u64 = 3 * SLOT_SIZE;
const ROOT_BYTES: usize = 48;
const WAL_HEADER_BYTES: usize = 28;

/// Table name → its rows, each rendered as text and sorted.
type State = BTreeMap<String, Vec<String>>;

fn checksum(bytes: &[u8]) -> u64 {
    twox_hash::XxHash3_64::oneshot(bytes)
}

fn run(db: &Database, sql: &str) {
    db.connect().execute(sql).unwrap_or_else(|e| panic!("{}: {e}", excerpt(sql, 200)));
}

fn table_names(db: &Database) -> Result<BTreeSet<String>, ApiaryError> {
    Ok(db.connect().query("SHOW TABLES")?.rows().map(|r| r[0].to_string()).collect())
}

fn table_rows(db: &Database, table: &str) -> Result<Vec<String>, ApiaryError> {
    let result = db.connect().query(&format!("SELECT * FROM {table}"))?;
    let mut rows: Vec<String> = result.rows().map(|r| r.iter().map(ScalarValue::to_string).collect::<Vec<_>>().join("|")).collect();
    rows.sort();
    Ok(rows)
}

fn state(db: &Database) -> State {
    let names = table_names(db).unwrap();
    names.into_iter().map(|name| (name.clone(), table_rows(db, &name).unwrap())).collect()
}

/// The pristine database: the file, its log, and the committed states (the last is the
/// state the files hold; the earlier ones are those after fewer logged statements).
struct Fixture {
    file: Vec<u8>,
    wal: Vec<u8>,
    states: Vec<State>,
}

fn numbers_row(rng: &mut Rng, k: usize) -> String {
    let null_or = |rng: &mut Rng, value: String| if rng.chance(1, 12) { "NULL".to_string() } else { value };
    let wide = rng.next_u64() % 1_000_000_000_000_000;
    format!(
        "({k}, {}, {}, {}, {}, {}, {}, {})",
        null_or(rng, (k as i64 * 7 % 1000 - 500).to_string()),
        null_or(rng, (k % 100).to_string()),
        null_or(rng, format!("{}.{:02}", k % 50, k % 4 * 25)),
        null_or(rng, format!("{k}{wide:015}.{:03}", k % 1000)),
        null_or(rng, format!("{:e}", (k as f64) / 7.0 - 30.0)),
        null_or(rng, format!("{}", (k % 17) as f32 * 0.5)),
        null_or(rng, if k.is_multiple_of(3) { "true" } else { "false" }.to_string()),
    )
}

fn strings_row(rng: &mut Rng, k: usize) -> String {
    let words = ["bee", "hive", "honey", "wax", "pollen", "drone", "queen", "nectar", "swarm", "comb"];
    let note = if rng.chance(1, 8) {
        "NULL".to_string()
    } else {
        let count = rng.range(1, 12);
        format!("'{}'", (0..count).map(|_| *rng.pick(&words)).collect::<Vec<_>>().join(" "))
    };
    format!(
        "({k}, '{}', 'Customer#{k:09}', {note}, DATE '{}-{:02}-{:02}', TIMESTAMP '2024-01-01 00:00:00' + INTERVAL '{} seconds', INTERVAL '{} days')",
        ["A", "N", "R"][k % 3],
        1990 + k % 30,
        k % 12 + 1,
        k % 28 + 1,
        k * 3601,
        k % 40,
    )
}

fn insert(db: &Database, table: &str, rows: impl Iterator<Item = String>) {
    let values: Vec<String> = rows.collect();
    run(db, &format!("INSERT INTO {table} VALUES {}", values.join(", ")));
}

fn build_fixture(dir: &Path) -> Fixture {
    let path = dir.join("pristine.apiary");
    let db = Database::open(&path).unwrap();
    let mut rng = Rng::new(1);
    run(&db, "SET block_size = 64");
    run(&db, "CREATE TABLE numbers (k BIGINT, i INTEGER, s SMALLINT, d DECIMAL(12,2), w DECIMAL(30,3), f DOUBLE, r REAL, b BOOLEAN)");
    run(&db, "CREATE TABLE strings (k INTEGER, flag CHAR(1), name VARCHAR, note VARCHAR(200), day DATE, ts TIMESTAMP, iv INTERVAL)");
    // Inserts of a block or more commit as checkpoints: the first generation.
    insert(&db, "numbers", (0..700).map(|k| numbers_row(&mut rng, k)));
    insert(&db, "strings", (0..700).map(|k| strings_row(&mut rng, k)));
    run(&db, "CREATE TABLE empty (a INTEGER, b VARCHAR)");
    // A second generation, so both root slots hold a valid root.
    insert(&db, "numbers", (700..710).map(|k| numbers_row(&mut rng, k)));
    run(&db, "CHECKPOINT");
    // Logged statements, one record each.
    let mut states = vec![state(&db)];
    let logged = [
        "CREATE TABLE extra (a INTEGER, b VARCHAR, c DECIMAL(30,2))".to_string(),
        "INSERT INTO extra VALUES (1, 'one', 1.5), (2, NULL, NULL), (3, 'a longer string than twelve bytes', -123456789012345678.25)"
            .to_string(),
        format!("INSERT INTO numbers VALUES {}", (710..715).map(|k| numbers_row(&mut rng, k)).collect::<Vec<_>>().join(", ")),
        format!("INSERT INTO strings VALUES {}", (700..703).map(|k| strings_row(&mut rng, k)).collect::<Vec<_>>().join(", ")),
        "DROP TABLE empty".to_string(),
        "INSERT INTO extra VALUES (4, 'four', 4)".to_string(),
    ];
    for statement in &logged {
        run(&db, statement);
        states.push(state(&db));
    }
    // Every commit is synced: the files now are what a crash would leave.
    let file = std::fs::read(&path).unwrap();
    let wal = std::fs::read(dir.join("pristine.apiary.wal")).unwrap();
    assert!(wal.len() > WAL_HEADER_BYTES + 500, "the fixture's statements are in the log ({} bytes)", wal.len());
    Fixture { file, wal, states }
}

// ---------------------------------------------------------------------------------------
// Raw damage

/// One random injury to `bytes`; `hot` is a range worth hitting more often (the header
/// and root slots of the file).
fn damage(rng: &mut Rng, bytes: &mut Vec<u8>, hot: std::ops::Range<usize>) {
    if bytes.is_empty() {
        bytes.extend((0..rng.below(64)).map(|_| rng.next_u64() as u8));
        return;
    }
    let len = bytes.len();
    let at = if rng.chance(1, 3) && hot.end <= len && !hot.is_empty() { rng.range(hot.start, hot.end) } else { rng.below(len) };
    match rng.below(8) {
        0 | 1 => {
            for _ in 0..rng.range(1, 4) {
                let position = if rng.chance(1, 2) { at } else { rng.below(len) };
                bytes[position] ^= 1 << rng.below(8);
            }
        }
        2 => bytes.truncate(at),
        3 => {
            let end = (at + rng.range(1, 8192)).min(len);
            bytes[at..end].fill(0);
        }
        4 => {
            // Swap two blocks of the same size (4 KiB-aligned or anywhere).
            let size = if rng.chance(1, 2) { 4096 } else { rng.range(1, 512) };
            if len > 2 * size {
                let (a, b) = (rng.below(len - size), rng.below(len - size));
                let block_a = bytes[a..a + size].to_vec();
                let block_b = bytes[b..b + size].to_vec();
                bytes[b..b + size].copy_from_slice(&block_a);
                bytes[a..a + size].copy_from_slice(&block_b);
            }
        }
        5 => {
            // Copy one stretch over another (a misdirected write).
            let size = rng.range(1, 4096).min(len);
            let (from, to) = (rng.below(len - size + 1), rng.below(len - size + 1));
            let stretch = bytes[from..from + size].to_vec();
            bytes[to..to + size].copy_from_slice(&stretch);
        }
        6 => bytes.extend((0..rng.range(1, 5000)).map(|_| if rng.chance(1, 2) { 0 } else { rng.next_u64() as u8 })),
        _ => {
            // Delete a stretch (later bytes shift).
            let end = (at + rng.range(1, 64)).min(len);
            bytes.drain(at..end);
        }
    }
}

#[derive(Debug)]
enum Outcome {
    /// Open failed cleanly.
    Refused,
    /// Opened: every table's rows or its (clean) error.
    Opened(BTreeMap<String, Result<Vec<String>, String>>),
}

/// Opens `path` and reads every table; `Err` is a bug (panic or internal error).
fn open_and_read(path: &Path, extra_tables: &BTreeSet<String>) -> Result<Outcome, String> {
    let db = match catch(|| Database::open(path)) {
        Err(panic) => return Err(format!("panic while opening: {panic}")),
        Ok(Err(error)) if is_bug(&error) => return Err(format!("internal error while opening: {error}")),
        Ok(Err(_)) => return Ok(Outcome::Refused),
        Ok(Ok(db)) => db,
    };
    let names = match catch(|| table_names(&db)) {
        Ok(Ok(names)) => names,
        Ok(Err(error)) => return Err(format!("SHOW TABLES failed: {error}")),
        Err(panic) => return Err(format!("panic in SHOW TABLES: {panic}")),
    };
    let mut tables = BTreeMap::new();
    for name in names.iter().chain(extra_tables) {
        let rows = match catch(|| table_rows(&db, name)) {
            Err(panic) => return Err(format!("panic reading {name}: {panic}")),
            Ok(Err(error)) if is_bug(&error) => return Err(format!("internal error reading {name}: {error}")),
            Ok(Err(error)) if !names.contains(name) => {
                let _ = error;
                continue; // a table of another state, absent here
            }
            Ok(rows) => rows.map_err(|e| e.to_string()),
        };
        tables.insert(name.clone(), rows);
    }
    // Writing to a damaged database and reopening it must not go wrong either.
    let written = catch(|| {
        let mut conn = db.connect();
        let _ = conn.execute("CREATE TABLE fuzz_written (a INTEGER)");
        let _ = conn.execute("INSERT INTO fuzz_written VALUES (1)");
        conn.execute("CHECKPOINT")
    });
    match written {
        Err(panic) => return Err(format!("panic writing to the damaged database: {panic}")),
        Ok(Err(error)) if is_bug(&error) => return Err(format!("internal error writing to the damaged database: {error}")),
        _ => {}
    }
    drop(db);
    match catch(|| Database::open(path).map(|db| table_names(&db))) {
        Err(panic) => return Err(format!("panic reopening after a write: {panic}")),
        Ok(Err(error)) | Ok(Ok(Err(error))) if is_bug(&error) => return Err(format!("internal error reopening after a write: {error}")),
        _ => {}
    }
    Ok(Outcome::Opened(tables))
}

/// Whether what was read matches one of `acceptable` committed states.
fn matches_a_state(tables: &BTreeMap<String, Result<Vec<String>, String>>, acceptable: &[State]) -> bool {
    acceptable.iter().any(|state| {
        tables.keys().eq(state.keys())
            && tables.iter().all(|(name, rows)| match rows {
                Ok(rows) => state.get(name) == Some(rows),
                Err(_) => true,
            })
    })
}

/// How a case ended when it passed, for the summary.
fn outcome_label(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::Refused => "refused to open",
        Outcome::Opened(tables) if tables.values().all(|t| t.is_ok()) => "opened, every table read",
        Outcome::Opened(_) => "opened, some tables refused",
    }
}

fn raw_damage_case(rng: &mut Rng, fixture: &Fixture, path: &Path) -> Result<&'static str, String> {
    let mut file = fixture.file.clone();
    let mut wal = fixture.wal.clone();
    let (damage_file, damage_wal) = match rng.below(10) {
        0..=5 => (true, false),
        6..=8 => (false, true),
        _ => (true, true),
    };
    if damage_file {
        for _ in 0..rng.range(1, 4) {
            damage(rng, &mut file, 0..DATA_START as usize);
        }
    }
    if damage_wal {
        for _ in 0..rng.range(1, 3) {
            damage(rng, &mut wal, 0..WAL_HEADER_BYTES);
        }
    }
    write_pair(path, &file, &wal);
    let all_tables: BTreeSet<String> = fixture.states.iter().flat_map(|s| s.keys().cloned()).collect();
    let outcome = open_and_read(path, &all_tables)?;
    match &outcome {
        Outcome::Refused => Ok(outcome_label(&outcome)),
        Outcome::Opened(tables) => {
            let last = fixture.states.len() - 1;
            let acceptable = if damage_wal { &fixture.states[..] } else { &fixture.states[last..] };
            if matches_a_state(tables, acceptable) {
                Ok(outcome_label(&outcome))
            } else {
                let summary: Vec<String> = tables
                    .iter()
                    .map(|(name, rows)| match rows {
                        Ok(rows) => format!("{name}: {} rows", rows.len()),
                        Err(error) => format!("{name}: {}", excerpt(error, 200)),
                    })
                    .collect();
                Err(format!(
                    "wrong data returned silently (file damaged: {damage_file}, log damaged: {damage_wal}): {}",
                    summary.join("; ")
                ))
            }
        }
    }
}

/// Writes the damaged file and log to `path`, and a copy beside it (`*.input`) that a
/// failure keeps: opening and writing change `path`.
fn write_pair(path: &Path, file: &[u8], wal: &[u8]) {
    std::fs::write(path, file).unwrap();
    std::fs::write(wal_path(path), wal).unwrap();
    std::fs::write(path.with_extension("input"), file).unwrap();
    std::fs::write(wal_path(&path.with_extension("input")), wal).unwrap();
}

fn wal_path(path: &Path) -> PathBuf {
    let mut wal = path.as_os_str().to_owned();
    wal.push(".wal");
    PathBuf::from(wal)
}

// ---------------------------------------------------------------------------------------
// Forged damage: checksums recomputed

/// The newest valid root: (slot offset, generation, metadata offset, metadata length).
fn newest_root(file: &[u8]) -> Option<(usize, u64, u64, u64)> {
    let mut best: Option<(usize, u64, u64, u64)> = None;
    for slot in 0..2 {
        let offset = (SLOT_SIZE * (1 + slot)) as usize;
        let bytes = file.get(offset..offset + ROOT_BYTES)?;
        let word = |i: usize| u64::from_le_bytes(bytes[8 + 8 * i..16 + 8 * i].try_into().unwrap());
        if &bytes[..8] != b"APIROOT\0" || checksum(&bytes[..40]) != word(4) {
            continue;
        }
        if best.is_none_or(|b| word(0) > b.1) {
            best = Some((offset, word(0), word(1), word(2)));
        }
    }
    best
}

/// Alters `bytes` the way a hostile writer would: bit flips, and lengths, counts and
/// tags replaced by extreme values.
fn forge(rng: &mut Rng, bytes: &mut Vec<u8>) {
    for _ in 0..rng.range(1, 4) {
        if bytes.is_empty() {
            return;
        }
        let at = rng.below(bytes.len());
        match rng.below(6) {
            0 | 1 => bytes[at] ^= 1 << rng.below(8),
            2 => {
                let value = *rng.pick(&[u64::MAX, u64::MAX / 2, 1 << 40, 1 << 32, u32::MAX as u64, 65_537, 0]);
                let width = *rng.pick(&[4usize, 8]);
                let end = (at + width).min(bytes.len());
                bytes[at..end].copy_from_slice(&value.to_le_bytes()[..end - at]);
            }
            3 => bytes[at] = *rng.pick(&[0u8, 1, 2, 3, 7, 9, 12, 13, 0xff]),
            4 => bytes.truncate(at),
            _ => {
                let stretch: Vec<u8> = (0..rng.range(1, 16)).map(|_| rng.next_u64() as u8).collect();
                bytes.splice(at..at, stretch);
            }
        }
    }
}

/// Rewrites the catalog metadata of the newest root, appends it to the file and points
/// the root (same generation, so the log still applies) at it with fresh checksums.
fn forged_metadata_case(rng: &mut Rng, fixture: &Fixture, path: &Path) -> Result<&'static str, String> {
    let mut file = fixture.file.clone();
    let (slot, generation, offset, len) = newest_root(&file).ok_or("the fixture has no valid root")?;
    let mut metadata = file[offset as usize..(offset + len) as usize].to_vec();
    forge(rng, &mut metadata);
    let new_offset = file.len() as u64;
    file.extend_from_slice(&metadata);
    let mut root = Vec::with_capacity(ROOT_BYTES);
    root.extend_from_slice(b"APIROOT\0");
    for word in [generation, new_offset, metadata.len() as u64, checksum(&metadata)] {
        root.extend_from_slice(&word.to_le_bytes());
    }
    let sum = checksum(&root);
    root.extend_from_slice(&sum.to_le_bytes());
    file[slot..slot + ROOT_BYTES].copy_from_slice(&root);
    write_pair(path, &file, &fixture.wal);
    open_and_read(path, &BTreeSet::new()).map(|outcome| outcome_label(&outcome))
}

/// Alters one record of the log and recomputes its length and checksum.
fn forged_log_case(rng: &mut Rng, fixture: &Fixture, path: &Path) -> Result<&'static str, String> {
    let wal = &fixture.wal;
    let mut records = Vec::new();
    let mut position = WAL_HEADER_BYTES;
    while position + 16 <= wal.len() {
        let len = u64::from_le_bytes(wal[position..position + 8].try_into().unwrap()) as usize;
        records.push(wal[position + 16..position + 16 + len].to_vec());
        position += 16 + len;
    }
    let victim = rng.below(records.len());
    forge(rng, &mut records[victim]);
    let mut forged = wal[..WAL_HEADER_BYTES].to_vec();
    for record in &records {
        forged.extend_from_slice(&(record.len() as u64).to_le_bytes());
        forged.extend_from_slice(&checksum(record).to_le_bytes());
        forged.extend_from_slice(record);
    }
    write_pair(path, &fixture.file, &forged);
    open_and_read(path, &BTreeSet::new()).map(|outcome| outcome_label(&outcome))
}

/// Encodes a random column, alters the bytes (or claims another row count) and decodes.
fn forged_stripe_case(rng: &mut Rng) -> Result<&'static str, String> {
    use apiary_storage::encoding::{decode, encode};
    use apiary_types::VectorBuilder;
    let types = [
        DataType::Boolean,
        DataType::SmallInt,
        DataType::Integer,
        DataType::BigInt,
        DataType::Real,
        DataType::Double,
        DataType::Decimal { precision: 12, scale: 2 },
        DataType::Decimal { precision: 30, scale: 3 },
        DataType::Varchar(None),
        DataType::Char(1),
        DataType::Date,
        DataType::Timestamp,
        DataType::Interval,
    ];
    let data_type = *rng.pick(&types);
    let rows = *rng.pick(&[0usize, 1, 3, 64, 100, 1000]);
    let distinct = rng.range(1, 300) as i64;
    let mut builder = VectorBuilder::new(data_type);
    for _ in 0..rows {
        if rng.chance(1, 10) {
            builder.push_null();
            continue;
        }
        let v = (rng.next_u64() as i64 % distinct).abs();
        let value = match data_type {
            DataType::Boolean => ScalarValue::Boolean(v % 2 == 0),
            DataType::SmallInt => ScalarValue::Int16(v as i16),
            DataType::Integer => ScalarValue::Int32(v as i32 * 1000),
            DataType::BigInt => ScalarValue::Int64(if rng.chance(1, 20) { i64::MIN } else { v }),
            DataType::Real => ScalarValue::Float32(v as f32 / 3.0),
            DataType::Double => ScalarValue::Float64(v as f64 / 7.0),
            DataType::Decimal { precision, scale } => ScalarValue::Decimal(v as i128 * 25, precision, scale),
            DataType::Varchar(_) if rng.chance(1, 2) => ScalarValue::Utf8(format!("value number {v} with some text")),
            DataType::Varchar(_) | DataType::Char(_) => ScalarValue::Utf8(["A", "N", "R", "é"][v as usize % 4].to_string()),
            DataType::Date => ScalarValue::Date(v as i32),
            DataType::Timestamp => ScalarValue::Timestamp(v * 1_000_000),
            _ => ScalarValue::Interval(apiary_types::Interval { months: v as i32, days: 1, micros: v }),
        };
        builder.push_scalar(&value);
    }
    let vector = builder.finish();
    let (encoding, mut bytes) = encode(&vector);
    forge(rng, &mut bytes);
    let claimed_rows = if rng.chance(1, 4) { *rng.pick(&[0usize, 1, rows + 1, rows * 2, 1 << 20]) } else { rows };
    match catch(|| decode(&bytes, data_type, claimed_rows, "forged stripe")) {
        Err(panic) => Err(format!("decoding a damaged {encoding} stripe of {rows} {data_type} values panicked: {panic}")),
        Ok(Err(error)) if is_bug(&error) => Err(format!("decoding a damaged {encoding} stripe: {error}")),
        Ok(Ok(decoded)) if decoded.len() != claimed_rows => {
            Err(format!("decoding a damaged {encoding} stripe gave {} rows for {claimed_rows}", decoded.len()))
        }
        Ok(Ok(_)) => Ok("decoded"),
        Ok(Err(_)) => Ok("refused to decode"),
    }
}

#[test]
fn damaged_database_files_fail_cleanly_or_read_correctly() {
    let config = FuzzConfig::from_env(DEFAULT_CASES);
    let dir = fuzz_support::scratch("file");
    let fixture = build_fixture(&dir);
    let path = dir.join("case.apiary");
    let watchdog = Watchdog::start("fuzz_file", Duration::from_secs(3600));
    let mut failures = Vec::new();
    const KINDS: [&str; 4] = ["raw damage", "forged metadata", "forged log", "forged stripe"];
    let mut outcomes: BTreeMap<(&str, &str), u32> = BTreeMap::new();
    for case_number in config.cases() {
        let mut rng = Rng::for_case(config.seed, case_number);
        let kind = match rng.below(10) {
            0..=5 => 0,
            6 => 1,
            7 => 2,
            _ => 3,
        };
        watchdog.begin(format!("case {case_number}: {}", config.replay("fuzz_file", case_number)), None);
        let outcome = match kind {
            0 => raw_damage_case(&mut rng, &fixture, &path),
            1 => forged_metadata_case(&mut rng, &fixture, &path),
            2 => forged_log_case(&mut rng, &fixture, &path),
            _ => forged_stripe_case(&mut rng),
        };
        watchdog.end();
        if let Ok(label) = outcome {
            *outcomes.entry((KINDS[kind], label)).or_default() += 1;
        }
        if let Err(message) = outcome {
            let kept = dir.join(format!("failure-{case_number}.apiary"));
            let _ = std::fs::copy(path.with_extension("input"), &kept);
            let _ = std::fs::copy(wal_path(&path.with_extension("input")), wal_path(&kept));
            failures.push(format!(
                "case {case_number}: {}\n  files kept at {}\n  replay: {}",
                excerpt(&message, 2000),
                kept.display(),
                config.replay("fuzz_file", case_number)
            ));
            if failures.len() >= 10 {
                break;
            }
        }
    }
    drop(watchdog);
    if failures.is_empty() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let summary: Vec<String> = outcomes.iter().map(|((kind, label), count)| format!("{kind}: {label} {count}")).collect();
    eprintln!("fuzz_file: {} cases from seed {}: {}", config.iterations, config.seed, summary.join(", "));
    assert!(failures.is_empty(), "{} failing case(s):\n{}", failures.len(), failures.join("\n\n"));
}

// ---------------------------------------------------------------------------------------
// Regressions: what this loop found, pinned.

/// Reads the rows of `sql` as text.
fn rows_of(db: &Database, sql: &str) -> Vec<String> {
    let result = db.connect().query(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    result.rows().map(|r| r.iter().map(ScalarValue::to_string).collect::<Vec<_>>().join("|")).collect()
}

/// Encoding a DECIMAL(p > 18) stripe whose values span more than 2^64 steps panicked (a
/// frame-of-reference code of 9 to 15 bytes), in the log and at checkpoints alike.
#[test]
fn wide_decimals_are_logged_and_checkpointed() {
    let dir = fuzz_support::scratch("wide-decimals");
    let path = dir.join("db.apiary");
    let expected = vec!["0.000", "5.125", "100000000000000000000.000", "-12345678901234567890123.456"];
    {
        let db = Database::open(&path).unwrap();
        run(&db, "CREATE TABLE w (d DECIMAL(30,3))");
        run(&db, "INSERT INTO w VALUES (0), (5.125), (100000000000000000000), (-12345678901234567890123.456)");
        assert_eq!(rows_of(&db, "SELECT d FROM w"), expected);
        run(&db, "CHECKPOINT");
    }
    let db = Database::open(&path).unwrap();
    assert_eq!(rows_of(&db, "SELECT d FROM w"), expected);
    drop(db);
    let _ = std::fs::remove_dir_all(&dir);
}

/// With both root slots blank and the log gone, a file full of data opened as a new,
/// empty database: its tables vanished without an error (and the next checkpoint would
/// have overwritten them).
#[test]
fn blank_root_slots_without_a_log_are_refused() {
    let dir = fuzz_support::scratch("blank-roots");
    let path = dir.join("db.apiary");
    {
        let db = Database::open(&path).unwrap();
        run(&db, "CREATE TABLE t AS SELECT 1 AS a");
        run(&db, "CHECKPOINT");
    }
    let mut file = std::fs::read(&path).unwrap();
    file[SLOT_SIZE as usize..DATA_START as usize].fill(0);
    std::fs::write(&path, &file).unwrap();
    std::fs::write(wal_path(&path), b"").unwrap();
    let error = Database::open(&path).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(error.contains("no valid root") && error.contains("write-ahead log"), "{error}");
    // With the log intact its generation gives the damage away.
    let dir2 = fuzz_support::scratch("blank-roots-log");
    let path2 = dir2.join("db.apiary");
    {
        let db = Database::open(&path2).unwrap();
        run(&db, "CREATE TABLE t AS SELECT 1 AS a");
        run(&db, "CHECKPOINT");
    }
    let mut file = std::fs::read(&path2).unwrap();
    file[SLOT_SIZE as usize..DATA_START as usize].fill(0);
    std::fs::write(&path2, &file).unwrap();
    let error = Database::open(&path2).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(error.contains("continues checkpoint"), "{error}");
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&dir2);
}

/// A damaged log record was taken for a torn last write even with intact records after
/// it: recovery dropped it and every later statement, and cut them from the log.
#[test]
fn a_damaged_log_record_before_intact_ones_is_refused() {
    let dir = fuzz_support::scratch("log-middle");
    let path = dir.join("db.apiary");
    let db = Database::open(&path).unwrap();
    run(&db, "CREATE TABLE t (a INTEGER, b VARCHAR)");
    for a in 1..=3 {
        run(&db, &format!("INSERT INTO t VALUES ({a}, 'row {a}')"));
    }
    // Every commit is synced: these copies are what a crash would leave.
    let file = std::fs::read(&path).unwrap();
    let wal = std::fs::read(wal_path(&path)).unwrap();
    drop(db);
    // The records: CREATE TABLE, then one per INSERT.
    let mut starts = Vec::new();
    let mut position = WAL_HEADER_BYTES;
    while position + 16 <= wal.len() {
        starts.push(position);
        position += 16 + u64::from_le_bytes(wal[position..position + 8].try_into().unwrap()) as usize;
    }
    assert_eq!(starts.len(), 4, "{starts:?}");
    let case = dir.join("case.apiary");
    let open_with = |damaged_record: usize| {
        let mut damaged = wal.clone();
        damaged[starts[damaged_record] + 20] ^= 0x40;
        write_pair(&case, &file, &damaged);
        Database::open(&case)
    };
    let error = open_with(2).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(error.contains("later records are intact"), "{error}");
    // The last record damaged is a torn write: the statements before it stand.
    let db = open_with(3).unwrap();
    assert_eq!(rows_of(&db, "SELECT a FROM t ORDER BY a"), ["1", "2"]);
    drop(db);
    let _ = std::fs::remove_dir_all(&dir);
}
