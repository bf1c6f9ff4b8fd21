//! The wire protocol through a real driver (tokio-postgres) and a raw client: types in
//! text and binary, parameters, prepared statements, portals, tags, errors,
//! transactions, COPY, cancellation, authentication and limits.

mod common;

use std::time::{Duration, Instant};

use apiary::Database;
use apiary_server::{ServerConfig, Users};
use common::*;
use postgres_types::{FromSql, Type};
use tokio_postgres::error::SqlState;
use tokio_postgres::SimpleQueryMessage;

/// A value's bytes as the server sent them (binary format).
#[derive(Debug, PartialEq)]
struct Raw(Vec<u8>);

impl<'a> FromSql<'a> for Raw {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Raw(raw.to_vec()))
    }
    fn accepts(_: &Type) -> bool {
        true
    }
}

fn simple_rows(messages: Vec<SimpleQueryMessage>) -> Vec<Vec<Option<String>>> {
    messages
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(row) => Some((0..row.len()).map(|i| row.get(i).map(str::to_string)).collect()),
            _ => None,
        })
        .collect()
}

const TYPES_QUERY: &str = "SELECT true, CAST(-2 AS SMALLINT), 42, CAST(9000000000 AS BIGINT), CAST(1.5 AS REAL), \
     CAST(0.1 AS DOUBLE), CAST(-12.50 AS DECIMAL(10,2)), CAST('ab' AS CHAR(3)), 'héllo', DATE '2024-02-29', \
     TIMESTAMP '2000-01-01 00:00:01.5', INTERVAL '1 day', CAST(NULL AS INTEGER)";

#[test]
fn types_in_text_and_binary_with_their_oids() {
    let server = start(tpch_database(0.01), ServerConfig::default());
    runtime().block_on(async {
        let client = connect(server.addr).await;
        // Text (simple protocol), as PostgreSQL 15 prints these values.
        let rows = simple_rows(client.simple_query(TYPES_QUERY).await.unwrap());
        let expected = [
            "t",
            "-2",
            "42",
            "9000000000",
            "1.5",
            "0.1",
            "-12.50",
            // Apiary's CHAR(n) keeps values unpadded.
            "ab",
            "héllo",
            "2024-02-29",
            "2000-01-01 00:00:01.5",
            "1 day",
        ];
        let mut want: Vec<Option<String>> = expected.iter().map(|s| Some(s.to_string())).collect();
        want.push(None);
        assert_eq!(rows, vec![want]);
        // Binary (extended protocol; tokio-postgres asks for binary results) with the
        // real type OIDs in RowDescription.
        let statement = client.prepare(TYPES_QUERY).await.unwrap();
        let oids: Vec<Type> = statement.columns().iter().map(|c| c.type_().clone()).collect();
        assert_eq!(
            oids,
            vec![
                Type::BOOL,
                Type::INT2,
                Type::INT4,
                Type::INT8,
                Type::FLOAT4,
                Type::FLOAT8,
                Type::NUMERIC,
                Type::BPCHAR,
                Type::VARCHAR,
                Type::DATE,
                Type::TIMESTAMP,
                Type::INTERVAL,
                Type::INT4
            ]
        );
        let row = client.query_one(&statement, &[]).await.unwrap();
        assert!(row.get::<_, bool>(0));
        assert_eq!(row.get::<_, i16>(1), -2);
        assert_eq!(row.get::<_, i32>(2), 42);
        assert_eq!(row.get::<_, i64>(3), 9_000_000_000);
        assert_eq!(row.get::<_, f32>(4), 1.5);
        assert_eq!(row.get::<_, f64>(5), 0.1);
        // NUMERIC -12.50: 2 digits, weight 0, negative, scale 2: 12, 5000.
        assert_eq!(row.get::<_, Raw>(6), Raw(vec![0, 2, 0, 0, 0x40, 0, 0, 2, 0, 12, 0x13, 0x88]));
        assert_eq!(row.get::<_, String>(7), "ab");
        assert_eq!(row.get::<_, String>(8), "héllo");
        // DATE: days since 2000-01-01; TIMESTAMP: microseconds since then.
        assert_eq!(row.get::<_, Raw>(9), Raw(8825i32.to_be_bytes().to_vec()));
        assert_eq!(row.get::<_, Raw>(10), Raw(1_500_000i64.to_be_bytes().to_vec()));
        let mut interval = 0i64.to_be_bytes().to_vec();
        interval.extend(1i32.to_be_bytes());
        interval.extend(0i32.to_be_bytes());
        assert_eq!(row.get::<_, Raw>(11), Raw(interval));
        assert_eq!(row.get::<_, Option<i32>>(12), None);
    });
}

