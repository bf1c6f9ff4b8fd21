//! `push_down_predicates`: conjuncts move towards the scans as far as the operators they
//! pass allow; outer joins whose NULL-extended rows a predicate rejects become inner or
//! one-sided joins.

use apiary_optimizer::rules::{push_down_predicates, unnest_subqueries};
use apiary_sql::expr::{BinaryOp, Expr};
use apiary_sql::{JoinKind, LogicalPlan};
use apiary_types::ScalarValue;

use crate::common::{assert_plan, assert_well_formed, find, TestDb};

/// x(xk, xd), y(yd, ye), z(za): nullable INTEGER columns.
fn db() -> TestDb {
    TestDb::new().table("x", 100, "xk, xd").table("y", 100, "yd, ye").table("z", 10, "za")
}

fn push(sql: &str) -> String {
    db().explain(sql, &[push_down_predicates::run])
}

#[test]
fn one_sided_conjuncts_reach_the_scans_and_two_sided_ones_join() {
    assert_plan(
        &push("SELECT xk FROM x, y WHERE xd = yd AND xk > 5 AND ye < 3"),
        "
        Project xk AS xk
          Join INNER ON xd = yd
            Scan x [xk, xd] filters=[xk > 5]
            Scan y [yd, ye] filters=[ye < 3]
        ",
    );
}

#[test]
fn full_join_filtered_on_the_left_becomes_a_left_join() {
    // Issue 10 (87 of 120 fuzzer mismatches): this became an INNER join.
    assert_plan(
        &push("SELECT xk, yd FROM x FULL JOIN y ON xd = yd WHERE xk = 1"),
        "
        Project xk AS xk, yd AS yd
          Join LEFT ON xd = yd
            Scan x [xk, xd] filters=[xk = 1]
            Scan y [yd, ye]
        ",
    );
}

#[test]
fn full_join_filtered_on_the_right_becomes_a_right_join() {
    assert_plan(
        &push("SELECT xk, yd FROM x FULL JOIN y ON xd = yd WHERE yd = 3"),
        "
        Project xk AS xk, yd AS yd
          Join RIGHT ON xd = yd
            Scan x [xk, xd]
            Scan y [yd, ye] filters=[yd = 3]
        ",
    );
}

#[test]
fn full_join_filtered_on_both_sides_becomes_an_inner_join() {
    assert_plan(
        &push("SELECT xk, yd FROM x FULL JOIN y ON xd = yd WHERE xk = 1 AND yd = 3"),
        "
        Project xk AS xk, yd AS yd
          Join INNER ON xd = yd
            Scan x [xk, xd] filters=[xk = 1]
            Scan y [yd, ye] filters=[yd = 3]
        ",
    );
}

#[test]
fn outer_on_condition_makes_a_nested_full_join_a_left_join() {
    // Issue 10: z(a)={1}, x(a)={1}, y(a)={2} must give (1, NULL, 1). The RIGHT join's
    // `xd < 2` filters its non-preserved input, which rejects x's NULLs below it (and, as
    // `yd < 2`, the y rows that could only match x rows it removes).
    assert_plan(
        &push("SELECT xk, yd, za FROM x FULL JOIN y ON xd = yd RIGHT JOIN z ON xd = za AND xd < 2"),
        "
        Project xk AS xk, yd AS yd, za AS za
          Join RIGHT ON xd = za
            Join LEFT ON xd = yd
              Scan x [xk, xd] filters=[xd < 2]
              Scan y [yd, ye] filters=[yd < 2]
            Scan z [za]
        ",
    );
}

#[test]
fn null_rejecting_where_makes_a_left_join_inner() {
    assert_plan(
        &push("SELECT xk FROM x LEFT JOIN y ON xk = yd WHERE ye > 0"),
        "
        Project xk AS xk
          Join INNER ON xk = yd
            Scan x [xk, xd]
            Scan y [yd, ye] filters=[ye > 0]
        ",
    );
}

