//! PostgreSQL's system catalogs, built from Apiary's catalog when a statement reads them,
//! so that clients written for PostgreSQL can introspect (psql's `\dt`/`\d`, JDBC's
//! `DatabaseMetaData`, BI tools) and so that the shell can too:
//!
//! ```text
//! pg_catalog.pg_namespace   pg_catalog, public, information_schema
//! pg_catalog.pg_class       one row per table (relkind 'r'), view ('v'), sequence ('S')
//!                           and index ('i': CREATE INDEX's and each key constraint's)
//! pg_catalog.pg_sequences   one row per sequence, with its last value
//! pg_catalog.pg_attribute   one row per column of a table or view (attnum from 1)
//! pg_catalog.pg_views       one row per view, with its query
//! pg_catalog.pg_type        the types Apiary has (apiary_types::pg)
//! pg_catalog.pg_am, pg_database, pg_roles, pg_user, pg_collation, pg_tables
//! pg_catalog.pg_description, pg_attrdef, pg_index, pg_constraint, pg_inherits,
//!   pg_policy, pg_statistic_ext, pg_trigger, pg_rewrite          (empty: Apiary has
//!                                                                 none of these objects)
//! information_schema.tables, views, columns, schemata
//! ```
//!
//! Each read builds a small temporary table (a few rows per user table), like
//! `apiary_storage_info()`. Table OIDs are derived from the table name, so they stay the
//! same between the queries a client makes about one table.

use std::sync::Arc;

use apiary_common::Result;
use apiary_storage::{Catalog, Table, View};
use apiary_types::pg::{self, pg_type, type_modifier, PgType};
use apiary_types::{DataChunk, DataType, Field, ScalarValue, Schema, VectorBuilder};

/// Who is connected, for `current_user`, `current_database()` and the catalogs' owner
/// columns. The wire-protocol server sets it from the startup message; the shell keeps
/// the defaults.
#[derive(Debug, Clone)]
pub struct SessionInfo {
    pub user: String,
    pub database: String,
    /// The id `pg_backend_pid()` returns (the wire protocol's process id).
    pub process_id: i32,
}

impl Default for SessionInfo {
    fn default() -> Self {
        SessionInfo { user: "apiary".to_string(), database: "apiary".to_string(), process_id: 0 }
    }
}

/// What `version()` returns: PostgreSQL-compatible first (tools parse the number),
/// then what it really is.
pub fn version_string() -> String {
    format!(
        "PostgreSQL 15.0 (Apiary {}) on {}-{}, an analytical database speaking PostgreSQL's protocol",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::ARCH,
        std::env::consts::OS
    )
}

pub const PG_CATALOG_OID: i32 = 11;
pub const PUBLIC_OID: i32 = 2200;
pub const INFORMATION_SCHEMA_OID: i32 = 13_000;
/// The owner of everything (PostgreSQL's bootstrap superuser has OID 10).
const OWNER_OID: i32 = 10;
/// `pg_am`'s row for heap tables.
const HEAP_AM_OID: i32 = 2;
/// `pg_am`'s row for B-tree indexes (Apiary's are hash maps; clients know btree).
const BTREE_AM_OID: i32 = 403;
/// PostgreSQL's `default` collation.
const DEFAULT_COLLATION_OID: i32 = 100;

pub use apiary_types::pg::table_oid;

/// Rows of a system table under construction.
struct SystemTable {
    name: &'static str,
    fields: Vec<Field>,
    builders: Vec<VectorBuilder>,
    rows: usize,
}

impl SystemTable {
    fn new(name: &'static str, columns: &[(&str, DataType)]) -> Self {
        let fields: Vec<Field> = columns.iter().map(|(n, t)| Field::new(*n, *t, true)).collect();
        let builders = fields.iter().map(|f| VectorBuilder::new(f.data_type)).collect();
        SystemTable { name, fields, builders, rows: 0 }
    }

    fn row(&mut self, values: Vec<ScalarValue>) {
        debug_assert_eq!(values.len(), self.fields.len(), "row width of {}", self.name);
        for (builder, value) in self.builders.iter_mut().zip(&values) {
            builder.push_scalar(value);
        }
        self.rows += 1;
    }

    fn finish(self, block_rows: usize) -> Result<Arc<Table>> {
        let table = Arc::new(Table::new(self.name, Schema::new(self.fields), block_rows));
        {
            let columns = self.builders.into_iter().map(|b| b.finish()).collect();
            let mut appender = table.appender()?;
            appender.append(&DataChunk::new(columns, self.rows))?;
            appender.commit()?;
        }
        Ok(table)
    }
}