/// TIMESTAMPTZ (OID 1184) and TIME (OID 1083): text in the session's zone, binary as
/// microseconds since 2000-01-01 UTC and since midnight, parameters both ways, and the
/// zone following SET TimeZone.
#[test]
fn time_zones_in_text_and_binary() {
    let server = start(Database::open_in_memory().unwrap(), ServerConfig::default());
    runtime().block_on(async {
        let client = connect(server.addr).await;
        let query = "SELECT TIMESTAMPTZ '2024-07-31 10:00:00.5+00', TIME '10:30:00.25', TIME '24:00:00'";
        let text = simple_rows(client.simple_query(query).await.unwrap());
        assert_eq!(text, vec![vec![Some("2024-07-31 10:00:00.5+00".to_string()), Some("10:30:00.25".into()), Some("24:00:00".into())]]);
        client.simple_query("SET TimeZone = 'America/New_York'").await.unwrap();
        let text = simple_rows(client.simple_query(query).await.unwrap());
        assert_eq!(text[0][0].as_deref(), Some("2024-07-31 06:00:00.5-04"));
        let shown = simple_rows(client.simple_query("SHOW TimeZone").await.unwrap());
        assert_eq!(shown, vec![vec![Some("America/New_York".to_string())]]);
        let statement = client.prepare(query).await.unwrap();
        let types: Vec<Type> = statement.columns().iter().map(|c| c.type_().clone()).collect();
        assert_eq!(types, vec![Type::TIMESTAMPTZ, Type::TIME, Type::TIME]);
        let row = client.query_one(&statement, &[]).await.unwrap();
        // 2024-07-31 10:00:00.5 UTC is 775_735_200.5 seconds after 2000-01-01 UTC, whatever
        // the session's zone.
        assert_eq!(row.get::<_, Raw>(0), Raw(775_735_200_500_000i64.to_be_bytes().to_vec()));
        assert_eq!(row.get::<_, Raw>(1), Raw(37_800_250_000i64.to_be_bytes().to_vec()));
        assert_eq!(row.get::<_, Raw>(2), Raw(86_400_000_000i64.to_be_bytes().to_vec()));
        let instant = std::time::UNIX_EPOCH + Duration::from_secs(1_722_420_000);
        assert_eq!(row.get::<_, std::time::SystemTime>(0), instant + Duration::from_millis(500));
        // A binary TIMESTAMPTZ parameter is an instant; text without a zone is read in the
        // session's zone.
        let shifted = client.query_one("SELECT $1::TIMESTAMPTZ + INTERVAL '1 day'", &[&instant]).await.unwrap();
        assert_eq!(shifted.get::<_, std::time::SystemTime>(0), instant + Duration::from_secs(86_400));
        let typed =
            client.prepare_typed("SELECT $1::TEXT::TIMESTAMPTZ = TIMESTAMPTZ '2024-07-31 10:00:00+00'", &[Type::TEXT]).await.unwrap();
        let same: bool = client.query_one(&typed, &[&"2024-07-31 06:00:00"]).await.unwrap().get(0);
        assert!(same, "text is read in America/New_York");
        let bad = client.simple_query("SET TimeZone = 'Mars/Phobos'").await.unwrap_err();
        let message = bad.as_db_error().map(|e| e.message().to_string()).unwrap_or_default();
        assert!(message.contains("TimeZone") || message.contains("time zone"), "{bad:?}");
    });
}

