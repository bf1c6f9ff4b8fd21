//! Bad input: random bytes, truncated, oversized and unknown messages, malformed bodies,
//! bad start-up packets, half-closed sockets, clients that never read. Each gets a clean
//! protocol error or a closed connection; the server stays up and a healthy session
//! beside them is unaffected. Plus a fixed-seed fuzz test of the message decoder.

mod common;

use std::net::Shutdown;
use std::time::{Duration, Instant};

use apiary_server::frontend::{decode_message, decode_sasl_initial, decode_startup, FrameReader};
use apiary_server::values::{parameter_value, Format};
use apiary_server::ServerConfig;
use bytes::{Bytes, BytesMut};
use common::*;

/// xorshift64*: a small deterministic generator (fixed seeds make failures replayable).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }
}

fn config() -> ServerConfig {
    ServerConfig { write_timeout: Duration::from_secs(1), max_message_bytes: 1 << 20, ..ServerConfig::default() }
}

fn assert_healthy(client: &mut RawClient) {
    let messages = client.query("SELECT count(*) FROM nation");
    assert_eq!(tags(&messages), vec!["SELECT 1"], "{messages:?}");
}

#[test]
fn bad_messages_get_errors_or_a_closed_connection() {
    let db = tpch_database(0.01);
    let server = start(db.clone(), config());
    let mut healthy = RawClient::ready(server.addr);

    // Random bytes after a good start-up.
    let mut rng = Rng(0x5eed);
    for _ in 0..20 {
        let mut client = RawClient::ready(server.addr);
        let len = 1 + rng.below(300);
        let noise = rng.bytes(len);
        client.send(&noise);
        client.stream.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
        // Either an error and a closed connection, or (bytes that frame as an unfinished
        // message) the server waiting for the rest: both are fine, a crash is not.
        let _ = client.closed();
    }
    assert_healthy(&mut healthy);

    // An oversized message: refused from its length word, before any body arrives.
    let mut client = RawClient::ready(server.addr);
    client.send(&[b'Q', 0x40, 0, 0, 0]);
    let messages = client.until_ready();
    assert_eq!(errors(&messages), vec!["54000"], "{messages:?}");
    assert!(client.closed());

    // An unknown message type and a negative length.
    for bytes in [&b"z\0\0\0\x04"[..], b"Q\xff\xff\xff\xff"] {
        let mut client = RawClient::ready(server.addr);
        client.send(bytes);
        let messages = client.until_ready();
        assert_eq!(errors(&messages), vec!["08P01"], "{messages:?}");
        assert!(client.closed());
    }

    // A truncated message, then the client goes away.
    let mut client = RawClient::ready(server.addr);
    client.send(b"Q\0\0\0\x50SELECT");
    client.stream.shutdown(Shutdown::Write).unwrap();
    assert!(client.closed());

    // A malformed body inside a well-framed message: an error, then the session goes on
    // after Sync.
    let mut client = RawClient::ready(server.addr);
    let mut bind = cstring("");
    bind.extend(cstring(""));
    bind.extend(0i16.to_be_bytes());
    bind.extend(1i16.to_be_bytes());
    bind.extend(1000i32.to_be_bytes()); // a parameter longer than the message
    client.send(&message(b'B', &bind));
    client.send(&message(b'E', &[0, 0, 0, 0, 0])); // skipped until Sync
    client.send(&message(b'S', &[]));
    let messages = client.until_ready();
    assert_eq!(errors(&messages), vec!["08P01"], "{messages:?}");
    assert_eq!(status(&messages), Some('I'));
    assert_healthy(&mut client);
    // Extended-protocol errors: an unknown statement, a wrong parameter count.
    let mut parse = cstring("s1");
    parse.extend(cstring("SELECT $1::int"));
    parse.extend(0i16.to_be_bytes());
    client.send(&message(b'P', &parse));
    let mut bind = cstring("");
    bind.extend(cstring("s1"));
    bind.extend(0i16.to_be_bytes());
    bind.extend(0i16.to_be_bytes());
    bind.extend(0i16.to_be_bytes());
    client.send(&message(b'B', &bind));
    client.send(&message(b'S', &[]));
    let messages = client.until_ready();
    assert_eq!(errors(&messages), vec!["08P01"], "{messages:?}");
    let mut describe = vec![b'S'];
    describe.extend(cstring("nope"));
    client.send(&message(b'D', &describe));
    client.send(&message(b'S', &[]));
    assert_eq!(errors(&client.until_ready()), vec!["26000"]);
    assert_healthy(&mut client);

    // Bad start-up packets: too short, too long, protocol 2, garbage.
    for packet in [
        vec![0, 0, 0, 3],
        vec![0x7f, 0xff, 0xff, 0xff],
        [8i32.to_be_bytes(), 0x0002_0000i32.to_be_bytes()].concat(),
        [12i32.to_be_bytes(), 196_608i32.to_be_bytes(), *b"user"].concat(),
    ] {
        let mut client = RawClient::connect(server.addr);
        client.send(&packet);
        let messages = client.until_ready();
        assert!(messages.iter().all(|m| m.tag == b'E'), "{messages:?}");
        assert!(client.closed());
    }
    // Start-up without a user name.
    let mut client = RawClient::connect(server.addr);
    client.send(&startup_packet(&[("database", "x")]));
    assert_eq!(errors(&client.until_ready()), vec!["28000"]);

    // Half-closed: a long query, then the client shuts its side. PostgreSQL treats EOF
    // as the end of the session; the query is interrupted and its memory returned.
    let mut client = RawClient::ready(server.addr);
    client.send(&message(b'Q', &cstring(LONG_QUERY)));
    std::thread::sleep(Duration::from_millis(300));
    client.stream.shutdown(Shutdown::Write).unwrap();
    assert!(client.closed());
    wait_for_idle_memory(&db);

    // A client that never reads its results: after the write time-out the server
    // closes it; the healthy session answers meanwhile.
    let mut client = RawClient::ready(server.addr);
    client.send(&message(b'Q', &cstring("SELECT * FROM lineitem, nation")));
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    assert_healthy(&mut healthy);
    assert!(started.elapsed() < Duration::from_secs(5));
    std::thread::sleep(Duration::from_secs(3));
    client.stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    assert!(client.closed(), "the stalled client is disconnected");
    wait_for_idle_memory(&db);
    assert_healthy(&mut healthy);
}

