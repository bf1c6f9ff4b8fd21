//! TPC-H: schema, in-process data generation (with the `tpchgen` crate), `.tbl` export,
//! the 22 queries and the reference answers carried in the repository.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

use apiary_common::{ApiaryError, Result};
use apiary_types::{DataChunk, DataType, StrColumnBuilder, Vector, VectorData};
use tpchgen::generators::{
    CustomerGenerator, LineItemGenerator, NationGenerator, OrderGenerator, PartGenerator, PartSuppGenerator, RegionGenerator,
    SupplierGenerator,
};

use crate::result::QueryResult;
use crate::Connection;

/// Tables in load order.
pub const TABLES: [&str; 8] = ["region", "nation", "part", "supplier", "partsupp", "customer", "orders", "lineitem"];

/// The standard TPC-H DDL (from `dss.ddl`), with NOT NULL columns.
pub const SCHEMA: &str = "
CREATE TABLE region (r_regionkey INTEGER NOT NULL, r_name CHAR(25) NOT NULL, r_comment VARCHAR(152));
CREATE TABLE nation (n_nationkey INTEGER NOT NULL, n_name CHAR(25) NOT NULL, n_regionkey INTEGER NOT NULL, n_comment VARCHAR(152));
CREATE TABLE part (p_partkey INTEGER NOT NULL, p_name VARCHAR(55) NOT NULL, p_mfgr CHAR(25) NOT NULL, p_brand CHAR(10) NOT NULL,
  p_type VARCHAR(25) NOT NULL, p_size INTEGER NOT NULL, p_container CHAR(10) NOT NULL, p_retailprice DECIMAL(15,2) NOT NULL,
  p_comment VARCHAR(23) NOT NULL);
CREATE TABLE supplier (s_suppkey INTEGER NOT NULL, s_name CHAR(25) NOT NULL, s_address VARCHAR(40) NOT NULL,
  s_nationkey INTEGER NOT NULL, s_phone CHAR(15) NOT NULL, s_acctbal DECIMAL(15,2) NOT NULL, s_comment VARCHAR(101) NOT NULL);
CREATE TABLE partsupp (ps_partkey INTEGER NOT NULL, ps_suppkey INTEGER NOT NULL, ps_availqty INTEGER NOT NULL,
  ps_supplycost DECIMAL(15,2) NOT NULL, ps_comment VARCHAR(199) NOT NULL);
CREATE TABLE customer (c_custkey INTEGER NOT NULL, c_name VARCHAR(25) NOT NULL, c_address VARCHAR(40) NOT NULL,
  c_nationkey INTEGER NOT NULL, c_phone CHAR(15) NOT NULL, c_acctbal DECIMAL(15,2) NOT NULL, c_mktsegment CHAR(10) NOT NULL,
  c_comment VARCHAR(117) NOT NULL);
CREATE TABLE orders (o_orderkey INTEGER NOT NULL, o_custkey INTEGER NOT NULL, o_orderstatus CHAR(1) NOT NULL,
  o_totalprice DECIMAL(15,2) NOT NULL, o_orderdate DATE NOT NULL, o_orderpriority CHAR(15) NOT NULL, o_clerk CHAR(15) NOT NULL,
  o_shippriority INTEGER NOT NULL, o_comment VARCHAR(79) NOT NULL);
CREATE TABLE lineitem (l_orderkey INTEGER NOT NULL, l_partkey INTEGER NOT NULL, l_suppkey INTEGER NOT NULL,
  l_linenumber INTEGER NOT NULL, l_quantity DECIMAL(15,2) NOT NULL, l_extendedprice DECIMAL(15,2) NOT NULL,
  l_discount DECIMAL(15,2) NOT NULL, l_tax DECIMAL(15,2) NOT NULL, l_returnflag CHAR(1) NOT NULL, l_linestatus CHAR(1) NOT NULL,
  l_shipdate DATE NOT NULL, l_commitdate DATE NOT NULL, l_receiptdate DATE NOT NULL, l_shipinstruct CHAR(25) NOT NULL,
  l_shipmode CHAR(10) NOT NULL, l_comment VARCHAR(44) NOT NULL);
