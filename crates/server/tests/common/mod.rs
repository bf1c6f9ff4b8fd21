//! What the server tests share: an in-process server on a free port, a client runtime,
//! and a raw protocol client for what drivers hide (tags, status bytes, bad input).

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use apiary::Database;
use apiary_server::{ServerConfig, ServerHandle};

/// A server on a free loopback port over `db`.
pub fn start(db: Database, config: ServerConfig) -> ServerHandle {
    ServerHandle::start(db, ServerConfig { port: 0, ..config }).expect("server starts")
}

/// A database with TPC-H at `sf` and a small table `t(a INTEGER, b VARCHAR)`.
pub fn tpch_database(sf: f64) -> Database {
    let db = Database::open_in_memory().unwrap();
    let mut conn = db.connect();
    apiary::tpch::load(&mut conn, sf).unwrap();
    conn.execute("CREATE TABLE t (a INTEGER, b VARCHAR)").unwrap();
    conn.execute("INSERT INTO t VALUES (1, 'one'), (2, 'two'), (3, NULL)").unwrap();
    db
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

pub fn conninfo(addr: SocketAddr, user: &str) -> String {
    format!("host=127.0.0.1 port={} user={user} dbname=apiary connect_timeout=10", addr.port())
}

/// A connected tokio-postgres client (its connection task runs on the current runtime).
pub async fn connect(addr: SocketAddr) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(&conninfo(addr, "tester"), tokio_postgres::NoTls).await.expect("connects");
    tokio::spawn(connection);
    client
}

/// A backend message as the raw client reads it.
#[derive(Debug, Clone)]
pub struct Message {
    pub tag: u8,
    pub body: Vec<u8>,
}

impl Message {
    /// The CommandComplete tag, ReadyForQuery status or error SQLSTATE, as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(self.body.strip_suffix(b"\0").unwrap_or(&self.body)).into_owned()
    }

    /// A field of an ErrorResponse/NoticeResponse (`b'C'`: SQLSTATE, `b'M'`: message).
    pub fn field(&self, code: u8) -> Option<String> {
        let mut rest = &self.body[..];
        while let Some((&kind, tail)) = rest.split_first() {
            if kind == 0 {
                break;
            }
            let end = tail.iter().position(|&b| b == 0)?;
            if kind == code {
                return Some(String::from_utf8_lossy(&tail[..end]).into_owned());
            }
            rest = &tail[end + 1..];
        }
        None
    }
}

/// A minimal blocking protocol client: writes what it is told, reads messages.
pub struct RawClient {
    pub stream: TcpStream,
}

impl RawClient {
    pub fn connect(addr: SocketAddr) -> RawClient {
        let stream = TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        RawClient { stream }
    }

    /// Connects and finishes start-up (no password) up to the first ReadyForQuery.
    pub fn ready(addr: SocketAddr) -> RawClient {
        let mut client = Self::connect(addr);
        client.send(&startup_packet(&[("user", "raw"), ("database", "apiary")]));
        client.until_ready();
        client
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

    /// The next message; `None` when the server closed the connection.
    pub fn read(&mut self) -> Option<Message> {
        let mut header = [0u8; 5];
        self.stream.read_exact(&mut header).ok()?;
        let len = i32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
        let mut body = vec![0u8; len.checked_sub(4)?];
        self.stream.read_exact(&mut body).ok()?;
        Some(Message { tag: header[0], body })
    }

    /// Messages up to and including ReadyForQuery (or until the connection closes).
    pub fn until_ready(&mut self) -> Vec<Message> {
        let mut messages = Vec::new();
        while let Some(message) = self.read() {
            let done = message.tag == b'Z';
            messages.push(message);
            if done {
                break;
            }
        }
        messages
    }

    /// A simple Query; the messages up to ReadyForQuery.
    pub fn query(&mut self, sql: &str) -> Vec<Message> {
        self.send(&message(b'Q', &cstring(sql)));
        self.until_ready()
    }

    /// Whether the server closed the connection (reads until EOF, skipping messages).
    pub fn closed(&mut self) -> bool {
        let mut buf = [0u8; 4096];
        loop {
            match self.stream.read(&mut buf) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
                Err(_) => return false,
            }
        }
    }
}

pub fn cstring(text: &str) -> Vec<u8> {
    let mut bytes = text.as_bytes().to_vec();
    bytes.push(0);
    bytes
}

/// A typed message: type byte, length, body.
pub fn message(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut bytes = vec![tag];
    bytes.extend_from_slice(&(body.len() as i32 + 4).to_be_bytes());
    bytes.extend_from_slice(body);
    bytes
}

/// A protocol 3.0 startup packet.
pub fn startup_packet(parameters: &[(&str, &str)]) -> Vec<u8> {
    let mut body = 196_608i32.to_be_bytes().to_vec();
    for (name, value) in parameters {
        body.extend(cstring(name));
        body.extend(cstring(value));
    }
    body.push(0);
    let mut packet = (body.len() as i32 + 4).to_be_bytes().to_vec();
    packet.extend(body);
    packet
}

/// Tags of the CommandComplete messages among `messages`.
pub fn tags(messages: &[Message]) -> Vec<String> {
    messages.iter().filter(|m| m.tag == b'C').map(Message::text).collect()
}

/// SQLSTATEs of the ErrorResponses among `messages`.
pub fn errors(messages: &[Message]) -> Vec<String> {
    messages.iter().filter(|m| m.tag == b'E').filter_map(|m| m.field(b'C')).collect()
}

/// The status byte of the last ReadyForQuery.
pub fn status(messages: &[Message]) -> Option<char> {
    messages.iter().rev().find(|m| m.tag == b'Z').map(|m| m.body[0] as char)
}

/// A query that runs for many seconds at TPC-H SF0.01 (a 60k x 60k cross product).
pub const LONG_QUERY: &str = "SELECT count(*) FROM lineitem a, lineitem b WHERE a.l_orderkey < b.l_orderkey";