const INT: DataType = DataType::Integer;
const SMALLINT: DataType = DataType::SmallInt;
const BOOL: DataType = DataType::Boolean;
const TEXT: DataType = DataType::Varchar(None);
const REAL: DataType = DataType::Real;

fn text(value: &str) -> ScalarValue {
    ScalarValue::Utf8(value.to_string())
}

fn int(value: i32) -> ScalarValue {
    ScalarValue::Int32(value)
}

fn small(value: i16) -> ScalarValue {
    ScalarValue::Int16(value)
}

fn boolean(value: bool) -> ScalarValue {
    ScalarValue::Boolean(value)
}

const NULL: ScalarValue = ScalarValue::Null;

/// The system table `schema.name` (`schema` is `None` when the statement did not name
/// one), or `None` if there is no such table.
pub fn system_table(
    catalog: &Catalog,
    session: &SessionInfo,
    schema: Option<&str>,
    name: &str,
    block_rows: usize,
) -> Result<Option<Arc<Table>>> {
    let table = match (schema, name) {
        (None | Some("pg_catalog"), _) => pg_catalog_table(catalog, session, name)?,
        (Some("information_schema"), _) => information_schema_table(catalog, session, name),
        _ => None,
    };
    table.map(|t| t.finish(block_rows)).transpose()
}

