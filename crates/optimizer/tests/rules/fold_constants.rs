//! `fold_constants`: constant sub-expressions become literals, boolean logic simplifies,
//! `CAST(date AS TIMESTAMP) op TIMESTAMP` becomes a DATE comparison; a constant whose
//! evaluation fails stays as it is (it may sit in a branch no row takes).

use apiary_optimizer::rules::{fold_constants, unnest_subqueries};
use apiary_sql::expr::Expr;
use apiary_sql::{JoinKind, LogicalPlan};

use crate::common::{assert_plan, find, TestDb};

fn db() -> TestDb {
    TestDb::new().table("t", 100, "a, b NOT NULL, d DATE")
}

fn fold(sql: &str) -> String {
    db().explain(sql, &[fold_constants::run])
}

#[test]
fn folds_constant_sub_expressions() {
    assert_plan(
        &fold("SELECT a + (1 + 2) * 3 AS x FROM t"),
        "
        Project a + 9 AS x
          Scan t [a, b, d]
        ",
    );
}

#[test]
fn folds_in_every_operator() {
    assert_plan(
        &fold("SELECT b + 0 * 5 AS g, sum(a + (2 - 1)) AS s FROM t WHERE a > 2 * 3 GROUP BY b + 0 * 5 ORDER BY b + 0 * 5 + 1"),
        // Above the aggregation, `b + 0 * 5` and `sum(...)` name its output columns.
        "
        Project b + 0 * 5 AS b + 0 * 5, sum(a + (2 - 1)) AS sum(a + (2 - 1))
          Sort b + 0 * 5 + 1 ASC
            Project b + 0 * 5 AS b + 0 * 5, sum(a + (2 - 1)) AS sum(a + (2 - 1)), b + 0 * 5 + 1 AS b + 0 * 5 + 1
              Aggregate groups=[b + 0] aggregates=[sum(a + 1)]
                Filter a > 6
                  Scan t [a, b, d]
        ",
    );
}

#[test]
fn simplifies_boolean_connectives_with_constants() {
    assert_plan(
        &fold("SELECT a FROM t WHERE (a > 1 AND TRUE) OR FALSE"),
        "
        Project a AS a
          Filter a > 1
            Scan t [a, b, d]
        ",
    );
    // A filter that is always true goes away.
    assert_plan(
        &fold("SELECT a FROM t WHERE a > 1 OR 1 = 1"),
        "
        Project a AS a
          Scan t [a, b, d]
        ",
    );
    // One that is never TRUE keeps no row: no scan at all (and no projection of nothing).
    for predicate in ["a > 1 AND 1 = 0", "NULL = 1"] {
        assert_plan(
            &fold(&format!("SELECT a FROM t WHERE {predicate}")),
            "
            Values (0 rows)
            ",
        );
    }
}

#[test]
fn keeps_null_in_three_valued_logic() {
    // `x AND NULL` is NULL or FALSE depending on x: neither may replace it.
    assert_plan(
        &fold("SELECT (a > 1) AND NULL AS x, (a > 1) OR NULL AS y, NULL OR TRUE AS z, NULL AND FALSE AS w FROM t"),
        "
        Project a > 1 AND NULL AS x, (a > 1) OR NULL AS y, true AS z, false AS w
          Scan t [a, b, d]
        ",
    );
}

fn db2() -> TestDb {
    db().table("u", 10, "c")
}

#[test]
fn an_always_true_join_condition_goes_away() {
    assert_plan(
        &db2().explain("SELECT a FROM t JOIN u ON 1 = 1", &[fold_constants::run]),
        "
        Project a AS a
          Join INNER
            Scan t [a, b, d]
            Scan u [c]
        ",
    );
}

/// `SELECT a, c FROM t <kind> JOIN u ON a = c AND 1 = 0` after folding; semi and anti
/// joins (from EXISTS, whose constant conjuncts stay in the subquery) get a FALSE condition.
fn never_matching(kind: &str) -> LogicalPlan {
    let (sql, join) = match kind {
        "SEMI" => ("SELECT a FROM t WHERE EXISTS (SELECT 1 FROM u WHERE a = c)".to_string(), Some(JoinKind::Semi)),
        "ANTI" => {
            ("SELECT a FROM t WHERE NOT EXISTS (SELECT 1 FROM u WHERE a = c)".to_string(), Some(JoinKind::Anti { null_aware: false }))
        }
        _ => (format!("SELECT a, c FROM t {kind} JOIN u ON a = c AND 1 = 0"), None),
    };
    let db = db2();
    let plan = db.plan(&sql, &[unnest_subqueries::run, fold_constants::run]);
    match join {
        Some(kind) => fold_constants::run(with_condition(plan, kind, Expr::boolean(false)), &mut db.context()).expect("fold"),
        None => plan,
    }
}

#[test]
fn a_never_matching_inner_or_semi_join_is_empty() {
    // Issue 10: `... JOIN lineitem l ON o_orderkey = l_orderkey AND 1 = 0` compared every pair.
    assert_plan(
        &never_matching("INNER").display_indent(),
        "
        Values (0 rows)
        ",
    );
    assert_plan(
        &never_matching("SEMI").display_indent(),
        "
        Values (0 rows)
        ",
    );
}

