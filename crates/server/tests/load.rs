//! Load and faults: many clients run TPC-H queries at once while some cancel their query
//! and some drop their connection mid-query. No panic, every completed answer equals
//! the one a single client got, the server still answers, and the memory queries hold
//! returns to zero.
//!
//! Short in `cargo test` (8 clients, 5 s, SF0.01); the long run of the issue (64 clients,
//! 60 s, SF0.1) is `bench/server_load.sh`, which sets APIARY_LOAD_CLIENTS,
//! APIARY_LOAD_SECONDS and APIARY_LOAD_SF.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use apiary_server::ServerConfig;
use common::*;
use tokio_postgres::SimpleQueryMessage;

fn setting<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// A result as sorted text rows (order-insensitive, exact values).
fn answer(messages: Vec<SimpleQueryMessage>) -> Vec<Vec<Option<String>>> {
    let mut rows: Vec<Vec<Option<String>>> = messages
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(row) => Some((0..row.len()).map(|i| row.get(i).map(str::to_string)).collect()),
            _ => None,
        })
        .collect();
    rows.sort();
    rows
}

#[derive(Default)]
struct Counts {
    completed: AtomicU64,
    cancelled: AtomicU64,
    disconnected: AtomicU64,
}

#[test]
fn clients_with_cancels_and_disconnects() {
    let clients: usize = setting("APIARY_LOAD_CLIENTS", 8);
    let seconds: u64 = setting("APIARY_LOAD_SECONDS", 5);
    let sf: f64 = setting("APIARY_LOAD_SF", 0.01);
    let db = tpch_database(sf);
    let server = start(db.clone(), ServerConfig { max_connections: clients * 2 + 8, ..ServerConfig::default() });
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tpch/queries");
    let queries: Vec<String> = (1..=22).map(|q| std::fs::read_to_string(root.join(format!("q{q:02}.sql"))).unwrap()).collect();
    let queries = Arc::new(queries);
    let counts = Arc::new(Counts::default());
    runtime().block_on(async {
        // The answers of one client alone.
        let client = connect(server.addr).await;
        let mut reference = HashMap::new();
        for (idx, sql) in queries.iter().enumerate() {
            reference.insert(idx, answer(client.simple_query(sql).await.unwrap()));
        }
        let reference = Arc::new(reference);
        let deadline = Instant::now() + Duration::from_secs(seconds);
        let mut tasks = Vec::new();
        for client_id in 0..clients {
            let (queries, reference, counts) = (Arc::clone(&queries), Arc::clone(&reference), Arc::clone(&counts));
            let addr = server.addr;
            tasks.push(tokio::spawn(async move {
                let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ (client_id as u64 + 1);
                let mut random = move |n: u64| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed % n
                };
                while Instant::now() < deadline {
                    let (client, connection) = tokio_postgres::connect(&conninfo(addr, "load"), tokio_postgres::NoTls).await.unwrap();
                    let connection = tokio::spawn(connection);
                    let client = Arc::new(client);
                    // A few queries per connection, then a new one.
                    let mut cancel_sent = false;
                    for _ in 0..5 {
                        let idx = random(22) as usize;
                        let action = random(10);
                        let delay = Duration::from_millis(random(40));
                        let running = {
                            let client = Arc::clone(&client);
                            let sql = queries[idx].clone();
                            tokio::spawn(async move { client.simple_query(&sql).await })
                        };
                        match action {
                            0 => {
                                tokio::time::sleep(delay).await;
                                client.cancel_token().cancel_query(tokio_postgres::NoTls).await.unwrap();
                                cancel_sent = true;
                                match running.await.unwrap() {
                                    Ok(messages) => assert_eq!(answer(messages), reference[&idx], "q{} after a late cancel", idx + 1),
                                    Err(e) => assert_eq!(e.code(), Some(&tokio_postgres::error::SqlState::QUERY_CANCELED), "{e:?}"),
                                }
                                counts.cancelled.fetch_add(1, Ordering::Relaxed);
                            }
                            1 => {
                                // Abrupt disconnect: the socket closes under the query.
                                tokio::time::sleep(delay).await;
                                connection.abort();
                                let _ = running.await;
                                counts.disconnected.fetch_add(1, Ordering::Relaxed);
                                break;
                            }
                            _ => {
                                match running.await.unwrap() {
                                    Ok(messages) => {
                                        assert_eq!(answer(messages), reference[&idx], "q{} under load", idx + 1);
                                        counts.completed.fetch_add(1, Ordering::Relaxed);
                                    }
                                    // A cancel request races with its query's end: one that
                                    // arrives after the query finished can stop the next
                                    // query of the connection (PostgreSQL has the same race).
                                    Err(e) if cancel_sent && e.code() == Some(&tokio_postgres::error::SqlState::QUERY_CANCELED) => {
                                        counts.cancelled.fetch_add(1, Ordering::Relaxed);
                                    }
                                    Err(e) => panic!("q{}: {e:?}", idx + 1),
                                }
                            }
                        }
                    }
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        // The server still answers, and what queries held is released.
        let n: i64 = client.query_one("SELECT count(*) FROM nation", &[]).await.unwrap().get(0);
        assert_eq!(n, 25);
        let idle_by = Instant::now() + Duration::from_secs(10);
        while db.query_memory_bytes() != 0 {
            assert!(Instant::now() < idle_by, "query memory stays at {} bytes", db.query_memory_bytes());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let (completed, cancelled, disconnected) =
        (counts.completed.load(Ordering::Relaxed), counts.cancelled.load(Ordering::Relaxed), counts.disconnected.load(Ordering::Relaxed));
    eprintln!("load: {clients} clients, {seconds} s, SF{sf}: {completed} completed, {cancelled} cancelled, {disconnected} disconnected");
    assert!(completed > 0 && cancelled + disconnected > 0, "the run exercised answers and faults");
}