fn pg_catalog_table(catalog: &Catalog, session: &SessionInfo, name: &str) -> Result<Option<SystemTable>> {
    let table = match name {
        "pg_namespace" => {
            let mut t = SystemTable::new("pg_namespace", &[("oid", INT), ("nspname", TEXT), ("nspowner", INT), ("nspacl", TEXT)]);
            for (oid, name) in [(PG_CATALOG_OID, "pg_catalog"), (PUBLIC_OID, "public"), (INFORMATION_SCHEMA_OID, "information_schema")] {
                t.row(vec![int(oid), text(name), int(OWNER_OID), NULL]);
            }
            t
        }
        "pg_class" => pg_class(catalog),
        "pg_views" => {
            let mut t =
                SystemTable::new("pg_views", &[("schemaname", TEXT), ("viewname", TEXT), ("viewowner", TEXT), ("definition", TEXT)]);
            for view in sorted_views(catalog) {
                t.row(vec![text("public"), text(&view.name), text(&session.user), text(&view.sql)]);
            }
            t
        }
        "pg_attribute" => pg_attribute(catalog),
        "pg_type" => pg_type_table(),
        "pg_am" => {
            let mut t = SystemTable::new("pg_am", &[("oid", INT), ("amname", TEXT), ("amhandler", INT), ("amtype", TEXT)]);
            t.row(vec![int(HEAP_AM_OID), text("heap"), int(0), text("t")]);
            t.row(vec![int(BTREE_AM_OID), text("btree"), int(0), text("i")]);
            t
        }
        "pg_sequences" => {
            let mut t = SystemTable::new(
                "pg_sequences",
                &[
                    ("schemaname", TEXT),
                    ("sequencename", TEXT),
                    ("sequenceowner", TEXT),
                    ("data_type", TEXT),
                    ("start_value", DataType::BigInt),
                    ("min_value", DataType::BigInt),
                    ("max_value", DataType::BigInt),
                    ("increment_by", DataType::BigInt),
                    ("cycle", BOOL),
                    ("cache_size", DataType::BigInt),
                    ("last_value", DataType::BigInt),
                ],
            );
            let mut sequences = catalog.all_sequences();
            sequences.sort_by(|a, b| a.name.cmp(&b.name));
            for sequence in sequences {
                let options = &sequence.options;
                let state = sequence.state();
                t.row(vec![
                    text("public"),
                    text(&sequence.name),
                    text(&session.user),
                    text(&options.data_type.to_string().to_lowercase()),
                    ScalarValue::Int64(options.start),
                    ScalarValue::Int64(options.min),
                    ScalarValue::Int64(options.max),
                    ScalarValue::Int64(options.increment),
                    boolean(options.cycle),
                    ScalarValue::Int64(1),
                    if state.called { ScalarValue::Int64(state.last) } else { NULL },
                ]);
            }
            t
        }
        "pg_database" => {
            let mut t = SystemTable::new(
                "pg_database",
                &[
                    ("oid", INT),
                    ("datname", TEXT),
                    ("datdba", INT),
                    ("encoding", INT),
                    ("datcollate", TEXT),
                    ("datctype", TEXT),
                    ("datistemplate", BOOL),
                    ("datallowconn", BOOL),
                    ("datconnlimit", INT),
                    ("dattablespace", INT),
                    ("datacl", TEXT),
                ],
            );
            // Encoding 6 is UTF8.
            t.row(vec![
                int(16_384),
                text(&session.database),
                int(OWNER_OID),
                int(6),
                text("C"),
                text("C"),
                boolean(false),
                boolean(true),
                int(-1),
                int(1663),
                NULL,
            ]);
            t
        }
        "pg_roles" | "pg_user" | "pg_authid" => {
            let (oid_name, name_column) = if name == "pg_user" { ("usesysid", "usename") } else { ("oid", "rolname") };
            let mut t = SystemTable::new(
                if name == "pg_user" { "pg_user" } else { "pg_roles" },
                &[
                    (oid_name, INT),
                    (name_column, TEXT),
                    ("rolsuper", BOOL),
                    ("rolinherit", BOOL),
                    ("rolcreaterole", BOOL),
                    ("rolcreatedb", BOOL),
                    ("rolcanlogin", BOOL),
                    ("rolconnlimit", INT),
                ],
            );
            t.row(vec![
                int(OWNER_OID),
                text(&session.user),
                boolean(true),
                boolean(true),
                boolean(true),
                boolean(true),
                boolean(true),
                int(-1),
            ]);
            t
        }
        "pg_collation" => {
            let mut t = SystemTable::new(
                "pg_collation",
                &[("oid", INT), ("collname", TEXT), ("collnamespace", INT), ("collprovider", TEXT), ("collencoding", INT)],
            );
            t.row(vec![int(DEFAULT_COLLATION_OID), text("default"), int(PG_CATALOG_OID), text("d"), int(-1)]);
            t
        }
        "pg_tables" => {
            let mut t = SystemTable::new(
                "pg_tables",
                &[
                    ("schemaname", TEXT),
                    ("tablename", TEXT),
                    ("tableowner", TEXT),
                    ("tablespace", TEXT),
                    ("hasindexes", BOOL),
                    ("hasrules", BOOL),
                    ("hastriggers", BOOL),
                    ("rowsecurity", BOOL),
                ],
            );
            for table in sorted_tables(catalog) {
                t.row(vec![
                    text("public"),
                    text(&table.name),
                    text(&session.user),
                    NULL,
                    boolean(false),
                    boolean(false),
                    boolean(false),
                    boolean(false),
                ]);
            }
            t
        }
        // Objects Apiary does not have: the tables exist, so that a client asking
        // "which indexes / triggers / policies does this table have?" hears "none".
        "pg_description" => {
            SystemTable::new("pg_description", &[("objoid", INT), ("classoid", INT), ("objsubid", INT), ("description", TEXT)])
        }
        "pg_attrdef" => SystemTable::new("pg_attrdef", &[("oid", INT), ("adrelid", INT), ("adnum", SMALLINT), ("adbin", TEXT)]),
        "pg_index" => SystemTable::new(
            "pg_index",
            &[
                ("indexrelid", INT),
                ("indrelid", INT),
                ("indnatts", SMALLINT),
                ("indisunique", BOOL),
                ("indisprimary", BOOL),
                ("indkey", TEXT),
            ],
        ),
        "pg_constraint" => SystemTable::new(
            "pg_constraint",
            &[
                ("oid", INT),
                ("conname", TEXT),
                ("connamespace", INT),
                ("contype", TEXT),
                ("conrelid", INT),
                ("conindid", INT),
                ("conkey", TEXT),
            ],
        ),
        "pg_inherits" => {
            SystemTable::new("pg_inherits", &[("inhrelid", INT), ("inhparent", INT), ("inhseqno", INT), ("inhdetachpending", BOOL)])
        }
        "pg_policy" => SystemTable::new("pg_policy", &[("oid", INT), ("polname", TEXT), ("polrelid", INT), ("polcmd", TEXT)]),
        "pg_statistic_ext" => {
            SystemTable::new("pg_statistic_ext", &[("oid", INT), ("stxrelid", INT), ("stxname", TEXT), ("stxnamespace", INT)])
        }
        "pg_trigger" => SystemTable::new("pg_trigger", &[("oid", INT), ("tgrelid", INT), ("tgname", TEXT), ("tgisinternal", BOOL)]),
        "pg_rewrite" => SystemTable::new("pg_rewrite", &[("oid", INT), ("rulename", TEXT), ("ev_class", INT)]),
        _ => return Ok(None),
    };
    Ok(Some(table))
}