#[test]
fn predicates_true_for_null_extended_rows_keep_the_left_join() {
    for predicate in ["ye IS NULL", "coalesce(ye, 0) = 0", "ye IS NULL OR ye > 5", "ye IS NOT DISTINCT FROM 1"] {
        let plan = push(&format!("SELECT xk FROM x LEFT JOIN y ON xk = yd WHERE {predicate}"));
        let lines: Vec<&str> = plan.lines().collect();
        assert!(lines[1].starts_with("  Filter ") && lines[2] == "    Join LEFT ON xk = yd", "{predicate}:\n{plan}");
        assert!(lines[4] == "      Scan y [yd, ye]", "{predicate} was pushed into the NULL-extended side:\n{plan}");
    }
}

#[test]
fn greatest_and_least_do_not_reject_nulls() {
    // greatest(NULL, 5) is 5 (NULLs are skipped, as in PostgreSQL), so the x rows without a
    // partner pass `greatest(ye, 5) > 1`: the join must stay LEFT and the filter above it.
    for function in ["greatest", "least"] {
        let plan = push(&format!("SELECT xk FROM x LEFT JOIN y ON xk = yd WHERE {function}(ye, 5) > 1"));
        let lines: Vec<&str> = plan.lines().collect();
        assert!(lines[1].starts_with("  Filter ") && lines[2] == "    Join LEFT ON xk = yd", "{function}:\n{plan}");
    }
}

#[test]
fn left_join_on_condition_filters_only_the_null_extended_side() {
    // `xd > 5` decides which x rows find a partner; it must not remove x rows.
    assert_plan(
        &push("SELECT xk FROM x LEFT JOIN y ON xk = yd AND ye > 0 AND xd > 5"),
        "
        Project xk AS xk
          Join LEFT ON xk = yd AND xd > 5
            Scan x [xk, xd]
            Scan y [yd, ye] filters=[ye > 0]
        ",
    );
}

#[test]
fn where_on_the_preserved_side_of_a_left_join_is_pushed() {
    assert_plan(
        &push("SELECT xk FROM x LEFT JOIN y ON xk = yd WHERE xd > 5"),
        "
        Project xk AS xk
          Join LEFT ON xk = yd
            Scan x [xk, xd] filters=[xd > 5]
            Scan y [yd, ye]
        ",
    );
}

#[test]
fn right_join_on_condition_filters_only_the_left_side() {
    assert_plan(
        &push("SELECT xk FROM x RIGHT JOIN y ON xk = yd AND xd > 5 AND ye > 0 WHERE ye < 9"),
        "
        Project xk AS xk
          Join RIGHT ON xk = yd AND ye > 0
            Scan x [xk, xd] filters=[xd > 5]
            Scan y [yd, ye] filters=[ye < 9]
        ",
    );
}

/// Replaces the condition of every join of `kind` in `plan`.
fn with_join_condition(plan: LogicalPlan, kind: JoinKind, condition: &Expr) -> LogicalPlan {
    match plan {
        LogicalPlan::Join { kind: k, left, right, mark, .. } if k == kind => {
            LogicalPlan::Join { kind: k, left, right, condition: Some(condition.clone()), mark }
        }
        LogicalPlan::Join { kind, left, right, condition: c, mark } => LogicalPlan::Join {
            kind,
            left: Box::new(with_join_condition(*left, kind, condition)),
            right: Box::new(with_join_condition(*right, kind, condition)),
            condition: c,
            mark,
        },
        LogicalPlan::Project { exprs, input } => {
            LogicalPlan::Project { exprs, input: Box::new(with_join_condition(*input, kind, condition)) }
        }
        LogicalPlan::Filter { predicate, input } => {
            LogicalPlan::Filter { predicate, input: Box::new(with_join_condition(*input, kind, condition)) }
        }
        other => other,
    }
}

