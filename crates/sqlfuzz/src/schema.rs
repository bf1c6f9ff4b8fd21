//! Random tables: a few columns of random types, NULL-heavy (a column may be all NULL),
//! values drawn from small pools so duplicates are common, whole rows repeated, sizes from
//! empty to a few hundred rows (more than one block and one vector under the small
//! settings of the configuration matrix). Some columns are NOT NULL, some tables have an
//! integer PRIMARY KEY (`Features::constraints`): their values are still NULL where an
//! outer join extends them.

use crate::generator::Features;
use crate::rng::Rng;
use crate::types::{random_value, SqlType, ValueOptions};

/// Rows per INSERT statement: a table arrives in several appends.
const INSERT_BATCH_ROWS: usize = 40;

#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    pub name: String,
    pub ty: SqlType,
    pub not_null: bool,
}

/// A table and its rows; each value is a SQL literal or `NULL`.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    pub name: String,
    pub columns: Vec<Column>,
    /// Index of the PRIMARY KEY column.
    pub primary_key: Option<usize>,
    pub rows: Vec<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Schema {
    pub tables: Vec<Table>,
}

impl Table {
    /// `CREATE TABLE` followed by `INSERT` statements.
    pub fn setup_sql(&self) -> Vec<String> {
        let mut columns: Vec<String> =
            self.columns.iter().map(|c| format!("{} {}{}", c.name, c.ty.sql(), if c.not_null { " NOT NULL" } else { "" })).collect();
        if let Some(key) = self.primary_key.and_then(|k| self.columns.get(k)) {
            columns.push(format!("PRIMARY KEY ({})", key.name));
        }
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
        let tables = (0..table_count).map(|index| random_table(rng, format!("t{index}"), options, features.constraints)).collect();
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

fn random_table(rng: &mut Rng, name: String, options: ValueOptions, constraints: bool) -> Table {
    let column_count = rng.range(2, 6) as usize;
    let mut columns: Vec<Column> = (0..column_count)
        .map(|index| Column { name: format!("c{index}"), ty: SqlType::random_column_type(rng), not_null: constraints && rng.chance(15) })
        .collect();
    let is_integer = |ty: SqlType| matches!(ty, SqlType::SmallInt | SqlType::Integer | SqlType::BigInt);
    if !columns.iter().any(|c| is_integer(c.ty)) {
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
    // A primary key: an integer column with distinct values (rows are then never repeated).
    let primary_key = if constraints && rng.chance(25) {
        let integers: Vec<usize> = (0..columns.len()).filter(|i| is_integer(columns[*i].ty)).collect();
        let key = integers[rng.below(integers.len())];
        columns[key].not_null = true;
        Some(key)
    } else {
        None
    };
    // Per column: how often it is NULL and the few values it takes.
    let profiles: Vec<(u32, Vec<String>)> = columns
        .iter()
        .map(|c| {
            let null_percent = if c.not_null { 0 } else { *rng.pick(&[0, 10, 30, 30, 50, 90, 100]) };
            let distinct = rng.range(1, 10) as usize;
            let pool = (0..distinct).map(|_| random_value(rng, c.ty, options)).collect();
            (null_percent, pool)
        })
        .collect();
    // Distinct key values: a shuffled run of small integers (SMALLINT-sized).
    let mut keys: Vec<i64> = (0..row_count as i64).map(|i| i * 3 - 40).collect();
    for i in (1..keys.len()).rev() {
        keys.swap(i, rng.below(i + 1));
    }
    let mut rows: Vec<Vec<String>> = Vec::with_capacity(row_count);
    for row_index in 0..row_count {
        if primary_key.is_none() && !rows.is_empty() && rng.chance(10) {
            let copy = rows[rng.below(rows.len())].clone();
            rows.push(copy);
            continue;
        }
        let row = profiles
            .iter()
            .enumerate()
            .map(|(column, (null_percent, pool))| {
                if Some(column) == primary_key {
                    let key = keys[row_index];
                    if key < 0 {
                        format!("({key})")
                    } else {
                        key.to_string()
                    }
                } else if rng.chance(*null_percent) {
                    "NULL".to_string()
                } else {
                    rng.pick(pool).clone()
                }
            })
            .collect();
        rows.push(row);
    }
    Table { name, columns, primary_key, rows }
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
        // Constraints hold in the data.
        let schema = Schema::random(&mut Rng::new(3), &Features::default());
        for table in &schema.tables {
            for (index, column) in table.columns.iter().enumerate() {
                if column.not_null {
                    assert!(table.rows.iter().all(|r| r[index] != "NULL"), "{}.{}", table.name, column.name);
                }
            }
            if let Some(key) = table.primary_key {
                let mut values: Vec<&String> = table.rows.iter().map(|r| &r[key]).collect();
                values.sort();
                values.dedup();
                assert_eq!(values.len(), table.rows.len());
            }
        }
    }
}
