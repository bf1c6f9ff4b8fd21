//! One client's session: the statements, portals and transaction state of the protocol
//! after start-up, on top of one engine [`Connection`].
//!
//! A session runs on its own thread (the engine is blocking; see `connection.rs` for the
//! async side that owns the socket). It takes decoded messages in order and writes
//! backend messages into a buffer that goes to the socket at flush points (Sync,
//! Flush, ReadyForQuery, COPY hand-overs) or whenever it holds [`FLUSH_BYTES`].
//!
//! ```text
//!                 Query ─▶ parse ─▶ for each statement: run ─▶ rows/tag ─┐
//!                                                                         ├▶ ReadyForQuery
//!  Parse ─▶ Prepared ─┐                                                   │
//!  Bind  ─▶ Portal  ──┴▶ Execute(max_rows) ─▶ rows, PortalSuspended / tag │
//!  Sync ────────────────────────────────────────────────────────────────┘
//!
//!  transaction status:  Idle ──BEGIN──▶ InBlock ──error──▶ Failed
//!                        ▲                 │                 │
//!                        └──COMMIT/ROLLBACK┴─────────────────┘
//! ```
//!
//! BEGIN, COMMIT, ROLLBACK and savepoints run in the engine's connection (its transaction
//! block: snapshot isolation, see the engine's `transaction.rs`); the session keeps the
//! status the protocol reports. COMMIT of a failed block rolls it back; a COMMIT that
//! fails (a serialization failure, 40001) ends the block too. After an error in the
//! extended protocol, messages are skipped until Sync, as PostgreSQL does.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use apiary::ast;
use apiary::{ApiaryError, Connection, DataType, QueryResult, ResultKind, ScalarValue};
use apiary_types::pg::data_type_for_oid;
use bytes::BytesMut;
use tokio::sync::{mpsc, OwnedSemaphorePermit};

use crate::backend::{BackendBuffer, Column, ErrorInfo, Severity, TxStatus};
use crate::copy::{copy_format, put_header, put_row, spool_options, CopyFormat, Spool};
use crate::frontend::{FrontendMessage, ProtocolError, Target, PROTOCOL_VIOLATION};
use crate::values::{parameter_value, Format};

/// Output is handed to the socket once this much is buffered.
const FLUSH_BYTES: usize = 256 * 1024;
/// Rows encoded between checks of the buffer size.
const ROWS_PER_STEP: usize = 256;

const FEATURE_NOT_SUPPORTED: &str = "0A000";
const ACTIVE_SQL_TRANSACTION: &str = "25001";
const NO_ACTIVE_SQL_TRANSACTION: &str = "25P01";
const IN_FAILED_SQL_TRANSACTION: &str = "25P02";
const INVALID_SQL_STATEMENT_NAME: &str = "26000";
const DUPLICATE_PREPARED_STATEMENT: &str = "42P05";
const DUPLICATE_CURSOR: &str = "42P03";
const INVALID_CURSOR_NAME: &str = "34000";
const SYNTAX_ERROR: &str = "42601";
const QUERY_CANCELED: &str = "57014";
const INVALID_PARAMETER_VALUE: &str = "22023";
const IO_ERROR: &str = "58030";

/// What the socket side gives a session.
pub enum Input {
    /// A message; the permit bounds the bytes queued for the session and is released
    /// when the message has been handled.
    Message(FrontendMessage, Option<OwnedSemaphorePermit>),
    /// A well-framed message (of this type byte) whose body did not decode.
    Malformed(u8, ProtocolError),
}

/// What a session gives the socket side.
pub enum Output {
    Bytes(BytesMut),
    /// ReadyForQuery was sent: the session waits for the client (the idle-in-transaction
    /// time-out starts when the status is not idle).
    Ready(TxStatus),
    /// Close the connection once the bytes before are written.
    Close,
}

/// The PostgreSQL session parameters clients set and read. Apiary keeps them so that
/// drivers that set them at start-up or with SET work; only UTF-8 and ISO dates exist,
/// so the others are reported, not obeyed.
const PG_PARAMETERS: [(&str, &str); 14] = [
    ("application_name", ""),
    ("client_encoding", "UTF8"),
    ("datestyle", "ISO, MDY"),
    ("intervalstyle", "postgres"),
    ("timezone", "UTC"),
    ("extra_float_digits", "1"),
    ("search_path", "\"$user\", public"),
    ("standard_conforming_strings", "on"),
    ("client_min_messages", "notice"),
    ("statement_timeout", "0"),
    ("lock_timeout", "0"),
    ("bytea_output", "hex"),
    ("transaction_isolation", "read committed"),
    ("default_transaction_isolation", "read committed"),
];

/// Parameters whose changes are reported to the client with ParameterStatus.
const REPORTED: [&str; 5] = ["application_name", "client_encoding", "datestyle", "intervalstyle", "timezone"];

/// The name PostgreSQL reports a parameter under (`DateStyle`, `TimeZone`).
fn reported_name(name: &str) -> &str {
    match name {
        "datestyle" => "DateStyle",
        "intervalstyle" => "IntervalStyle",
        "timezone" => "TimeZone",
        other => other,
    }
}

/// A prepared statement (the unnamed one included).
struct Prepared {
    /// `None` for an empty query string.
    statement: Option<ast::Statement>,
    parameter_types: Vec<DataType>,
    /// Result columns; empty for a statement without rows.
    columns: Vec<Column>,
}

/// A portal: a bound statement, or a cursor from DECLARE.
struct Portal {
    prepared: Arc<Prepared>,
    parameters: Vec<ScalarValue>,
    formats: Vec<Format>,
    state: PortalState,
    /// DECLARE ... WITH HOLD: survives the end of its transaction.
    holdable: bool,
}

