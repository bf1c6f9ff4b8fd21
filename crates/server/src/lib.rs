//! # apiary-server
//!
//! Apiary's PostgreSQL wire-protocol (v3) server: psql, JDBC, psycopg and every other
//! PostgreSQL driver use one [`apiary::Database`] at once. Async (tokio) lives only in
//! this crate; the engine is blocking, so each session runs its statements on a thread
//! of its own.
//!
//! ```text
//!  TcpListener ─accept─▶ connection.rs (tokio task per client)
//!                          startup: SSLRequest → TLS (tls.rs), CancelRequest,
//!                                   limits, SCRAM-SHA-256 (auth.rs)
//!                          then: socket ⇄ frontend.rs (decode, bounds-checked)
//!                                       ⇄ session.rs on the session's thread
//!                                            (Connection, prepared statements,
//!                                             portals, transactions, COPY via copy.rs)
//!                                       ⇄ backend.rs (encode), values.rs (formats)
//!  CancelRequest ─▶ Shared::cancel ─▶ the session's Connection::interrupt_flag()
//! ```
//!
//! Limits: `max_message_bytes` per message, `max_connections` sessions, time-outs for
//! authentication, idle-in-transaction and clients that stop reading.

pub mod auth;
mod backend;
mod connection;
mod copy;
pub mod frontend;
mod session;
mod tls;
pub mod values;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use apiary::Database;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

pub use auth::Users;

/// Most parameters a statement may have (the protocol counts them in 16 bits).
pub const MAX_PARAMETERS: usize = 65_535;

/// How the server runs. [`ServerConfig::default`] is what `apiary serve` starts with.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub host: String,
    /// 0: any free port (tests).
    pub port: u16,
    /// `None`: no passwords, and only loopback clients are accepted.
    pub users: Option<Users>,
    /// PEM certificate chain and private key.
    pub tls: Option<(PathBuf, PathBuf)>,
    pub require_tls: bool,
    pub max_connections: usize,
    /// Longest message a client may send (its length word is checked before reading).
    pub max_message_bytes: usize,
    /// A session that stays idle inside BEGIN this long is closed.
    pub idle_in_transaction_timeout: Option<Duration>,
    /// Start-up and authentication must finish within this.
    pub authentication_timeout: Duration,
    /// A client that accepts no output for this long is disconnected (a client that
    /// never reads its results must not hold a session and its result forever).
    pub write_timeout: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            host: "127.0.0.1".to_string(),
            port: 5432,
            users: None,
            tls: None,
            require_tls: false,
            max_connections: 100,
            max_message_bytes: 64 << 20,
            idle_in_transaction_timeout: Some(Duration::from_secs(600)),
            authentication_timeout: Duration::from_secs(60),
            write_timeout: Duration::from_secs(300),
        }
    }
}

/// What one session registered for cancel requests.
struct CancelEntry {
    secret_key: i32,
    interrupt: Arc<AtomicBool>,
}

/// State shared by all connections.
pub(crate) struct Shared {
    db: Database,
    config: ServerConfig,
    tls: Option<TlsAcceptor>,
    sessions: AtomicUsize,
    next_process_id: AtomicI32,
    cancel_keys: Mutex<HashMap<i32, CancelEntry>>,
}

impl Shared {
    fn register_cancel(&self, interrupt: Arc<AtomicBool>) -> (i32, i32) {
        let process_id = self.next_process_id.fetch_add(1, Ordering::Relaxed);
        let mut key = [0u8; 4];
        // A guessable key would let anyone cancel others' queries; ring's system random.
        use ring::rand::SecureRandom;
        let _ = ring::rand::SystemRandom::new().fill(&mut key);
        let secret_key = i32::from_be_bytes(key);
        if let Ok(mut keys) = self.cancel_keys.lock() {
            keys.insert(process_id, CancelEntry { secret_key, interrupt });
        }
        (process_id, secret_key)
    }

    fn unregister_cancel(&self, process_id: i32) {
        if let Ok(mut keys) = self.cancel_keys.lock() {
            keys.remove(&process_id);
        }
    }

