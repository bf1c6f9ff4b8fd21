//! `unnest_subqueries`: every subquery becomes a join (semi, anti, mark, single, or a left
//! join with a grouped aggregation); nothing is evaluated once per outer row.

use apiary_common::ApiaryError;
use apiary_optimizer::rules::unnest_subqueries;
use apiary_sql::{JoinKind, LogicalPlan};

use crate::common::{assert_plan, find, TestDb};

/// o(ok NOT NULL, ov), i(ik NOT NULL, iv NOT NULL), n(nk, nv): n's columns are nullable.
fn db() -> TestDb {
    TestDb::new().table("o", 1000, "ok NOT NULL, ov").table("i", 100, "ik NOT NULL, iv NOT NULL").table("n", 100, "nk, nv")
}

fn unnest(sql: &str) -> String {
    let plan = db().plan(sql, &[unnest_subqueries::run]);
    assert!(!plan.contains_subquery(), "{plan}");
    plan.display_indent()
}

fn joins_of_kind(plan: &LogicalPlan, kind: JoinKind) -> usize {
    find(plan, &|p| matches!(p, LogicalPlan::Join { kind: k, .. } if *k == kind)).len()
}

#[test]
fn exists_becomes_a_semi_join_on_the_correlation() {
    assert_plan(
        &unnest("SELECT ok FROM o WHERE EXISTS (SELECT 1 FROM i WHERE ik = ok AND iv > 3)"),
        "
        Project ok AS ok
          Join SEMI ON ik = ok
            Scan o [ok, ov]
            Project 1 AS 1, ik AS ik
              Filter iv > 3
                Scan i [ik, iv]
        ",
    );
}

#[test]
fn not_exists_becomes_an_anti_join() {
    assert_plan(
        &unnest("SELECT ok FROM o WHERE NOT EXISTS (SELECT 1 FROM i WHERE ik = ok)"),
        "
        Project ok AS ok
          Join ANTI ON ik = ok
            Scan o [ok, ov]
            Project 1 AS 1, ik AS ik
              Scan i [ik, iv]
        ",
    );
}

#[test]
fn in_becomes_a_semi_join_on_the_equality() {
    assert_plan(
        &unnest("SELECT ok FROM o WHERE ok IN (SELECT ik FROM i)"),
        "
        Project ok AS ok
          Join SEMI ON ok = ik
            Scan o [ok, ov]
            Project ik AS ik
              Scan i [ik, iv]
        ",
    );
}

#[test]
fn not_in_without_nulls_is_a_plain_anti_join() {
    assert_plan(
        &unnest("SELECT ok FROM o WHERE ok NOT IN (SELECT ik FROM i)"),
        "
        Project ok AS ok
          Join ANTI ON ok = ik
            Scan o [ok, ov]
            Project ik AS ik
              Scan i [ik, iv]
        ",
    );
}

#[test]
fn not_in_over_nullable_values_is_null_aware() {
    // `x NOT IN (1, NULL)` is never TRUE: a plain anti join would keep x = 2.
    assert_plan(
        &unnest("SELECT ok FROM o WHERE ov NOT IN (SELECT nv FROM n)"),
        "
        Project ok AS ok
          Project ok AS ok, ov AS ov
            Join NULL-AWARE ANTI ON ov = nv
              Scan o [ok, ov]
              Project nv AS nv
                Scan n [nk, nv]
        ",
    );
}

#[test]
fn constant_not_in_keeps_its_key_in_the_join() {
    // Issue 10: `5 NOT IN (SELECT b FROM y)` with y = {1, NULL} is NULL, not TRUE. The
    // constant becomes a column so the key equality belongs to the join, not the subquery.
    assert_plan(
        &unnest("SELECT ok FROM o WHERE 5 NOT IN (SELECT nv FROM n)"),
        "
        Project ok AS ok
          Project ok AS ok, ov AS ov
            Join NULL-AWARE ANTI ON in_operand = nv
              Project ok AS ok, ov AS ov, 5 AS in_operand
                Scan o [ok, ov]
              Project nv AS nv
                Scan n [nk, nv]
        ",
    );
}