enum PortalState {
    NotRun,
    Rows { result: QueryResult, tag: &'static str, chunk: usize, row: usize },
    Done,
}

/// Where a COPY FROM STDIN was issued, which decides what follows its end.
enum CopySource {
    /// A simple Query: the statements after the COPY, then ReadyForQuery.
    Simple(VecDeque<ast::Statement>),
    Extended,
}

struct CopyIn {
    statement: ast::Statement,
    spool: Spool,
    source: CopySource,
}

/// How a statement started.
enum Started {
    Tag(String),
    Rows(QueryResult, &'static str),
    CopyIn,
}

static NEXT_SPOOL: AtomicU64 = AtomicU64::new(1);

pub struct Session {
    conn: Connection,
    out: BackendBuffer,
    sender: mpsc::Sender<Output>,
    /// The socket side is gone: stop producing output.
    gone: bool,
    closing: bool,
    statements: HashMap<String, Arc<Prepared>>,
    portals: HashMap<String, Portal>,
    tx: TxStatus,
    skip_until_sync: bool,
    copy_in: Option<CopyIn>,
    parameters: BTreeMap<String, String>,
}

impl Session {
    pub fn new(mut conn: Connection, sender: mpsc::Sender<Output>, startup: &[(String, String)]) -> Session {
        let mut parameters: BTreeMap<String, String> = PG_PARAMETERS.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        for (name, value) in startup {
            let name = name.to_ascii_lowercase();
            // The session's time zone is the engine's (a name it does not know leaves UTC).
            if name == "timezone" {
                let _ = conn.set_time_zone(value);
                continue;
            }
            // client_encoding stays UTF8 (what the server sends); the others are kept.
            if parameters.contains_key(&name) && name != "client_encoding" {
                parameters.insert(name, value.clone());
            }
        }
        parameters.insert("timezone".to_string(), conn.settings().time_zone_name.clone());
        Session {
            conn,
            out: BackendBuffer::new(),
            sender,
            gone: false,
            closing: false,
            statements: HashMap::new(),
            portals: HashMap::new(),
            tx: TxStatus::Idle,
            skip_until_sync: false,
            copy_in: None,
            parameters,
        }
    }

    /// The start-up messages after authentication: parameter statuses, the cancel key,
    /// ReadyForQuery.
    pub fn greet(&mut self, process_id: i32, secret_key: i32, user: &str) {
        let statuses = [
            ("server_version", "15.0".to_string()),
            ("server_encoding", "UTF8".to_string()),
            ("integer_datetimes", "on".to_string()),
            ("standard_conforming_strings", "on".to_string()),
            ("is_superuser", "on".to_string()),
            ("session_authorization", user.to_string()),
            ("default_transaction_read_only", "off".to_string()),
            ("in_hot_standby", "off".to_string()),
        ];
        for (name, value) in statuses {
            self.out.parameter_status(name, &value);
        }
        for name in REPORTED {
            let value = self.parameters.get(name).cloned().unwrap_or_default();
            self.out.parameter_status(reported_name(name), &value);
        }
        self.out.backend_key_data(process_id, secret_key);
        self.ready();
    }

    /// Handles messages until the input ends or the session closes.
    pub fn run(mut self, mut inputs: mpsc::Receiver<Input>) {
        while let Some(input) = inputs.blocking_recv() {
            match input {
                Input::Message(message, _permit) => self.handle(message),
                Input::Malformed(tag, error) => self.malformed(tag, error),
            }
            if self.closing || self.gone {
                break;
            }
        }
    }

    // ---- output -------------------------------------------------------------------

    fn flush(&mut self) {
        if self.out.len() == 0 || self.gone {
            return;
        }
        let bytes = self.out.take();
        if self.sender.blocking_send(Output::Bytes(bytes)).is_err() {
            self.gone = true;
        }
    }

    fn maybe_flush(&mut self) {
        if self.out.len() >= FLUSH_BYTES {
            self.flush();
        }
    }

    fn ready(&mut self) {
        if self.tx == TxStatus::Idle {
            // The implicit transaction ended: its portals go (cursors WITH HOLD stay).
            self.portals.retain(|_, p| p.holdable);
        }
        self.out.ready_for_query(self.tx);
        self.flush();
        if !self.gone && self.sender.blocking_send(Output::Ready(self.tx)).is_err() {
            self.gone = true;
        }
    }

    fn send_error(&mut self, error: &ErrorInfo) {
        self.out.error(error);
        if error.severity == Severity::Error && self.tx == TxStatus::InBlock {
            self.tx = TxStatus::Failed;
        }
    }

    fn notice(&mut self, severity: Severity, code: &str, message: &str) {
        self.out.error(&ErrorInfo::new(severity, code, message));
    }

    // ---- dispatch ------------------------------------------------------------------

    /// A message that did not decode is an error like a failing statement: a Query
    /// gets its ReadyForQuery, an extended-protocol message skips to Sync, and in copy
    /// mode it ends the COPY.
    fn malformed(&mut self, tag: u8, error: ProtocolError) {
        let info = ErrorInfo::error(error.code, error.message);
        if let Some(copy) = self.copy_in.take() {
            self.after_copy_error(info, copy.source);
            return;
        }
        if self.skip_until_sync {
            return;
        }
        self.send_error(&info);
        if tag == b'Q' {
            self.ready();
        } else {
            self.skip_until_sync = true;
            self.flush();
        }
    }

    fn handle(&mut self, message: FrontendMessage) {
        if self.copy_in.is_some() {
            self.handle_copy_message(message);
            return;
        }
        match message {
            FrontendMessage::Terminate => {
                self.closing = true;
                self.flush();
            }
            // Late COPY messages after a COPY failed are dropped, as in PostgreSQL.
            FrontendMessage::CopyData(_) | FrontendMessage::CopyDone | FrontendMessage::CopyFail(_) => {}
            FrontendMessage::Sync => {
                self.skip_until_sync = false;
                self.ready();
            }
            _ if self.skip_until_sync => {}
            FrontendMessage::Query(sql) => {
                self.simple_query(&sql);
            }
            FrontendMessage::Flush => self.flush(),
            FrontendMessage::Password(_) => {
                self.send_error(&ErrorInfo::fatal(PROTOCOL_VIOLATION, "unexpected password message after authentication"));
                self.flush();
                self.close();
            }
            FrontendMessage::FunctionCall => {
                self.send_error(&ErrorInfo::error(FEATURE_NOT_SUPPORTED, "fast-path function calls are not supported"));
                self.ready();
            }
            extended => {
                if let Err(error) = self.extended(extended) {
                    self.send_error(&error);
                    self.skip_until_sync = true;
                }
                self.maybe_flush();
            }
        }
    }

    fn close(&mut self) {
        self.closing = true;
        if !self.gone {
            let _ = self.sender.blocking_send(Output::Close);
        }
    }

    // ---- simple query --------------------------------------------------------------

    fn simple_query(&mut self, sql: &str) {
        let statements = match apiary::parse(sql) {
            Ok(statements) => statements,
            Err(error) => {
                let info = engine_error(&error, Some(sql));
                self.send_error(&info);
                self.ready();
                return;
            }
        };
        if statements.is_empty() {
            self.out.empty_query();
            self.ready();
            return;
        }
        self.run_simple(statements.into(), sql);
    }