#[test]
fn parameters_prepared_statements_and_portals() {
    let server = start(tpch_database(0.01), ServerConfig::default());
    runtime().block_on(async {
        let mut client = connect(server.addr).await;
        // One statement, prepared once, executed with different values; `$1`'s type
        // comes from the column it is compared with.
        let statement = client.prepare("SELECT count(*) FROM lineitem WHERE l_linenumber = $1").await.unwrap();
        assert_eq!(statement.params(), &[Type::INT4]);
        let mut total = 0;
        for line in 1..=7i32 {
            total += client.query_one(&statement, &[&line]).await.unwrap().get::<_, i64>(0);
        }
        let all: i64 = client.query_one("SELECT count(*) FROM lineitem", &[]).await.unwrap().get(0);
        assert_eq!(total, all);
        // Text, NULL and inferred parameters.
        let row = client.query_one("SELECT $1::varchar || '!', $2::int IS NULL, $3::date + 1", &[&"hi", &None::<i32>, &"x"]).await;
        assert!(row.is_err(), "a VARCHAR value for a DATE parameter is refused by the driver or the server");
        let row = client.query_one("SELECT $1::varchar || '!', $2::int IS NULL", &[&"hi", &None::<i32>]).await.unwrap();
        assert_eq!(row.get::<_, String>(0), "hi!");
        assert!(row.get::<_, bool>(1));
        let rows = client.query("SELECT a FROM t WHERE b = $1 OR a > $2 ORDER BY a", &[&"one", &2i32]).await.unwrap();
        assert_eq!(rows.iter().map(|r| r.get::<_, i32>(0)).collect::<Vec<_>>(), vec![1, 3]);
        // A portal read 2 rows at a time (inside a transaction, as portals live there).
        let transaction = client.transaction().await.unwrap();
        let statement = transaction.prepare("SELECT n_nationkey FROM nation ORDER BY n_nationkey").await.unwrap();
        let portal = transaction.bind(&statement, &[]).await.unwrap();
        let mut seen = Vec::new();
        loop {
            let rows = transaction.query_portal(&portal, 2).await.unwrap();
            assert!(rows.len() <= 2);
            if rows.is_empty() {
                break;
            }
            seen.extend(rows.iter().map(|r| r.get::<_, i32>(0)));
        }
        assert_eq!(seen, (0..25).collect::<Vec<_>>());
        transaction.commit().await.unwrap();
    });
}

#[test]
fn errors_carry_sqlstate_and_position_and_the_session_goes_on() {
    let server = start(tpch_database(0.01), ServerConfig::default());
    runtime().block_on(async {
        let client = connect(server.addr).await;
        let error = client.simple_query("SELECT 1 FROM nation WHER x").await.unwrap_err();
        let db_error = error.as_db_error().unwrap();
        assert_eq!(db_error.code(), &SqlState::SYNTAX_ERROR);
        assert!(matches!(db_error.position(), Some(tokio_postgres::error::ErrorPosition::Original(25..=28))), "{db_error:?}");
        let error = client.query("SELECT * FROM no_such_table", &[]).await.unwrap_err();
        assert_eq!(error.code(), Some(&SqlState::UNDEFINED_TABLE));
        let error = client.query("SELECT no_such_column FROM nation", &[]).await.unwrap_err();
        assert_eq!(error.code(), Some(&SqlState::UNDEFINED_COLUMN));
        let error = client.query("SELECT CAST('x' AS INTEGER)", &[]).await.unwrap_err();
        assert!(error.code().is_some_and(|c| c.code().starts_with("22")), "{error:?}");
        // Wrong parameter values are the client's error too.
        let error = client.query("SELECT $1::int", &[&"not a number"]).await.unwrap_err();
        assert!(error.code().is_some() || error.to_string().contains("error serializing"), "{error:?}");
        let n: i32 = client.query_one("SELECT 7", &[]).await.unwrap().get(0);
        assert_eq!(n, 7);
    });
}

