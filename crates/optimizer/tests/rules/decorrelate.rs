//! `decorrelate` (used by `unnest_subqueries` for what its pull-up rewrites cannot
//! express): the dependent join is pushed down to where the outer columns are read, over
//! D = the distinct outer values from a fresh copy of the outer plan.

use apiary_common::ApiaryError;
use apiary_optimizer::rules::unnest_subqueries;
use apiary_sql::{JoinKind, LogicalPlan};

use crate::common::{assert_plan, find, TestDb};

/// o(ok NOT NULL, ov), i(ik NOT NULL, iv NOT NULL), n(nk, nv): n's columns are nullable.
fn db() -> TestDb {
    TestDb::new().table("o", 1000, "ok NOT NULL, ov").table("i", 100, "ik NOT NULL, iv NOT NULL").table("n", 100, "nk, nv")
}

fn unnest(sql: &str) -> LogicalPlan {
    let plan = db().plan(sql, &[unnest_subqueries::run]);
    assert!(!plan.contains_subquery(), "{plan}");
    plan
}

fn count(plan: &LogicalPlan, f: &dyn Fn(&LogicalPlan) -> bool) -> usize {
    find(plan, f).len()
}

/// Aggregations without aggregates: the DISTINCT that computes D.
fn domains(plan: &LogicalPlan) -> usize {
    count(plan, &|p| matches!(p, LogicalPlan::Aggregate { aggregates, .. } if aggregates.is_empty()))
}

#[test]
fn scalar_aggregate_with_a_non_equality_correlation() {
    // Issue 10: `SELECT c, (SELECT count(*) FROM t1 x WHERE x.c > t1.c) FROM t1`. The count
    // is computed per distinct outer value over D ⟕ input, so a value without rows gets 0.
    assert_plan(
        &unnest("SELECT ok, (SELECT count(*) FROM i WHERE ik > ok) AS c FROM o").display_indent(),
        "
        Project ok AS ok, count(*) AS c
          Join SINGLE ON ok IS NOT DISTINCT FROM ok
            Scan o [ok, ov]
            Project count(*) AS count(*), ok AS ok
              Aggregate groups=[ok] aggregates=[count(present) FILTER (WHERE NOT (present IS NULL))]
                Join LEFT ON ok IS NOT DISTINCT FROM ok
                  Aggregate groups=[ok] aggregates=[]
                    Scan o [ok, ov]
                  Project ik AS ik, iv AS iv, ok AS ok, true AS present
                    Filter ik > ok
                      Join INNER
                        Scan i [ik, iv]
                        Aggregate groups=[ok] aggregates=[]
                          Scan o [ok, ov]
        ",
    );
}

#[test]
fn the_outer_plan_is_copied_with_fresh_columns() {
    // The three scans of o produce different column ids (assert_well_formed checks that no
    // id is produced twice); the domains read the copies, not the outer scan.
    let plan = unnest("SELECT ok, (SELECT count(*) FROM i WHERE ik > ok) AS c FROM o");
    let scans: Vec<_> =
        find(&plan, &|p| matches!(p, LogicalPlan::Scan(s) if s.table.name == "o")).into_iter().map(|p| p.output()[0].id).collect();
    assert_eq!(scans.len(), 3, "{plan}");
    assert!(scans[0] != scans[1] && scans[1] != scans[2] && scans[0] != scans[2], "{plan}");
}

#[test]
fn the_domain_comes_from_the_same_rows_as_the_outer_plan() {
    // `ORDER BY ov LIMIT 5` over ties (or a LIMIT over a hash aggregation's output) may keep
    // other rows in each evaluation; D from a second evaluation then misses outer values,
    // and the single join gives them NULL (a count that is NULL). So the outer plan is
    // computed once, as a materialized CTE that the join and D both read (was refused).
    let sql = "SELECT o2.ok, (SELECT count(*) FROM i WHERE ik > o2.ok) AS c FROM (SELECT ok FROM o ORDER BY ov LIMIT 5) o2";
    let plan = unnest(sql);
    assert_eq!(count(&plan, &|p| matches!(p, LogicalPlan::Limit { .. })), 1, "{plan}");
    let ctes = find(&plan, &|p| matches!(p, LogicalPlan::Cte { .. }));
    assert_eq!(ctes.len(), 1, "{plan}");
    let LogicalPlan::Cte { id, .. } = ctes[0] else { unreachable!("matched above") };
    let reads = count(&plan, &|p| matches!(p, LogicalPlan::CteScan(scan) if scan.id == *id));
    assert!(reads >= 2, "the join and D (here twice) read the one evaluation: {plan}");
    // Also for a LATERAL subquery over a FROM item with LIMIT.
    let plan =
        unnest("SELECT x.ok, s.n FROM (SELECT ok FROM o ORDER BY ov LIMIT 5) x, LATERAL (SELECT count(*) AS n FROM i WHERE ik > x.ok) s");
    assert_eq!(count(&plan, &|p| matches!(p, LogicalPlan::Limit { .. })), 1, "{plan}");
    assert_eq!(count(&plan, &|p| matches!(p, LogicalPlan::Cte { .. })), 1, "{plan}");
    // An outer plan that reads an enclosing query's columns cannot be a CTE: still refused.
    let sql = "SELECT (SELECT sum(s.n) FROM (SELECT ok FROM o WHERE ov = n.nv ORDER BY ov LIMIT 2) x, \
               LATERAL (SELECT count(*) AS n FROM i WHERE ik > x.ok) s) FROM n";
    assert!(matches!(db().try_plan(sql, &[unnest_subqueries::run]), Err(ApiaryError::NotImplemented(_))));
}