    /// Runs statements of one Query message until one fails or starts a COPY FROM STDIN.
    fn run_simple(&mut self, mut queue: VecDeque<ast::Statement>, sql: &str) {
        while let Some(statement) = queue.pop_front() {
            if self.gone {
                return;
            }
            match self.start(&statement, &[]) {
                Ok(Started::Tag(tag)) => self.out.command_complete(&tag),
                Ok(Started::Rows(result, tag)) => {
                    let columns = result_columns(&result);
                    self.out.row_description(&columns, &[]);
                    let mut cursor = RowCursor::default();
                    let sent = self.send_rows(&result, &mut cursor, &[], 0);
                    self.out.command_complete(&format!("{tag} {sent}"));
                }
                Ok(Started::CopyIn) => {
                    if let Some(copy) = &mut self.copy_in {
                        copy.source = CopySource::Simple(queue);
                    }
                    self.flush();
                    return;
                }
                Err(error) => {
                    let info = engine_error_info(error, Some(sql));
                    self.send_error(&info);
                    break;
                }
            }
            self.maybe_flush();
        }
        self.ready();
    }

    // ---- statements ----------------------------------------------------------------

    /// Starts one statement: transaction control and session parameters here, COPY
    /// with STDIN/STDOUT here, the rest in the engine.
    fn start(&mut self, statement: &ast::Statement, parameters: &[ScalarValue]) -> Result<Started, StatementError> {
        use ast::Statement as S;
        match statement {
            S::StartTransaction { .. } => {
                if self.tx != TxStatus::Idle {
                    self.notice(Severity::Warning, ACTIVE_SQL_TRANSACTION, "there is already a transaction in progress");
                } else {
                    self.conn.execute_statement(statement).map_err(StatementError::Engine)?;
                    self.tx = TxStatus::InBlock;
                }
                return Ok(Started::Tag("BEGIN".into()));
            }
            S::Commit { .. } => {
                let tag = match self.tx {
                    TxStatus::Idle => {
                        self.notice(Severity::Warning, NO_ACTIVE_SQL_TRANSACTION, "there is no transaction in progress");
                        "COMMIT"
                    }
                    TxStatus::InBlock => "COMMIT",
                    // PostgreSQL answers COMMIT of a failed transaction with ROLLBACK.
                    TxStatus::Failed => "ROLLBACK",
                };
                let ended = match self.tx {
                    TxStatus::InBlock => self.conn.execute_statement(statement),
                    _ => self.conn.execute("ROLLBACK").map(|_| QueryResult::statement(None)),
                };
                // The block ends whether or not its changes could be committed.
                self.end_transaction();
                ended.map_err(StatementError::Engine)?;
                return Ok(Started::Tag(tag.into()));
            }
            S::Rollback { savepoint: None, .. } => {
                if self.tx == TxStatus::Idle {
                    self.notice(Severity::Warning, NO_ACTIVE_SQL_TRANSACTION, "there is no transaction in progress");
                }
                self.conn.execute_statement(statement).map_err(StatementError::Engine)?;
                self.end_transaction();
                return Ok(Started::Tag("ROLLBACK".into()));
            }
            S::Rollback { savepoint: Some(_), .. } | S::Savepoint { .. } | S::ReleaseSavepoint { .. } => {
                let (what, tag) = match statement {
                    S::Savepoint { .. } => ("SAVEPOINT", "SAVEPOINT"),
                    S::ReleaseSavepoint { .. } => ("RELEASE SAVEPOINT", "RELEASE"),
                    _ => ("ROLLBACK TO SAVEPOINT", "ROLLBACK"),
                };
                if self.tx == TxStatus::Idle {
                    return Err(StatementError::Info(ErrorInfo::error(
                        NO_ACTIVE_SQL_TRANSACTION,
                        format!("{what} can only be used in transaction blocks"),
                    )));
                }
                self.conn.execute_statement(statement).map_err(StatementError::Engine)?;
                // ROLLBACK TO a savepoint recovers a failed block.
                self.tx = TxStatus::InBlock;
                return Ok(Started::Tag(tag.into()));
            }
            _ => {}
        }
        if self.tx == TxStatus::Failed {
            return Err(StatementError::Info(ErrorInfo::error(
                IN_FAILED_SQL_TRANSACTION,
                "current transaction is aborted, commands ignored until end of transaction block",
            )));
        }
        match statement {
            S::Set(set) => self.set_parameter(set, statement),
            S::ShowVariable { variable } => {
                let name = variable.iter().map(|i| i.value.to_ascii_lowercase()).collect::<Vec<_>>().join(".");
                match self.parameters.get(&name) {
                    Some(value) => Ok(Started::Rows(single_text_result(&name, value), "SHOW")),
                    None if name == "all" => Err(StatementError::Info(ErrorInfo::error(FEATURE_NOT_SUPPORTED, "SHOW ALL"))),
                    None => self.engine(statement, parameters),
                }
            }
            S::Deallocate { name, .. } => {
                if name.value.eq_ignore_ascii_case("all") && name.quote_style.is_none() {
                    self.statements.clear();
                    Ok(Started::Tag("DEALLOCATE ALL".into()))
                } else if self.statements.remove(&name.value).is_some() {
                    Ok(Started::Tag("DEALLOCATE".into()))
                } else {
                    Err(StatementError::Info(ErrorInfo::error(
                        INVALID_SQL_STATEMENT_NAME,
                        format!("prepared statement \"{}\" does not exist", name.value),
                    )))
                }
            }
            S::Discard { .. } => {
                self.statements.clear();
                self.portals.clear();
                Ok(Started::Tag("DISCARD ALL".into()))
            }
            S::Declare { stmts } => self.declare(stmts),
            S::Fetch { name, direction, .. } => self.fetch(&name.value, direction),
            S::Close { cursor } => {
                match cursor {
                    ast::CloseCursor::All => self.portals.clear(),
                    ast::CloseCursor::Specific { name } => {
                        if self.portals.remove(&name.value).is_none() {
                            return Err(cursor_missing(&name.value));
                        }
                    }
                }
                Ok(Started::Tag("CLOSE CURSOR".into()))
            }
            S::Query(query) if apiary::pg_catalog::empty_catalog_query(query).is_some() => {
                let names = apiary::pg_catalog::empty_catalog_query(query).unwrap_or_default();
                let types = vec![DataType::Varchar(None); names.len()];
                Ok(Started::Rows(QueryResult::rows_result(names, types, Vec::new()), "SELECT"))
            }
            S::Copy { source, to: false, target: ast::CopyTarget::Stdin, options, .. } => self.copy_from_stdin(statement, source, options),
            S::Copy { source, to: true, target: ast::CopyTarget::Stdout, options, .. } => self.copy_to_stdout(source, options, parameters),
            _ => self.engine(statement, parameters),
        }
    }

