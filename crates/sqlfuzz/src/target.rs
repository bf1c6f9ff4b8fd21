//! A database under test: a configuration of the matrix (settings, in memory or a file)
//! loaded with a schema, and a connection that runs SQL and classifies what comes back.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use apiary::{ApiaryError, Connection, Database};

use crate::compare::{Cell, Row};
use crate::schema::Schema;

/// How often the watchdog looks at the running statement.
const WATCHDOG_TICK: Duration = Duration::from_millis(20);

/// Where the tables live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Storage {
    Memory,
    /// A database file in a temporary directory, closed and reopened after loading;
    /// `checkpoint`: written to the file's blocks first (else replayed from the log).
    File {
        checkpoint: bool,
    },
}

/// One configuration of the matrix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub name: String,
    /// `SET` statements run before the tables are created.
    pub settings: Vec<String>,
    pub storage: Storage,
}

impl Config {
    pub fn new(name: &str, settings: &[&str], storage: Storage) -> Config {
        Config { name: name.to_string(), settings: settings.iter().map(|s| s.to_string()).collect(), storage }
    }

    /// The matrix: every setting's rare value appears at least once, and the file
    /// configurations read their tables back from disk.
    pub fn matrix() -> Vec<Config> {
        vec![
            Config::new("default", &[], Storage::Memory),
            Config::new("tiny", &["SET threads = 1", "SET vector_size = 64", "SET block_size = 100", "SET jit = always"], Storage::Memory),
            Config::new(
                "parallel-small",
                &["SET threads = 2", "SET vector_size = 128", "SET block_size = 64", "SET staging = off", "SET simd = off"],
                Storage::Memory,
            ),
            Config::new("file", &["SET threads = 2", "SET block_size = 100"], Storage::File { checkpoint: true }),
            Config::new(
                "file-log",
                &["SET threads = 1", "SET vector_size = 64", "SET staging = off", "SET simd = off"],
                Storage::File { checkpoint: false },
            ),
            Config::new("staging-simd", &["SET threads = 2", "SET vector_size = 64", "SET staging = on", "SET simd = on"], Storage::Memory),
        ]
    }

    /// The configuration's statements as SQL text (for reproductions).
    pub fn settings_sql(&self) -> String {
        self.settings.iter().map(|s| format!("{s};\n")).collect()
    }
}

/// How a statement failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// A feature Apiary does not have: counted, not a failure.
    NotImplemented,
    /// An internal error or a panic: always a finding.
    Internal,
    /// The watchdog cancelled the statement.
    Timeout,
    /// An error a user can cause while the query runs (overflow, a failed cast, ...).
    Runtime,
    /// Any other user error (syntax, names, types).
    Rejected,
}

#[derive(Debug, Clone)]
pub enum Outcome {
    Rows(Vec<Row>),
    Error(ErrorKind, String),
}

/// Shared with the watchdog thread.
struct Watch {
    /// Milliseconds since `epoch` after which the running statement is cancelled; 0: idle.
    deadline_ms: AtomicU64,
    stop: AtomicBool,
    epoch: Instant,
}

/// A loaded database and a connection to it.
pub struct Target {
    pub config: Config,
    /// Kept open while the connection is used.
    _db: Database,
    conn: Connection,
    dir: Option<PathBuf>,
    watch: Arc<Watch>,
    timeout: Duration,
}

impl Target {
    /// Opens a database for `config`, applies its settings and loads `schema`. `Err` when
    /// the setup fails (itself worth reporting).
    pub fn open(config: &Config, schema: &Schema, timeout: Duration) -> Result<Target, String> {
        let setup = schema.setup_sql();
        let (db, dir) = match config.storage {
            Storage::Memory => (Database::open_in_memory().map_err(|e| e.to_string())?, None),
            Storage::File { checkpoint } => {
                let dir = scratch_dir();
                std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
                let path = dir.join("fuzz.apiary");
                {
                    let db = Database::open(&path).map_err(|e| e.to_string())?;
                    let mut conn = db.connect();
                    run_all(&mut conn, &config.settings)?;
                    run_all(&mut conn, &setup)?;
                    if checkpoint {
                        run_all(&mut conn, &["CALL checkpoint()".to_string()])?;
                    }
                }
                (Database::open(&path).map_err(|e| format!("reopening {}: {e}", path.display()))?, Some(dir))
            }
        };
        let mut conn = db.connect();
        run_all(&mut conn, &config.settings)?;
        if dir.is_none() {
            run_all(&mut conn, &setup)?;
        }
        let watch = Arc::new(Watch { deadline_ms: AtomicU64::new(0), stop: AtomicBool::new(false), epoch: Instant::now() });
        let flag = conn.interrupt_flag();
        let watcher = Arc::clone(&watch);
        std::thread::spawn(move || {
            while !watcher.stop.load(Ordering::Relaxed) {
                std::thread::sleep(WATCHDOG_TICK);
                let deadline = watcher.deadline_ms.load(Ordering::Relaxed);
                if deadline != 0 && watcher.epoch.elapsed().as_millis() as u64 > deadline {
                    flag.store(true, Ordering::Relaxed);
                }
            }
        });
        Ok(Target { config: config.clone(), _db: db, conn, dir, watch, timeout })
    }

    /// Runs one statement (a query) and returns its rows or its classified error.
    pub fn run(&mut self, sql: &str) -> Outcome {
        let deadline = self.watch.epoch.elapsed() + self.timeout;
        self.watch.deadline_ms.store(deadline.as_millis().max(1) as u64, Ordering::Relaxed);
        let conn = &mut self.conn;
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| conn.query(sql)));
        self.watch.deadline_ms.store(0, Ordering::Relaxed);
        match result {
            Ok(Ok(result)) => Outcome::Rows(result.rows().map(|row| row.iter().map(Cell::from_scalar).collect()).collect()),
            Ok(Err(error)) => Outcome::Error(classify(&error), error.to_string()),
            Err(payload) => {
                let message = payload
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "panic".to_string());
                Outcome::Error(ErrorKind::Internal, format!("panic: {message}"))
            }
        }
    }

    /// Runs a statement whose result does not matter (SET); `Err` with its message.
    pub fn execute(&mut self, sql: &str) -> Result<(), String> {
        self.conn.execute(sql).map(|_| ()).map_err(|e| e.to_string())
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        self.watch.stop.store(true, Ordering::Relaxed);
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn run_all(conn: &mut Connection, statements: &[String]) -> Result<(), String> {
    for sql in statements {
        conn.execute(sql).map_err(|e| format!("{sql}: {e}"))?;
    }
    Ok(())
}

/// A fresh directory for one database file.
fn scratch_dir() -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("apiary-sqlfuzz-{}-{n}", std::process::id()))
}

pub fn classify(error: &ApiaryError) -> ErrorKind {
    let text = error.to_string();
    match error {
        ApiaryError::NotImplemented(_) => ErrorKind::NotImplemented,
        ApiaryError::Internal(_) => ErrorKind::Internal,
        ApiaryError::Interrupted => ErrorKind::Timeout,
        _ if text.contains("internal error") || text.contains("This is a bug") => ErrorKind::Internal,
        ApiaryError::Execution(_)
        | ApiaryError::Constraint(_)
        | ApiaryError::UniqueViolation(_)
        | ApiaryError::NotNullViolation(_)
        | ApiaryError::CheckViolation(_)
        | ApiaryError::StringTooLong(_)
        | ApiaryError::CardinalityViolation(_) => ErrorKind::Runtime,
        _ => ErrorKind::Rejected,
    }
}
