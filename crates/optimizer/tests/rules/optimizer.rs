//! The optimizer as a whole: rules run in order, each reports whether it changed the plan
//! (what EXPLAIN prints), disabled rules are skipped.

use apiary_common::ApiaryError;
use apiary_optimizer::{optimize, rule_names, OptimizerContext, RULES};

use crate::common::{TestDb, TestEvaluator};

fn db() -> TestDb {
    TestDb::new().table("t", 100, "t1, t2, t3").table("u", 10, "u1, u2")
}

fn changed(sql: &str) -> Vec<&'static str> {
    let (_, reports) = db().optimize(sql);
    assert_eq!(reports.len(), RULES.len(), "one report per rule run");
    reports.iter().filter(|r| r.changed).map(|r| r.rule).collect()
}

#[test]
fn reports_which_rules_changed_the_plan() {
    assert_eq!(changed("SELECT t1 FROM t WHERE t2 > 1 + 1"), ["fold_constants", "push_down_predicates", "prune_columns"]);
    assert_eq!(changed("SELECT t1 FROM t WHERE EXISTS (SELECT 1 FROM u WHERE u1 = t2)"), ["unnest_subqueries", "prune_columns"]);
}

#[test]
fn reports_no_change_when_there_is_nothing_to_do() {
    assert_eq!(changed("SELECT t1, t2, t3 FROM t"), Vec::<&str>::new());
}

#[test]
fn disabled_rules_are_skipped_except_unnesting() {
    let db = db();
    let (plan, next_column_id) = db.bind("SELECT t1 FROM t WHERE t2 IN (SELECT u1 FROM u) AND t3 > 1 + 1");
    let mut ctx = OptimizerContext::new(next_column_id, &TestEvaluator);
    ctx.disabled = rule_names().iter().map(|r| r.to_string()).collect();
    let (plan, reports) = optimize(plan, &mut ctx).expect("optimize");
    let ran: Vec<&str> = reports.iter().map(|r| r.rule).collect();
    assert_eq!(ran, ["unnest_subqueries"]);
    assert!(!plan.contains_subquery());
    assert!(plan.display_indent().contains("1 + 1"), "fold_constants ran:\n{plan}");
}

#[test]
fn a_subquery_left_after_unnesting_is_an_error() {
    let db = db();
    let (plan, next_column_id) = db.bind("SELECT t1 FROM t JOIN u ON t2 = u2 AND u1 IN (SELECT t3 FROM t)");
    let mut ctx = OptimizerContext::new(next_column_id, &TestEvaluator);
    let error = optimize(plan, &mut ctx);
    assert!(matches!(error, Err(ApiaryError::NotImplemented(_))), "{error:?}");
}

/// A predicate pushed into a UNION branch can become constant (the branch's literal column
/// compared with a constant): the branch is folded away, not run (TPC-DS Q04/Q11/Q74
/// evaluated a dozen dead branches).
#[test]
fn a_union_branch_that_a_pushed_down_predicate_rejects_is_removed() {
    let (plan, _) =
        db().optimize("SELECT k FROM (SELECT 1 AS s, t1 AS k FROM t, u WHERE t2 = u1 UNION ALL SELECT 2, u2 FROM u) x WHERE s = 2");
    let text = plan.display_indent();
    assert!(!text.contains("Scan t "), "the dead branch is still planned:\n{text}");
    assert!(text.contains("Scan u "), "{text}");
    // Both branches rejected: nothing is scanned.
    let (plan, _) = db().optimize("SELECT k FROM (SELECT 1 AS s, t1 AS k FROM t UNION ALL SELECT 2, u2 FROM u) x WHERE s = 3");
    assert!(!plan.display_indent().contains("Scan"), "{plan}");
}

/// Many uncorrelated scalar subqueries become a chain of single joins; computing a join's
/// output columns once per level keeps planning linear (it was exponential: 20 subqueries
/// took seconds, 40 would never finish).
#[test]
fn a_chain_of_forty_scalar_subqueries_plans() {
    let terms: Vec<String> = (0..40).map(|i| format!("(SELECT count(*) FROM u WHERE u1 > {i})")).collect();
    let (plan, _) = db().optimize(&format!("SELECT {} AS total FROM t", terms.join(" + ")));
    assert!(!plan.contains_subquery());
}

/// `d = (SELECT ...)` with an uncorrelated subquery filters the relation `d` belongs to
/// before it meets the others (TPC-DS Q06: a month of date_dim, not the joined fact
/// table): the subquery's one-row relation joins `u` first.
#[test]
fn a_comparison_with_an_uncorrelated_scalar_subquery_joins_where_it_filters() {
    let (plan, _) = db().optimize("SELECT t1 FROM t, u WHERE t2 = u1 AND u2 = (SELECT max(u2) FROM u)");
    crate::common::assert_plan(
        &plan.display_indent(),
        "
        Project t1 AS t1
          Join INNER ON t2 = u1
            Scan t [t1, t2]
            Join INNER ON u2 = max(u2)
              Scan u [u1, u2]
              Join SINGLE
                Values (1 rows)
                Project max(u2) AS max(u2)
                  Aggregate groups=[] aggregates=[max(u2)]
                    Scan u [u2]
        ",
    );
}
