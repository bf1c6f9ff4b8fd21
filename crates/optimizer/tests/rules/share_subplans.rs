//! `share_subplans`: an aggregating subplan that occurs more than once is computed once,
//! as a materialized CTE every occurrence reads.

use apiary_optimizer::rules::{prune_columns, push_down_predicates, share_subplans, unnest_subqueries};
use apiary_sql::LogicalPlan;

use crate::common::{find, Rule, TestDb};

const RULES: &[Rule] = &[unnest_subqueries::run, push_down_predicates::run, share_subplans::run, prune_columns::run];

fn db() -> TestDb {
    TestDb::new().table("sales", 1000, "store MOD 10, item MOD 100, price, day MOD 50").table("dates", 50, "dk, month MOD 12")
}

fn ctes(plan: &LogicalPlan) -> usize {
    find(plan, &|p| matches!(p, LogicalPlan::Cte { .. })).len()
}

fn cte_scans(plan: &LogicalPlan) -> usize {
    find(plan, &|p| matches!(p, LogicalPlan::CteScan(_))).len()
}

/// TPC-DS Q65's shape: each store's average over items, and the items to compare with it,
/// from the same (store, item) revenue subquery written twice.
const REVENUE: &str =
    "(SELECT store, item, sum(price) AS revenue FROM sales, dates WHERE day = dk AND month BETWEEN 1 AND 3 GROUP BY store, item)";

#[test]
fn the_same_aggregation_written_twice_is_computed_once() {
    let sql = format!(
        "SELECT sc.store, sc.item FROM (SELECT store, avg(revenue) AS ave FROM {REVENUE} sa GROUP BY store) sb, {REVENUE} sc \
         WHERE sb.store = sc.store AND sc.revenue <= 0.1 * sb.ave"
    );
    let plan = db().plan(&sql, RULES);
    assert_eq!(ctes(&plan), 1, "{}", plan.display_indent());
    assert_eq!(cte_scans(&plan), 2, "{}", plan.display_indent());
    // The sales are scanned once, in the definition.
    assert_eq!(find(&plan, &|p| matches!(p, LogicalPlan::Scan(s) if s.table.name == "sales")).len(), 1, "{}", plan.display_indent());
}

#[test]
fn occurrences_that_differ_are_left_alone() {
    for other in [
        // Another constant, another aggregate, another grouping.
        "(SELECT store, item, sum(price) AS revenue FROM sales, dates WHERE day = dk AND month BETWEEN 1 AND 4 GROUP BY store, item)",
        "(SELECT store, item, max(price) AS revenue FROM sales, dates WHERE day = dk AND month BETWEEN 1 AND 3 GROUP BY store, item)",
        "(SELECT store, day AS item, sum(price) AS revenue FROM sales, dates WHERE day = dk AND month BETWEEN 1 AND 3 GROUP BY store, day)",
    ] {
        let sql = format!("SELECT a.store FROM {REVENUE} a, {other} b WHERE a.store = b.store AND a.item = b.item");
        let plan = db().plan(&sql, RULES);
        assert_eq!(ctes(&plan), 0, "{other}\n{}", plan.display_indent());
    }
}

#[test]
fn scans_and_joins_without_aggregation_are_not_shared() {
    let plan = db().plan(
        "SELECT a.store FROM (SELECT store, item FROM sales, dates WHERE day = dk) a, (SELECT store, item FROM sales, dates WHERE day = dk) b \
         WHERE a.store = b.item",
        RULES,
    );
    assert_eq!(ctes(&plan), 0, "{}", plan.display_indent());
}

#[test]
fn correlated_occurrences_are_not_shared() {
    // The subquery reads the outer row's store: decorrelated, it joins the outer rows,
    // so its two occurrences differ; nothing reading an outer column is moved to a CTE.
    let plan = db().plan(
        "SELECT store FROM sales s WHERE price > (SELECT avg(price) FROM sales WHERE store = s.store) \
         AND item > (SELECT avg(price) FROM sales WHERE store = s.store)",
        RULES,
    );
    for cte in find(&plan, &|p| matches!(p, LogicalPlan::Cte { .. })) {
        let LogicalPlan::Cte { definition, .. } = cte else { unreachable!() };
        assert!(definition.free_columns().is_empty(), "{}", plan.display_indent());
    }
}

#[test]
fn applying_it_twice_changes_nothing_more() {
    let sql = format!("SELECT a.store FROM {REVENUE} a, {REVENUE} b WHERE a.store = b.store AND a.item = b.item");
    let db = db();
    let once = db.plan(&sql, RULES);
    let twice = share_subplans::run(once.clone(), &mut db.context()).expect("share_subplans");
    assert_eq!(once.display_indent(), twice.display_indent());
}
