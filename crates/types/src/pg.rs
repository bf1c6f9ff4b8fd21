//! PostgreSQL's identities for Apiary's types: type OIDs, names, lengths and type
//! modifiers, as the wire protocol (RowDescription, ParameterDescription) and the
//! `pg_catalog` tables report them. One table, so that what a client sees in a result's
//! description and what it reads from `pg_type`/`pg_attribute` agree.

use crate::datatype::DataType;

/// A PostgreSQL type as `pg_type` describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PgType {
    pub oid: u32,
    /// `pg_type.typname`.
    pub name: &'static str,
    /// `pg_type.typlen`: bytes of a value, -1 for variable length.
    pub len: i16,
    /// What `format_type` prints without a modifier (`character varying`).
    pub sql_name: &'static str,
    /// `pg_type.typcategory`.
    pub category: char,
}

pub const BOOL: PgType = PgType { oid: 16, name: "bool", len: 1, sql_name: "boolean", category: 'B' };
pub const INT8: PgType = PgType { oid: 20, name: "int8", len: 8, sql_name: "bigint", category: 'N' };
pub const INT2: PgType = PgType { oid: 21, name: "int2", len: 2, sql_name: "smallint", category: 'N' };
pub const INT4: PgType = PgType { oid: 23, name: "int4", len: 4, sql_name: "integer", category: 'N' };
pub const TEXT: PgType = PgType { oid: 25, name: "text", len: -1, sql_name: "text", category: 'S' };
pub const OID: PgType = PgType { oid: 26, name: "oid", len: 4, sql_name: "oid", category: 'N' };
pub const FLOAT4: PgType = PgType { oid: 700, name: "float4", len: 4, sql_name: "real", category: 'N' };
pub const FLOAT8: PgType = PgType { oid: 701, name: "float8", len: 8, sql_name: "double precision", category: 'N' };
pub const UNKNOWN: PgType = PgType { oid: 705, name: "unknown", len: -2, sql_name: "unknown", category: 'X' };
pub const BPCHAR: PgType = PgType { oid: 1042, name: "bpchar", len: -1, sql_name: "character", category: 'S' };
pub const VARCHAR: PgType = PgType { oid: 1043, name: "varchar", len: -1, sql_name: "character varying", category: 'S' };
pub const DATE: PgType = PgType { oid: 1082, name: "date", len: 4, sql_name: "date", category: 'D' };
pub const TIME: PgType = PgType { oid: 1083, name: "time", len: 8, sql_name: "time without time zone", category: 'D' };
pub const TIMESTAMP: PgType = PgType { oid: 1114, name: "timestamp", len: 8, sql_name: "timestamp without time zone", category: 'D' };
pub const TIMESTAMPTZ: PgType = PgType { oid: 1184, name: "timestamptz", len: 8, sql_name: "timestamp with time zone", category: 'D' };
pub const INTERVAL: PgType = PgType { oid: 1186, name: "interval", len: 16, sql_name: "interval", category: 'T' };
pub const NUMERIC: PgType = PgType { oid: 1700, name: "numeric", len: -1, sql_name: "numeric", category: 'N' };

/// Every type Apiary's values can have, in OID order (the rows of `pg_type`).
pub const ALL_TYPES: [PgType; 17] =
    [BOOL, INT8, INT2, INT4, TEXT, OID, FLOAT4, FLOAT8, UNKNOWN, BPCHAR, VARCHAR, DATE, TIME, TIMESTAMP, TIMESTAMPTZ, INTERVAL, NUMERIC];

/// The PostgreSQL type of values of `data_type`. `VARCHAR` without a length is
/// `varchar` (PostgreSQL's `text` behaves the same; Apiary does not tell them apart);
/// an untyped NULL column is `text`, as PostgreSQL resolves unknown-typed output.
pub fn pg_type(data_type: DataType) -> PgType {
    match data_type {
        DataType::Null => TEXT,
        DataType::Boolean => BOOL,
        DataType::SmallInt => INT2,
        DataType::Integer => INT4,
        DataType::BigInt => INT8,
        DataType::Real => FLOAT4,
        DataType::Double => FLOAT8,
        DataType::Decimal { .. } => NUMERIC,
        DataType::Char(_) => BPCHAR,
        DataType::Varchar(_) => VARCHAR,
        DataType::Date => DATE,
        DataType::Timestamp => TIMESTAMP,
        DataType::TimestampTz => TIMESTAMPTZ,
        DataType::Time => TIME,
        DataType::Interval => INTERVAL,
    }
}