#[test]
fn correlated_not_in_over_nullable_values_matches_nulls_explicitly() {
    // x NOT IN (correlated S) == NOT EXISTS (s in S: s = x OR s IS NULL OR x IS NULL).
    assert_plan(
        &unnest("SELECT ok FROM o WHERE ov NOT IN (SELECT nv FROM n WHERE nk = ok)"),
        "
        Project ok AS ok
          Join ANTI ON ((ov = nv) OR (nv IS NULL OR ov IS NULL)) AND nk = ok
            Scan o [ok, ov]
            Project nv AS nv, nk AS nk
              Scan n [nk, nv]
        ",
    );
}

#[test]
fn correlated_count_becomes_a_grouped_left_join_that_counts_zero_for_no_rows() {
    // No group for an outer row means the subquery counted no rows: 0, not NULL.
    assert_plan(
        &unnest("SELECT ok, (SELECT count(*) FROM i WHERE ik = ok) AS c FROM o"),
        "
        Project ok AS ok, CASE WHEN correlation_key IS NULL THEN 0 ELSE count(*) END AS c
          Join LEFT ON correlation_key = ok
            Scan o [ok, ov]
            Project count(*) AS count(*), correlation_key AS correlation_key
              Aggregate groups=[ik] aggregates=[count(*)]
                Scan i [ik, iv]
        ",
    );
}

#[test]
fn correlated_sum_over_no_rows_stays_null() {
    assert_plan(
        &unnest("SELECT ok, (SELECT sum(iv) FROM i WHERE ik = ok) AS s FROM o"),
        "
        Project ok AS ok, sum(iv) AS s
          Join LEFT ON correlation_key = ok
            Scan o [ok, ov]
            Project sum(iv) AS sum(iv), correlation_key AS correlation_key
              Aggregate groups=[ik] aggregates=[sum(iv)]
                Scan i [ik, iv]
        ",
    );
}

#[test]
fn scalar_subquery_without_aggregation_is_a_single_join() {
    // A left join would duplicate the outer row when two rows match; SQL raises an error.
    assert_plan(
        &unnest("SELECT ok, (SELECT iv FROM i WHERE ik = ok) AS v FROM o"),
        "
        Project ok AS ok, iv AS v
          Join SINGLE ON ik = ok
            Scan o [ok, ov]
            Project iv AS iv, ik AS ik
              Scan i [ik, iv]
        ",
    );
}

/// An uncorrelated scalar subquery is one row (its value, NULL without rows, an error
/// with several) cross-joined to the input: one more relation of the input's inner joins,
/// which join ordering can place where the comparison with it is selective.
#[test]
fn uncorrelated_scalar_subquery_is_a_one_row_relation_joined_to_the_input() {
    assert_plan(
        &unnest("SELECT ok FROM o WHERE ov > (SELECT max(iv) FROM i)"),
        "
        Project ok AS ok
          Filter ov > max(iv)
            Join INNER
              Scan o [ok, ov]
              Join SINGLE
                Values (1 rows)
                Project max(iv) AS max(iv)
                  Aggregate groups=[] aggregates=[max(iv)]
                    Scan i [ik, iv]
        ",
    );
}

#[test]
fn exists_used_as_a_value_becomes_a_mark_join() {
    assert_plan(
        &unnest("SELECT ok FROM o WHERE ov = 1 OR EXISTS (SELECT 1 FROM i WHERE ik = ok)"),
        "
        Project ok AS ok
          Filter (ov = 1) OR exists
            Join MARK ON ik = ok
              Scan o [ok, ov]
              Project 1 AS 1, ik AS ik
                Scan i [ik, iv]
        ",
    );
}

#[test]
fn in_over_nullable_values_used_as_a_value_is_a_null_aware_mark_join() {
    let plan = db().plan("SELECT ov IN (SELECT nv FROM n) AS m FROM o", &[unnest_subqueries::run]);
    assert_eq!(joins_of_kind(&plan, JoinKind::Mark { null_aware: true }), 1, "{plan}");
    let plan = db().plan("SELECT ok IN (SELECT ik FROM i) AS m FROM o", &[unnest_subqueries::run]);
    assert_eq!(joins_of_kind(&plan, JoinKind::Mark { null_aware: false }), 1, "{plan}");
}

