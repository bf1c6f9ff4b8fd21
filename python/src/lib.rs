//! `apiary._apiary`: the extension module under the Python package `apiary`.
//!
//! This layer is thin on purpose: it runs statements on an [`apiary::Connection`] and
//! moves data in and out as Arrow through the Arrow C stream interface (the
//! `__arrow_c_stream__` PyCapsule protocol), so no column is converted value by value
//! here. The DB-API surface, pandas / Polars / NumPy conversions and the lookup of
//! DataFrames by variable name are Python (`python/apiary/`).
//!
//! A statement runs with the GIL released, on a thread of its own, while the calling
//! thread waits and checks for signals: a Ctrl-C (`KeyboardInterrupt`) sets the
//! connection's interrupt flag, the engine stops the query at its next vector, and the
//! `KeyboardInterrupt` is raised to the caller.

use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use apiary::arrow::array::{RecordBatch, RecordBatchIterator, RecordBatchReader};
use apiary::arrow::error::ArrowError;
use apiary::arrow::ffi::FFI_ArrowSchema;
use apiary::arrow::ffi_stream::{FFI_ArrowArrayStream, RecordBatchStreamReader};
use apiary::{ApiaryError, DataType, ExternalTable, ExternalTables, ResultKind, ScalarValue, TimeZone};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyList, PyString};

create_exception!(_apiary, Warning, PyException, "PEP 249: an important warning.");
create_exception!(_apiary, Error, PyException, "PEP 249: the base of Apiary's errors; `sqlstate` holds the SQLSTATE.");
create_exception!(_apiary, InterfaceError, Error, "PEP 249: misuse of the interface (a closed connection or cursor).");
create_exception!(_apiary, DatabaseError, Error, "PEP 249: an error the database reported.");
create_exception!(_apiary, DataError, DatabaseError, "SQLSTATE class 22: a value out of range, division by zero, a failed cast.");
create_exception!(
    _apiary,
    OperationalError,
    DatabaseError,
    "SQLSTATE classes 40 and 53-58: serialization failures, out of memory, cancelled, I/O errors."
);
create_exception!(_apiary, IntegrityError, DatabaseError, "SQLSTATE class 23: a constraint was violated.");
create_exception!(_apiary, InternalError, DatabaseError, "SQLSTATE class XX: an internal error or corruption.");
create_exception!(_apiary, ProgrammingError, DatabaseError, "SQLSTATE class 42 and others: syntax errors, unknown names, wrong types.");
create_exception!(_apiary, NotSupportedError, DatabaseError, "SQLSTATE 0A000: a feature Apiary does not support.");

const STREAM_CAPSULE: &CStr = c"arrow_array_stream";
const SCHEMA_CAPSULE: &CStr = c"arrow_schema";

/// The stack of a statement's thread: binding and planning recurse over the statement,
/// and the engine counts on a main thread's stack for statements it does not move to a
/// larger one itself (address space, touched only as deep as a statement goes).
const STATEMENT_STACK: usize = 64 << 20;

/// How often a waiting caller checks for Ctrl-C.
const SIGNAL_POLL: Duration = Duration::from_millis(20);

/// With a progress bar: statements shorter than this draw none; then it is redrawn this
/// often (the CLI's figures).
const PROGRESS_AFTER: Duration = Duration::from_secs(1);
const PROGRESS_REDRAW: Duration = Duration::from_millis(100);

/// The Python exception for an engine error: the PEP 249 class for its SQLSTATE (as
/// psycopg maps them), with the code in its `sqlstate` attribute.
fn to_py_err(py: Python<'_>, error: &ApiaryError) -> PyErr {
    let code = error.sqlstate();
    let message = error.to_string();
    let err = match &code[..2] {
        "22" => DataError::new_err(message),
        "23" => IntegrityError::new_err(message),
        "0A" => NotSupportedError::new_err(message),
        "08" | "40" | "53" | "54" | "55" | "57" | "58" => OperationalError::new_err(message),
        "XX" | "2B" | "25" => InternalError::new_err(message),
        _ => ProgrammingError::new_err(message),
    };
    // Setting an attribute on a fresh exception object cannot fail.
    let _ = err.value(py).setattr("sqlstate", code);
    err
}

fn closed() -> PyErr {
    InterfaceError::new_err("the connection is closed")
}

/// A connection to a database: one session (settings, plan cache) in it.
#[pyclass(frozen, module = "apiary._apiary")]
struct Connection {
    /// The database and the session; `None` once closed (which lets go of the database
    /// file when no other connection holds it).
    session: Mutex<Option<Session>>,
    /// The session's interrupt flag, kept outside the lock a running statement holds.
    interrupt: Arc<AtomicBool>,
}

