//! The table functions `generate_series(start, stop [, step])` (stop included, as
//! PostgreSQL and DuckDB) and `range(start, stop [, step])` (stop excluded, DuckDB), over
//! integers, and over timestamps (or dates) with an INTERVAL step; with a TIMESTAMPTZ
//! argument the series is one of instants, stepped on the session zone's calendar (as
//! PostgreSQL adds an interval to a TIMESTAMPTZ). With one argument the
//! series starts at 0 (DuckDB). The rows are materialised into a temporary table, which
//! counts against `memory_limit` before it is built.

use std::sync::Arc;

use apiary_common::{bind_err, Result};
use apiary_storage::{BufferPool, Table};
use apiary_types::datetime::{add_interval_to_timestamp, add_interval_to_timestamptz, MICROS_PER_DAY};
use apiary_types::{DataType, Field, ScalarValue, TimeZone, Vector};

/// Rows of one vector of the generated column.
const PIECE_ROWS: usize = 1 << 16;

/// `Ok(None)` when `name` is not a series function.
pub fn series(name: &str, args: &[ScalarValue], pool: &BufferPool, block_rows: usize, zone: &TimeZone) -> Result<Option<Arc<Table>>> {
    let inclusive = match name {
        "generate_series" => true,
        "range" => false,
        _ => return Ok(None),
    };
    if args.is_empty() || args.len() > 3 {
        return Err(bind_err!("{name} takes 1 to 3 arguments (start, stop, step), got {}", args.len()));
    }
    if args.iter().any(ScalarValue::is_null) {
        // PostgreSQL: no rows for a NULL argument.
        return Ok(Some(build(name, DataType::BigInt, Vec::new(), block_rows)?));
    }
    let temporal = args.iter().any(|a| matches!(a, ScalarValue::Timestamp(_) | ScalarValue::Date(_) | ScalarValue::TimestampTz(_)));
    if temporal {
        return timestamps(name, args, inclusive, pool, block_rows, zone).map(Some);
    }
    let integer = |v: &ScalarValue| -> Result<i64> {
        match v {
            ScalarValue::Int16(_) | ScalarValue::Int32(_) | ScalarValue::Int64(_) => Ok(v.as_i128().unwrap_or(0) as i64),
            other => Err(bind_err!("{name} needs integer arguments (or timestamps with an interval step), not {other}")),
        }
    };
    let (start, stop, step) = match args {
        [stop] => (0, integer(stop)?, 1),
        [start, stop] => (integer(start)?, integer(stop)?, 1),
        [start, stop, step] => (integer(start)?, integer(stop)?, integer(step)?),
        _ => unreachable!("arity checked"),
    };
    if step == 0 {
        return Err(bind_err!("step size cannot equal zero"));
    }
    // The number of values, in i128 so that extreme bounds do not overflow.
    let span = stop as i128 - start as i128;
    let mut count = if (span >= 0) == (step > 0) || span == 0 { span / step as i128 + 1 } else { 0 };
    if !inclusive && count > 0 && start as i128 + (count - 1) * step as i128 == stop as i128 {
        count -= 1;
    }
    let count = usize::try_from(count.max(0)).map_err(|_| bind_err!("{name} would produce too many rows"))?;
    pool.check_headroom(count.saturating_mul(8), &format!("{name}() of {count} rows"))?;
    let mut pieces = Vec::new();
    let mut produced = 0usize;
    while produced < count {
        let rows = (count - produced).min(PIECE_ROWS);
        let first = start as i128 + produced as i128 * step as i128;
        let values: Vec<i64> = (0..rows).map(|i| (first + i as i128 * step as i128) as i64).collect();
        pieces.push(Vector::from_native(DataType::BigInt, values));
        produced += rows;
    }
    Ok(Some(build(name, DataType::BigInt, pieces, block_rows)?))
}

fn timestamps(
    name: &str,
    args: &[ScalarValue],
    inclusive: bool,
    pool: &BufferPool,
    block_rows: usize,
    zone: &TimeZone,
) -> Result<Arc<Table>> {
    // With a TIMESTAMPTZ bound, the others are read in the session's zone (PostgreSQL
    // converts them so), and the steps follow that zone's calendar.
    let instants = args.iter().any(|a| matches!(a, ScalarValue::TimestampTz(_)));
    let out_of_range = || bind_err!("{name}: timestamp out of range");
    let moment = |v: &ScalarValue| -> Result<i64> {
        let local = match v {
            ScalarValue::TimestampTz(t) => return Ok(*t),
            ScalarValue::Timestamp(t) => *t,
            ScalarValue::Date(d) => *d as i64 * MICROS_PER_DAY,
            other => return Err(bind_err!("{name} over timestamps needs a start and a stop timestamp, not {other}")),
        };
        if instants {
            zone.to_utc(local).ok_or_else(out_of_range)
        } else {
            Ok(local)
        }
    };
    let data_type = if instants { DataType::TimestampTz } else { DataType::Timestamp };
    let [start, stop, ScalarValue::Interval(step)] = args else {
        return Err(bind_err!("{name} over timestamps needs (start, stop, interval step)"));
    };
    let (start, stop, step) = (moment(start)?, moment(stop)?, *step);
    if step.normalized() == 0 {
        return Err(bind_err!("step size cannot equal zero"));
    }
    let ascending = step.normalized() > 0;
    let mut values = Vec::new();
    let mut current = start;
    loop {
        let before_stop = if ascending { current < stop } else { current > stop };
        if !(before_stop || (inclusive && current == stop)) {
            break;
        }
        values.push(current);
        if values.len() % PIECE_ROWS == 0 {
            pool.check_headroom(values.len() * 8, &format!("{name}() of {} rows", values.len()))?;
        }
        let next = if instants { add_interval_to_timestamptz(current, step, zone) } else { add_interval_to_timestamp(current, step) };
        current = match next {
            // A step like '1 month -29 days' can stand still in February: stop rather
            // than repeat a value forever.
            Some(next) if (next > current) == ascending && next != current => next,
            _ => break,
        };
    }
    let pieces = values.chunks(PIECE_ROWS).map(|c| Vector::from_native(data_type, c.to_vec())).collect();
    build(name, data_type, pieces, block_rows)
}

fn build(name: &str, data_type: DataType, pieces: Vec<Vector>, block_rows: usize) -> Result<Arc<Table>> {
    let fields = vec![Field::new(name, data_type, false)];
    crate::table_functions::temporary_table(name, fields, pieces.into_iter().map(|v| vec![v]).collect(), block_rows)
}