#[test]
fn null_aware_anti_join_keeps_its_key_condition() {
    // `5 NOT IN (SELECT yd FROM y)` (issue 10): the key equality reads only the subquery's
    // side. Pushed into it as a filter, the join would no longer see the NULL keys or
    // whether the subquery has rows, and `5 NOT IN (1, NULL)` would be TRUE.
    let db = db();
    let unnested = db.plan("SELECT xk FROM x WHERE xk NOT IN (SELECT yd FROM y)", &[unnest_subqueries::run]);
    let kind = JoinKind::Anti { null_aware: true };
    let LogicalPlan::Join { right, .. } = find(&unnested, &|p| matches!(p, LogicalPlan::Join { kind: k, .. } if *k == kind))[0] else {
        unreachable!()
    };
    let yd = right.output()[0].clone();
    let constant_key = Expr::compare(BinaryOp::Eq, Expr::literal(ScalarValue::Int32(5)), yd.expr());
    let plan = with_join_condition(unnested, kind, &constant_key);
    let pushed = push_down_predicates::run(plan, &mut db.context()).expect("push down");
    assert_well_formed(&pushed);
    assert_plan(
        &pushed.display_indent(),
        "
        Project xk AS xk
          Project xk AS xk, xd AS xd
            Join NULL-AWARE ANTI ON 5 = yd
              Scan x [xk, xd]
              Project yd AS yd
                Scan y [yd, ye]
        ",
    );
}

#[test]
fn null_aware_mark_join_keeps_its_key_condition() {
    let db = db();
    let unnested = db.plan("SELECT xk IN (SELECT yd FROM y WHERE ye > 1) AS m FROM x", &[unnest_subqueries::run]);
    let kind = JoinKind::Mark { null_aware: true };
    assert_eq!(find(&unnested, &|p| matches!(p, LogicalPlan::Join { kind: k, .. } if *k == kind)).len(), 1, "{unnested}");
    let LogicalPlan::Join { right, .. } = find(&unnested, &|p| matches!(p, LogicalPlan::Join { kind: k, .. } if *k == kind))[0] else {
        unreachable!()
    };
    let yd = right.output()[0].clone();
    let constant_key = Expr::compare(BinaryOp::Eq, Expr::literal(ScalarValue::Int32(5)), yd.expr());
    let plan = with_join_condition(unnested, kind, &constant_key);
    let pushed = push_down_predicates::run(plan, &mut db.context()).expect("push down");
    assert_well_formed(&pushed);
    let joins = find(&pushed, &|p| matches!(p, LogicalPlan::Join { kind: k, .. } if *k == kind));
    let LogicalPlan::Join { condition, .. } = joins[0] else { unreachable!() };
    assert_eq!(condition.as_ref().map(|c| c.to_string()).as_deref(), Some("5 = yd"), "{pushed}");
}

#[test]
fn constant_not_in_stays_null_aware_through_push_down() {
    assert_plan(
        &db().explain("SELECT xk FROM x WHERE 5 NOT IN (SELECT yd FROM y)", &[unnest_subqueries::run, push_down_predicates::run]),
        "
        Project xk AS xk
          Project xk AS xk, xd AS xd
            Join NULL-AWARE ANTI ON in_operand = yd
              Project xk AS xk, xd AS xd, 5 AS in_operand
                Scan x [xk, xd]
              Project yd AS yd
                Scan y [yd, ye]
        ",
    );
}

#[test]
fn semi_join_condition_on_the_left_filters_the_left_side() {
    assert_plan(
        &db().explain(
            "SELECT xk FROM x WHERE EXISTS (SELECT 1 FROM y WHERE yd = xd AND xk > 5 AND ye < 2)",
            &[unnest_subqueries::run, push_down_predicates::run],
        ),
        "
        Project xk AS xk
          Join SEMI ON yd = xd
            Scan x [xk, xd] filters=[xk > 5]
            Project 1 AS 1, yd AS yd
              Scan y [yd, ye] filters=[ye < 2]
        ",
    );
}

#[test]
fn anti_join_condition_on_the_left_stays_in_the_join() {
    // An x row with xk <= 5 has no partner, so NOT EXISTS keeps it: filtering x would drop it.
    assert_plan(
        &db().explain(
            "SELECT xk FROM x WHERE NOT EXISTS (SELECT 1 FROM y WHERE yd = xd AND xk > 5 AND ye < 2)",
            &[unnest_subqueries::run, push_down_predicates::run],
        ),
        "
        Project xk AS xk
          Join ANTI ON yd = xd AND xk > 5
            Scan x [xk, xd]
            Project 1 AS 1, yd AS yd
              Scan y [yd, ye] filters=[ye < 2]
        ",
    );
}