#[test]
fn a_never_matching_outer_join_null_extends_its_preserved_side() {
    assert_plan(
        &never_matching("LEFT").display_indent(),
        "
        Project a AS a, c AS c
          Project a AS a, b AS b, d AS d, NULL AS c
            Scan t [a, b, d]
        ",
    );
    assert_plan(
        &never_matching("RIGHT").display_indent(),
        "
        Project a AS a, c AS c
          Project NULL AS a, NULL AS b, NULL AS d, c AS c
            Scan u [c]
        ",
    );
    // FULL: every row of each side once, the other side NULL.
    assert_plan(
        &never_matching("FULL").display_indent(),
        "
        Project a AS a, c AS c
          Union ALL (2 inputs)
            Project a AS a, b AS b, d AS d, NULL AS c
              Scan t [a, b, d]
            Project NULL AS a, NULL AS b, NULL AS d, c AS c
              Scan u [c]
        ",
    );
}

#[test]
fn a_never_matching_anti_join_keeps_every_row() {
    assert_plan(
        &never_matching("ANTI").display_indent(),
        "
        Project a AS a
          Scan t [a, b, d]
        ",
    );
}

#[test]
fn a_never_matching_null_aware_join_is_kept() {
    // `x NOT IN (SELECT ...)` decides on the whole subquery (a NULL in it, or no row at all),
    // not on matches: it cannot be dropped like a plain anti join.
    let plan = db2().plan("SELECT a FROM t WHERE a NOT IN (SELECT c FROM u WHERE 1 = 0 OR c > 5)", &[unnest_subqueries::run]);
    let kind = JoinKind::Anti { null_aware: true };
    let with_false = with_condition(plan, kind, Expr::boolean(false));
    let folded = fold_constants::run(with_false, &mut db2().context()).expect("fold");
    assert_eq!(find(&folded, &|p| matches!(p, LogicalPlan::Join { kind: k, .. } if *k == kind)).len(), 1, "{folded}");
}

/// Replaces the condition of the join of `kind` (under projections and filters).
fn with_condition(plan: LogicalPlan, kind: JoinKind, condition: Expr) -> LogicalPlan {
    match plan {
        LogicalPlan::Join { kind: k, left, right, mark, .. } if k == kind => {
            LogicalPlan::Join { kind: k, left, right, condition: Some(condition), mark }
        }
        LogicalPlan::Project { exprs, input } => LogicalPlan::Project { exprs, input: Box::new(with_condition(*input, kind, condition)) },
        LogicalPlan::Filter { predicate, input } => {
            LogicalPlan::Filter { predicate, input: Box::new(with_condition(*input, kind, condition)) }
        }
        other => other,
    }
}

#[test]
fn leaves_a_failing_constant_unfolded() {
    // Division by zero is raised when a row evaluates it, not while planning.
    assert_plan(
        &fold("SELECT 1 / 0 AS x"),
        "
        Project 1 / 0 AS x
          Values (1 rows)
        ",
    );
}

#[test]
fn evaluates_only_the_branches_taken() {
    // Issue 10: COALESCE(-56, 1/0) is -56 and an untaken CASE branch never raises.
    assert_plan(
        &fold("SELECT COALESCE(-56, 1 / 0) AS x, CASE WHEN FALSE THEN 1 / 0 ELSE 0 END AS y"),
        "
        Project -56 AS x, 0 AS y
          Values (1 rows)
        ",
    );
}

#[test]
fn keeps_a_failing_constant_in_a_branch_that_depends_on_the_row() {
    assert_plan(
        &fold("SELECT CASE WHEN a > 0 THEN 1 / 0 ELSE 0 END AS x, COALESCE(a, 1 / 0) AS y FROM t"),
        "
        Project CASE WHEN a > 0 THEN 1 / 0 ELSE 0 END AS x, coalesce(a, 1 / 0) AS y
          Scan t [a, b, d]
        ",
    );
}

#[test]
fn compares_dates_with_timestamps_as_dates() {
    // `d < '... 12:00'` holds for every day up to and including the 5th.
    assert_plan(
        &fold("SELECT d FROM t WHERE d < TIMESTAMP '1970-01-05 12:00:00' AND TIMESTAMP '1970-01-02 00:00:00' <= d"),
        "
        Project d AS d
          Filter d <= DATE '1970-01-05' AND d >= DATE '1970-01-02'
            Scan t [a, b, d]
        ",
    );
    assert_plan(
        &fold("SELECT d FROM t WHERE d > TIMESTAMP '1970-01-05 12:00:00'"),
        "
        Project d AS d
          Filter d > DATE '1970-01-05'
            Scan t [a, b, d]
        ",
    );
}

#[test]
fn does_not_turn_equality_with_a_time_of_day_into_a_date_equality() {
    // No date (at midnight) equals noon; `d = DATE '1970-01-05'` would match one.
    assert_plan(
        &fold("SELECT d FROM t WHERE d = TIMESTAMP '1970-01-05 12:00:00'"),
        "
        Project d AS d
          Filter CAST(d AS TIMESTAMP) = TIMESTAMP '1970-01-05 12:00:00'
            Scan t [a, b, d]
        ",
    );
}