    fn end_transaction(&mut self) {
        self.tx = TxStatus::Idle;
        self.portals.retain(|_, p| p.holdable);
    }

    /// Runs a statement in the engine.
    fn engine(&mut self, statement: &ast::Statement, parameters: &[ScalarValue]) -> Result<Started, StatementError> {
        let result = if parameters.is_empty() {
            self.conn.execute_statement(statement)
        } else {
            self.conn.execute_with_parameters(statement, parameters)
        }
        .map_err(StatementError::Engine)?;
        if matches!(statement, ast::Statement::Set(_) | ast::Statement::Reset(_)) {
            self.report_time_zone();
        }
        Ok(match result.kind {
            ResultKind::Rows => Started::Rows(result, rows_tag(statement)),
            ResultKind::Statement { rows_affected } => Started::Tag(command_tag(statement, rows_affected)),
        })
    }

    /// `SET` of a PostgreSQL session parameter (kept here), or of an Apiary setting. The
    /// time zone is the engine's (it shows and reads TIMESTAMPTZ values in it), reported
    /// to the client as PostgreSQL does.
    fn set_parameter(&mut self, set: &ast::Set, statement: &ast::Statement) -> Result<Started, StatementError> {
        let is_time_zone = match set {
            ast::Set::SetTimeZone { .. } => true,
            ast::Set::SingleAssignment { variable, .. } => variable.to_string().eq_ignore_ascii_case("timezone"),
            _ => false,
        };
        if is_time_zone {
            return self.engine(statement, &[]);
        }
        let (name, value) = match set {
            ast::Set::SingleAssignment { variable, values, .. } => {
                let name = variable.to_string().to_ascii_lowercase();
                if !self.parameters.contains_key(&name) {
                    return self.engine(statement, &[]);
                }
                let value = values.iter().map(parameter_text).collect::<Vec<_>>().join(", ");
                (name, value)
            }
            ast::Set::SetNames { charset_name, .. } => ("client_encoding".to_string(), charset_name.value.clone()),
            _ => return self.engine(statement, &[]),
        };
        let value = if value.eq_ignore_ascii_case("default") {
            PG_PARAMETERS.iter().find(|(n, _)| *n == name).map_or(String::new(), |(_, v)| v.to_string())
        } else {
            value
        };
        if name == "client_encoding" && !matches!(value.to_ascii_uppercase().replace(['-', '_'], "").as_str(), "UTF8" | "UNICODE") {
            return Err(StatementError::Info(ErrorInfo::error(
                INVALID_PARAMETER_VALUE,
                format!("client_encoding {value} is not supported: Apiary speaks UTF8 only"),
            )));
        }
        let value = if name == "client_encoding" { "UTF8".to_string() } else { value };
        if REPORTED.contains(&name.as_str()) {
            self.out.parameter_status(reported_name(&name), &value);
        }
        self.parameters.insert(name, value);
        Ok(Started::Tag("SET".into()))
    }

    /// Reports the engine's time zone with ParameterStatus when it changed (SET, RESET).
    fn report_time_zone(&mut self) {
        let current = self.conn.settings().time_zone_name.clone();
        if self.parameters.get("timezone") != Some(&current) {
            self.out.parameter_status(reported_name("timezone"), &current);
            self.parameters.insert("timezone".to_string(), current);
        }
    }

    // ---- cursors (DECLARE / FETCH / CLOSE) ----------------------------------------

    fn declare(&mut self, declarations: &[ast::Declare]) -> Result<Started, StatementError> {
        let [declaration] = declarations else {
            return Err(unsupported("DECLARE of several cursors"));
        };
        let (Some(query), [name]) = (&declaration.for_query, declaration.names.as_slice()) else {
            return Err(unsupported("this form of DECLARE"));
        };
        let holdable = declaration.hold == Some(true);
        if !holdable && self.tx == TxStatus::Idle {
            return Err(StatementError::Info(ErrorInfo::error(
                NO_ACTIVE_SQL_TRANSACTION,
                "DECLARE CURSOR can only be used in transaction blocks",
            )));
        }
        if self.portals.contains_key(&name.value) {
            return Err(StatementError::Info(ErrorInfo::error(DUPLICATE_CURSOR, format!("cursor \"{}\" already exists", name.value))));
        }
        // The query runs now; FETCH hands out its rows.
        let result = self.conn.execute_statement(&ast::Statement::Query(query.clone())).map_err(StatementError::Engine)?;
        let columns = result_columns(&result);
        let format = if declaration.binary == Some(true) { Format::Binary } else { Format::Text };
        let portal = Portal {
            formats: vec![format; columns.len()],
            prepared: Arc::new(Prepared { statement: None, parameter_types: Vec::new(), columns }),
            parameters: Vec::new(),
            state: PortalState::Rows { result, tag: "FETCH", chunk: 0, row: 0 },
            holdable,
        };
        self.portals.insert(name.value.clone(), portal);
        Ok(Started::Tag("DECLARE CURSOR".into()))
    }

    /// FETCH: the next rows of a cursor, as the result of this statement.
    fn fetch(&mut self, name: &str, direction: &ast::FetchDirection) -> Result<Started, StatementError> {
        let count = fetch_count(direction)?;
        let portal = self.portals.get_mut(name).ok_or_else(|| cursor_missing(name))?;
        let PortalState::Rows { result, chunk, row, .. } = &mut portal.state else {
            return Ok(Started::Rows(QueryResult::rows_result(Vec::new(), Vec::new(), Vec::new()), "FETCH"));
        };
        // The rows go out as this statement's result: slice them off the cursor.
        let mut chunks = Vec::new();
        let mut remaining = count;
        while remaining > 0 && *chunk < result.chunks.len() {
            let source = &result.chunks[*chunk];
            let take = remaining.min(source.row_count() - *row);
            chunks.push(apiary_types::DataChunk::new(source.columns.iter().map(|c| c.slice(*row, take)).collect(), take));
            remaining -= take;
            *row += take;
            if *row >= source.row_count() {
                *chunk += 1;
                *row = 0;
            }
        }
        let fetched = QueryResult::rows_result(result.columns.clone(), result.types.clone(), chunks).in_time_zone(result.time_zone);
        Ok(Started::Rows(fetched, "FETCH"))
    }