fn sorted_tables(catalog: &Catalog) -> Vec<Arc<Table>> {
    let mut tables = catalog.tables();
    tables.sort_by(|a, b| a.name.cmp(&b.name));
    tables
}

fn sorted_views(catalog: &Catalog) -> Vec<Arc<View>> {
    let mut views = catalog.views();
    views.sort_by(|a, b| a.name.cmp(&b.name));
    views
}

/// A table or a view, as the catalogs that list both describe it.
struct Relation {
    name: String,
    fields: Vec<Field>,
    /// Each column's DEFAULT (SQL text), for a table.
    defaults: Vec<Option<String>>,
    /// `None` for a view.
    rows: Option<usize>,
}

impl Relation {
    fn is_view(&self) -> bool {
        self.rows.is_none()
    }
}

/// The tables, then the views, each by name.
fn relations(catalog: &Catalog) -> Vec<Relation> {
    let tables = sorted_tables(catalog).into_iter().map(|t| Relation {
        name: t.name.clone(),
        fields: t.schema.fields.clone(),
        defaults: (0..t.schema.len()).map(|c| t.default_of(c).map(str::to_string)).collect(),
        rows: Some(t.row_count()),
    });
    let views = sorted_views(catalog).into_iter().map(|v| Relation {
        name: v.name.clone(),
        fields: v.columns.clone(),
        defaults: Vec::new(),
        rows: None,
    });
    tables.chain(views).collect()
}

fn pg_class(catalog: &Catalog) -> SystemTable {
    let mut t = SystemTable::new(
        "pg_class",
        &[
            ("oid", INT),
            ("relname", TEXT),
            ("relnamespace", INT),
            ("reltype", INT),
            ("reloftype", INT),
            ("relowner", INT),
            ("relam", INT),
            ("relfilenode", INT),
            ("reltablespace", INT),
            ("relpages", INT),
            ("reltuples", REAL),
            ("relallvisible", INT),
            ("reltoastrelid", INT),
            ("relhasindex", BOOL),
            ("relisshared", BOOL),
            ("relpersistence", TEXT),
            ("relkind", TEXT),
            ("relnatts", SMALLINT),
            ("relchecks", SMALLINT),
            ("relhasrules", BOOL),
            ("relhastriggers", BOOL),
            ("relhassubclass", BOOL),
            ("relrowsecurity", BOOL),
            ("relforcerowsecurity", BOOL),
            ("relispopulated", BOOL),
            ("relreplident", TEXT),
            ("relispartition", BOOL),
            ("reloptions", TEXT),
            ("relpartbound", TEXT),
        ],
    );
    // Tables and views, then sequences (relkind 'S') and indexes ('i': CREATE INDEX's
    // and each key constraint's, named as the constraint).
    let mut rows: Vec<(String, i32, i32, i32, f32, &str, usize, usize)> = Vec::new();
    let tables = sorted_tables(catalog);
    for relation in relations(catalog) {
        let oid = table_oid(&relation.name);
        // A view has no storage: no access method, file or pages, and reltuples -1.
        let (access_method, file, pages, tuples, kind) = match relation.rows {
            Some(rows) => (HEAP_AM_OID, oid, i32::try_from(rows / 100).unwrap_or(i32::MAX), rows as f32, "r"),
            None => (0, 0, 0, -1.0, "v"),
        };
        let checks = tables.iter().find(|t| t.name == relation.name && !relation.is_view()).map_or(0, |t| t.checks.len());
        rows.push((relation.name, access_method, file, pages, tuples, kind, relation.fields.len(), checks));
    }
    let mut sequences = catalog.all_sequences();
    sequences.sort_by(|a, b| a.name.cmp(&b.name));
    for sequence in sequences {
        rows.push((sequence.name.clone(), 0, table_oid(&sequence.name), 1, 1.0, "S", 3, 0));
    }
    for table in &tables {
        let keys =
            table.key_constraints().into_iter().map(|(columns, primary)| (table.key_constraint_name(columns, primary), columns.len()));
        let created = table.indexes.iter().map(|index| (index.definition.name.clone(), index.definition.columns.len()));
        for (name, width) in keys.chain(created) {
            let rows_estimate = table.row_count();
            rows.push((
                name.clone(),
                BTREE_AM_OID,
                table_oid(&name),
                i32::try_from(rows_estimate / 200).unwrap_or(i32::MAX),
                rows_estimate as f32,
                "i",
                width,
                0,
            ));
        }
    }
    for (name, access_method, file, pages, tuples, kind, columns, checks) in rows {
        let oid = table_oid(&name);
        t.row(vec![
            int(oid),
            text(&name),
            int(PUBLIC_OID),
            int(0),
            int(0),
            int(OWNER_OID),
            int(access_method),
            int(file),
            int(0),
            int(pages),
            ScalarValue::Float32(tuples),
            int(0),
            int(0),
            boolean(false),
            boolean(false),
            text("p"),
            text(kind),
            small(i16::try_from(columns).unwrap_or(i16::MAX)),
            small(i16::try_from(checks).unwrap_or(i16::MAX)),
            boolean(false),
            boolean(false),
            boolean(false),
            boolean(false),
            boolean(false),
            boolean(true),
            text("d"),
            boolean(false),
            NULL,
            NULL,
        ]);
    }
    t
}