";

macro_rules! queries {
    ($($n:literal),*) => { [$(include_str!(concat!("../../../tpch/queries/q", $n, ".sql"))),*] };
}

const QUERIES: [&str; 22] = queries!(
    "01", "02", "03", "04", "05", "06", "07", "08", "09", "10", "11", "12", "13", "14", "15", "16", "17", "18", "19", "20", "21", "22"
);

macro_rules! answers {
    ($sf:literal: $($n:literal),*) => { [$(include_str!(concat!("../../../tpch/answers/sf", $sf, "/q", $n, ".csv"))),*] };
}

const ANSWERS_SF001: [&str; 22] = answers!("0.01": "01", "02", "03", "04", "05", "06", "07", "08", "09", "10", "11", "12", "13", "14", "15", "16", "17", "18", "19", "20", "21", "22");
const ANSWERS_SF01: [&str; 22] = answers!("0.1": "01", "02", "03", "04", "05", "06", "07", "08", "09", "10", "11", "12", "13", "14", "15", "16", "17", "18", "19", "20", "21", "22");
const ANSWERS_SF1: [&str; 22] = answers!("1": "01", "02", "03", "04", "05", "06", "07", "08", "09", "10", "11", "12", "13", "14", "15", "16", "17", "18", "19", "20", "21", "22");

/// The text of query `number` (1-22).
pub fn query(number: usize) -> Option<&'static str> {
    QUERIES.get(number.checked_sub(1)?).copied()
}

/// The reference answer of query `number` at scale factor `sf`, if the repository has it.
pub fn answer(sf: f64, number: usize) -> Option<&'static str> {
    let index = number.checked_sub(1)?;
    let answers = if (sf - 0.01).abs() < 1e-9 {
        &ANSWERS_SF001
    } else if (sf - 0.1).abs() < 1e-9 {
        &ANSWERS_SF01
    } else if (sf - 1.0).abs() < 1e-9 {
        &ANSWERS_SF1
    } else {
        return None;
    };
    answers.get(index).copied()
}

/// Compares a result with a reference answer (`|`-separated, header line first):
/// numbers within 0.01 or a relative 1e-6, text equal after trimming trailing blanks.
pub fn check_answer(result: &QueryResult, expected: &str) -> std::result::Result<(), String> {
    let mut lines = expected.strip_suffix('\n').unwrap_or(expected).split('\n');
    lines.next(); // header
                  // A row whose only value is NULL is an empty line, so empty lines are rows.
    let expected_rows: Vec<Vec<&str>> = lines.map(|l| l.trim_end_matches('\r').split('|').collect()).collect();
    let actual_rows: Vec<Vec<Option<String>>> = result
        .chunks
        .iter()
        .flat_map(|chunk| {
            (0..chunk.row_count()).map(move |r| (0..chunk.column_count()).map(|c| QueryResult::format_cell(chunk, r, c)).collect())
        })
        .collect();
    if expected_rows.len() != actual_rows.len() {
        return Err(format!("expected {} rows, got {}", expected_rows.len(), actual_rows.len()));
    }
    for (row, (want, got)) in expected_rows.iter().zip(&actual_rows).enumerate() {
        if want.len() != got.len() {
            return Err(format!("row {row}: expected {} columns, got {}", want.len(), got.len()));
        }
        for (column, (w, g)) in want.iter().zip(got).enumerate() {
            let g = g.as_deref().unwrap_or("");
            let same = match (w.trim().parse::<f64>(), g.trim().parse::<f64>()) {
                (Ok(a), Ok(b)) => (a - b).abs() <= 0.01 || (a - b).abs() <= 1e-6 * a.abs().max(b.abs()),
                _ => w.trim_end() == g.trim_end(),
            };
            if !same {
                return Err(format!("row {row}, column {column}: expected '{w}', got '{g}'"));
            }
        }
    }
    Ok(())
}