#[test]
fn several_correlated_columns_join_on_all_of_them() {
    // Outer columns in an aggregate's argument (only the general rewrite handles them).
    let plan = unnest("SELECT ok, (SELECT max(iv + ov) FROM i WHERE ik = ok) AS m FROM o");
    let top = find(&plan, &|p| matches!(p, LogicalPlan::Join { kind: JoinKind::Single | JoinKind::Left, .. }))[0];
    let LogicalPlan::Join { condition: Some(condition), .. } = top else { panic!("{plan}") };
    assert_eq!(condition.to_string(), "ok IS NOT DISTINCT FROM ok AND ov IS NOT DISTINCT FROM ov", "{plan}");
}

#[test]
fn correlation_inside_a_join_of_the_subquery() {
    let plan = unnest("SELECT ok, (SELECT count(*) FROM i JOIN n ON ik = nk AND nv > ov) AS c FROM o");
    assert!(domains(&plan) >= 1, "{plan}");
}

#[test]
fn correlation_inside_a_union_of_the_subquery() {
    let plan = unnest(
        "SELECT ok, (SELECT count(*) FROM (SELECT ik AS v FROM i WHERE ik > ok UNION ALL SELECT nk FROM n WHERE nk > ok) u) AS c FROM o",
    );
    // D reaches both inputs of the union.
    assert!(domains(&plan) >= 2, "{plan}");
}

#[test]
fn correlated_in_over_nullable_values_used_as_a_value() {
    // Issue 10: three-valued IN per outer row, as a scalar aggregate over the subquery.
    let plan = unnest("SELECT ok, ov IN (SELECT nv FROM n WHERE nk = ok) AS m FROM o");
    let text = plan.display_indent();
    assert!(text.contains("bool_or(nv = ov)") && text.contains("bool_or(nv IS NULL)"), "{text}");
}

#[test]
fn correlation_two_levels_up() {
    let plan =
        unnest("SELECT ok FROM o WHERE EXISTS (SELECT 1 FROM i WHERE ik > ok AND EXISTS (SELECT 1 FROM n WHERE nk > ik AND nv < ok))");
    assert!(count(&plan, &|p| matches!(p, LogicalPlan::Join { kind: JoinKind::Semi, .. })) >= 1, "{plan}");
}

#[test]
fn refuses_a_correlation_inside_a_full_join_cleanly() {
    let error =
        db().try_plan("SELECT ok, (SELECT count(*) FROM i FULL JOIN n ON ik = nk AND nv > ov) AS c FROM o", &[unnest_subqueries::run]);
    assert!(matches!(error, Err(ApiaryError::NotImplemented(_))), "{error:?}");
}

#[test]
fn a_correlated_limit_numbers_the_rows_of_each_domain_value() {
    // Was refused ("correlated subquery with LIMIT"): the first row per outer value is
    // row_number() OVER (PARTITION BY the domain column ORDER BY iv) = 1.
    let plan = unnest("SELECT ok, (SELECT iv FROM i WHERE ik > ok ORDER BY iv LIMIT 1) AS v FROM o");
    assert_eq!(count(&plan, &|p| matches!(p, LogicalPlan::Limit { .. })), 0, "{plan}");
    assert_eq!(count(&plan, &|p| matches!(p, LogicalPlan::Window { .. })), 1, "{plan}");
    assert_eq!(domains(&plan), 1, "{plan}");
}