fn collation_of(data_type: DataType) -> i32 {
    if data_type.is_string() {
        DEFAULT_COLLATION_OID
    } else {
        0
    }
}

fn pg_attribute(catalog: &Catalog) -> SystemTable {
    let mut t = SystemTable::new(
        "pg_attribute",
        &[
            ("attrelid", INT),
            ("attname", TEXT),
            ("atttypid", INT),
            ("attstattarget", INT),
            ("attlen", SMALLINT),
            ("attnum", SMALLINT),
            ("attndims", INT),
            ("attcacheoff", INT),
            ("atttypmod", INT),
            ("attbyval", BOOL),
            ("attalign", TEXT),
            ("attstorage", TEXT),
            ("attcompression", TEXT),
            ("attnotnull", BOOL),
            ("atthasdef", BOOL),
            ("atthasmissing", BOOL),
            ("attidentity", TEXT),
            ("attgenerated", TEXT),
            ("attisdropped", BOOL),
            ("attislocal", BOOL),
            ("attinhcount", INT),
            ("attcollation", INT),
            ("attacl", TEXT),
            ("attoptions", TEXT),
        ],
    );
    for relation in relations(catalog) {
        let oid = table_oid(&relation.name);
        for (idx, field) in relation.fields.iter().enumerate() {
            let pg = pg_type(field.data_type);
            t.row(vec![
                int(oid),
                text(&field.name),
                int(pg.oid as i32),
                int(-1),
                small(pg.len),
                small(i16::try_from(idx + 1).unwrap_or(i16::MAX)),
                int(0),
                int(-1),
                int(type_modifier(field.data_type)),
                boolean(pg.len > 0 && pg.len <= 8),
                text(if pg.len == 8 { "d" } else { "i" }),
                text(if pg.len > 0 { "p" } else { "x" }),
                text(""),
                boolean(!field.nullable),
                boolean(false),
                boolean(false),
                text(""),
                text(""),
                boolean(false),
                boolean(true),
                int(0),
                int(collation_of(field.data_type)),
                NULL,
                NULL,
            ]);
        }
    }
    t
}

fn pg_type_table() -> SystemTable {
    let mut t = SystemTable::new(
        "pg_type",
        &[
            ("oid", INT),
            ("typname", TEXT),
            ("typnamespace", INT),
            ("typowner", INT),
            ("typlen", SMALLINT),
            ("typbyval", BOOL),
            ("typtype", TEXT),
            ("typcategory", TEXT),
            ("typispreferred", BOOL),
            ("typisdefined", BOOL),
            ("typdelim", TEXT),
            ("typrelid", INT),
            ("typelem", INT),
            ("typarray", INT),
            ("typnotnull", BOOL),
            ("typbasetype", INT),
            ("typtypmod", INT),
            ("typndims", INT),
            ("typcollation", INT),
            ("typdefault", TEXT),
        ],
    );
    for ty in pg::ALL_TYPES {
        let PgType { oid, name, len, category, .. } = ty;
        let collation = if category == 'S' { DEFAULT_COLLATION_OID } else { 0 };
        t.row(vec![
            int(oid as i32),
            text(name),
            int(PG_CATALOG_OID),
            int(OWNER_OID),
            small(len),
            boolean(len > 0 && len <= 8),
            text("b"),
            text(&category.to_string()),
            boolean(matches!(name, "float8" | "text" | "bool" | "timestamp" | "interval" | "oid")),
            boolean(true),
            text(","),
            int(0),
            int(0),
            int(0),
            boolean(false),
            int(0),
            int(-1),
            int(0),
            int(collation),
            NULL,
        ]);
    }
    t
}