struct Session {
    database: apiary::Database,
    connection: apiary::Connection,
}

impl Connection {
    fn new(database: apiary::Database) -> Self {
        let connection = database.connect();
        let interrupt = connection.interrupt_flag();
        Connection { session: Mutex::new(Some(Session { database, connection })), interrupt }
    }

    fn session(&self) -> MutexGuard<'_, Option<Session>> {
        // A panic while the lock was held left the session as it was between statements.
        self.session.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Opens a database: in memory for `None` or `":memory:"`, otherwise the file at `path`
/// (created if missing).
#[pyfunction]
#[pyo3(signature = (path = None))]
fn connect(py: Python<'_>, path: Option<&str>) -> PyResult<Connection> {
    let database = match path {
        None | Some(":memory:") | Some("") => apiary::Database::open_in_memory(),
        Some(path) => {
            let path = path.to_string();
            py.detach(move || apiary::Database::open(path))
        }
    }
    .map_err(|e| to_py_err(py, &e))?;
    Ok(Connection::new(database))
}

/// What a statement is run with.
enum Statement {
    /// `;`-separated statements; the last one's result is returned.
    Script(String),
    /// One statement with `$n` (or `?`) parameter values.
    WithParameters(Box<apiary::ast::Statement>, Vec<ScalarValue>),
}

#[pymethods]
impl Connection {
    /// Another connection (session) to the same database.
    fn duplicate(&self) -> PyResult<Connection> {
        match self.session().as_ref() {
            None => Err(closed()),
            Some(session) => Ok(Connection::new(session.database.clone())),
        }
    }

    /// Runs `sql` and returns the last statement's result (`None` for an empty script).
    ///
    /// `parameters` (a sequence) fill the statement's `?` or `$n` placeholders; it must
    /// then be one statement. `resolve(name)` is called for a name in `FROM` that the
    /// database does not know and returns an object with `__arrow_c_stream__` (or
    /// `None`).
    #[pyo3(signature = (sql, parameters = None, resolve = None, progress = None))]
    fn execute(
        &self,
        py: Python<'_>,
        sql: &str,
        parameters: Option<&Bound<'_, PyAny>>,
        resolve: Option<Py<PyAny>>,
        progress: Option<Py<PyAny>>,
    ) -> PyResult<Option<QueryResult>> {
        let statement = match parameters {
            None => Statement::Script(sql.to_string()),
            Some(parameters) => {
                let values = parameters.try_iter()?.map(|value| to_scalar(&value?)).collect::<PyResult<Vec<_>>>()?;
                let mut statements = apiary::parse(sql).map_err(|e| to_py_err(py, &e))?;
                if statements.len() != 1 {
                    return Err(ProgrammingError::new_err(format!(
                        "a statement with parameters must be one statement, not {}",
                        statements.len()
                    )));
                }
                Statement::WithParameters(Box::new(statements.remove(0)), values)
            }
        };
        let external: Option<Arc<dyn ExternalTables>> = resolve.map(|resolve| Arc::new(PythonTables { resolve }) as _);
        let outcome = self.run(py, statement, external, progress)?;
        match outcome {
            Ok(result) => {
                Ok(result.map(|(result, elapsed, threads)| QueryResult { result, engine_seconds: elapsed.as_secs_f64(), threads }))
            }
            Err(error) => Err(to_py_err(py, &error)),
        }
    }

    /// Ends the session; later calls raise `InterfaceError`. Closing twice is allowed.
    fn close(&self) {
        self.session().take();
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.session().is_none()
    }