    // ---- COPY ----------------------------------------------------------------------

    fn copy_from_stdin(
        &mut self,
        statement: &ast::Statement,
        source: &ast::CopySource,
        options: &[ast::CopyOption],
    ) -> Result<Started, StatementError> {
        let format = copy_format(options).map_err(|m| StatementError::Info(ErrorInfo::error(FEATURE_NOT_SUPPORTED, m)))?;
        let ast::CopySource::Table { columns, .. } = source else {
            return Err(unsupported("COPY (query) FROM STDIN"));
        };
        let column_count = columns.len();
        let spool = Spool::create(format, NEXT_SPOOL.fetch_add(1, Ordering::Relaxed))
            .map_err(|e| StatementError::Info(ErrorInfo::error(IO_ERROR, format!("cannot create a COPY spool file: {e}"))))?;
        self.copy_in = Some(CopyIn { statement: statement.clone(), spool, source: CopySource::Extended });
        // The column count is informational for text formats; 0 when all columns.
        self.out.copy_in_response(column_count);
        self.flush();
        Ok(Started::CopyIn)
    }

    fn handle_copy_message(&mut self, message: FrontendMessage) {
        let Some(copy) = self.copy_in.as_mut() else { return };
        let error = match message {
            FrontendMessage::CopyData(data) => match copy.spool.write(&data) {
                Ok(()) => return,
                Err(message) => StatementError::Info(ErrorInfo::error("22P04", message)),
            },
            FrontendMessage::Flush | FrontendMessage::Sync => return,
            FrontendMessage::CopyDone => {
                let Some(copy) = self.copy_in.take() else { return };
                let source = match self.finish_copy(copy) {
                    (Ok(rows), source) => {
                        self.out.command_complete(&format!("COPY {rows}"));
                        source
                    }
                    (Err(error), source) => {
                        let info = engine_error_info(error, None);
                        self.after_copy_error(info, source);
                        return;
                    }
                };
                if let CopySource::Simple(rest) = source {
                    self.run_simple(rest, "");
                }
                return;
            }
            FrontendMessage::CopyFail(reason) => {
                StatementError::Info(ErrorInfo::error(QUERY_CANCELED, format!("COPY from stdin failed: {reason}")))
            }
            FrontendMessage::Terminate => {
                self.copy_in = None;
                self.closing = true;
                return;
            }
            other => StatementError::Info(ErrorInfo::error(
                PROTOCOL_VIOLATION,
                format!("unexpected message during COPY from stdin: {}", message_name(&other)),
            )),
        };
        if let Some(copy) = self.copy_in.take() {
            let info = engine_error_info(error, None);
            self.after_copy_error(info, copy.source);
        }
    }

    /// Ends copy mode with an error: a simple Query gets its ReadyForQuery, an extended
    /// one skips to Sync.
    fn after_copy_error(&mut self, info: ErrorInfo, source: CopySource) {
        self.send_error(&info);
        match source {
            CopySource::Simple(_) => self.ready(),
            CopySource::Extended => {
                self.skip_until_sync = true;
                self.flush();
            }
        }
    }

    /// Loads the spooled data with the engine's COPY FROM 'file'.
    fn finish_copy(&mut self, mut copy: CopyIn) -> (Result<u64, StatementError>, CopySource) {
        let result = self.load_spool(&mut copy);
        // The spool is removed when `copy` drops.
        (result, copy.source)
    }

    fn load_spool(&mut self, copy: &mut CopyIn) -> Result<u64, StatementError> {
        copy.spool.finish().map_err(|message| StatementError::Info(ErrorInfo::error("22P04", message)))?;
        let ast::Statement::Copy { source, to, options, legacy_options, values, .. } = &copy.statement else {
            return Err(unsupported("COPY"));
        };
        let format = copy_format(options).map_err(|m| StatementError::Info(ErrorInfo::error(FEATURE_NOT_SUPPORTED, m)))?;
        let load = ast::Statement::Copy {
            source: source.clone(),
            to: *to,
            target: ast::CopyTarget::File { filename: copy.spool.path.to_string_lossy().into_owned() },
            options: spool_options(&format),
            legacy_options: legacy_options.clone(),
            values: values.clone(),
        };
        let result = self.conn.execute_statement(&load).map_err(|error| StatementError::Engine(spool_error(error, &copy.spool)))?;
        Ok(match result.kind {
            ResultKind::Statement { rows_affected } => rows_affected.unwrap_or(0),
            ResultKind::Rows => result.row_count() as u64,
        })
    }

    fn copy_to_stdout(
        &mut self,
        source: &ast::CopySource,
        options: &[ast::CopyOption],
        parameters: &[ScalarValue],
    ) -> Result<Started, StatementError> {
        let format = copy_format(options).map_err(|m| StatementError::Info(ErrorInfo::error(FEATURE_NOT_SUPPORTED, m)))?;
        let query = match source {
            ast::CopySource::Query(query) => ast::Statement::Query(query.clone()),
            ast::CopySource::Table { table_name, columns } => {
                let list =
                    if columns.is_empty() { "*".to_string() } else { columns.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(", ") };
                let sql = format!("SELECT {list} FROM {table_name}");
                apiary::parse(&sql).map_err(StatementError::Engine)?.pop().ok_or_else(|| unsupported("COPY of this source"))?
            }
        };
        let result =
            if parameters.is_empty() { self.conn.execute_statement(&query) } else { self.conn.execute_with_parameters(&query, parameters) }
                .map_err(StatementError::Engine)?;
        self.out.copy_out_response(result.column_count());
        let mut line = BytesMut::new();
        let mut scratch = BytesMut::new();
        if let CopyFormat::Csv { header: true, delimiter, quote, .. } = &format {
            put_header(&mut line, &result.columns, *delimiter, *quote);
            self.out.copy_data(&line);
        }
        let mut rows = 0u64;
        for chunk in &result.chunks {
            for row in 0..chunk.row_count() {
                line.clear();
                put_row(&mut line, &chunk.columns, row, &format, &mut scratch, &result.time_zone);
                self.out.copy_data(&line);
                rows += 1;
                if rows.is_multiple_of(ROWS_PER_STEP as u64) {
                    self.maybe_flush();
                    if self.gone {
                        return Ok(Started::Tag(format!("COPY {rows}")));
                    }
                }
            }
        }
        self.out.copy_done();
        Ok(Started::Tag(format!("COPY {rows}")))
    }

    // ---- extended query ------------------------------------------------------------