#[test]
fn command_tags_and_transaction_status() {
    let server = start(tpch_database(0.01), ServerConfig::default());
    let mut raw = RawClient::ready(server.addr);
    let messages = raw.query("CREATE TABLE x (a INTEGER, b VARCHAR); INSERT INTO x VALUES (1, 'a'), (2, 'b'), (3, NULL); SELECT * FROM x; SET threads = 2; SHOW threads; EXPLAIN SELECT 1");
    let all = tags(&messages);
    assert_eq!(all[..5], ["CREATE TABLE", "INSERT 0 3", "SELECT 3", "SET", "SHOW 1"], "{all:?}");
    assert!(tags(&messages)[5].starts_with("EXPLAIN "), "{:?}", tags(&messages));
    assert_eq!(status(&messages), Some('I'));
    // INSERT, DELETE, UPDATE and MERGE tags count the rows changed, with RETURNING too.
    let messages = raw.query(
        "CREATE TABLE y AS SELECT * FROM x; UPDATE y SET b = 'z' WHERE a > 1; DELETE FROM y WHERE a = 1; \
         UPDATE y SET a = a + 10 RETURNING a; DELETE FROM y WHERE b IS NULL RETURNING *; \
         INSERT INTO y VALUES (7, 'q'), (8, 'r') RETURNING a; \
         MERGE INTO y USING x ON y.a = x.a WHEN MATCHED THEN DELETE WHEN NOT MATCHED THEN INSERT VALUES (x.a, x.b); \
         TRUNCATE y; DROP TABLE y",
    );
    assert_eq!(
        tags(&messages),
        ["SELECT 3", "UPDATE 2", "DELETE 1", "UPDATE 2", "DELETE 0", "INSERT 0 2", "MERGE 3", "TRUNCATE TABLE", "DROP TABLE"]
    );
    // BEGIN: 'T'; a write inside the block is seen by the block only; an error fails the
    // block: 'E', and only ROLLBACK (TO a savepoint) is accepted; ROLLBACK ends it and the
    // write never happened.
    let messages = raw.query("BEGIN; INSERT INTO x VALUES (4, 'd'); SELECT count(*) FROM x");
    assert_eq!(tags(&messages), vec!["BEGIN", "INSERT 0 1", "SELECT 1"]);
    assert!(messages.iter().find(|m| m.tag == b'D').unwrap().body.ends_with(b"4"));
    assert_eq!(status(&messages), Some('T'));
    let messages = raw.query("SAVEPOINT s; SELECT * FROM nope");
    assert_eq!((tags(&messages), errors(&messages)), (vec!["SAVEPOINT".to_string()], vec!["42P01".to_string()]));
    assert_eq!(status(&messages), Some('E'));
    let messages = raw.query("SELECT 1");
    assert_eq!(errors(&messages), vec!["25P02"]);
    let messages = raw.query("ROLLBACK TO SAVEPOINT s");
    assert_eq!((tags(&messages), status(&messages)), (vec!["ROLLBACK".to_string()], Some('T')));
    let messages = raw.query("ROLLBACK");
    assert_eq!(tags(&messages), vec!["ROLLBACK"]);
    assert_eq!(status(&messages), Some('I'));
    let messages = raw.query("SELECT count(*) FROM x");
    let row = messages.iter().find(|m| m.tag == b'D').unwrap();
    assert!(row.body.ends_with(b"3"), "{row:?}");
    let messages = raw.query("BEGIN; DELETE FROM x WHERE a = 3; RELEASE SAVEPOINT nope");
    assert_eq!(status(&messages), Some('E'));
    raw.query("ROLLBACK");
    let messages = raw.query("BEGIN; DELETE FROM x WHERE a = 3; COMMIT; SELECT count(*) FROM x");
    assert_eq!(tags(&messages), vec!["BEGIN", "DELETE 1", "COMMIT", "SELECT 1"]);
    assert!(messages.iter().find(|m| m.tag == b'D').unwrap().body.ends_with(b"2"));
    assert_eq!(errors(&raw.query("SAVEPOINT s")), vec!["25P01"]);
    // COMMIT of a failed block answers ROLLBACK, as PostgreSQL does.
    raw.query("BEGIN");
    raw.query("SELECT * FROM nope");
    assert_eq!(tags(&raw.query("COMMIT")), vec!["ROLLBACK"]);
    // An empty query and an error in the middle of several statements.
    let messages = raw.query("");
    assert!(messages.iter().any(|m| m.tag == b'I'));
    let messages = raw.query("SELECT 1; SELECT * FROM nope; SELECT 2");
    assert_eq!((tags(&messages), errors(&messages)), (vec!["SELECT 1".to_string()], vec!["42P01".to_string()]));
}