    /// Cancels the statement running on this connection (from another thread).
    fn interrupt(&self) {
        self.interrupt.store(true, Ordering::Relaxed);
    }
}

impl Connection {
    /// Runs the statement with the GIL released, on a thread of its own, while this
    /// thread waits and turns a Ctrl-C into an interrupt of the statement. The outer
    /// error is a Python one (the `KeyboardInterrupt`), the inner one the engine's.
    ///
    /// `progress`, when given, is called with a progress line (see
    /// `QueryProgress::bar_line`) about every 100 ms once the statement has run for a
    /// second, and with `None` when a statement that drew one ends.
    fn run(
        &self,
        py: Python<'_>,
        statement: Statement,
        external: Option<Arc<dyn ExternalTables>>,
        progress: Option<Py<PyAny>>,
    ) -> PyResult<apiary::Result<Option<(apiary::QueryResult, Duration, usize)>>> {
        let interrupt = Arc::clone(&self.interrupt);
        let progress_handle = match &progress {
            Some(_) => self.session().as_ref().map(|session| session.connection.progress_handle()),
            None => None,
        };
        py.detach(|| {
            std::thread::scope(|scope| {
                let (done, finished) = mpsc::channel();
                let worker = std::thread::Builder::new().name("apiary-statement".into()).stack_size(STATEMENT_STACK).spawn_scoped(
                    scope,
                    move || {
                        let mut guard = self.session();
                        let outcome = match guard.as_mut() {
                            None => Err(closed()),
                            Some(Session { connection: session, .. }) => {
                                session.set_external_tables(external);
                                let started = Instant::now();
                                let outcome = match statement {
                                    Statement::Script(sql) => session.execute(&sql).map(|mut results| results.pop()),
                                    Statement::WithParameters(statement, values) => {
                                        session.execute_with_parameters(&statement, &values).map(Some)
                                    }
                                };
                                let threads = session.threads();
                                let outcome = outcome.map(|result| result.map(|result| (result, started.elapsed(), threads)));
                                // The resolver holds Python objects: it goes with the statement.
                                session.set_external_tables(None);
                                Ok(outcome)
                            }
                        };
                        drop(guard);
                        let _ = done.send(());
                        outcome
                    },
                );
                let worker = match worker {
                    Ok(worker) => worker,
                    Err(e) => return Err(OperationalError::new_err(format!("cannot start a thread for the statement: {e}"))),
                };
                let mut signal: Option<PyErr> = None;
                let started = Instant::now();
                let (mut drawn, mut last_drawn) = (false, started);
                // Ends when the statement's thread says it is done (or ended without saying).
                while let Err(mpsc::RecvTimeoutError::Timeout) = finished.recv_timeout(SIGNAL_POLL) {
                    if let Err(err) = Python::attach(|py| py.check_signals()) {
                        signal.get_or_insert(err);
                    }
                    if let (Some(draw), Some(handle)) = (&progress, &progress_handle) {
                        if started.elapsed() >= PROGRESS_AFTER && last_drawn.elapsed() >= PROGRESS_REDRAW {
                            last_drawn = Instant::now();
                            if let Some(now) = handle.current() {
                                // A failing callback only loses the bar, but a Ctrl-C that
                                // Python raised inside it is the user's.
                                let interrupted = Python::attach(|py| match draw.call1(py, (now.bar_line(),)) {
                                    Err(err) if err.is_instance_of::<pyo3::exceptions::PyKeyboardInterrupt>(py) => Some(err),
                                    _ => None,
                                });
                                if let Some(err) = interrupted {
                                    signal.get_or_insert(err);
                                }
                                drawn = true;
                            }
                        }
                    }
                    // Set again at each poll: the engine clears the flag when a statement
                    // starts, which may be after the signal came.
                    if signal.is_some() {
                        interrupt.store(true, Ordering::Relaxed);
                    }
                }
                if let (Some(draw), true) = (&progress, drawn) {
                    let _ = Python::attach(|py| draw.call1(py, (py.None(),)));
                }
                let outcome = worker.join().map_err(|_| InternalError::new_err("the statement's thread panicked"))?;
                match signal {
                    Some(err) => Err(err),
                    None => outcome,
                }
            })
        })
    }
}

/// The names a query's `FROM` leaves unresolved, looked up through a Python callable.
struct PythonTables {
    resolve: Py<PyAny>,
}

impl ExternalTables for PythonTables {
    fn lookup(&self, name: &str) -> apiary::Result<Option<ExternalTable>> {
        Python::attach(|py| -> PyResult<Option<ExternalTable>> {
            let found = self.resolve.bind(py).call1((name,))?;
            if found.is_none() {
                return Ok(None);
            }
            let reader = import_stream(&found)?;
            let schema = reader.schema();
            let batches = reader.collect::<Result<Vec<RecordBatch>, ArrowError>>().map_err(|e| DataError::new_err(e.to_string()))?;
            Ok(Some(ExternalTable::new(schema, batches)))
        })
        .map_err(|err| ApiaryError::Bind(format!("reading the Python object {name}: {err}")))
    }
}

/// Reads an object that exports an Arrow C stream (`__arrow_c_stream__`).
fn import_stream(object: &Bound<'_, PyAny>) -> PyResult<RecordBatchStreamReader> {
    let capsule = object.call_method0("__arrow_c_stream__")?;
    let capsule = capsule.cast::<PyCapsule>()?;
    let pointer = capsule.pointer_checked(Some(STREAM_CAPSULE))?;
    // SAFETY: the capsule holds an `ArrowArrayStream` (checked by its name);
    // `from_raw` moves the stream out and leaves a released one behind, which is what the
    // capsule protocol asks of a consumer.
    unsafe { RecordBatchStreamReader::from_raw(pointer.as_ptr().cast()) }.map_err(|e| DataError::new_err(e.to_string()))
}

/// A Python value as a parameter value.
fn to_scalar(value: &Bound<'_, PyAny>) -> PyResult<ScalarValue> {
    if value.is_none() {
        return Ok(ScalarValue::Null);
    }
    if let Ok(b) = value.cast::<pyo3::types::PyBool>() {
        return Ok(ScalarValue::Boolean(b.is_true()));
    }
    if value.is_instance_of::<pyo3::types::PyInt>() {
        return match value.extract::<i64>() {
            Ok(v) => Ok(ScalarValue::Int64(v)),
            Err(_) => {
                let v: i128 = value.extract().map_err(|_| DataError::new_err(format!("integer {value} is out of range")))?;
                if v.unsigned_abs() >= 10u128.pow(38) {
                    return Err(DataError::new_err(format!("integer {value} is out of range")));
                }
                Ok(ScalarValue::Decimal(v, 38, 0))
            }
        };
    }
    if let Ok(v) = value.cast::<pyo3::types::PyFloat>() {
        return Ok(ScalarValue::Float64(v.value()));
    }
    if let Ok(v) = value.cast::<PyString>() {
        return Ok(ScalarValue::Utf8(v.to_cow()?.into_owned()));
    }
    // Decimals, dates, times and intervals travel as text the engine casts to the type
    // `apiary._convert.parameter` names.
    let py = value.py();
    let converted = py.import("apiary._convert")?.call_method1("parameter", (value,))?;
    let (kind, text): (String, String) = converted.extract()?;
    let target = match kind.as_str() {
        "date" => DataType::Date,
        "time" => DataType::Time,
        "timestamp" => DataType::Timestamp,
        "timestamptz" => DataType::TimestampTz,
        "interval" => DataType::Interval,
        "decimal" => {
            let digits = text.trim_start_matches('-').replace('.', "").trim_start_matches('0').len().max(1);
            let scale = text.split_once('.').map_or(0, |(_, fraction)| fraction.len());
            if digits.max(scale) > 38 {
                return Err(DataError::new_err(format!("decimal {text} has more than 38 digits")));
            }
            DataType::Decimal { precision: digits.max(scale).max(1) as u8, scale: scale as u8 }
        }
        other => return Err(ProgrammingError::new_err(format!("cannot pass a {other} as a parameter"))),
    };
    ScalarValue::Utf8(text).cast_to_in(&target, &TimeZone::UTC).map_err(|e| to_py_err(py, &e))
}

/// A statement's result: rows (a query) or a count of affected rows.
#[pyclass(frozen, module = "apiary._apiary")]
struct QueryResult {
    result: apiary::QueryResult,
    /// How long the engine took (parse to result), without the Python around it.
    engine_seconds: f64,
    /// The database's worker threads when the statement ran: how many batches the
    /// Arrow export converts at a time.
    threads: usize,
}

impl QueryResult {
    /// Which columns a requested schema (an `arrow_schema` capsule) asks for as string
    /// views: text columns whose requested type is `Utf8View`, matched by position.
    fn requested_string_views(&self, capsule: &Bound<'_, PyAny>) -> PyResult<Vec<bool>> {
        let capsule = capsule.cast::<PyCapsule>()?;
        let pointer = capsule.pointer_checked(Some(SCHEMA_CAPSULE))?;
        // SAFETY: the capsule holds an `ArrowSchema` (checked by its name), which the
        // capsule keeps alive while we read it; we do not take ownership.
        let requested = unsafe { &*pointer.as_ptr().cast::<FFI_ArrowSchema>() };
        let requested = arrow::datatypes::Schema::try_from(requested).map_err(|e| ProgrammingError::new_err(e.to_string()))?;
        Ok(self
            .result
            .types
            .iter()
            .enumerate()
            .map(|(i, t)| {
                matches!(t, DataType::Varchar(_) | DataType::Char(_))
                    && requested.fields().get(i).is_some_and(|f| *f.data_type() == arrow::datatypes::DataType::Utf8View)
            })
            .collect())
    }
}

#[pymethods]
impl QueryResult {
    /// Seconds the engine spent on the statement (parsing to result), without the time
    /// in Python or converting the result (the overhead benchmarks measure).
    #[getter]
    fn engine_seconds(&self) -> f64 {
        self.engine_seconds
    }