#[test]
fn exists_ignores_limit_and_order_by() {
    let plan = db().plan("SELECT ok FROM o WHERE EXISTS (SELECT 1 FROM i WHERE ik > ok ORDER BY iv LIMIT 3)", &[unnest_subqueries::run]);
    assert!(find(&plan, &|p| matches!(p, LogicalPlan::Limit { .. } | LogicalPlan::Sort { .. })).is_empty(), "{plan}");
    assert_eq!(joins_of_kind(&plan, JoinKind::Semi), 1, "{plan}");
}

#[test]
fn exists_keeps_limit_zero() {
    // EXISTS over `LIMIT 0` is FALSE whatever the rows are.
    let plan = db().plan("SELECT ok FROM o WHERE EXISTS (SELECT 1 FROM i LIMIT 0)", &[unnest_subqueries::run]);
    assert_eq!(find(&plan, &|p| matches!(p, LogicalPlan::Limit { limit: Some(0), .. })).len(), 1, "{plan}");
}

#[test]
fn exists_over_an_aggregation_without_groups_keeps_every_row() {
    // A scalar aggregation has a row for every outer row, matching or not: the EXISTS is
    // always TRUE, so the plan must not be a semi join on the correlation `ik = ok`.
    for sql in [
        "SELECT ok FROM o WHERE EXISTS (SELECT count(*) FROM i WHERE ik = ok)",
        "SELECT ok FROM o WHERE EXISTS (SELECT sum(iv) FROM i WHERE ik = ok)",
    ] {
        let plan = db().plan(sql, &[unnest_subqueries::run]);
        let semi = find(&plan, &|p| matches!(p, LogicalPlan::Join { kind: JoinKind::Semi, .. }));
        assert_eq!(semi.len(), 1, "{sql}:\n{plan}");
        let LogicalPlan::Join { condition: Some(condition), .. } = semi[0] else { panic!("{plan}") };
        assert_eq!(condition.to_string(), "ok IS NOT DISTINCT FROM ok", "{sql}:\n{plan}");
    }
}

#[test]
fn correlated_aggregate_with_having_filters_after_aggregating() {
    // With no matching rows, count(*) = 0 and HAVING count(*) > 1 removes the row: NULL.
    // The HAVING must not be applied to a value that was never computed for the outer row.
    let plan = db().plan("SELECT ok, (SELECT count(*) FROM i WHERE ik = ok HAVING count(*) > 1) AS c FROM o", &[unnest_subqueries::run]);
    assert!(!plan.contains_subquery(), "{plan}");
    let filters = find(&plan, &|p| matches!(p, LogicalPlan::Filter { predicate, .. } if predicate.to_string().contains("count(*) > 1")));
    assert_eq!(filters.len(), 1, "{plan}");
    let LogicalPlan::Filter { input, .. } = filters[0] else { unreachable!() };
    assert!(matches!(input.as_ref(), LogicalPlan::Aggregate { .. }), "HAVING is not on the aggregation:\n{plan}");
}

#[test]
fn scalar_distinct_subquery_groups_by_the_correlation() {
    // One row per distinct value and outer row: more than one is an error (single join).
    assert_plan(
        &unnest("SELECT ok, (SELECT DISTINCT iv FROM i WHERE ik = ok) AS v FROM o"),
        "
        Project ok AS ok, iv AS v
          Join SINGLE ON correlation_key = ok
            Scan o [ok, ov]
            Aggregate groups=[iv, ik] aggregates=[]
              Project iv AS iv, ik AS ik
                Scan i [ik, iv]
        ",
    );
}

#[test]
fn nested_subqueries_unnest_inside_out() {
    let plan = db().plan(
        "SELECT ok FROM o WHERE EXISTS (SELECT 1 FROM i WHERE ik = ok AND iv IN (SELECT nv FROM n WHERE nk > 5))",
        &[unnest_subqueries::run],
    );
    assert!(!plan.contains_subquery(), "{plan}");
    assert_eq!(joins_of_kind(&plan, JoinKind::Semi), 2, "{plan}");
}