#[test]
fn copy_from_stdin_and_to_stdout() {
    use futures::{SinkExt, StreamExt};
    let server = start(tpch_database(0.01), ServerConfig::default());
    runtime().block_on(async {
        let client = connect(server.addr).await;
        client.batch_execute("CREATE TABLE c (id INTEGER, name VARCHAR, amount DECIMAL(10,2), day DATE)").await.unwrap();
        // Text format: tabs, \N for NULL, backslash escapes.
        let sink = client.copy_in("COPY c FROM STDIN").await.unwrap();
        futures::pin_mut!(sink);
        sink.send(bytes::Bytes::from_static(b"1\tan\\tx\t1.50\t2024-01-02\n2\t\\N\t-3\t\\N\n")).await.unwrap();
        assert_eq!(sink.finish().await.unwrap(), 2);
        // CSV with a header, quotes and an empty string.
        let sink = client.copy_in("COPY c FROM STDIN (FORMAT csv, HEADER true)").await.unwrap();
        futures::pin_mut!(sink);
        sink.send(bytes::Bytes::from_static(b"id,name,amount,day\n3,\"a,\"\"b\"\"\",0.01,2000-02-29\n4,\"\",,\n")).await.unwrap();
        assert_eq!(sink.finish().await.unwrap(), 2);
        let stream = client.copy_out("COPY (SELECT * FROM c ORDER BY id) TO STDOUT").await.unwrap();
        let chunks: Vec<_> = stream.collect().await;
        let text: Vec<u8> = chunks.into_iter().flat_map(|c| c.unwrap().to_vec()).collect();
        assert_eq!(
            String::from_utf8(text).unwrap(),
            "1\tan\\tx\t1.50\t2024-01-02\n2\t\\N\t-3.00\t\\N\n3\ta,\"b\"\t0.01\t2000-02-29\n4\t\t\\N\t\\N\n"
        );
        let stream = client.copy_out("COPY c TO STDOUT (FORMAT csv, HEADER)").await.unwrap();
        let chunks: Vec<_> = stream.collect().await;
        let text: Vec<u8> = chunks.into_iter().flat_map(|c| c.unwrap().to_vec()).collect();
        let text = String::from_utf8(text).unwrap();
        assert!(
            text.starts_with("id,name,amount,day\n") && text.contains("3,\"a,\"\"b\"\"\",0.01,2000-02-29\n") && text.contains("4,\"\",,\n"),
            "{text}"
        );
        // A malformed row fails the whole COPY and names the line; nothing is loaded.
        let sink = client.copy_in("COPY c FROM STDIN").await.unwrap();
        futures::pin_mut!(sink);
        sink.send(bytes::Bytes::from_static(b"5\tok\t1\t2024-01-01\nnot a number\tx\t1\t2024-01-01\n")).await.unwrap();
        let error = sink.finish().await.unwrap_err();
        let message = error.as_db_error().map(|e| e.message().to_string()).unwrap_or_default();
        assert!(message.starts_with("STDIN:2:"), "{error:?}");
        let n: i64 = client.query_one("SELECT count(*) FROM c", &[]).await.unwrap().get(0);
        assert_eq!(n, 4);
    });
}