/// PostgreSQL's type modifier (`atttypmod`): lengths and precisions, -1 for none.
pub fn type_modifier(data_type: DataType) -> i32 {
    // VARHDRSZ: PostgreSQL stores character lengths and numeric precisions plus 4.
    const HEADER: i32 = 4;
    match data_type {
        DataType::Char(n) | DataType::Varchar(Some(n)) => i32::try_from(n).map_or(-1, |n| n.saturating_add(HEADER)),
        DataType::Decimal { precision, scale } => ((precision as i32) << 16 | scale as i32) + HEADER,
        _ => -1,
    }
}

/// The Apiary type for a PostgreSQL type OID a client names (parameter types, casts).
/// `None` for types Apiary does not have.
pub fn data_type_for_oid(oid: u32) -> Option<DataType> {
    Some(match oid {
        16 => DataType::Boolean,
        20 => DataType::BigInt,
        21 => DataType::SmallInt,
        23 | 26 => DataType::Integer,
        25 | 1043 | 19 => DataType::Varchar(None),
        1042 => DataType::Varchar(None),
        700 => DataType::Real,
        701 => DataType::Double,
        1082 => DataType::Date,
        1083 => DataType::Time,
        1114 => DataType::Timestamp,
        1184 => DataType::TimestampTz,
        1186 => DataType::Interval,
        1700 => DataType::Decimal { precision: 38, scale: 10 },
        _ => return None,
    })
}

/// First OID PostgreSQL gives user objects.
const FIRST_USER_OID: u32 = 16_384;

/// A stable OID for a user table: derived from its name (FNV-1a), above the system range,
/// so it stays the same between the queries a client makes about one table.
pub fn table_oid(name: &str) -> i32 {
    let mut hash: u32 = 0x811c_9dc5;
    for byte in name.bytes() {
        hash = (hash ^ byte as u32).wrapping_mul(0x0100_0193);
    }
    (FIRST_USER_OID + hash % (i32::MAX as u32 - FIRST_USER_OID)) as i32
}

/// `'name'::regclass`: PostgreSQL's fixed OIDs for its catalogs, [`table_oid`] otherwise.
pub fn relation_oid(name: &str) -> i32 {
    let name = name.strip_prefix("pg_catalog.").unwrap_or(name);
    match name {
        "pg_type" => 1247,
        "pg_attribute" => 1249,
        "pg_proc" => 1255,
        "pg_class" => 1259,
        "pg_namespace" => 2615,
        "pg_constraint" => 2606,
        "pg_description" => 2609,
        "pg_index" => 2610,
        "pg_database" => 1262,
        other => table_oid(other.strip_prefix("public.").unwrap_or(other)),
    }
}

/// `format_type(type, typmod)`: the SQL spelling of a column's type
/// (`character varying(44)`, `numeric(15,2)`).
pub fn format_type(data_type: DataType) -> String {
    let base = pg_type(data_type).sql_name;
    match data_type {
        DataType::Char(n) | DataType::Varchar(Some(n)) => format!("{base}({n})"),
        DataType::Decimal { precision, scale } => format!("{base}({precision},{scale})"),
        _ => base.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modifiers_and_names_follow_postgres() {
        assert_eq!(type_modifier(DataType::Varchar(Some(44))), 48);
        assert_eq!(type_modifier(DataType::decimal(15, 2)), (15 << 16 | 2) + 4);
        assert_eq!(type_modifier(DataType::Integer), -1);
        assert_eq!(format_type(DataType::Varchar(Some(10))), "character varying(10)");
        assert_eq!(format_type(DataType::decimal(15, 2)), "numeric(15,2)");
        assert_eq!(format_type(DataType::Timestamp), "timestamp without time zone");
        assert_eq!(pg_type(DataType::BigInt).oid, 20);
        for t in &ALL_TYPES {
            if let Some(d) = data_type_for_oid(t.oid) {
                assert_eq!(pg_type(d).category, t.category, "{}", t.name);
            }
        }
    }
}