    /// Whether the statement returns rows.
    #[getter]
    fn has_rows(&self) -> bool {
        self.result.has_rows()
    }

    /// Rows returned or affected (-1 when not known).
    #[getter]
    fn rowcount(&self) -> i64 {
        match self.result.kind {
            ResultKind::Rows => self.result.row_count() as i64,
            ResultKind::Statement { rows_affected } => rows_affected.map_or(-1, |n| n as i64),
        }
    }

    /// Column names.
    #[getter]
    fn columns<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, &self.result.columns)
    }

    /// Column types as SQL names (`INTEGER`, `DECIMAL(15,2)`, ...).
    #[getter]
    fn types<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, self.result.types.iter().map(|t| t.to_string()))
    }

    /// Exports the rows as an Arrow C stream (the `__arrow_c_stream__` protocol).
    /// Fixed-width columns are handed over without copying. Of a requested schema (a
    /// hint a producer may ignore, in the protocol's words) Apiary follows one thing:
    /// text columns requested as string views (`Utf8View`) are exported as views, also
    /// without copying.
    #[pyo3(signature = (requested_schema = None))]
    fn __arrow_c_stream__<'py>(&self, py: Python<'py>, requested_schema: Option<&Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyCapsule>> {
        let string_views = match requested_schema {
            Some(capsule) if !capsule.is_none() => self.requested_string_views(capsule)?,
            _ => vec![false; self.result.column_count()],
        };
        let result = &self.result;
        let batches = py.detach(|| result.to_arrow_with(&string_views, self.threads)).map_err(|e| to_py_err(py, &e))?;
        let schema = self.result.arrow_schema_with_string_views(&string_views);
        let reader: Box<dyn RecordBatchReader + Send> = Box::new(RecordBatchIterator::new(batches.into_iter().map(Ok), schema));
        PyCapsule::new_with_value(py, FFI_ArrowArrayStream::new(reader), STREAM_CAPSULE)
    }

    /// Exports the result's schema (the `__arrow_c_schema__` protocol).
    fn __arrow_c_schema__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyCapsule>> {
        let schema = self.result.arrow_schema();
        let ffi = FFI_ArrowSchema::try_from(schema.as_ref()).map_err(|e| InternalError::new_err(e.to_string()))?;
        PyCapsule::new_with_value(py, ffi, SCHEMA_CAPSULE)
    }

    fn __repr__(&self) -> String {
        format!("<apiary result: {} columns, {} rows>", self.result.column_count(), self.rowcount())
    }
}

