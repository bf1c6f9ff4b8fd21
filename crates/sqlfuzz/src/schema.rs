//! Random tables: a few columns of random types, NULL-heavy (a column may be all NULL),
//! values drawn from small pools so duplicates are common, whole rows repeated, sizes from
//! empty to a few hundred rows (more than one block and one vector under the small
//! settings of the configuration matrix).

use crate::generator::Features;
use crate::rng::Rng;
use crate::types::{random_value, SqlType, ValueOptions};

/// Rows per INSERT statement: a table arrives in several appends.
const INSERT_BATCH_ROWS: usize = 40;

#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    pub name: String,
    pub ty: SqlType,
}

/// A table and its rows; each value is a SQL literal or `NULL`.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    pub name: String,
    pub columns: Vec<Column>,
    pub rows: Vec<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Schema {
    pub tables: Vec<Table>,
}

impl Table {
    /// `CREATE TABLE` followed by `INSERT` statements.
    pub fn setup_sql(&self) -> Vec<String> {
        let columns: Vec<String> = self.columns.iter().map(|c| format!("{} {}", c.name, c.ty.sql())).collect();
        let mut statements = vec![format!("CREATE TABLE {} ({})", self.name, columns.join(", "))];
        for batch in self.rows.chunks(INSERT_BATCH_ROWS) {
            let rows: Vec<String> = batch.iter().map(|row| format!("({})", row.join(", "))).collect();
            statements.push(format!("INSERT INTO {} VALUES {}", self.name, rows.join(", ")));
        }
        statements
    }
}

impl Schema {
    /// A random schema: 3 to 5 tables `t0`, `t1`, ... Every table has an integer column
    /// (join keys). `features` decides on special floats and huge decimals.
    pub fn random(rng: &mut Rng, features: &Features) -> Schema {
        let options = ValueOptions { special_floats: features.special_floats, huge_decimals: features.huge_decimals };
        let table_count = rng.range(3, 5) as usize;
        let tables = (0..table_count).map(|index| random_table(rng, format!("t{index}"), options)).collect();
        Schema { tables }
    }

    /// All statements that create and fill the tables.
    pub fn setup_sql(&self) -> Vec<String> {
        self.tables.iter().flat_map(|t| t.setup_sql()).collect()
    }

    pub fn table(&self, name: &str) -> Option<&Table> {
        self.tables.iter().find(|t| t.name == name)
    }
}

fn random_table(rng: &mut Rng, name: String, options: ValueOptions) -> Table {
    let column_count = rng.range(2, 6) as usize;
    let mut columns: Vec<Column> =
        (0..column_count).map(|index| Column { name: format!("c{index}"), ty: SqlType::random_column_type(rng) }).collect();
    if !columns.iter().any(|c| matches!(c.ty, SqlType::SmallInt | SqlType::Integer | SqlType::BigInt)) {
        let index = rng.below(columns.len());
        columns[index].ty = SqlType::Integer;
    }
    let row_count = match rng.weighted(&[5, 20, 50, 15, 10]) {
        0 => 0,
        1 => rng.range(1, 5),
        2 => rng.range(6, 30),
        3 => rng.range(31, 80),
        _ => rng.range(100, 250),
    } as usize;
    // Per column: how often it is NULL and the few values it takes.
    let profiles: Vec<(u32, Vec<String>)> = columns
        .iter()
        .map(|c| {
            let null_percent = *rng.pick(&[0, 10, 30, 30, 50, 90, 100]);
            let distinct = rng.range(1, 10) as usize;
            let pool = (0..distinct).map(|_| random_value(rng, c.ty, options)).collect();
            (null_percent, pool)
        })
        .collect();
    let mut rows: Vec<Vec<String>> = Vec::with_capacity(row_count);
    for _ in 0..row_count {
        if !rows.is_empty() && rng.chance(10) {
            let copy = rows[rng.below(rows.len())].clone();
            rows.push(copy);
            continue;
        }
        let row = profiles
            .iter()
            .map(|(null_percent, pool)| if rng.chance(*null_percent) { "NULL".to_string() } else { rng.pick(pool).clone() })
            .collect();
        rows.push(row);
    }
    Table { name, columns, rows }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_is_deterministic_and_has_int_columns() {
        let a = Schema::random(&mut Rng::new(11), &Features::default());
        let b = Schema::random(&mut Rng::new(11), &Features::default());
        assert_eq!(a, b);
        for table in &a.tables {
            assert!(table.columns.iter().any(|c| matches!(c.ty, SqlType::SmallInt | SqlType::Integer | SqlType::BigInt)));
            assert!(table.rows.iter().all(|r| r.len() == table.columns.len()));
        }
    }
}
