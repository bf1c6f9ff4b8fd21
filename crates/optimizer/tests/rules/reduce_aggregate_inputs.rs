//! `reduce_aggregate_inputs`: an aggregation joined on its group keys with a much smaller
//! relation computes only the groups that can join (semi join of its input with a copy of
//! that relation).

use apiary_optimizer::rules::{push_down_predicates, reduce_aggregate_inputs, unnest_subqueries};
use apiary_sql::{JoinKind, LogicalPlan};

use crate::common::{assert_plan, find, Rule, TestDb};

const RULES: &[Rule] = &[unnest_subqueries::run, push_down_predicates::run, reduce_aggregate_inputs::run];

/// part (1,000 rows) and line (2,000 rows), as in TPC-H Q17.
fn db() -> TestDb {
    TestDb::new().table("part", 1000, "pk, pv").table("line", 2000, "lk, lq")
}

const AVERAGE_PER_KEY: &str = "(SELECT lk AS k, avg(lq) AS a FROM line GROUP BY lk) agg";

fn semi_joins(plan: &LogicalPlan) -> usize {
    find(plan, &|p| matches!(p, LogicalPlan::Join { kind: JoinKind::Semi, .. })).len()
}

#[test]
fn aggregation_computes_only_the_groups_that_join() {
    assert_plan(
        &db().explain(&format!("SELECT pk, a FROM part, {AVERAGE_PER_KEY} WHERE pk = k AND pv < 10"), RULES),
        "
        Project pk AS pk, avg(lq) AS avg(lq)
          Join INNER ON pk = lk
            Scan part [pk, pv] filters=[pv < 10]
            Project lk AS lk, avg(lq) AS avg(lq)
              Aggregate groups=[lk] aggregates=[avg(lq)]
                Join SEMI ON lk = pk
                  Scan line [lk, lq]
                  Scan part [pk, pv] filters=[pv < 10]
        ",
    );
}

#[test]
fn also_for_the_null_extended_side_of_a_left_join() {
    let plan = db().plan(&format!("SELECT pk, a FROM part LEFT JOIN {AVERAGE_PER_KEY} ON pk = k WHERE pv < 10"), RULES);
    assert_eq!(semi_joins(&plan), 1, "{plan}");
}

#[test]
fn not_for_the_preserved_side_of_an_outer_join() {
    // Every group appears in the result of a RIGHT join: none may be dropped.
    let plan = db().plan(&format!("SELECT pk, a FROM (SELECT * FROM part WHERE pv < 10) p RIGHT JOIN {AVERAGE_PER_KEY} ON pk = k"), RULES);
    assert_eq!(semi_joins(&plan), 0, "{plan}");
    let plan = db().plan(&format!("SELECT pk, a FROM {AVERAGE_PER_KEY} LEFT JOIN (SELECT * FROM part WHERE pv < 10) p ON pk = k"), RULES);
    assert_eq!(semi_joins(&plan), 0, "{plan}");
}

#[test]
fn not_when_joined_on_an_aggregate_value() {
    let plan = db().plan(&format!("SELECT pk, a FROM part, {AVERAGE_PER_KEY} WHERE pk = a AND pv < 10"), RULES);
    assert_eq!(semi_joins(&plan), 0, "{plan}");
}

#[test]
fn not_when_the_other_side_is_not_much_smaller() {
    // 1,000 part rows against 2,000 aggregated rows: the semi join would cost more than it saves.
    let plan = db().plan(&format!("SELECT pk, a FROM part, {AVERAGE_PER_KEY} WHERE pk = k"), RULES);
    assert_eq!(semi_joins(&plan), 0, "{plan}");
}

#[test]
fn applying_it_twice_changes_nothing_more() {
    let db = db();
    let once = db.plan(&format!("SELECT pk, a FROM part, {AVERAGE_PER_KEY} WHERE pk = k AND pv < 10"), RULES);
    let twice = reduce_aggregate_inputs::run(once.clone(), &mut db.context()).expect("reduce");
    assert_eq!(once.display_indent(), twice.display_indent());
}