/// The package's version (the engine's).
#[pyfunction]
fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// The engine's memory comes from mimalloc, as in the CLI: the system allocator returns
/// large blocks to the kernel at once and pays page faults and zeroing to get them back
/// on the next query (a fifth of the time of exporting lineitem to Arrow went to them).
/// Memory handed to Python (Arrow buffers) is released through this module, so it goes
/// back to the same allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` and `mi_option_arena_eager_commit` in mimalloc's `mi_option_e`
/// (libmimalloc-sys has no constants for them).
const MIMALLOC_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
const MIMALLOC_ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;

/// Freed memory goes back to the kernel after this many milliseconds unused: reused by
/// queries run one after another, returned when the program does something else (a
/// library should not keep its peak for the life of the process, as the CLI does).
const PURGE_DELAY_MS: std::os::raw::c_long = 2000;

#[pymodule]
fn _apiary(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // SAFETY: setting a mimalloc option has no preconditions.
    unsafe {
        libmimalloc_sys::mi_option_set(MIMALLOC_PURGE_DELAY, PURGE_DELAY_MS);
        libmimalloc_sys::mi_option_set(MIMALLOC_ARENA_EAGER_COMMIT, 0);
    }
    let py = m.py();
    m.add_class::<Connection>()?;
    m.add_class::<QueryResult>()?;
    m.add_function(wrap_pyfunction!(connect, m)?)?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    for (name, class) in [
        ("Warning", py.get_type::<Warning>()),
        ("Error", py.get_type::<Error>()),
        ("InterfaceError", py.get_type::<InterfaceError>()),
        ("DatabaseError", py.get_type::<DatabaseError>()),
        ("DataError", py.get_type::<DataError>()),
        ("OperationalError", py.get_type::<OperationalError>()),
        ("IntegrityError", py.get_type::<IntegrityError>()),
        ("InternalError", py.get_type::<InternalError>()),
        ("ProgrammingError", py.get_type::<ProgrammingError>()),
        ("NotSupportedError", py.get_type::<NotSupportedError>()),
    ] {
        m.add(name, class)?;
    }
    Ok(())
}
