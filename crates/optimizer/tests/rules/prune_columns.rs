//! `prune_columns`: every operator carries only the columns someone above reads.

use apiary_optimizer::rules::{prune_columns, push_down_predicates, unnest_subqueries};

use crate::common::{assert_plan, Rule, TestDb};

const RULES: &[Rule] = &[unnest_subqueries::run, push_down_predicates::run, prune_columns::run];

fn db() -> TestDb {
    TestDb::new().table("t", 100, "t1, t2, t3").table("u", 10, "u1, u2")
}

fn prune(sql: &str) -> String {
    db().explain(sql, RULES)
}

#[test]
fn scans_read_only_what_is_needed_including_their_filters() {
    assert_plan(
        &prune("SELECT t1 FROM t WHERE t2 > 3"),
        "
        Project t1 AS t1
          Scan t [t1, t2] filters=[t2 > 3]
        ",
    );
}

#[test]
fn the_result_keeps_every_column() {
    assert_plan(
        &prune("SELECT t1, t2, t3 FROM t"),
        "
        Project t1 AS t1, t2 AS t2, t3 AS t3
          Scan t [t1, t2, t3]
        ",
    );
}

#[test]
fn unused_aggregates_go_but_group_keys_stay() {
    // Dropping t3 from the GROUP BY would change the number of rows.
    assert_plan(
        &prune("SELECT g FROM (SELECT t1 AS g, sum(t2) AS s, count(*) AS c FROM t GROUP BY t1, t3) q"),
        "
        Project t1 AS t1
          Project t1 AS t1
            Aggregate groups=[t1, t3] aggregates=[]
              Scan t [t1, t3]
        ",
    );
}

#[test]
fn join_and_sort_keys_are_kept() {
    assert_plan(
        &prune("SELECT t1 FROM t JOIN u ON t2 = u2 ORDER BY u1"),
        "
        Project t1 AS t1
          Sort u1 ASC
            Project t1 AS t1, u1 AS u1
              Join INNER ON t2 = u2
                Scan t [t1, t2]
                Scan u [u1, u2]
        ",
    );
}

#[test]
fn union_all_drops_an_unused_position_from_every_input() {
    assert_plan(
        &prune("SELECT x FROM (SELECT t1 AS x, t2 AS y FROM t UNION ALL SELECT u1, u2 FROM u) s"),
        "
        Project x AS x
          Union ALL (2 inputs)
            Project t1 AS t1
              Project t1 AS t1
                Scan t [t1]
            Project u1 AS u1
              Project u1 AS u1
                Scan u [u1]
        ",
    );
}

#[test]
fn union_distinct_keeps_every_position() {
    // Both columns decide which rows are duplicates.
    let plan = prune("SELECT count(*) AS c FROM (SELECT t1, t2 FROM t UNION SELECT u1, u2 FROM u) s");
    assert!(plan.contains("Scan t [t1, t2]") && plan.contains("Scan u [u1, u2]"), "{plan}");
}

#[test]
fn the_subquery_side_of_a_semi_join_keeps_its_key() {
    assert_plan(
        &prune("SELECT t1 FROM t WHERE t2 IN (SELECT u2 FROM u WHERE u1 > 1)"),
        "
        Project t1 AS t1
          Join SEMI ON t2 = u2
            Scan t [t1, t2]
            Project u2 AS u2
              Scan u [u1, u2] filters=[u1 > 1]
        ",
    );
}

#[test]
fn count_star_reads_no_column() {
    assert_plan(
        &prune("SELECT count(*) AS c FROM t"),
        "
        Project count(*) AS count(*)
          Aggregate groups=[] aggregates=[count(*)]
            Scan t []
        ",
    );
}

#[test]
fn values_drop_unused_columns() {
    assert_plan(
        &prune("SELECT a FROM (VALUES (1, 2), (3, 4)) v(a, b)"),
        "
        Project column1 AS column1
          Values (2 rows)
        ",
    );
    let plan = db().plan("SELECT a FROM (VALUES (1, 2), (3, 4)) v(a, b)", RULES);
    assert_eq!(apiary_sql::LogicalPlan::children(&plan)[0].output().len(), 1, "{plan}");
}

#[test]
fn a_recursive_cte_keeps_every_column_of_its_terms_and_work_table() {
    // The recursive term reads the work table by position: a column nobody reads above
    // (t2 as d) stays in both terms; inside them, unread columns still go (t3).
    let plan = prune("WITH RECURSIVE r(n, d) AS (SELECT t1, t2 FROM t UNION ALL SELECT n + 1, d FROM r WHERE n < 10) SELECT n FROM r");
    assert!(plan.contains("RecursiveCte r (#0) UNION ALL [n, d]"), "{plan}");
    assert!(plan.contains("WorkTableScan r (#0) [n, d]"), "{plan}");
    assert!(plan.contains("Scan t [t1, t2]\n"), "{plan}");
}
