//! One client connection on the async side: start-up (TLS, cancel requests, limits,
//! authentication), then a pump between the socket and the session's thread.
//!
//! ```text
//!  socket ─read─▶ FrameReader ─▶ decode ─▶ pending ─(byte budget)─▶ session thread
//!  socket ◀─write─ Output::Bytes ◀──────────────────────────────────  (blocking engine)
//! ```
//!
//! The pump never waits on the session while it could be writing: inputs wait in
//! `pending` until the session's queue has room (bounded in messages and bytes), and
//! output is always drained, so a session blocked on a full socket and a pump blocked
//! on a full session cannot wait for each other. When the client goes away (EOF, reset,
//! a write that does not finish within the write time-out) the running statement is
//! interrupted and the session thread ends after it.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, Semaphore};

use crate::auth::{ScramError, MECHANISM};
use crate::backend::{BackendBuffer, ErrorInfo, TxStatus};
use crate::frontend::{decode_message, decode_sasl_initial, decode_startup, FrameReader, FrontendMessage, ProtocolError, StartupPacket};
use crate::session::{Input, Output, Session};
use crate::Shared;

/// Messages queued for a session.
const INPUT_QUEUE: usize = 64;
/// Bytes of messages queued for a session (a single larger message still passes).
const INPUT_BUDGET: usize = 16 << 20;
/// Output batches in flight from the session to the socket.
const OUTPUT_QUEUE: usize = 4;
/// Stack of a session thread: statements are bound and dropped there, and deeply
/// nested generated SQL recurses (the engine uses the same for large statements).
/// Reserved address space, touched only as deep as needed.
const SESSION_STACK: usize = 1 << 30;
const SMALL_SESSION_STACK: usize = 64 << 20;

const INVALID_AUTHORIZATION: &str = "28000";
const INVALID_PASSWORD: &str = "28P01";
const TOO_MANY_CONNECTIONS: &str = "53300";
const IDLE_IN_TRANSACTION_TIMEOUT: &str = "25P03";
const PROTOCOL_VIOLATION: &str = "08P01";

pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// Why a connection ended early; only for the log line.
type ConnectionResult<T> = Result<T, String>;

/// Counts a session against `max_connections` while it lives.
struct SessionSlot(Arc<Shared>);