fn wait_for_idle_memory(db: &apiary::Database) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while db.query_memory_bytes() != 0 {
        assert!(Instant::now() < deadline, "query memory stays at {}", db.query_memory_bytes());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Valid messages of every type, to mutate.
fn sample_messages() -> Vec<Vec<u8>> {
    let mut bind = cstring("p");
    bind.extend(cstring("s"));
    bind.extend(1i16.to_be_bytes());
    bind.extend(1i16.to_be_bytes());
    bind.extend(2i16.to_be_bytes());
    bind.extend(4i32.to_be_bytes());
    bind.extend(7i32.to_be_bytes());
    bind.extend((-1i32).to_be_bytes());
    bind.extend(1i16.to_be_bytes());
    bind.extend(1i16.to_be_bytes());
    let mut parse = cstring("s");
    parse.extend(cstring("SELECT $1, $2"));
    parse.extend(2i16.to_be_bytes());
    parse.extend(23i32.to_be_bytes());
    parse.extend(0i32.to_be_bytes());
    let mut execute = cstring("p");
    execute.extend(10i32.to_be_bytes());
    let mut sasl = cstring("SCRAM-SHA-256");
    sasl.extend(14i32.to_be_bytes());
    sasl.extend(b"n,,n=,r=abcdef");
    vec![
        message(b'Q', &cstring("SELECT 1")),
        message(b'P', &parse),
        message(b'B', &bind),
        message(b'D', &[b"S".to_vec(), cstring("s")].concat()),
        message(b'C', &[b"P".to_vec(), cstring("p")].concat()),
        message(b'E', &execute),
        message(b'S', &[]),
        message(b'H', &[]),
        message(b'd', b"1\tx\n"),
        message(b'c', &[]),
        message(b'f', &cstring("oops")),
        message(b'p', &sasl),
        message(b'X', &[]),
    ]
}

#[test]
fn decoder_fuzz_fixed_seed() {
    let mut rng = Rng(0xa91a_7e57);
    let samples = sample_messages();
    let frames = FrameReader { max_message_bytes: 4096 };
    let mut decoded = 0usize;
    for _ in 0..100_000 {
        // A stream of a few messages, mutated: flipped bytes, cut, spliced, lengths set.
        let count = 1 + rng.below(4);
        let mut stream: Vec<u8> = Vec::new();
        for _ in 0..count {
            stream.extend(&samples[rng.below(samples.len())]);
        }
        for _ in 0..rng.below(4) {
            match rng.below(4) {
                0 if !stream.is_empty() => {
                    let at = rng.below(stream.len());
                    stream[at] ^= 1 << rng.below(8);
                }
                0 | 1 => {
                    let at = rng.below(stream.len() + 1);
                    stream.truncate(at);
                }
                2 => {
                    let at = rng.below(stream.len() + 1);
                    let len = rng.below(16);
                    let noise = rng.bytes(len);
                    stream.splice(at..at, noise);
                }
                _ => {
                    if stream.len() >= 5 {
                        let at = rng.below(stream.len() - 4);
                        stream[at..at + 4].copy_from_slice(&(rng.next() as i32 >> rng.below(32)).to_be_bytes());
                    }
                }
            }
        }
        let mut buffer = BytesMut::from(&stream[..]);
        while let Ok(Some((tag, body))) = frames.next_message(&mut buffer) {
            if decode_message(tag, body.clone()).is_ok() {
                decoded += 1;
            }
            let _ = decode_sasl_initial(body.clone());
            let _ = decode_startup(body);
        }
        let mut buffer = BytesMut::from(&stream[..]);
        let _ = frames.next_startup(&mut buffer);
        let _ = decode_startup(Bytes::from(stream.clone()));
        // Parameter values of every type in both formats.
        let types = [
            apiary::DataType::Boolean,
            apiary::DataType::SmallInt,
            apiary::DataType::Integer,
            apiary::DataType::BigInt,
            apiary::DataType::Real,
            apiary::DataType::Double,
            apiary::DataType::decimal(15, 2),
            apiary::DataType::Varchar(None),
            apiary::DataType::Date,
            apiary::DataType::Timestamp,
            apiary::DataType::TimestampTz,
            apiary::DataType::Time,
            apiary::DataType::Interval,
        ];
        let value = &stream[..stream.len().min(20)];
        let data_type = types[rng.below(types.len())];
        let zone = apiary_types::TimeZone::from_setting("Europe/Vienna").expect("a zone").0;
        let _ = parameter_value(Some(value), Format::Binary, data_type, &zone);
        let _ = parameter_value(Some(value), Format::Text, data_type, &zone);
    }
    assert!(decoded > 10_000, "the mutations leave enough messages whole to exercise the decoders ({decoded})");
}

#[test]
fn silent_clients_are_dropped_after_the_authentication_timeout() {
    let config = ServerConfig { authentication_timeout: Duration::from_millis(300), ..ServerConfig::default() };
    let server = start(apiary::Database::open_in_memory().unwrap(), config);
    // Nothing at all, then half a startup packet: both are cut off.
    for partial in [&[][..], &[0, 0, 0, 40, 0, 3][..]] {
        let mut client = RawClient::connect(server.addr);
        client.send(partial);
        let started = Instant::now();
        assert!(client.closed());
        assert!(started.elapsed() < Duration::from_secs(5), "closed after {:?}", started.elapsed());
    }
    let mut healthy = RawClient::ready(server.addr);
    assert_eq!(tags(&healthy.query("SELECT 1")), vec!["SELECT 1"]);
}