    fn extended(&mut self, message: FrontendMessage) -> Result<(), ErrorInfo> {
        match message {
            FrontendMessage::Parse { name, sql, parameter_types } => self.parse(name, &sql, &parameter_types),
            FrontendMessage::Bind { portal, statement, parameter_formats, parameters, result_formats } => {
                self.bind(portal, &statement, &parameter_formats, &parameters, &result_formats)
            }
            FrontendMessage::Describe { target: Target::Statement, name } => {
                let prepared = self.statements.get(&name).cloned().ok_or_else(|| statement_missing(&name))?;
                self.out.parameter_description(&prepared.parameter_types);
                if prepared.columns.is_empty() {
                    self.out.no_data();
                } else {
                    self.out.row_description(&prepared.columns, &[]);
                }
                Ok(())
            }
            FrontendMessage::Describe { target: Target::Portal, name } => {
                let portal = self.portals.get(&name).ok_or_else(|| cursor_missing_info(&name))?;
                if portal.prepared.columns.is_empty() {
                    self.out.no_data();
                } else {
                    let (columns, formats) = (portal.prepared.columns.clone(), portal.formats.clone());
                    self.out.row_description(&columns, &formats);
                }
                Ok(())
            }
            FrontendMessage::Close { target, name } => {
                match target {
                    Target::Statement => self.statements.remove(&name).map(|_| ()),
                    Target::Portal => self.portals.remove(&name).map(|_| ()),
                };
                self.out.close_complete();
                Ok(())
            }
            FrontendMessage::Execute { portal, max_rows } => self.execute(&portal, max_rows),
            _ => Ok(()),
        }
    }

    fn parse(&mut self, name: String, sql: &str, parameter_types: &[u32]) -> Result<(), ErrorInfo> {
        if !name.is_empty() && self.statements.contains_key(&name) {
            return Err(ErrorInfo::error(DUPLICATE_PREPARED_STATEMENT, format!("prepared statement \"{name}\" already exists")));
        }
        let mut statements = apiary::parse(sql).map_err(|e| engine_error(&e, Some(sql)))?;
        if statements.len() > 1 {
            return Err(ErrorInfo::error(SYNTAX_ERROR, "cannot insert multiple commands into a prepared statement"));
        }
        let declared: Vec<Option<DataType>> = parameter_types.iter().map(|&oid| data_type_for_oid(oid)).collect();
        let prepared = match statements.pop() {
            None => Prepared { statement: None, parameter_types: Vec::new(), columns: Vec::new() },
            Some(statement) => {
                let (parameter_types, columns) = self.describe(&statement, &declared).map_err(|e| engine_error(&e, Some(sql)))?;
                Prepared { statement: Some(statement), parameter_types, columns }
            }
        };
        self.statements.insert(name, Arc::new(prepared));
        self.out.parse_complete();
        Ok(())
    }

    /// Parameter types and result columns of a statement.
    fn describe(&mut self, statement: &ast::Statement, declared: &[Option<DataType>]) -> apiary::Result<(Vec<DataType>, Vec<Column>)> {
        let text = DataType::Varchar(None);
        // Statements the session answers itself.
        match statement {
            ast::Statement::ShowVariable { variable } => {
                let name = variable.iter().map(|i| i.value.to_ascii_lowercase()).collect::<Vec<_>>().join(".");
                if self.parameters.contains_key(&name) {
                    return Ok((Vec::new(), vec![Column { name, data_type: text }]));
                }
            }
            ast::Statement::Query(query) => {
                if let Some(names) = apiary::pg_catalog::empty_catalog_query(query) {
                    let columns = names.into_iter().map(|name| Column { name, data_type: text }).collect();
                    return Ok((declared.iter().map(|t| t.unwrap_or(text)).collect(), columns));
                }
            }
            ast::Statement::Fetch { name, .. } => {
                let columns = self.portals.get(&name.value).map(|p| p.prepared.columns.clone()).unwrap_or_default();
                return Ok((Vec::new(), columns));
            }
            ast::Statement::Copy { .. }
            | ast::Statement::StartTransaction { .. }
            | ast::Statement::Commit { .. }
            | ast::Statement::Rollback { .. }
            | ast::Statement::Set(_)
            | ast::Statement::Declare { .. }
            | ast::Statement::Close { .. }
            | ast::Statement::Deallocate { .. }
            | ast::Statement::Discard { .. } => {
                let mut types: Vec<DataType> = declared.iter().map(|t| t.unwrap_or(text)).collect();
                types.extend(std::iter::repeat_n(text, placeholder_count(statement).saturating_sub(types.len())));
                return Ok((types, Vec::new()));
            }
            _ => {}
        }
        let description = self.conn.describe_statement(statement, declared)?;
        let columns = description.columns.into_iter().map(|(name, data_type)| Column { name, data_type }).collect();
        Ok((description.parameter_types, columns))
    }

    fn bind(
        &mut self,
        portal_name: String,
        statement: &str,
        parameter_formats: &[i16],
        parameters: &[Option<bytes::Bytes>],
        result_formats: &[i16],
    ) -> Result<(), ErrorInfo> {
        let prepared = self.statements.get(statement).cloned().ok_or_else(|| statement_missing(statement))?;
        if parameters.len() != prepared.parameter_types.len() {
            return Err(ErrorInfo::error(
                PROTOCOL_VIOLATION,
                format!(
                    "bind message supplies {} parameters, but prepared statement \"{statement}\" requires {}",
                    parameters.len(),
                    prepared.parameter_types.len()
                ),
            ));
        }
        if parameter_formats.len() > 1 && parameter_formats.len() != parameters.len() {
            return Err(ErrorInfo::error(
                PROTOCOL_VIOLATION,
                format!("bind message has {} parameter formats but {} parameters", parameter_formats.len(), parameters.len()),
            ));
        }
        let mut values = Vec::with_capacity(parameters.len());
        for (idx, (value, data_type)) in parameters.iter().zip(&prepared.parameter_types).enumerate() {
            let format = Format::for_column(parameter_formats, idx).map_err(|m| ErrorInfo::error(PROTOCOL_VIOLATION, m))?;
            let value = parameter_value(value.as_deref(), format, *data_type, &self.conn.settings().execution.time_zone)
                .map_err(|e| ErrorInfo::error(e.code, e.message).with_detail(format!("in parameter ${}", idx + 1)))?;
            values.push(value);
        }
        if result_formats.len() > 1 && result_formats.len() != prepared.columns.len() {
            return Err(ErrorInfo::error(
                PROTOCOL_VIOLATION,
                format!("bind message has {} result formats but query has {} columns", result_formats.len(), prepared.columns.len()),
            ));
        }
        let formats = (0..prepared.columns.len())
            .map(|idx| Format::for_column(result_formats, idx))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|m| ErrorInfo::error(PROTOCOL_VIOLATION, m))?;
        if !portal_name.is_empty() && self.portals.contains_key(&portal_name) {
            return Err(ErrorInfo::error(DUPLICATE_CURSOR, format!("portal \"{portal_name}\" already exists")));
        }
        self.portals.insert(portal_name, Portal { prepared, parameters: values, formats, state: PortalState::NotRun, holdable: false });
        self.out.bind_complete();
        Ok(())
    }