fn information_schema_table(catalog: &Catalog, session: &SessionInfo, name: &str) -> Option<SystemTable> {
    let table = match name {
        "schemata" => {
            let mut t = SystemTable::new("schemata", &[("catalog_name", TEXT), ("schema_name", TEXT), ("schema_owner", TEXT)]);
            for schema in ["pg_catalog", "public", "information_schema"] {
                t.row(vec![text(&session.database), text(schema), text(&session.user)]);
            }
            t
        }
        "tables" => {
            let mut t = SystemTable::new(
                "tables",
                &[
                    ("table_catalog", TEXT),
                    ("table_schema", TEXT),
                    ("table_name", TEXT),
                    ("table_type", TEXT),
                    ("self_referencing_column_name", TEXT),
                    ("reference_generation", TEXT),
                    ("user_defined_type_catalog", TEXT),
                    ("user_defined_type_schema", TEXT),
                    ("user_defined_type_name", TEXT),
                    ("is_insertable_into", TEXT),
                    ("is_typed", TEXT),
                    ("commit_action", TEXT),
                ],
            );
            for relation in relations(catalog) {
                t.row(vec![
                    text(&session.database),
                    text("public"),
                    text(&relation.name),
                    text(if relation.is_view() { "VIEW" } else { "BASE TABLE" }),
                    NULL,
                    NULL,
                    NULL,
                    NULL,
                    NULL,
                    text(if relation.is_view() { "NO" } else { "YES" }),
                    text("NO"),
                    NULL,
                ]);
            }
            t
        }
        "views" => {
            let mut t = SystemTable::new(
                "views",
                &[
                    ("table_catalog", TEXT),
                    ("table_schema", TEXT),
                    ("table_name", TEXT),
                    ("view_definition", TEXT),
                    ("check_option", TEXT),
                    ("is_updatable", TEXT),
                    ("is_insertable_into", TEXT),
                    ("is_trigger_updatable", TEXT),
                    ("is_trigger_deletable", TEXT),
                    ("is_trigger_insertable_into", TEXT),
                ],
            );
            for view in sorted_views(catalog) {
                t.row(vec![
                    text(&session.database),
                    text("public"),
                    text(&view.name),
                    text(&view.sql),
                    text("NONE"),
                    text("NO"),
                    text("NO"),
                    text("NO"),
                    text("NO"),
                    text("NO"),
                ]);
            }
            t
        }
        "sequences" => {
            let mut t = SystemTable::new(
                "sequences",
                &[
                    ("sequence_catalog", TEXT),
                    ("sequence_schema", TEXT),
                    ("sequence_name", TEXT),
                    ("data_type", TEXT),
                    ("numeric_precision", INT),
                    ("numeric_precision_radix", INT),
                    ("numeric_scale", INT),
                    ("start_value", TEXT),
                    ("minimum_value", TEXT),
                    ("maximum_value", TEXT),
                    ("increment", TEXT),
                    ("cycle_option", TEXT),
                ],
            );
            let mut sequences = catalog.all_sequences();
            sequences.sort_by(|a, b| a.name.cmp(&b.name));
            for sequence in sequences {
                let options = &sequence.options;
                let precision = match options.data_type {
                    DataType::SmallInt => 16,
                    DataType::Integer => 32,
                    _ => 64,
                };
                t.row(vec![
                    text(&session.database),
                    text("public"),
                    text(&sequence.name),
                    text(&options.data_type.to_string().to_lowercase()),
                    int(precision),
                    int(2),
                    int(0),
                    text(&options.start.to_string()),
                    text(&options.min.to_string()),
                    text(&options.max.to_string()),
                    text(&options.increment.to_string()),
                    text(if options.cycle { "YES" } else { "NO" }),
                ]);
            }
            t
        }
        "columns" => {
            let mut t = SystemTable::new(
                "columns",
                &[
                    ("table_catalog", TEXT),
                    ("table_schema", TEXT),
                    ("table_name", TEXT),
                    ("column_name", TEXT),
                    ("ordinal_position", INT),
                    ("column_default", TEXT),
                    ("is_nullable", TEXT),
                    ("data_type", TEXT),
                    ("character_maximum_length", INT),
                    ("character_octet_length", INT),
                    ("numeric_precision", INT),
                    ("numeric_precision_radix", INT),
                    ("numeric_scale", INT),
                    ("datetime_precision", INT),
                    ("interval_type", TEXT),
                    ("udt_catalog", TEXT),
                    ("udt_schema", TEXT),
                    ("udt_name", TEXT),
                    ("is_identity", TEXT),
                    ("is_generated", TEXT),
                    ("is_updatable", TEXT),
                ],
            );
            for relation in relations(catalog) {
                for (idx, field) in relation.fields.iter().enumerate() {
                    let data_type = field.data_type;
                    let pg = pg_type(data_type);
                    let (precision, radix, scale) = numeric_facts(data_type);
                    let length = match data_type {
                        DataType::Char(n) | DataType::Varchar(Some(n)) => i32::try_from(n).ok(),
                        _ => None,
                    };
                    let opt = |v: Option<i32>| v.map_or(NULL, int);
                    t.row(vec![
                        text(&session.database),
                        text("public"),
                        text(&relation.name),
                        text(&field.name),
                        int(i32::try_from(idx + 1).unwrap_or(i32::MAX)),
                        relation.defaults.get(idx).and_then(|d| d.as_deref()).map_or(NULL, text),
                        text(if field.nullable { "YES" } else { "NO" }),
                        text(pg.sql_name),
                        opt(length),
                        opt(length.map(|n| n.saturating_mul(4))),
                        opt(precision),
                        opt(radix),
                        opt(scale),
                        opt(match data_type {
                            DataType::Date => Some(0),
                            DataType::Timestamp | DataType::TimestampTz | DataType::Time => Some(6),
                            _ => None,
                        }),
                        NULL,
                        text(&session.database),
                        text("pg_catalog"),
                        text(pg.name),
                        text("NO"),
                        text("NEVER"),
                        text(if relation.is_view() { "NO" } else { "YES" }),
                    ]);
                }
            }
            t
        }
        _ => return None,
    };
    Some(table)
}