#[test]
fn common_conjuncts_are_factored_out_of_disjunctions() {
    assert_plan(
        &push("SELECT xk FROM x, y WHERE (xd = yd AND xk = 1) OR (xd = yd AND xk = 2)"),
        "
        Project xk AS xk
          Join INNER ON xd = yd
            Scan x [xk, xd] filters=[(xk = 1) OR (xk = 2)]
            Scan y [yd, ye]
        ",
    );
}

#[test]
fn a_disjunction_over_both_sides_implies_one_per_side() {
    assert_plan(
        &push("SELECT xk FROM x, y WHERE xd = yd AND ((xk = 1 AND ye = 1) OR (xk = 2 AND ye = 2))"),
        "
        Project xk AS xk
          Join INNER ON xd = yd AND ((xk = 1 AND ye = 1) OR (xk = 2 AND ye = 2))
            Scan x [xk, xd] filters=[(xk = 1) OR (xk = 2)]
            Scan y [yd, ye] filters=[(ye = 1) OR (ye = 2)]
        ",
    );
}

#[test]
fn not_through_a_limit() {
    assert_plan(
        &push("SELECT xk FROM (SELECT xk FROM x LIMIT 10) s WHERE xk > 3"),
        "
        Project xk AS xk
          Filter xk > 3
            Limit 10
              Project xk AS xk
                Scan x [xk, xd]
        ",
    );
}

#[test]
fn through_an_aggregation_only_on_group_keys() {
    assert_plan(
        &push("SELECT * FROM (SELECT xk, sum(xd) AS s FROM x GROUP BY xk) g WHERE xk > 3 AND s > 10"),
        "
        Project xk AS xk, sum(xd) AS sum(xd)
          Project xk AS xk, sum(xd) AS sum(xd)
            Filter sum(xd) > 10
              Aggregate groups=[xk] aggregates=[sum(xd)]
                Scan x [xk, xd] filters=[xk > 3]
        ",
    );
}

#[test]
fn a_disjunction_of_keys_and_aggregates_implies_one_on_the_keys() {
    // `(xk = 1 AND s > 10) OR xk = 2` keeps only groups 1 and 2: the input is filtered on
    // `xk` (TPC-DS Q4/Q11, a CTE of yearly totals read for two years).
    assert_plan(
        &push("SELECT * FROM (SELECT xk, sum(xd) AS s FROM x GROUP BY xk) g WHERE (xk = 1 AND s > 10) OR xk = 2"),
        "
        Project xk AS xk, sum(xd) AS sum(xd)
          Project xk AS xk, sum(xd) AS sum(xd)
            Filter (xk = 1 AND sum(xd) > 10) OR (xk = 2)
              Aggregate groups=[xk] aggregates=[sum(xd)]
                Scan x [xk, xd] filters=[(xk = 1) OR (xk = 2)]
        ",
    );
}

#[test]
fn equal_implied_disjunctions_are_pushed_once_and_never_true_disjuncts_imply_nothing() {
    // Both predicates imply `xk = 1 OR xk = 2` (in different orders); the disjunct
    // `'a' = 'b' AND xk = 3` can never be true, so it does not widen the implication.
    assert_plan(
        &push(
            "SELECT * FROM (SELECT xk, sum(xd) AS s FROM x GROUP BY xk) g \
             WHERE ((xk = 1 AND s > 10) OR xk = 2) AND ((xk = 2 AND s > 5) OR xk = 1 OR ('a' = 'b' AND xk = 3))",
        ),
        "
        Project xk AS xk, sum(xd) AS sum(xd)
          Project xk AS xk, sum(xd) AS sum(xd)
            Filter ((xk = 1 AND sum(xd) > 10) OR (xk = 2)) AND ((xk = 2 AND sum(xd) > 5) OR ((xk = 1) OR ('a' = 'b' AND xk = 3)))
              Aggregate groups=[xk] aggregates=[sum(xd)]
                Scan x [xk, xd] filters=[(xk = 1) OR (xk = 2)]
        ",
    );
}

