//! Transaction blocks between concurrent connections: snapshot reads, reading one's own
//! writes, rollback, savepoints, first-committer-wins (no lost update), write skew (which
//! snapshot isolation allows), keys checked at commit, FOREIGN KEYs that hold between
//! concurrent writers, atomic and durable commits of several tables, and a randomised
//! multi-client workload checked against a sequential model.

use std::sync::{Arc, Barrier};

use apiary::{ApiaryError, Connection, Database, ScalarValue};

fn run(conn: &mut Connection, sql: &str) {
    conn.execute(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
}

fn ints(conn: &mut Connection, sql: &str) -> Vec<i64> {
    let result = conn.query(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    result
        .rows()
        .flat_map(|row| {
            row.into_iter().map(|v| match v {
                ScalarValue::Int32(v) => v as i64,
                ScalarValue::Int64(v) => v,
                other => panic!("{sql}: {other:?}"),
            })
        })
        .collect()
}

fn accounts() -> (Database, Connection, Connection) {
    let db = Database::open_in_memory().unwrap();
    let mut setup = db.connect();
    run(&mut setup, "CREATE TABLE acct (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL)");
    run(&mut setup, "INSERT INTO acct VALUES (1, 100), (2, 100), (3, 100)");
    (db.clone(), db.connect(), db.connect())
}

#[test]
fn a_transaction_reads_its_snapshot_and_its_own_writes() {
    let (_db, mut a, mut b) = accounts();
    run(&mut a, "BEGIN");
    assert_eq!(ints(&mut a, "SELECT sum(balance) FROM acct"), [300]);
    run(&mut b, "UPDATE acct SET balance = balance + 1000 WHERE id = 1");
    run(&mut b, "INSERT INTO acct VALUES (4, 1)");
    // Not the other connection's committed changes...
    assert_eq!(ints(&mut a, "SELECT sum(balance), count(*) FROM acct"), [300, 3]);
    // ...but its own.
    run(&mut a, "UPDATE acct SET balance = balance - 10 WHERE id = 2");
    run(&mut a, "INSERT INTO acct VALUES (5, 5)");
    assert_eq!(ints(&mut a, "SELECT balance FROM acct ORDER BY id"), [100, 90, 100, 5]);
    assert_eq!(ints(&mut b, "SELECT balance FROM acct ORDER BY id"), [1100, 100, 100, 1], "not committed yet");
    run(&mut a, "COMMIT");
    assert_eq!(ints(&mut b, "SELECT balance FROM acct ORDER BY id"), [1100, 90, 100, 1, 5]);
    assert_eq!(ints(&mut a, "SELECT balance FROM acct ORDER BY id"), [1100, 90, 100, 1, 5]);
}

#[test]
fn rollback_and_savepoints_undo_and_a_failed_block_waits_for_rollback() {
    let (_db, mut a, _) = accounts();
    run(&mut a, "BEGIN; DELETE FROM acct WHERE id = 1; TRUNCATE acct; INSERT INTO acct VALUES (9, 9)");
    assert_eq!(ints(&mut a, "SELECT id FROM acct"), [9]);
    run(&mut a, "ROLLBACK");
    assert_eq!(ints(&mut a, "SELECT id FROM acct ORDER BY id"), [1, 2, 3]);
    run(&mut a, "START TRANSACTION ISOLATION LEVEL REPEATABLE READ; UPDATE acct SET balance = 1 WHERE id = 1; SAVEPOINT s");
    run(&mut a, "UPDATE acct SET balance = 2 WHERE id = 2; SAVEPOINT t; UPDATE acct SET balance = 3 WHERE id = 3");
    run(&mut a, "ROLLBACK TO SAVEPOINT t");
    assert_eq!(ints(&mut a, "SELECT balance FROM acct ORDER BY id"), [1, 2, 100]);
    run(&mut a, "ROLLBACK TO s");
    assert_eq!(ints(&mut a, "SELECT balance FROM acct ORDER BY id"), [1, 100, 100]);
    // An error aborts the block: everything but ROLLBACK (TO) is refused.
    assert!(a.execute("SELECT 1 / 0").is_err());
    let refused = a.execute("SELECT 1");
    assert!(matches!(refused, Err(ApiaryError::InFailedTransaction)), "{refused:?}");
    assert_eq!(ApiaryError::InFailedTransaction.sqlstate(), "25P02");
    run(&mut a, "ROLLBACK TO SAVEPOINT s");
    run(&mut a, "RELEASE SAVEPOINT s; COMMIT");
    assert_eq!(ints(&mut a, "SELECT balance FROM acct ORDER BY id"), [1, 100, 100]);
    // COMMIT of a failed block rolls it back.
    run(&mut a, "BEGIN; UPDATE acct SET balance = 0");
    assert!(a.execute("SELECT nope FROM acct").is_err());
    run(&mut a, "COMMIT");
    assert_eq!(ints(&mut a, "SELECT balance FROM acct ORDER BY id"), [1, 100, 100]);
    assert!(a.execute("ROLLBACK TO SAVEPOINT s").is_err(), "no block open");
    assert!(a.execute("BEGIN; CHECKPOINT").is_err(), "CHECKPOINT (which moves rows) inside a block is refused");
    run(&mut a, "ROLLBACK");
}

#[test]
fn the_first_committer_wins_and_no_update_is_lost() {
    let (_db, mut a, mut b) = accounts();
    run(&mut a, "BEGIN; UPDATE acct SET balance = balance + 10 WHERE id = 1");
    run(&mut b, "BEGIN; UPDATE acct SET balance = balance + 20 WHERE id = 1");
    run(&mut a, "COMMIT");
    let conflict = b.execute("COMMIT");
    assert!(matches!(&conflict, Err(ApiaryError::Serialization(_))), "{conflict:?}");
    assert_eq!(conflict.unwrap_err().sqlstate(), "40001");
    assert!(!b.in_transaction(), "the failed COMMIT rolled back");
    assert_eq!(ints(&mut b, "SELECT balance FROM acct WHERE id = 1"), [110]);
    // Against an autocommit statement too, and for DELETE.
    run(&mut a, "BEGIN; DELETE FROM acct WHERE id = 2");
    run(&mut b, "UPDATE acct SET balance = 0 WHERE id = 2");
    assert!(matches!(a.execute("COMMIT"), Err(ApiaryError::Serialization(_))));
    assert_eq!(ints(&mut a, "SELECT id, balance FROM acct WHERE id = 2"), [2, 0]);
    // Different rows of one table: both commit.
    run(&mut a, "BEGIN; UPDATE acct SET balance = balance + 1 WHERE id = 1; INSERT INTO acct VALUES (10, 10)");
    run(&mut b, "BEGIN; UPDATE acct SET balance = balance + 1 WHERE id = 3; INSERT INTO acct VALUES (11, 11)");
    run(&mut b, "COMMIT");
    run(&mut a, "COMMIT");
    assert_eq!(ints(&mut a, "SELECT id, balance FROM acct ORDER BY id"), [1, 111, 2, 0, 3, 101, 10, 10, 11, 11]);
}

#[test]
fn a_table_created_after_begin_is_written_against_its_contents_then() {
    let (_db, mut a, mut b) = accounts();
    run(&mut a, "BEGIN");
    run(&mut b, "CREATE TABLE late (v INTEGER); INSERT INTO late VALUES (1)");
    run(&mut a, "INSERT INTO late VALUES (2)");
    run(&mut b, "INSERT INTO late VALUES (3)");
    assert_eq!(ints(&mut a, "SELECT v FROM late ORDER BY v"), [1, 2]);
    run(&mut a, "COMMIT");
    assert_eq!(ints(&mut b, "SELECT v FROM late ORDER BY v"), [1, 2, 3]);
}

#[test]
fn write_skew_is_allowed_as_under_snapshot_isolation() {
    // Both read that the total is 300 and each takes 200 from a different account: each
    // alone keeps the total positive, together they do not. Snapshot isolation (like
    // PostgreSQL's REPEATABLE READ) lets both commit; SERIALIZABLE would refuse one.
    let (_db, mut a, mut b) = accounts();
    run(&mut a, "BEGIN");
    run(&mut b, "BEGIN");
    assert_eq!(ints(&mut a, "SELECT sum(balance) FROM acct"), [300]);
    assert_eq!(ints(&mut b, "SELECT sum(balance) FROM acct"), [300]);
    run(&mut a, "UPDATE acct SET balance = balance - 200 WHERE id = 1");
    run(&mut b, "UPDATE acct SET balance = balance - 200 WHERE id = 2");
    run(&mut a, "COMMIT");
    run(&mut b, "COMMIT");
    assert_eq!(ints(&mut a, "SELECT sum(balance) FROM acct"), [-100]);
}

#[test]
fn keys_are_checked_against_the_table_at_commit() {
    let (_db, mut a, mut b) = accounts();
    run(&mut a, "BEGIN; INSERT INTO acct VALUES (7, 1)");
    run(&mut b, "BEGIN; INSERT INTO acct VALUES (7, 2)");
    assert!(a.execute("INSERT INTO acct VALUES (8, 1), (8, 2)").is_err(), "a duplicate within a statement fails at once");
    run(&mut a, "ROLLBACK; BEGIN; INSERT INTO acct VALUES (7, 1); COMMIT");
    let duplicate = b.execute("COMMIT");
    assert!(matches!(&duplicate, Err(ApiaryError::UniqueViolation(m)) if m.contains("acct_pkey")), "{duplicate:?}");
    assert_eq!(ints(&mut b, "SELECT balance FROM acct WHERE id = 7"), [1]);
    // A key the transaction freed is free at commit.
    run(&mut a, "BEGIN; DELETE FROM acct WHERE id = 7; INSERT INTO acct VALUES (7, 3); COMMIT");
    assert_eq!(ints(&mut b, "SELECT balance FROM acct WHERE id = 7"), [3]);
    // A statement's key is checked when it runs: one the snapshot holds is a duplicate
    // (23505); one only a transaction committed since holds is a conflict (40001).
    run(&mut b, "BEGIN");
    run(&mut a, "INSERT INTO acct VALUES (9, 1)");
    let duplicate = b.execute("INSERT INTO acct VALUES (7, 0)");
    assert!(matches!(&duplicate, Err(ApiaryError::UniqueViolation(_))), "{duplicate:?}");
    run(&mut b, "ROLLBACK; BEGIN; SELECT 1");
    run(&mut a, "INSERT INTO acct VALUES (10, 1)");
    let conflict = b.execute("INSERT INTO acct VALUES (10, 0)");
    assert!(matches!(&conflict, Err(ApiaryError::Serialization(m)) if m.contains("acct_pkey")), "{conflict:?}");
    run(&mut b, "ROLLBACK");
}

/// Neither a transaction nor a statement outside one can add a child while another
/// removes its parent: the checks made against a snapshot are made again at COMMIT
/// (40001), and statements outside blocks check and publish one at a time.
#[test]
fn foreign_keys_hold_between_concurrent_writers() {
    let db = Database::open_in_memory().unwrap();
    let (mut a, mut b) = (db.connect(), db.connect());
    run(&mut a, "CREATE TABLE parent (id INTEGER PRIMARY KEY); CREATE TABLE child (p INTEGER REFERENCES parent)");
    run(&mut a, "INSERT INTO parent SELECT * FROM range(0, 10)");
    // A child added in a block, its parent removed outside before COMMIT.
    run(&mut a, "BEGIN; INSERT INTO child VALUES (1)");
    run(&mut b, "DELETE FROM parent WHERE id = 1");
    let commit = a.execute("COMMIT");
    assert!(matches!(&commit, Err(ApiaryError::Serialization(m)) if m.contains("child_p_fkey")), "{commit:?}");
    // A parent removed in a block, a child added outside before COMMIT.
    run(&mut a, "BEGIN; DELETE FROM parent WHERE id = 2");
    run(&mut b, "INSERT INTO child VALUES (2)");
    let commit = a.execute("COMMIT");
    assert!(matches!(&commit, Err(ApiaryError::Serialization(m)) if m.contains("child_p_fkey")), "{commit:?}");
    // Both in blocks: the second COMMIT fails.
    run(&mut a, "BEGIN; INSERT INTO child VALUES (3)");
    run(&mut b, "BEGIN; DELETE FROM parent WHERE id = 3; COMMIT");
    assert!(matches!(a.execute("COMMIT"), Err(ApiaryError::Serialization(_))));
    assert_eq!(ints(&mut a, "SELECT count(*) FROM child c WHERE NOT EXISTS (SELECT 1 FROM parent p WHERE p.id = c.p)"), [0]);
    // Outside blocks, from two threads: children and parent removals race.
    let barrier = Arc::new(Barrier::new(2));
    let adders = {
        let (db, barrier) = (db.clone(), Arc::clone(&barrier));
        std::thread::spawn(move || {
            let mut conn = db.connect();
            barrier.wait();
            for i in 0..300 {
                let _ = conn.execute(&format!("INSERT INTO child VALUES ({})", 4 + i % 6));
            }
        })
    };
    barrier.wait();
    for id in 4..10 {
        std::thread::sleep(std::time::Duration::from_millis(5));
        let _ = b.execute(&format!("DELETE FROM parent WHERE id = {id}"));
    }
    adders.join().unwrap();
    assert_eq!(ints(&mut a, "SELECT count(*) FROM child c WHERE NOT EXISTS (SELECT 1 FROM parent p WHERE p.id = c.p)"), [0]);
}

#[test]
fn a_commit_of_several_tables_is_atomic_and_durable() {
    let dir = std::env::temp_dir().join(format!("apiary-transactions-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("db.apiary");
    let crash_copy = |name: &str| {
        let crashed = dir.join(format!("{name}.apiary"));
        std::fs::copy(&path, &crashed).unwrap();
        std::fs::copy(dir.join("db.apiary.wal"), dir.join(format!("{name}.apiary.wal"))).unwrap();
        Database::open(&crashed).unwrap()
    };
    let db = Database::open(&path).unwrap();
    let mut a = db.connect();
    run(&mut a, "CREATE TABLE orders (id INTEGER PRIMARY KEY, total INTEGER); CREATE TABLE items (order_id INTEGER, qty INTEGER)");
    run(&mut a, "BEGIN; INSERT INTO orders VALUES (1, 30); INSERT INTO items VALUES (1, 10), (1, 20)");
    // Not committed: a crash now leaves nothing of it.
    let mut crashed = crash_copy("open").connect();
    assert_eq!(ints(&mut crashed, "SELECT (SELECT count(*) FROM orders) + (SELECT count(*) FROM items)"), [0]);
    // Another connection's snapshot sees all of it or none.
    let mut b = db.connect();
    run(&mut a, "COMMIT");
    assert_eq!(ints(&mut b, "SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM items)"), [1, 2]);
    let mut crashed = crash_copy("committed").connect();
    assert_eq!(ints(&mut crashed, "SELECT (SELECT sum(total) FROM orders), (SELECT sum(qty) FROM items)"), [30, 30]);
    run(&mut a, "BEGIN; UPDATE orders SET total = 0; DELETE FROM items; COMMIT");
    let mut crashed = crash_copy("changed").connect();
    assert_eq!(ints(&mut crashed, "SELECT (SELECT sum(total) FROM orders), (SELECT count(*) FROM items)"), [0, 0]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A query outside any transaction block reads all its tables as of one moment: while
/// transactions move rows from one table to another, a query counting both never sees a
/// row in both or in neither.
#[test]
fn a_query_sees_a_commit_of_several_tables_whole_or_not_at_all() {
    let db = Database::open_in_memory().unwrap();
    let mut writer = db.connect();
    run(&mut writer, "CREATE TABLE here (id INTEGER, pad VARCHAR); CREATE TABLE there (id INTEGER, pad VARCHAR)");
    run(&mut writer, "INSERT INTO here SELECT g, repeat('x', 20) FROM generate_series(1, 20000) AS s(g)");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (db, stop) = (db.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut conn = db.connect();
            let mut reads = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) || reads < 20 {
                // The two scans start apart in time (the first is a large join).
                let total = ints(&mut conn, "SELECT (SELECT count(*) FROM here h1 JOIN here h2 USING (id)) + (SELECT count(*) FROM there)");
                assert_eq!(total, [20000], "read {reads} saw half a commit");
                reads += 1;
            }
            reads
        })
    };
    for round in 0..200 {
        let (from, to) = if round % 2 == 0 { ("here", "there") } else { ("there", "here") };
        run(
            &mut writer,
            &format!(
                "BEGIN; INSERT INTO {to} SELECT * FROM {from} WHERE id % 7 = {}; DELETE FROM {from} WHERE id % 7 = {}; COMMIT",
                round % 7,
                round % 7
            ),
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let reads = reader.join().expect("the reader saw every commit whole");
    assert!(reads >= 20);
}

/// A transaction that changed a table another connection then altered fails at COMMIT
/// (40001) instead of writing rows of the old shape into a table no one reads.
#[test]
fn a_commit_after_an_alter_of_its_table_is_a_serialization_failure() {
    let (_db, mut a, mut b) = accounts();
    run(&mut a, "BEGIN; UPDATE acct SET balance = balance + 1 WHERE id = 1");
    run(&mut b, "ALTER TABLE acct ADD COLUMN note VARCHAR DEFAULT 'x'");
    let error = a.execute("COMMIT").unwrap_err();
    assert_eq!(error.sqlstate(), "40001", "{error}");
    assert_eq!(ints(&mut b, "SELECT count(*) FROM acct WHERE note = 'x'"), [ints(&mut b, "SELECT count(*) FROM acct")[0]]);
}

/// Clients move money between accounts in transactions (read both balances, update
/// both), retrying on serialization failures; each records the transfers that committed.
/// The final balances must be the initial ones plus exactly the committed transfers (no
/// lost update), and the total must not change.
#[test]
fn concurrent_transfers_match_a_sequential_model() {
    const CLIENTS: usize = 4;
    const TRANSFERS: usize = 40;
    const ACCOUNTS: i64 = 5;
    let db = Database::open_in_memory().unwrap();
    let mut setup = db.connect();
    run(&mut setup, "CREATE TABLE acct (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL)");
    run(&mut setup, "INSERT INTO acct SELECT i, 1000 FROM range(0, 5) r(i)");
    let start = Arc::new(Barrier::new(CLIENTS));
    let handles: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let db = db.clone();
            let start = Arc::clone(&start);
            std::thread::spawn(move || {
                let mut conn = db.connect();
                let mut committed = Vec::new();
                let mut conflicts = 0;
                let mut seed = client as u64 * 7919 + 17;
                let mut next = move || {
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    (seed >> 33) as i64
                };
                start.wait();
                for _ in 0..TRANSFERS {
                    let from = next() % ACCOUNTS;
                    let to = (from + 1 + next() % (ACCOUNTS - 1)) % ACCOUNTS;
                    let amount = 1 + next() % 50;
                    loop {
                        run(&mut conn, "BEGIN");
                        let balances = ints(&mut conn, &format!("SELECT balance FROM acct WHERE id IN ({from}, {to}) ORDER BY id"));
                        assert_eq!(balances.len(), 2);
                        run(&mut conn, &format!("UPDATE acct SET balance = balance - {amount} WHERE id = {from}"));
                        run(&mut conn, &format!("UPDATE acct SET balance = balance + {amount} WHERE id = {to}"));
                        match conn.execute("COMMIT") {
                            Ok(_) => break,
                            Err(ApiaryError::Serialization(_)) => conflicts += 1,
                            Err(e) => panic!("COMMIT: {e}"),
                        }
                    }
                    committed.push((from, to, amount));
                }
                (committed, conflicts)
            })
        })
        .collect();
    let mut expected = vec![1000i64; ACCOUNTS as usize];
    let mut conflicts = 0;
    for handle in handles {
        let (committed, retried) = handle.join().unwrap();
        conflicts += retried;
        for (from, to, amount) in committed {
            expected[from as usize] -= amount;
            expected[to as usize] += amount;
        }
    }
    assert_eq!(ints(&mut setup, "SELECT balance FROM acct ORDER BY id"), expected, "after {conflicts} retried conflicts");
    assert_eq!(ints(&mut setup, "SELECT sum(balance) FROM acct"), [1000 * ACCOUNTS]);
}

/// DDL inside a block is the block's alone until COMMIT, then everyone's.
#[test]
fn ddl_in_a_block_is_seen_by_others_only_after_commit() {
    let (_db, mut a, mut b) = accounts();
    run(&mut a, "BEGIN; CREATE TABLE made (x INTEGER); INSERT INTO made VALUES (1), (2); DROP TABLE acct");
    assert!(b.execute("SELECT * FROM made").is_err(), "not committed yet");
    assert_eq!(ints(&mut b, "SELECT count(*) FROM acct"), [3], "the drop is not committed yet");
    // Another connection's writes to the table the block drops are dropped with it.
    run(&mut b, "INSERT INTO acct VALUES (4, 4)");
    run(&mut a, "COMMIT");
    assert_eq!(ints(&mut b, "SELECT sum(x) FROM made"), [3]);
    assert!(b.execute("SELECT * FROM acct").is_err());
}

/// Two blocks create a table of the same name: the second COMMIT fails and leaves
/// nothing of its block.
#[test]
fn a_block_creating_a_name_another_committed_first_fails_at_commit() {
    let (_db, mut a, mut b) = accounts();
    run(&mut a, "BEGIN; CREATE TABLE twin (a INTEGER); INSERT INTO twin VALUES (1)");
    run(&mut b, "BEGIN; CREATE TABLE twin (b VARCHAR); INSERT INTO acct VALUES (9, 9)");
    run(&mut a, "COMMIT");
    let error = b.execute("COMMIT").unwrap_err();
    assert_eq!(error.sqlstate(), "42P07", "{error}");
    assert_eq!(ints(&mut a, "SELECT a FROM twin"), [1]);
    assert_eq!(ints(&mut a, "SELECT count(*) FROM acct"), [3], "the failed block's insert is gone too");
    assert!(!b.in_transaction());
}

/// An ALTER inside a block rewrites the table from its snapshot: if another connection
/// changed the table since, the COMMIT fails (40001) rather than losing that change.
#[test]
fn an_alter_in_a_block_fails_at_commit_when_the_table_changed_meanwhile() {
    let (_db, mut a, mut b) = accounts();
    run(&mut a, "BEGIN; ALTER TABLE acct ADD COLUMN note VARCHAR DEFAULT 'x'");
    run(&mut b, "UPDATE acct SET balance = 0 WHERE id = 1");
    let error = a.execute("COMMIT").unwrap_err();
    assert_eq!(error.sqlstate(), "40001", "{error}");
    assert_eq!(ints(&mut b, "SELECT balance FROM acct ORDER BY id"), [0, 100, 100]);
    assert!(b.execute("SELECT note FROM acct").is_err(), "the ALTER rolled back");
    // Unchanged meanwhile, it commits; a block that wrote the old table then fails.
    run(&mut b, "BEGIN; UPDATE acct SET balance = balance + 1 WHERE id = 2");
    run(&mut a, "BEGIN; ALTER TABLE acct ADD COLUMN note VARCHAR DEFAULT 'x'; UPDATE acct SET note = 'y' WHERE id = 3; COMMIT");
    let error = b.execute("COMMIT").unwrap_err();
    assert_eq!(error.sqlstate(), "40001", "{error}");
    assert_eq!(ints(&mut a, "SELECT count(*) FROM acct WHERE note = 'x'"), [2]);
    assert_eq!(ints(&mut a, "SELECT balance FROM acct ORDER BY id"), [0, 100, 100]);
}

/// A block that began before another connection altered a table cannot write the new
/// table against its snapshot of the old one.
#[test]
fn a_block_cannot_write_a_table_altered_after_it_began() {
    let (_db, mut a, mut b) = accounts();
    run(&mut a, "BEGIN");
    assert_eq!(ints(&mut a, "SELECT count(*) FROM acct"), [3]);
    run(&mut b, "ALTER TABLE acct ADD COLUMN note VARCHAR");
    run(&mut a, "CREATE TABLE other (x INTEGER)");
    let error = a.execute("INSERT INTO acct VALUES (7, 7, 'n')").unwrap_err();
    assert_eq!(error.sqlstate(), "40001", "{error}");
    run(&mut a, "ROLLBACK");
}