/// One column being generated.
enum Column {
    Int(Vec<i32>),
    Long(Vec<i64>),
    Decimal(Vec<i64>),
    Date(Vec<i32>),
    Text(StrColumnBuilder),
}

struct Columns {
    columns: Vec<Column>,
    scratch: String,
}

impl Columns {
    fn new(kinds: &str) -> Columns {
        let columns = kinds
            .chars()
            .map(|k| match k {
                'i' => Column::Int(Vec::new()),
                'l' => Column::Long(Vec::new()),
                'd' => Column::Decimal(Vec::new()),
                'D' => Column::Date(Vec::new()),
                _ => Column::Text(StrColumnBuilder::new()),
            })
            .collect();
        Columns { columns, scratch: String::new() }
    }

    fn int(&mut self, c: usize, v: i64) {
        match &mut self.columns[c] {
            Column::Int(x) => x.push(v as i32),
            Column::Long(x) => x.push(v),
            _ => unreachable!("column {c} is not an integer"),
        }
    }

    fn decimal(&mut self, c: usize, v: i64) {
        if let Column::Decimal(x) = &mut self.columns[c] {
            x.push(v);
        }
    }

    fn date(&mut self, c: usize, v: i32) {
        if let Column::Date(x) = &mut self.columns[c] {
            x.push(v);
        }
    }

    fn text(&mut self, c: usize, v: impl std::fmt::Display) {
        self.scratch.clear();
        let _ = write!(self.scratch, "{v}");
        if let Column::Text(b) = &mut self.columns[c] {
            // CHAR values are stored without trailing blanks.
            b.push(self.scratch.trim_end_matches(' '));
        }
    }

    fn finish(self, types: &[DataType]) -> Vec<Vector> {
        self.columns
            .into_iter()
            .zip(types)
            .map(|(c, t)| {
                let data = match c {
                    Column::Int(v) | Column::Date(v) => VectorData::I32(v.into()),
                    Column::Long(v) | Column::Decimal(v) => VectorData::I64(v.into()),
                    Column::Text(b) => VectorData::Str(b.finish()),
                };
                Vector::new(*t, data, None)
            })
            .collect()
    }
}