    /// A CancelRequest: interrupts the session's running statement if the key matches
    /// (silently nothing otherwise, as in PostgreSQL).
    fn cancel(&self, process_id: i32, secret_key: &[u8]) {
        let Ok(keys) = self.cancel_keys.lock() else { return };
        if let Some(entry) = keys.get(&process_id) {
            if secret_key == entry.secret_key.to_be_bytes() {
                entry.interrupt.store(true, Ordering::Relaxed);
            }
        }
    }
}

/// A server whose listening socket is bound.
pub struct Server {
    listener: TcpListener,
    shared: Arc<Shared>,
}

impl Server {
    /// Binds the listening socket (call inside a tokio runtime).
    pub async fn bind(db: Database, config: ServerConfig) -> Result<Server, String> {
        let tls = match &config.tls {
            Some((cert, key)) => Some(tls::acceptor(cert, key)?),
            None => None,
        };
        if config.require_tls && tls.is_none() {
            return Err("--require-tls needs --tls-cert and --tls-key".to_string());
        }
        let address = format!("{}:{}", config.host, config.port);
        let listener = TcpListener::bind(&address).await.map_err(|e| format!("cannot listen on {address}: {e}"))?;
        let shared = Arc::new(Shared {
            db,
            config,
            tls,
            sessions: AtomicUsize::new(0),
            next_process_id: AtomicI32::new(1),
            cancel_keys: Mutex::new(HashMap::new()),
        });
        Ok(Server { listener, shared })
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// What the server says at start-up: where it listens and who may connect.
    pub fn describe(&self) -> String {
        let address = self.local_addr().map_or_else(|| "?".to_string(), |a| a.to_string());
        let config = &self.shared.config;
        let who = match &config.users {
            Some(users) => format!("SCRAM-SHA-256 passwords for {} user(s)", users.len()),
            None => "no users configured: only connections from the loopback address are accepted, without a password \
                     (use --users FILE or --password to accept others)"
                .to_string(),
        };
        let tls = match (&config.tls, config.require_tls) {
            (Some(_), true) => "TLS required",
            (Some(_), false) => "TLS available",
            (None, _) => "no TLS",
        };
        format!("apiary: listening on {address} (PostgreSQL protocol 3.0); {who}; {tls}; at most {} connections", config.max_connections)
    }

    /// Accepts clients until the future is dropped.
    pub async fn run(self) {
        loop {
            match self.listener.accept().await {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    let shared = Arc::clone(&self.shared);
                    tokio::spawn(connection::serve(stream, peer, shared));
                }
                // Out of file descriptors and the like: wait a little rather than spin.
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }
}

/// A server running on its own runtime in the background (tests, benchmarks); stops
/// when dropped.
pub struct ServerHandle {
    pub addr: SocketAddr,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ServerHandle {
    pub fn start(db: Database, config: ServerConfig) -> Result<ServerHandle, String> {
        let runtime = runtime()?;
        let server = runtime.block_on(Server::bind(db, config))?;
        let addr = server.local_addr().ok_or("the listening socket has no address")?;
        let (shutdown, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("apiary-server".to_string())
            .spawn(move || {
                runtime.block_on(async move {
                    tokio::select! {
                        _ = server.run() => {}
                        _ = stopped => {}
                    }
                });
                // Sessions still open end with the runtime.
                runtime.shutdown_timeout(Duration::from_secs(1));
            })
            .map_err(|e| format!("cannot start the server thread: {e}"))?;
        Ok(ServerHandle { addr, shutdown: Some(shutdown), thread: Some(thread) })
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("apiary-net")
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the network runtime: {e}"))
}

/// `apiary serve`: runs until Ctrl-C or SIGTERM, printing the start-up message.
pub fn serve(db: Database, config: ServerConfig) -> Result<(), String> {
    let runtime = runtime()?;
    runtime.block_on(async move {
        let server = Server::bind(db, config).await?;
        eprintln!("{}", server.describe());
        let terminate = async {
            #[cfg(unix)]
            {
                if let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                    term.recv().await;
                    return;
                }
            }
            std::future::pending::<()>().await
        };
        tokio::select! {
            _ = server.run() => {}
            _ = tokio::signal::ctrl_c() => eprintln!("apiary: shutting down"),
            _ = terminate => eprintln!("apiary: shutting down"),
        }
        Ok::<(), String>(())
    })?;
    runtime.shutdown_timeout(Duration::from_secs(1));
    Ok(())
}
