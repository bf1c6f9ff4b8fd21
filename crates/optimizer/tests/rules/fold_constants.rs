//! `fold_constants`: constant sub-expressions become literals, boolean logic simplifies,
//! `CAST(date AS TIMESTAMP) op TIMESTAMP` becomes a DATE comparison; a constant whose
//! evaluation fails stays as it is (it may sit in a branch no row takes).

use apiary_optimizer::rules::fold_constants;

use crate::common::{assert_plan, TestDb};

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
    // A filter that is always true goes away; one that is never true stays as FALSE.
    assert_plan(
        &fold("SELECT a FROM t WHERE a > 1 OR 1 = 1"),
        "
        Project a AS a
          Scan t [a, b, d]
        ",
    );
    assert_plan(
        &fold("SELECT a FROM t WHERE a > 1 AND 1 = 0"),
        "
        Project a AS a
          Filter false
            Scan t [a, b, d]
        ",
    );
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

#[test]
fn join_conditions_fold_too() {
    // A constant-false ON condition is folded (issue 10: it compared every pair).
    let plan = db().table("u", 10, "c").explain("SELECT a FROM t JOIN u ON a = c AND 1 = 0", &[fold_constants::run]);
    assert_plan(
        &plan,
        "
        Project a AS a
          Join INNER ON false
            Scan t [a, b, d]
            Scan u [c]
        ",
    );
    let plan = db().table("u", 10, "c").explain("SELECT a FROM t JOIN u ON 1 = 1", &[fold_constants::run]);
    assert_plan(
        &plan,
        "
        Project a AS a
          Join INNER
            Scan t [a, b, d]
            Scan u [c]
        ",
    );
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