/// Generates part `part` of `part_count` of `table` at scale factor `sf`.
fn generate_part(table: &str, sf: f64, part: i32, part_count: i32, types: &[DataType]) -> Vec<Vector> {
    let kinds: String = types
        .iter()
        .map(|t| match t {
            DataType::Integer => 'i',
            DataType::BigInt => 'l',
            DataType::Decimal { .. } => 'd',
            DataType::Date => 'D',
            _ => 's',
        })
        .collect();
    let mut c = Columns::new(&kinds);
    match table {
        "region" => {
            for r in RegionGenerator::new(sf, part, part_count).iter() {
                c.int(0, r.r_regionkey);
                c.text(1, r.r_name);
                c.text(2, r.r_comment);
            }
        }
        "nation" => {
            for n in NationGenerator::new(sf, part, part_count).iter() {
                c.int(0, n.n_nationkey);
                c.text(1, n.n_name);
                c.int(2, n.n_regionkey);
                c.text(3, n.n_comment);
            }
        }
        "part" => {
            for p in PartGenerator::new(sf, part, part_count).iter() {
                c.int(0, p.p_partkey);
                c.text(1, &p.p_name);
                c.text(2, p.p_mfgr);
                c.text(3, p.p_brand);
                c.text(4, p.p_type);
                c.int(5, p.p_size as i64);
                c.text(6, p.p_container);
                c.decimal(7, p.p_retailprice.0);
                c.text(8, p.p_comment);
            }
        }
        "supplier" => {
            for s in SupplierGenerator::new(sf, part, part_count).iter() {
                c.int(0, s.s_suppkey);
                c.text(1, s.s_name);
                c.text(2, &s.s_address);
                c.int(3, s.s_nationkey);
                c.text(4, &s.s_phone);
                c.decimal(5, s.s_acctbal.0);
                c.text(6, &s.s_comment);
            }
        }
        "partsupp" => {
            for ps in PartSuppGenerator::new(sf, part, part_count).iter() {
                c.int(0, ps.ps_partkey);
                c.int(1, ps.ps_suppkey);
                c.int(2, ps.ps_availqty as i64);
                c.decimal(3, ps.ps_supplycost.0);
                c.text(4, ps.ps_comment);
            }
        }
        "customer" => {
            for cu in CustomerGenerator::new(sf, part, part_count).iter() {
                c.int(0, cu.c_custkey);
                c.text(1, cu.c_name);
                c.text(2, &cu.c_address);
                c.int(3, cu.c_nationkey);
                c.text(4, &cu.c_phone);
                c.decimal(5, cu.c_acctbal.0);
                c.text(6, cu.c_mktsegment);
                c.text(7, cu.c_comment);
            }
        }
        "orders" => {
            for o in OrderGenerator::new(sf, part, part_count).iter() {
                c.int(0, o.o_orderkey);
                c.int(1, o.o_custkey);
                c.text(2, o.o_orderstatus);
                c.decimal(3, o.o_totalprice.0);
                c.date(4, o.o_orderdate.to_unix_epoch());
                c.text(5, o.o_orderpriority);
                c.text(6, o.o_clerk);
                c.int(7, o.o_shippriority as i64);
                c.text(8, o.o_comment);
            }
        }
        "lineitem" => {
            for l in LineItemGenerator::new(sf, part, part_count).iter() {
                c.int(0, l.l_orderkey);
                c.int(1, l.l_partkey);
                c.int(2, l.l_suppkey);
                c.int(3, l.l_linenumber as i64);
                c.decimal(4, l.l_quantity * 100);
                c.decimal(5, l.l_extendedprice.0);
                c.decimal(6, l.l_discount.0);
                c.decimal(7, l.l_tax.0);
                c.text(8, l.l_returnflag);
                c.text(9, l.l_linestatus);
                c.date(10, l.l_shipdate.to_unix_epoch());
                c.date(11, l.l_commitdate.to_unix_epoch());
                c.date(12, l.l_receiptdate.to_unix_epoch());
                c.text(13, l.l_shipinstruct);
                c.text(14, l.l_shipmode);
                c.text(15, l.l_comment);
            }
        }
        other => unreachable!("unknown TPC-H table {other}"),
    }
    c.finish(types)
}

/// Number of generator parts for a table: at least two per thread, and parts of about
/// a million rows for the big tables, so that a part's unpacked columns are a small
/// fraction of the packed table they are appended to.
fn part_count(table: &str, threads: usize, sf: f64) -> i32 {
    let rows_per_sf = match table {
        "region" | "nation" => return 1,
        "lineitem" => 6_000_000.0,
        "orders" => 1_500_000.0,
        "partsupp" => 800_000.0,
        _ => 200_000.0,
    };
    let by_size = (rows_per_sf * sf / 1_000_000.0).ceil() as i32;
    by_size.max((threads * 2) as i32).max(1)
}

/// Parts generated ahead of the one being appended: bounds the unpacked rows in memory.
const PARTS_AHEAD: i32 = 2;