    fn execute(&mut self, name: &str, max_rows: i32) -> Result<(), ErrorInfo> {
        let portal = self.portals.get_mut(name).ok_or_else(|| cursor_missing_info(name))?;
        if matches!(portal.state, PortalState::NotRun) {
            portal.state = PortalState::Done;
            let prepared = Arc::clone(&portal.prepared);
            let parameters = std::mem::take(&mut portal.parameters);
            let Some(statement) = &prepared.statement else {
                self.out.empty_query();
                return Ok(());
            };
            match self.start(statement, &parameters) {
                Ok(Started::Tag(tag)) => {
                    self.out.command_complete(&tag);
                    return Ok(());
                }
                Ok(Started::CopyIn) => return Ok(()),
                Ok(Started::Rows(result, tag)) => {
                    check_described_types(&prepared.columns, &result, self.portals.get(name).map(|p| p.formats.as_slice()))?;
                    if let Some(portal) = self.portals.get_mut(name) {
                        portal.state = PortalState::Rows { result, tag, chunk: 0, row: 0 };
                    }
                }
                Err(error) => return Err(engine_error_info(error, None)),
            }
        }
        // Take the portal's rows out while they are sent (send_rows borrows self).
        let Some(portal) = self.portals.get_mut(name) else { return Ok(()) };
        let formats = portal.formats.clone();
        match std::mem::replace(&mut portal.state, PortalState::Done) {
            PortalState::Rows { result, tag, chunk, row } => {
                let mut cursor = RowCursor { chunk, row };
                let limit = if max_rows > 0 { max_rows as usize } else { 0 };
                let sent = self.send_rows(&result, &mut cursor, &formats, limit);
                let exhausted = cursor.chunk >= result.chunks.len();
                if exhausted {
                    self.out.command_complete(&format!("{tag} {sent}"));
                } else {
                    self.out.portal_suspended();
                    if let Some(portal) = self.portals.get_mut(name) {
                        portal.state = PortalState::Rows { result, tag, chunk: cursor.chunk, row: cursor.row };
                    }
                }
            }
            PortalState::Done | PortalState::NotRun => self.out.command_complete("SELECT 0"),
        }
        Ok(())
    }

