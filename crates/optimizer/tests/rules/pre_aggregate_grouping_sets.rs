//! `pre_aggregate_grouping_sets`: a grouping-sets aggregation first groups its input by all
//! of its keys, then computes its sets from those groups, when its aggregates can be merged
//! and no key is nearly unique.

use apiary_optimizer::rules::pre_aggregate_grouping_sets;
use apiary_sql::LogicalPlan;

use crate::common::{assert_plan, find, Rule, TestDb};

const RULES: &[Rule] = &[pre_aggregate_grouping_sets::run];

fn db() -> TestDb {
    TestDb::new().table("t", 1000, "a, b, x")
}

fn aggregates(plan: &LogicalPlan) -> usize {
    find(plan, &|p| matches!(p, LogicalPlan::Aggregate { .. })).len()
}

#[test]
fn rollup_aggregates_the_finest_groups_first() {
    assert_plan(
        &db().explain("SELECT a % 10, b % 3, sum(x), avg(x), count(*), count(x), min(x) FROM t GROUP BY ROLLUP(a % 10, b % 3)", RULES),
        "
        Project a % 10 AS a % 10, b % 3 AS b % 3, sum(x) AS sum(x), avg(x) AS avg(x), count(*) AS count(*), count(x) AS count(x), min(x) AS min(x)
          Project a % 10 AS a % 10, b % 3 AS b % 3, grouping_set AS grouping_set, sum AS sum(x), average_of(sum, count) AS avg(x), coalesce(count, 0) AS count(*), coalesce(count, 0) AS count(x), min AS min(x)
            Aggregate groups=[a % 10, b % 3] sets=[(0, 1), (0), ()] aggregates=[sum(sum), sum(sum), sum(count), sum(count), sum(count), min(min)]
              Aggregate groups=[a % 10, b % 3] aggregates=[sum(x), sum(x), count(x), count(*), count(x), min(x)]
                Scan t [a, b, x]
        ",
    );
}

#[test]
fn not_when_an_aggregate_cannot_be_merged() {
    for call in ["count(DISTINCT x)", "sum(DISTINCT x)", "string_agg(x::varchar, ',' ORDER BY x)", "median(x)", "stddev(x)"] {
        let plan = db().plan(&format!("SELECT a % 10, {call} FROM t GROUP BY ROLLUP(a % 10)"), RULES);
        assert_eq!(aggregates(&plan), 1, "{call}: {plan}");
    }
    // min/max of the distinct values are min/max.
    let plan = db().plan("SELECT a % 10, max(DISTINCT x) FROM t GROUP BY ROLLUP(a % 10)", RULES);
    assert_eq!(aggregates(&plan), 2, "{plan}");
}

#[test]
fn not_when_a_key_is_nearly_unique() {
    // Every value of `a` is its own group: the pre-aggregation would keep every row.
    let plan = db().plan("SELECT a, b % 3, sum(x) FROM t GROUP BY ROLLUP(a, b % 3)", RULES);
    assert_eq!(aggregates(&plan), 1, "{plan}");
}

#[test]
fn not_without_grouping_sets() {
    let plan = db().plan("SELECT a % 10, sum(x) FROM t GROUP BY a % 10", RULES);
    assert_eq!(aggregates(&plan), 1, "{plan}");
}
