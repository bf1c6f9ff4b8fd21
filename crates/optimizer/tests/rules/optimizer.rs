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