#[test]
fn not_below_an_aggregation_without_groups() {
    // A scalar aggregation has a row even over no input: `WHERE 1 = 0` must stay above it.
    assert_plan(
        &push("SELECT * FROM (SELECT count(*) AS c FROM x) g WHERE 1 = 0"),
        "
        Project count(*) AS count(*)
          Project count(*) AS count(*)
            Filter 1 = 0
              Aggregate groups=[] aggregates=[count(*)]
                Scan x [xk, xd]
        ",
    );
}

#[test]
fn into_every_input_of_a_union() {
    assert_plan(
        &push("SELECT * FROM (SELECT xk FROM x UNION ALL SELECT yd FROM y) u WHERE xk > 1"),
        "
        Project xk AS xk
          Union ALL (2 inputs)
            Project xk AS xk
              Scan x [xk, xd] filters=[xk > 1]
            Project yd AS yd
              Scan y [yd, ye] filters=[yd > 1]
        ",
    );
}

#[test]
fn nothing_is_pushed_across_a_recursion() {
    // A filter on the result is not one on each iteration's rows (they feed the next
    // iteration): it stays above the RecursiveCte, and the terms keep their own filters.
    let plan = db().plan(
        "WITH RECURSIVE r(n, d) AS (SELECT xk, xd FROM x WHERE xk < 3 UNION ALL SELECT n + 1, d FROM r WHERE n < 10) \
         SELECT n FROM r WHERE n > 5 AND d = 1",
        &[push_down_predicates::run],
    );
    assert_well_formed(&plan);
    // (The filter above the definition is the references' filters together, as for any
    // materialized CTE.)
    assert_plan(
        &plan.display_indent(),
        "
        Cte r (#0): definition, then body
          Filter n > 5 AND d = 1
            RecursiveCte r (#0) UNION ALL [n, d]: non-recursive term, then recursive term
              Project xk AS xk, xd AS xd
                Scan x [xk, xd] filters=[xk < 3]
              Project n + 1 AS n + 1, d AS d
                Filter n < 10
                  WorkTableScan r (#0) [n, d]
          Project n AS n
            Filter n > 5 AND d = 1
              CteScan r (#0) [n, d]
        ",
    );
}

#[test]
fn where_on_a_left_join_key_also_filters_the_null_extended_side() {
    // A y row with yd <= 5 could only match x rows with xd <= 5, which the WHERE removes.
    assert_plan(
        &push("SELECT xk FROM x LEFT JOIN y ON xd = yd WHERE xd > 5"),
        "
        Project xk AS xk
          Join LEFT ON xd = yd
            Scan x [xk, xd] filters=[xd > 5]
            Scan y [yd, ye] filters=[yd > 5]
        ",
    );
    // Not for NOT IN: a NULL on the right side decides for every left row.
    let plan = db()
        .explain("SELECT xk FROM x WHERE xd > 5 AND xd NOT IN (SELECT yd FROM y)", &[unnest_subqueries::run, push_down_predicates::run]);
    assert!(!plan.contains("yd > 5"), "{plan}");
}

#[test]
fn an_inner_join_condition_on_the_null_extended_side_makes_a_left_join_inner() {
    // A NULL-extended row has ye NULL: `ye = za` is never true for it.
    let plan = push("SELECT xk FROM x LEFT JOIN y ON xd = yd, z WHERE ye = za");
    assert!(plan.contains("Join INNER ON xd = yd") && !plan.contains("LEFT"), "{plan}");
    assert!(plan.contains("ye IS NOT NULL"), "{plan}");
    // coalesce(ye, 0) = za can be true for it: the join stays LEFT.
    let plan = push("SELECT xk FROM x LEFT JOIN y ON xd = yd, z WHERE coalesce(ye, 0) = za");
    assert!(plan.contains("Join LEFT ON xd = yd"), "{plan}");
}