/// `numeric_precision`, `numeric_precision_radix`, `numeric_scale` of information_schema.
fn numeric_facts(data_type: DataType) -> (Option<i32>, Option<i32>, Option<i32>) {
    match data_type {
        DataType::SmallInt => (Some(16), Some(2), Some(0)),
        DataType::Integer => (Some(32), Some(2), Some(0)),
        DataType::BigInt => (Some(64), Some(2), Some(0)),
        DataType::Real => (Some(24), Some(2), None),
        DataType::Double => (Some(53), Some(2), None),
        DataType::Decimal { precision, scale } => (Some(precision as i32), Some(10), Some(scale as i32)),
        _ => (None, None, None),
    }
}

/// Values of PostgreSQL's session functions (`current_user`, `version()`, ...).
pub fn session_value(session: &SessionInfo, name: &str) -> Option<ScalarValue> {
    Some(match name {
        "current_user" | "session_user" | "user" | "current_role" => ScalarValue::Utf8(session.user.clone()),
        "current_database" | "current_catalog" => ScalarValue::Utf8(session.database.clone()),
        "current_schema" => ScalarValue::Utf8("public".to_string()),
        "version" => ScalarValue::Utf8(version_string()),
        "pg_backend_pid" => ScalarValue::Int32(session.process_id),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_oids_are_stable_and_in_the_user_range() {
        assert_eq!(table_oid("lineitem"), table_oid("lineitem"));
        assert_ne!(table_oid("lineitem"), table_oid("orders"));
        assert!(table_oid("x") >= 16_384, "above PostgreSQL's system OIDs");
    }
}

/// PostgreSQL catalogs of objects Apiary does not have: they hold no rows.
const EMPTY_CATALOGS: [&str; 17] = [
    "pg_policy",
    "pg_statistic_ext",
    "pg_publication",
    "pg_publication_rel",
    "pg_publication_namespace",
    "pg_inherits",
    "pg_trigger",
    "pg_rewrite",
    "pg_constraint",
    "pg_index",
    "pg_attrdef",
    "pg_description",
    "pg_partitioned_table",
    "pg_foreign_table",
    "pg_sequence",
    "pg_event_trigger",
    "pg_extension",
];

/// Whether `factor` names one of [`EMPTY_CATALOGS`] (`pg_catalog.x` or `x`).
fn is_empty_catalog(factor: &sqlparser::ast::TableFactor) -> bool {
    let sqlparser::ast::TableFactor::Table { name, args: None, .. } = factor else { return false };
    let parts: Vec<String> = name.0.iter().filter_map(|p| p.as_ident()).map(|i| i.value.to_ascii_lowercase()).collect();
    match parts.as_slice() {
        [table] | [_, table] if parts.len() == 1 || parts[0] == "pg_catalog" => EMPTY_CATALOGS.contains(&table.as_str()),
        _ => false,
    }
}

/// The result columns of a query that is empty because every branch reads one of
/// [`EMPTY_CATALOGS`] through an inner join; `None` for any other query.
///
/// Clients ask about policies, publications, statistics objects and the like with
/// queries over array types, subscripts and `generate_series` (psql's `\d table` does)
/// that Apiary cannot bind; with no such objects their answer is known without binding:
/// no rows. Columns are named as PostgreSQL names them and typed text.
pub fn empty_catalog_query(query: &sqlparser::ast::Query) -> Option<Vec<String>> {
    use sqlparser::ast::{SelectItem, SetExpr, SetOperator};
    fn empty(body: &SetExpr) -> bool {
        match body {
            SetExpr::Select(select) => select.from.iter().any(|from| {
                is_empty_catalog(&from.relation)
                    || from.joins.iter().any(|join| {
                        use sqlparser::ast::JoinOperator as J;
                        matches!(join.join_operator, J::Join(_) | J::Inner(_) | J::CrossJoin(_)) && is_empty_catalog(&join.relation)
                    })
            }),
            SetExpr::Query(query) => empty(&query.body),
            SetExpr::SetOperation { op, left, right, .. } => match op {
                SetOperator::Union => empty(left) && empty(right),
                SetOperator::Intersect => empty(left) || empty(right),
                SetOperator::Except | SetOperator::Minus => empty(left),
            },
            _ => false,
        }
    }
    fn first_select(body: &SetExpr) -> Option<&sqlparser::ast::Select> {
        match body {
            SetExpr::Select(select) => Some(select),
            SetExpr::Query(query) => first_select(&query.body),
            SetExpr::SetOperation { left, .. } => first_select(left),
            _ => None,
        }
    }
    if !empty(&query.body) {
        return None;
    }
    let select = first_select(&query.body)?;
    select
        .projection
        .iter()
        .map(|item| match item {
            SelectItem::ExprWithAlias { alias, .. } => Some(alias.value.clone()),
            SelectItem::UnnamedExpr(expr) => Some(match expr {
                sqlparser::ast::Expr::Identifier(ident) => ident.value.clone(),
                sqlparser::ast::Expr::CompoundIdentifier(parts) => parts.last().map_or("?column?".to_string(), |p| p.value.clone()),
                sqlparser::ast::Expr::Function(f) => {
                    f.name.0.last().and_then(|p| p.as_ident()).map_or("?column?".to_string(), |i| i.value.clone())
                }
                _ => "?column?".to_string(),
            }),
            // `*` needs the catalog's columns: bind it normally.
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod empty_catalog_tests {
    use super::empty_catalog_query;

    fn columns(sql: &str) -> Option<Vec<String>> {
        match apiary_sql::parser::parse_sql(sql).unwrap().pop() {
            Some(sqlparser::ast::Statement::Query(query)) => empty_catalog_query(&query),
            _ => None,
        }
    }

    #[test]
    fn queries_over_empty_catalogs_are_recognised() {
        assert_eq!(
            columns("SELECT pol.polname, x[1] AS y, pg_get_expr(a, b) FROM pg_catalog.pg_policy pol WHERE pol.polrelid = '1'"),
            Some(vec!["polname".to_string(), "y".to_string(), "pg_get_expr".to_string()])
        );
        assert!(columns("SELECT a FROM pg_class c, pg_inherits i WHERE c.oid = i.inhparent UNION SELECT b FROM pg_trigger").is_some());
        assert_eq!(columns("SELECT a FROM pg_class c LEFT JOIN pg_inherits i ON true"), None);
        assert_eq!(columns("SELECT a FROM pg_class UNION SELECT b FROM pg_trigger"), None);
        assert_eq!(columns("SELECT * FROM pg_policy"), None);
    }
}