impl Drop for SessionSlot {
    fn drop(&mut self) {
        self.0.sessions.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A connection after start-up and authentication.
struct Authenticated {
    stream: Box<dyn Stream>,
    buffer: BytesMut,
    user: String,
    database: String,
    parameters: Vec<(String, String)>,
    _slot: SessionSlot,
}

pub async fn serve(stream: TcpStream, peer: SocketAddr, shared: Arc<Shared>) {
    let timeout = shared.config.authentication_timeout;
    match tokio::time::timeout(timeout, start(stream, peer, &shared)).await {
        Ok(Ok(Some(authenticated))) => run(authenticated, &shared).await,
        // A cancel request, a refused or failed start-up: the client got its answer.
        Ok(Ok(None)) | Ok(Err(_)) => {}
        // The socket is dropped: a client that does not finish authenticating in time
        // gets no more of the server's attention (PostgreSQL does the same).
        Err(_) => {}
    }
}

/// Writes a FATAL error and closes.
async fn refuse(stream: &mut Box<dyn Stream>, error: ErrorInfo) -> ConnectionResult<Option<Authenticated>> {
    let mut out = BackendBuffer::new();
    out.error(&error);
    let _ = stream.write_all(&out.take()).await;
    let _ = stream.flush().await;
    let _ = stream.shutdown().await;
    Err(error.message)
}

async fn read_more(stream: &mut Box<dyn Stream>, buffer: &mut BytesMut) -> ConnectionResult<()> {
    match stream.read_buf(buffer).await {
        Ok(0) => Err("the client closed the connection".to_string()),
        Ok(_) => Ok(()),
        Err(e) => Err(format!("reading from the client: {e}")),
    }
}

async fn next_startup_packet(
    stream: &mut Box<dyn Stream>,
    buffer: &mut BytesMut,
    frames: &FrameReader,
) -> ConnectionResult<Result<Bytes, ProtocolError>> {
    loop {
        match frames.next_startup(buffer) {
            Ok(Some(body)) => return Ok(Ok(body)),
            Ok(None) => read_more(stream, buffer).await?,
            Err(error) => return Ok(Err(error)),
        }
    }
}

/// The next typed message during authentication.
async fn next_message(
    stream: &mut Box<dyn Stream>,
    buffer: &mut BytesMut,
    frames: &FrameReader,
) -> ConnectionResult<Result<(u8, Bytes), ProtocolError>> {
    loop {
        match frames.next_message(buffer) {
            Ok(Some(message)) => return Ok(Ok(message)),
            Ok(None) => read_more(stream, buffer).await?,
            Err(error) => return Ok(Err(error)),
        }
    }
}

fn fatal(error: ProtocolError) -> ErrorInfo {
    ErrorInfo::fatal(error.code, error.message)
}

/// Start-up: TLS negotiation, cancel requests, the startup message, limits and
/// authentication. `None` when the connection ends here without error.
async fn start(tcp: TcpStream, peer: SocketAddr, shared: &Arc<Shared>) -> ConnectionResult<Option<Authenticated>> {
    let config = &shared.config;
    let frames = FrameReader { max_message_bytes: config.max_message_bytes };
    let mut stream: Box<dyn Stream> = Box::new(tcp);
    let mut buffer = BytesMut::with_capacity(1024);
    let mut encrypted = false;
    let parameters = loop {
        let body = match next_startup_packet(&mut stream, &mut buffer, &frames).await? {
            Ok(body) => body,
            Err(error) => return refuse(&mut stream, fatal(error)).await,
        };
        match decode_startup(body) {
            Err(error) => return refuse(&mut stream, fatal(error)).await,
            Ok(StartupPacket::SslRequest) if !encrypted => {
                let Some(acceptor) = &shared.tls else {
                    stream.write_all(b"N").await.map_err(|e| e.to_string())?;
                    continue;
                };
                // Bytes already sent after the SSLRequest would bypass encryption
                // (CVE-2021-23214): refuse them.
                if !buffer.is_empty() {
                    return refuse(&mut stream, ErrorInfo::fatal(PROTOCOL_VIOLATION, "received unencrypted data after SSL request")).await;
                }
                stream.write_all(b"S").await.map_err(|e| e.to_string())?;
                stream.flush().await.map_err(|e| e.to_string())?;
                let tls = acceptor.accept(stream).await.map_err(|e| format!("TLS handshake with {peer}: {e}"))?;
                stream = Box::new(tls);
                encrypted = true;
            }
            Ok(StartupPacket::SslRequest) => {
                return refuse(&mut stream, ErrorInfo::fatal(PROTOCOL_VIOLATION, "SSL request on an encrypted connection")).await;
            }
            Ok(StartupPacket::GssEncRequest) => stream.write_all(b"N").await.map_err(|e| e.to_string())?,
            Ok(StartupPacket::Cancel { process_id, secret_key }) => {
                shared.cancel(process_id, &secret_key);
                return Ok(None);
            }
            Ok(StartupPacket::Startup { minor, parameters, .. }) => {
                // Protocol 3.x with x > 0 or `_pq_.` options: say what this server speaks.
                let unsupported: Vec<String> = parameters.iter().filter(|(k, _)| k.starts_with("_pq_.")).map(|(k, _)| k.clone()).collect();
                if minor > 0 || !unsupported.is_empty() {
                    let mut out = BackendBuffer::new();
                    out.negotiate_protocol_version(0, unsupported);
                    stream.write_all(&out.take()).await.map_err(|e| e.to_string())?;
                }
                break parameters;
            }
        }
    };
    if config.require_tls && !encrypted {
        return refuse(
            &mut stream,
            ErrorInfo::fatal(INVALID_AUTHORIZATION, "this server accepts only TLS connections (--require-tls)")
                .with_hint("connect with sslmode=require"),
        )
        .await;
    }
    let parameter = |name: &str| parameters.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let Some(user) = parameter("user").filter(|u| !u.is_empty()) else {
        return refuse(&mut stream, ErrorInfo::fatal(INVALID_AUTHORIZATION, "no PostgreSQL user name specified in startup packet")).await;
    };
    let database = parameter("database").filter(|d| !d.is_empty()).unwrap_or_else(|| user.clone());
    if config.users.is_none() && !peer.ip().is_loopback() {
        return refuse(
            &mut stream,
            ErrorInfo::fatal(
                INVALID_AUTHORIZATION,
                format!("connection from {} refused: the server has no users configured and accepts only loopback connections", peer.ip()),
            )
            .with_hint("start the server with --users FILE or --password"),
        )
        .await;
    }
    // The slot is taken before authentication so that a flood of half-open logins
    // counts against the limit too.
    let sessions = shared.sessions.fetch_add(1, Ordering::Relaxed) + 1;
    let slot = SessionSlot(Arc::clone(shared));
    if sessions > config.max_connections {
        return refuse(
            &mut stream,
            ErrorInfo::fatal(
                TOO_MANY_CONNECTIONS,
                format!("sorry, too many clients already (--max-connections {})", config.max_connections),
            ),
        )
        .await;
    }
    if let Some(users) = &config.users {
        let mut out = BackendBuffer::new();
        out.authentication_sasl(vec![MECHANISM.to_string()]);
        stream.write_all(&out.take()).await.map_err(|e| e.to_string())?;
        let mut exchange = users.start(&user);
        let initial = match next_message(&mut stream, &mut buffer, &frames).await? {
            Ok((b'p', body)) => decode_sasl_initial(body),
            Ok((tag, _)) => Err(ProtocolError::fatal(PROTOCOL_VIOLATION, format!("expected SASL response, got message type {tag}"))),
            Err(error) => Err(error),
        };
        let (mechanism, data) = match initial {
            Ok(initial) => initial,
            Err(error) => return refuse(&mut stream, fatal(error)).await,
        };
        if mechanism != MECHANISM {
            return refuse(&mut stream, ErrorInfo::fatal(PROTOCOL_VIOLATION, format!("unsupported SASL mechanism {mechanism}"))).await;
        }
        let scram_failure = |error: ScramError| match error {
            ScramError::Malformed(message) => ErrorInfo::fatal(PROTOCOL_VIOLATION, message),
            ScramError::WrongPassword => ErrorInfo::fatal(INVALID_PASSWORD, format!("password authentication failed for user \"{user}\"")),
        };
        let server_first = match exchange.client_first(&data) {
            Ok(message) => message,
            Err(error) => return refuse(&mut stream, scram_failure(error)).await,
        };
        out.authentication_sasl_continue(server_first.as_bytes());
        stream.write_all(&out.take()).await.map_err(|e| e.to_string())?;
        let last = match next_message(&mut stream, &mut buffer, &frames).await? {
            Ok((b'p', body)) => body,
            Ok((tag, _)) => {
                return refuse(&mut stream, ErrorInfo::fatal(PROTOCOL_VIOLATION, format!("expected SASL response, got message type {tag}")))
                    .await
            }
            Err(error) => return refuse(&mut stream, fatal(error)).await,
        };
        let server_final = match exchange.client_final(&last) {
            Ok(message) => message,
            Err(error) => return refuse(&mut stream, scram_failure(error)).await,
        };
        out.authentication_sasl_final(server_final.as_bytes());
        out.authentication_ok();
        stream.write_all(&out.take()).await.map_err(|e| e.to_string())?;
    } else {
        let mut out = BackendBuffer::new();
        out.authentication_ok();
        stream.write_all(&out.take()).await.map_err(|e| e.to_string())?;
    }
    Ok(Some(Authenticated { stream, buffer, user, database, parameters, _slot: slot }))
}

/// Starts the session thread and pumps messages until the connection ends.
async fn run(authenticated: Authenticated, shared: &Arc<Shared>) {
    let Authenticated { stream, mut buffer, user, database, parameters, _slot } = authenticated;
    let mut conn = shared.db.connect();
    let interrupt = conn.interrupt_flag();
    let (process_id, secret_key) = shared.register_cancel(Arc::clone(&interrupt));
    conn.set_session_info(apiary::pg_catalog::SessionInfo { user: user.clone(), database, process_id });
    let (input_tx, input_rx) = mpsc::channel::<Input>(INPUT_QUEUE);
    let (output_tx, mut output_rx) = mpsc::channel::<Output>(OUTPUT_QUEUE);
    let mut session = Session::new(conn, output_tx, &parameters);
    let session_thread = move || {
        session.greet(process_id, secret_key, &user);
        session.run(input_rx);
    };
    let (reader, mut writer) = tokio::io::split(stream);
    let mut reader = reader;
    let spawned = spawn_session(session_thread);
    if spawned.is_err() {
        let mut out = BackendBuffer::new();
        out.error(&ErrorInfo::fatal("53000", "cannot start a thread for the session"));
        let _ = writer.write_all(&out.take()).await;
        shared.unregister_cancel(process_id);
        return;
    }
    let frames = FrameReader { max_message_bytes: shared.config.max_message_bytes };
    let budget = Arc::new(Semaphore::new(INPUT_BUDGET));
    let mut pending: VecDeque<(Input, usize)> = VecDeque::new();
    let mut status = TxStatus::Idle;
    let mut waiting_for_client = false;
    let mut input_ended = false;
    let write_timeout = shared.config.write_timeout;
    let idle_timeout = shared.config.idle_in_transaction_timeout;
    loop {
        // Frame what has arrived into pending inputs.
        while !input_ended && pending.len() < INPUT_QUEUE {
            match frames.next_message(&mut buffer) {
                Ok(Some((tag, body))) => {
                    let size = body.len() + 5;
                    let input = match decode_message(tag, body) {
                        Ok(FrontendMessage::Terminate) => {
                            input_ended = true;
                            Input::Message(FrontendMessage::Terminate, None)
                        }
                        Ok(message) => Input::Message(message, None),
                        Err(error) if error.fatal => {
                            input_ended = true;
                            pending.push_back((Input::Malformed(tag, ProtocolError { fatal: true, ..error }), 0));
                            break;
                        }
                        Err(error) => Input::Malformed(tag, error),
                    };
                    pending.push_back((input, size));
                }
                Ok(None) => break,
                Err(error) => {
                    // Framing is lost: tell the client and stop reading.
                    input_ended = true;
                    pending.push_back((Input::Malformed(0, error), 0));
                    break;
                }
            }
        }
        let fatal_next = matches!(pending.front(), Some((Input::Malformed(_, e), _)) if e.fatal);
        if fatal_next {
            // Everything before it was handed over; the session answers nothing more.
            if let Some((Input::Malformed(_, error), _)) = pending.pop_front() {
                let mut out = BackendBuffer::new();
                out.error(&ErrorInfo::fatal(error.code, error.message));
                // Let the session finish what it was sending first.
                drop(input_tx);
                while let Some(output) = output_rx.recv().await {
                    if let Output::Bytes(bytes) = output {
                        if tokio::time::timeout(write_timeout, writer.write_all(&bytes)).await.is_err() {
                            break;
                        }
                    }
                }
                let _ = tokio::time::timeout(write_timeout, writer.write_all(&out.take())).await;
                let _ = writer.shutdown().await;
            }
            interrupt.store(true, Ordering::Relaxed);
            break;
        }
        let want_read = !input_ended && pending.is_empty();
        let idle_in_transaction = waiting_for_client && status != TxStatus::Idle && pending.is_empty();
        let cost = pending.front().map_or(0, |(_, size)| (*size).clamp(1, INPUT_BUDGET) as u32);
        let has_pending = !pending.is_empty();
        tokio::select! {
            biased;
            output = output_rx.recv() => match output {
                Some(Output::Bytes(bytes)) => {
                    match tokio::time::timeout(write_timeout, writer.write_all(&bytes)).await {
                        Ok(Ok(())) => {}
                        // The client is gone or stopped reading: stop its query.
                        _ => { interrupt.store(true, Ordering::Relaxed); break; }
                    }
                }
                Some(Output::Ready(new_status)) => {
                    status = new_status;
                    waiting_for_client = true;
                }
                Some(Output::Close) | None => {
                    let _ = writer.flush().await;
                    let _ = writer.shutdown().await;
                    break;
                }
            },
            slot = async {
                let permit = Arc::clone(&budget).acquire_many_owned(cost).await;
                let slot = input_tx.reserve().await;
                (permit, slot)
            }, if has_pending => {
                let (Ok(permit), Ok(slot)) = slot else { break };
                if let Some((input, _)) = pending.pop_front() {
                    waiting_for_client = false;
                    slot.send(match input {
                        Input::Message(message, _) => Input::Message(message, Some(permit)),
                        malformed => malformed,
                    });
                }
            },
            read = reader.read_buf(&mut buffer), if want_read => match read {
                Ok(0) | Err(_) => {
                    // EOF or reset: the client is gone (a half-closed socket too:
                    // PostgreSQL treats it the same). Stop what runs for it.
                    interrupt.store(true, Ordering::Relaxed);
                    break;
                }
                Ok(_) => {}
            },
            _ = sleep_or_never(idle_timeout), if idle_in_transaction => {
                let mut out = BackendBuffer::new();
                out.error(&ErrorInfo::fatal(IDLE_IN_TRANSACTION_TIMEOUT, "terminating connection due to idle-in-transaction timeout"));
                let _ = tokio::time::timeout(write_timeout, writer.write_all(&out.take())).await;
                let _ = writer.shutdown().await;
                break;
            },
        }
    }
    // Dropping the channels ends the session thread once its statement stopped.
    shared.unregister_cancel(process_id);
}

async fn sleep_or_never(duration: Option<std::time::Duration>) {
    match duration {
        Some(duration) => tokio::time::sleep(duration).await,
        None => std::future::pending().await,
    }
}

fn spawn_session(body: impl FnOnce() + Send + 'static) -> std::io::Result<()> {
    // Take the large stack when the system grants it; a smaller one otherwise (the
    // engine moves large statements to a large stack itself).
    let body = Arc::new(std::sync::Mutex::new(Some(body)));
    for stack in [SESSION_STACK, SMALL_SESSION_STACK] {
        let body = Arc::clone(&body);
        let spawned = std::thread::Builder::new().name("apiary-session".to_string()).stack_size(stack).spawn(move || {
            let taken = body.lock().ok().and_then(|mut b| b.take());
            if let Some(body) = taken {
                body();
            }
        });
        if spawned.is_ok() {
            return Ok(());
        }
    }
    Err(std::io::Error::other("cannot start a session thread"))
}