/// Creates the TPC-H tables (dropping existing ones) and fills them at scale factor `sf`.
/// Parts are generated on all threads and appended in order as they finish, at most
/// `threads + PARTS_AHEAD` of them held at once.
pub fn load(conn: &mut Connection, sf: f64) -> Result<()> {
    if !(sf > 0.0 && sf <= 1000.0) {
        return Err(ApiaryError::Bind(format!("scale factor must be in (0, 1000], not {sf}")));
    }
    for table in TABLES {
        conn.execute(&format!("DROP TABLE IF EXISTS {table}"))?;
    }
    conn.execute(SCHEMA)?;
    let threads = conn.db.scheduler.threads();
    for table_name in TABLES {
        let table = conn.catalog().table(table_name)?;
        let types = table.schema.types();
        let parts = part_count(table_name, threads, sf);
        let next = std::sync::atomic::AtomicI32::new(1);
        // Generated parts by number, the number of parts appended, and whether to stop.
        struct Progress {
            ready: std::collections::BTreeMap<i32, Vec<Vector>>,
            appended: i32,
            stop: bool,
        }
        let progress = std::sync::Mutex::new(Progress { ready: Default::default(), appended: 0, stop: false });
        let changed = std::sync::Condvar::new();
        let lock = || progress.lock().unwrap_or_else(|e| e.into_inner());
        let mut appender = conn.table_writer(&table)?;
        let appended: Result<()> = std::thread::scope(|scope| {
            for _ in 0..threads.min(parts as usize) {
                scope.spawn(|| loop {
                    let part = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if part > parts {
                        break;
                    }
                    // Wait until the part is within reach of the appender.
                    let mut state = lock();
                    while !state.stop && part > state.appended + threads as i32 + PARTS_AHEAD {
                        state = changed.wait(state).unwrap_or_else(|e| e.into_inner());
                    }
                    if state.stop {
                        break;
                    }
                    drop(state);
                    let columns = generate_part(table_name, sf, part, parts, &types);
                    lock().ready.insert(part, columns);
                    changed.notify_all();
                });
            }
            let result = (1..=parts).try_for_each(|part| {
                let mut state = lock();
                let columns = loop {
                    if let Some(columns) = state.ready.remove(&part) {
                        break columns;
                    }
                    state = changed.wait(state).unwrap_or_else(|e| e.into_inner());
                };
                drop(state);
                let len = columns.first().map_or(0, |c| c.len());
                appender.append(&DataChunk::new(columns, len))?;
                lock().appended = part;
                changed.notify_all();
                Ok(())
            });
            // On an error the generators waiting for room stop.
            lock().stop = true;
            changed.notify_all();
            result
        });
        appended?;
        conn.finish_write(&table, appender.prepare()?)?;
    }
    Ok(())
}

/// Writes `<table>.tbl` files (dbgen format: `|`-separated with a trailing `|`).
pub fn write_tbl(dir: &Path, sf: f64) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| ApiaryError::Io(format!("cannot create {}: {e}", dir.display())))?;
    for table in TABLES {
        let path = dir.join(format!("{table}.tbl"));
        let file = std::fs::File::create(&path).map_err(|e| ApiaryError::Io(format!("cannot create {}: {e}", path.display())))?;
        let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
        let io = |e: std::io::Error| ApiaryError::Io(format!("writing {}: {e}", path.display()));
        macro_rules! rows {
            ($generator:expr) => {
                for row in $generator.iter() {
                    writeln!(out, "{row}").map_err(io)?;
                }
            };
        }
        match table {
            "region" => rows!(RegionGenerator::new(sf, 1, 1)),
            "nation" => rows!(NationGenerator::new(sf, 1, 1)),
            "part" => rows!(PartGenerator::new(sf, 1, 1)),
            "supplier" => rows!(SupplierGenerator::new(sf, 1, 1)),
            "partsupp" => rows!(PartSuppGenerator::new(sf, 1, 1)),
            "customer" => rows!(CustomerGenerator::new(sf, 1, 1)),
            "orders" => rows!(OrderGenerator::new(sf, 1, 1)),
            _ => rows!(LineItemGenerator::new(sf, 1, 1)),
        }
        out.flush().map_err(io)?;
    }
    Ok(())
}