#[test]
fn cancel_request_stops_a_running_query() {
    let db = tpch_database(0.01);
    let server = start(db.clone(), ServerConfig::default());
    runtime().block_on(async {
        let client = connect(server.addr).await;
        let token = client.cancel_token();
        let running = tokio::spawn(async move {
            let started = Instant::now();
            let result = client.simple_query(LONG_QUERY).await;
            (result, started.elapsed(), client)
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        let cancelled_at = Instant::now();
        token.cancel_query(tokio_postgres::NoTls).await.unwrap();
        let (result, _, client) = running.await.unwrap();
        let error = result.unwrap_err();
        assert_eq!(error.code(), Some(&SqlState::QUERY_CANCELED), "{error:?}");
        assert!(cancelled_at.elapsed() < Duration::from_secs(2), "cancel took {:?}", cancelled_at.elapsed());
        // The session is usable and the query's memory is back.
        let n: i32 = client.query_one("SELECT 1", &[]).await.unwrap().get(0);
        assert_eq!(n, 1);
        assert_eq!(db.query_memory_bytes(), 0);
    });
}

#[test]
fn scram_authentication() {
    let config = ServerConfig { users: Some(Users::parse("alice:secret\nbob:other\n").unwrap()), ..ServerConfig::default() };
    let server = start(Database::open_in_memory().unwrap(), config);
    runtime().block_on(async {
        let info = |user: &str, password: &str| format!("{} password={password}", conninfo(server.addr, user));
        let (client, connection) = tokio_postgres::connect(&info("alice", "secret"), tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(connection);
        let user: String = client.query_one("SELECT current_user", &[]).await.unwrap().get(0);
        assert_eq!(user, "alice");
        for (user, password) in [("alice", "wrong"), ("carol", "secret")] {
            let error = tokio_postgres::connect(&info(user, password), tokio_postgres::NoTls).await.err().expect("refused");
            assert_eq!(error.code(), Some(&SqlState::INVALID_PASSWORD), "{user}: {error:?}");
        }
    });
}

#[test]
fn connection_limit_and_idle_in_transaction_timeout() {
    let config =
        ServerConfig { max_connections: 2, idle_in_transaction_timeout: Some(Duration::from_millis(500)), ..ServerConfig::default() };
    let server = start(Database::open_in_memory().unwrap(), config);
    runtime().block_on(async {
        let first = connect(server.addr).await;
        let second = connect(server.addr).await;
        let error = tokio_postgres::connect(&conninfo(server.addr, "third"), tokio_postgres::NoTls).await.err().expect("over the limit");
        assert_eq!(error.code(), Some(&SqlState::TOO_MANY_CONNECTIONS), "{error:?}");
        assert!(error.as_db_error().is_some_and(|e| e.message().contains("max-connections")), "{error:?}");
        drop(second);
        tokio::time::sleep(Duration::from_millis(200)).await;
        let third = connect(server.addr).await;
        third.batch_execute("SELECT 1").await.unwrap();
        // Idle inside BEGIN for longer than the time-out: the server ends the session.
        first.batch_execute("BEGIN").await.unwrap();
        tokio::time::sleep(Duration::from_millis(1200)).await;
        assert!(first.batch_execute("SELECT 1").await.is_err());
        // Idle outside a transaction is fine.
        tokio::time::sleep(Duration::from_millis(1200)).await;
        third.batch_execute("SELECT 1").await.unwrap();
    });
}

#[test]
fn catalog_introspection() {
    let server = start(tpch_database(0.01), ServerConfig::default());
    runtime().block_on(async {
        let client = connect(server.addr).await;
        let version: String = client.query_one("SELECT version()", &[]).await.unwrap().get(0);
        assert!(version.starts_with("PostgreSQL 15") && version.contains("Apiary"), "{version}");
        let rows = client
            .query("SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY table_name", &[])
            .await
            .unwrap();
        let names: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
        assert!(names.contains(&"lineitem".to_string()) && names.contains(&"t".to_string()), "{names:?}");
        let rows = client
            .query(
                "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'orders' ORDER BY ordinal_position",
                &[],
            )
            .await
            .unwrap();
        assert_eq!(rows.len(), 9);
        assert_eq!((rows[0].get::<_, String>(0), rows[0].get::<_, String>(1)), ("o_orderkey".to_string(), "integer".to_string()));
        // A query over catalogs Apiary has no rows in (psql's \d asks these).
        let rows = client.query("SELECT polname FROM pg_catalog.pg_policy WHERE polrelid = 1", &[]).await.unwrap();
        assert!(rows.is_empty());
    });
}