#[test]
fn non_equality_correlation_under_an_aggregate_is_decorrelated() {
    // Issue 10: refused before; now the general path (see decorrelate.rs).
    let plan = db().plan("SELECT ok, (SELECT count(*) FROM i WHERE ik > ok) AS c FROM o", &[unnest_subqueries::run]);
    assert!(!plan.contains_subquery(), "{plan}");
    assert_eq!(joins_of_kind(&plan, JoinKind::Single), 1, "{plan}");
}

#[test]
fn subqueries_reading_only_outer_columns_plan() {
    // Issue 10 (item 8): "column X (#N) is not in the input".
    let db = db();
    for sql in [
        "SELECT (SELECT sum(o1.ov)) AS s FROM o o1",
        "SELECT ok, (SELECT o.ov) AS v FROM o, i WHERE ok = ik",
        "SELECT EXISTS (SELECT ik FROM i WHERE ik = ok) AS g, count(*) AS c FROM o GROUP BY g",
    ] {
        let plan = db.plan(sql, &[unnest_subqueries::run]);
        assert!(!plan.contains_subquery(), "{sql}:\n{plan}");
    }
}

#[test]
fn subquery_in_a_join_condition_is_refused_cleanly() {
    let error = db().try_plan("SELECT ok FROM o JOIN i ON ik = ok AND EXISTS (SELECT 1 FROM n WHERE nk = ik)", &[unnest_subqueries::run]);
    assert!(matches!(error, Err(ApiaryError::NotImplemented(_))), "{error:?}");
}

#[test]
fn a_lateral_subquery_correlated_by_equality_becomes_a_join_on_it() {
    // `FROM o, LATERAL (... WHERE ik = ok)`: the correlated predicate is pulled out of the
    // right side into the join condition; no domain of outer values is needed.
    assert_plan(
        &unnest("SELECT ok, s.iv FROM o, LATERAL (SELECT iv FROM i WHERE ik = ok AND iv > 3) s"),
        "
        Project ok AS ok, iv AS iv
          Project ok AS ok, ov AS ov, iv AS iv
            Join INNER ON ik = ok
              Scan o [ok, ov]
              Project iv AS iv, ik AS ik
                Filter iv > 3
                  Scan i [ik, iv]
        ",
    );
}

#[test]
fn a_left_lateral_join_stays_a_left_join() {
    let plan =
        db().plan("SELECT ok, s.iv FROM o LEFT JOIN LATERAL (SELECT iv FROM i WHERE ik = ok) s ON s.iv > 1", &[unnest_subqueries::run]);
    assert_eq!(joins_of_kind(&plan, JoinKind::Left), 1, "{plan}");
    assert_eq!(joins_of_kind(&plan, JoinKind::Inner), 0, "{plan}");
    // An aggregate (one row per left row, also without matches) needs the general rewrite.
    let plan = db()
        .plan("SELECT ok, s.n FROM o LEFT JOIN LATERAL (SELECT count(*) AS n FROM i WHERE ik > ok) s ON true", &[unnest_subqueries::run]);
    let text = plan.display_indent();
    assert!(text.contains("Join LEFT ON ok IS NOT DISTINCT FROM ok"), "{text}");
    assert!(plan.free_columns().is_empty(), "{text}");
}

#[test]
fn a_correlated_limit_numbers_the_rows_of_each_outer_value() {
    // Top-1 per outer row: row_number() partitioned by the outer values, in the ORDER BY's
    // order, kept when it is 1; no LIMIT is left.
    let plan = db().plan("SELECT ok, (SELECT iv FROM i WHERE ik = ok ORDER BY iv DESC LIMIT 1) AS top FROM o", &[unnest_subqueries::run]);
    let text = plan.display_indent();
    assert!(find(&plan, &|p| matches!(p, LogicalPlan::Limit { .. })).is_empty(), "{text}");
    assert!(text.contains("Window row_number() OVER (PARTITION BY ok ORDER BY iv DESC)"), "{text}");
    assert!(text.contains("Filter row_number > 0 AND row_number <= 1"), "{text}");
    // With an offset and no ORDER BY.
    let plan =
        db().plan("SELECT ok, (SELECT count(*) FROM (SELECT 1 FROM i WHERE ik = ok LIMIT 3 OFFSET 2) s) FROM o", &[unnest_subqueries::run]);
    let text = plan.display_indent();
    assert!(text.contains("Filter row_number > 2 AND row_number <= 5"), "{text}");
}