    /// Sends DataRows from `cursor` on, at most `limit` (0: all); returns how many.
    fn send_rows(&mut self, result: &QueryResult, cursor: &mut RowCursor, formats: &[Format], limit: usize) -> usize {
        let mut sent = 0;
        while cursor.chunk < result.chunks.len() {
            let chunk = &result.chunks[cursor.chunk];
            let rows = chunk.row_count();
            while cursor.row < rows {
                if limit > 0 && sent >= limit {
                    return sent;
                }
                let mut end = (cursor.row + ROWS_PER_STEP).min(rows);
                if limit > 0 {
                    end = end.min(cursor.row + (limit - sent));
                }
                self.out.data_rows(chunk, cursor.row, end, formats, &result.time_zone);
                sent += end - cursor.row;
                cursor.row = end;
                self.maybe_flush();
                if self.gone {
                    return sent;
                }
            }
            cursor.chunk += 1;
            cursor.row = 0;
        }
        sent
    }
}

#[derive(Default)]
struct RowCursor {
    chunk: usize,
    row: usize,
}

/// An error from running a statement: the engine's (with its SQLSTATE) or the session's.
enum StatementError {
    Engine(ApiaryError),
    Info(ErrorInfo),
}

fn engine_error_info(error: StatementError, sql: Option<&str>) -> ErrorInfo {
    match error {
        StatementError::Engine(e) => engine_error(&e, sql),
        StatementError::Info(info) => info,
    }
}

fn unsupported(what: &str) -> StatementError {
    StatementError::Info(ErrorInfo::error(FEATURE_NOT_SUPPORTED, format!("{what} is not supported")))
}

fn cursor_missing(name: &str) -> StatementError {
    StatementError::Info(cursor_missing_info(name))
}

fn cursor_missing_info(name: &str) -> ErrorInfo {
    ErrorInfo::error(INVALID_CURSOR_NAME, format!("portal \"{name}\" does not exist"))
}

fn statement_missing(name: &str) -> ErrorInfo {
    ErrorInfo::error(INVALID_SQL_STATEMENT_NAME, format!("prepared statement \"{name}\" does not exist"))
}

/// An engine error for the client: its SQLSTATE, and for syntax errors the position in
/// `sql` (PostgreSQL counts characters from 1).
pub fn engine_error(error: &ApiaryError, sql: Option<&str>) -> ErrorInfo {
    let mut info = ErrorInfo::error(error.sqlstate(), error.to_string());
    if let (ApiaryError::Parse(message), Some(sql)) = (error, sql) {
        info.position = syntax_error_position(message, sql);
    }
    info
}

/// `at line L, column C` in a parser message, as a 1-based character offset.
fn syntax_error_position(message: &str, sql: &str) -> Option<usize> {
    let rest = &message[message.find("at line ")? + "at line ".len()..];
    let (line, rest) = rest.split_once(", column ")?;
    let line: usize = line.trim().parse().ok()?;
    let column: usize = rest.chars().take_while(|c| c.is_ascii_digit()).collect::<String>().parse().ok()?;
    let mut offset = 0;
    for (idx, text) in sql.split('\n').enumerate() {
        if idx + 1 == line {
            return Some(offset + column.min(text.chars().count() + 1));
        }
        offset += text.chars().count() + 1;
    }
    None
}

fn spool_error(error: ApiaryError, spool: &Spool) -> ApiaryError {
    // The engine names the spool file; the client knows its data as STDIN.
    let path = spool.path.to_string_lossy().into_owned();
    match error {
        ApiaryError::Load { line, message, .. } => {
            ApiaryError::Load { file: "STDIN".to_string(), line, message: message.replace(&path, "STDIN") }
        }
        ApiaryError::Io(message) => ApiaryError::Io(message.replace(&path, "STDIN")),
        other => other,
    }
}

/// Result columns of a result.
fn result_columns(result: &QueryResult) -> Vec<Column> {
    result.columns.iter().zip(&result.types).map(|(name, data_type)| Column { name: name.clone(), data_type: *data_type }).collect()
}

/// A binary column must be encoded as the type the client was told at Describe.
fn check_described_types(described: &[Column], result: &QueryResult, formats: Option<&[Format]>) -> Result<(), ErrorInfo> {
    let Some(formats) = formats else { return Ok(()) };
    for (idx, (column, format)) in described.iter().zip(formats).enumerate() {
        let actual = result.types.get(idx).copied().unwrap_or(DataType::Null);
        let oid = |t: DataType| apiary_types::pg::pg_type(t).oid;
        if *format == Format::Binary && actual != DataType::Null && oid(actual) != oid(column.data_type) {
            return Err(ErrorInfo::error(
                "XX000",
                format!(
                    "column {} was described as {} but the result has {}; request it in text format. This is a bug in Apiary; please report it",
                    column.name,
                    apiary_types::pg::pg_type(column.data_type).name,
                    apiary_types::pg::pg_type(actual).name
                ),
            ));
        }
    }
    Ok(())
}

fn single_text_result(name: &str, value: &str) -> QueryResult {
    let vector = apiary_types::Vector::from_scalar(&ScalarValue::Utf8(value.to_string()), DataType::Varchar(None), 1);
    QueryResult::rows_result(vec![name.to_string()], vec![DataType::Varchar(None)], vec![apiary_types::DataChunk::new(vec![vector], 1)])
}

/// The text of a SET value (`'UTC'`, `ISO, MDY`, `3`, `DEFAULT`).
fn parameter_text(expr: &ast::Expr) -> String {
    match expr {
        ast::Expr::Value(v) => match &v.value {
            ast::Value::SingleQuotedString(s) | ast::Value::DoubleQuotedString(s) => s.clone(),
            other => other.to_string(),
        },
        ast::Expr::Identifier(ident) => ident.value.clone(),
        other => other.to_string(),
    }
}

fn fetch_count(direction: &ast::FetchDirection) -> Result<usize, StatementError> {
    use ast::FetchDirection as D;
    let number = |value: &ast::ValueWithSpan| -> Result<usize, StatementError> {
        match &value.value {
            ast::Value::Number(n, _) => n.parse::<usize>().map_err(|_| unsupported("FETCH with this count")),
            _ => Err(unsupported("FETCH with this count")),
        }
    };
    match direction {
        D::Next | D::Forward { limit: None } => Ok(1),
        D::Count { limit } | D::Forward { limit: Some(limit) } => number(limit),
        D::All | D::ForwardAll => Ok(usize::MAX),
        _ => Err(unsupported("FETCH in this direction (cursors move forward only)")),
    }
}

/// The highest `$n` in a statement the engine does not bind (their types default to text).
fn placeholder_count(statement: &ast::Statement) -> usize {
    let text = statement.to_string();
    let mut highest = 0;
    let bytes = text.as_bytes();
    for (idx, _) in text.match_indices('$') {
        let digits: String = bytes[idx + 1..].iter().take_while(|b| b.is_ascii_digit()).map(|&b| b as char).collect();
        if let Ok(n) = digits.parse::<usize>() {
            highest = highest.max(n.min(crate::MAX_PARAMETERS));
        }
    }
    highest
}

/// The CommandComplete tag of a statement without rows.
fn command_tag(statement: &ast::Statement, rows: Option<u64>) -> String {
    use ast::Statement as S;
    let rows = rows.unwrap_or(0);
    match statement {
        S::Insert(_) => format!("INSERT 0 {rows}"),
        S::Delete(_) => format!("DELETE {rows}"),
        S::Update(_) => format!("UPDATE {rows}"),
        S::Merge(_) => format!("MERGE {rows}"),
        S::Truncate(_) => "TRUNCATE TABLE".to_string(),
        S::AlterTable(_) => "ALTER TABLE".to_string(),
        S::CreateTable(create) if create.query.is_some() => format!("SELECT {rows}"),
        S::CreateTable(_) => "CREATE TABLE".to_string(),
        S::CreateView(_) => "CREATE VIEW".to_string(),
        S::Drop { object_type, .. } => format!("DROP {object_type}"),
        S::Copy { .. } => format!("COPY {rows}"),
        S::Set(_) => "SET".to_string(),
        S::Reset(_) => "RESET".to_string(),
        S::Call(_) => "CHECKPOINT".to_string(),
        S::Query(_) => format!("SELECT {rows}"),
        other => other.to_string().split_whitespace().next().unwrap_or("OK").to_ascii_uppercase(),
    }
}

/// The CommandComplete tag word of a statement with rows (the row count follows).
fn rows_tag(statement: &ast::Statement) -> &'static str {
    match statement {
        ast::Statement::ShowVariable { .. } | ast::Statement::ShowTables { .. } => "SHOW",
        ast::Statement::Explain { .. } => "EXPLAIN",
        // With RETURNING.
        ast::Statement::Insert(_) => "INSERT 0",
        ast::Statement::Delete(_) => "DELETE",
        ast::Statement::Update(_) => "UPDATE",
        ast::Statement::Merge(_) => "MERGE",
        _ => "SELECT",
    }
}

fn message_name(message: &FrontendMessage) -> &'static str {
    match message {
        FrontendMessage::Query(_) => "Query",
        FrontendMessage::Parse { .. } => "Parse",
        FrontendMessage::Bind { .. } => "Bind",
        FrontendMessage::Describe { .. } => "Describe",
        FrontendMessage::Execute { .. } => "Execute",
        FrontendMessage::Close { .. } => "Close",
        FrontendMessage::Password(_) => "PasswordMessage",
        FrontendMessage::FunctionCall => "FunctionCall",
        _ => "another message",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_count_characters_from_one() {
        assert_eq!(syntax_error_position("syntax error: at line 1, column 10: expected", "SELECT 1 FRM t"), Some(10));
        assert_eq!(syntax_error_position("at line 2, column 3: x", "SELECT\nÄÄx"), Some(10));
        assert_eq!(syntax_error_position("no position", "x"), None);
    }

    #[test]
    fn placeholders_are_counted() {
        let statement = apiary::parse("SET application_name = $2").map(|mut s| s.pop());
        if let Ok(Some(statement)) = statement {
            assert_eq!(placeholder_count(&statement), 2);
        }
    }
}
