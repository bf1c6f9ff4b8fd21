//! `reorder_joins`: trees of inner joins are re-planned by estimated cost (dynamic
//! programming up to 12 relations, greedy beyond); the smaller input of each join goes on
//! the right (the build side); cross products only where the join graph is disconnected.

use std::collections::BTreeSet;

use apiary_common::ApiaryError;
use apiary_optimizer::cardinality::estimate;
use apiary_optimizer::rules::reorder_joins::{self, MAX_JOIN_RELATIONS};
use apiary_optimizer::rules::{push_down_predicates, unnest_subqueries};
use apiary_sql::expr::{BinaryOp, Expr};
use apiary_sql::{JoinKind, LogicalPlan};

use crate::common::{find, Rule, TestDb};

const RULES: &[Rule] = &[unnest_subqueries::run, push_down_predicates::run, reorder_joins::run];

/// A fact table and three dimensions of different sizes.
fn db() -> TestDb {
    TestDb::new().table("f", 1000, "f1, f2, f3").table("d1", 100, "a1").table("d2", 10, "b1").table("d3", 50, "c1")
}

fn inner_joins(plan: &LogicalPlan) -> Vec<&LogicalPlan> {
    find(plan, &|p| matches!(p, LogicalPlan::Join { kind: JoinKind::Inner, .. }))
}

fn cross_products(plan: &LogicalPlan) -> usize {
    find(plan, &|p| matches!(p, LogicalPlan::Join { condition: None, .. })).len()
}

/// Every conjunct of the join conditions and filters in `plan`, as text (`a = b` and
/// `b = a` alike: the rule rebuilds equalities from equivalence classes).
fn conjuncts(plan: &LogicalPlan) -> BTreeSet<String> {
    let mut exprs = Vec::new();
    for node in find(plan, &|_| true) {
        match node {
            LogicalPlan::Join { condition: Some(c), .. } => exprs.extend(c.clone().split_conjunction()),
            LogicalPlan::Filter { predicate, .. } => exprs.extend(predicate.clone().split_conjunction()),
            LogicalPlan::Scan(scan) => exprs.extend(scan.filters.iter().cloned()),
            _ => {}
        }
    }
    exprs
        .iter()
        .map(|e| match e {
            Expr::Binary { op: BinaryOp::Eq, left, right, .. } => {
                let mut sides = [left.to_string(), right.to_string()];
                sides.sort();
                format!("{} = {}", sides[0], sides[1])
            }
            other => other.to_string(),
        })
        .collect()
}

#[test]
fn builds_on_the_smaller_side_of_every_join() {
    let plan = db().plan("SELECT count(*) FROM d1, f, d2, d3 WHERE f1 = a1 AND f2 = b1 AND f3 = c1", RULES);
    let joins = inner_joins(&plan);
    assert_eq!(joins.len(), 3, "{plan}");
    for join in joins {
        let LogicalPlan::Join { left, right, .. } = join else { unreachable!() };
        assert!(estimate(right).rows <= estimate(left).rows, "build side is the larger input:\n{plan}");
    }
    assert_eq!(cross_products(&plan), 0, "{plan}");
}

#[test]
fn keeps_every_predicate() {
    let sql = "SELECT count(*) FROM d1, f, d2 WHERE f1 = a1 AND f2 = b1 AND a1 + b1 > f3 AND f3 < 500";
    let before = db().plan(sql, &[unnest_subqueries::run, push_down_predicates::run]);
    let after = db().plan(sql, RULES);
    assert_eq!(conjuncts(&before), conjuncts(&after), "before:\n{before}after:\n{after}");
}

#[test]
fn equal_columns_form_classes_so_transitive_joins_avoid_cross_products() {
    // d2 and d3 are joined only through f's key: `b1 = f1 AND f1 = c1` also joins b1 to c1,
    // so the two small dimensions can meet before the fact table without a cross product.
    let plan = db().plan("SELECT count(*) FROM f, d2, d3 WHERE b1 = f1 AND f1 = c1", RULES);
    assert_eq!(inner_joins(&plan).len(), 2, "{plan}");
    assert_eq!(cross_products(&plan), 0, "{plan}");
}

#[test]
fn cross_product_only_where_the_graph_is_disconnected() {
    let plan = db().plan("SELECT count(*) FROM f, d1, d2 WHERE f1 = a1", RULES);
    assert_eq!(inner_joins(&plan).len(), 2, "{plan}");
    assert_eq!(cross_products(&plan), 1, "{plan}");
}

#[test]
fn outer_joins_are_not_reordered() {
    let plan = db().plan("SELECT count(*) FROM f LEFT JOIN d1 ON f1 = a1 JOIN d2 ON f2 = b1", RULES);
    let left_joins = find(&plan, &|p| matches!(p, LogicalPlan::Join { kind: JoinKind::Left, .. }));
    assert_eq!(left_joins.len(), 1, "{plan}");
    let LogicalPlan::Join { left, right, .. } = left_joins[0] else { unreachable!() };
    assert!(matches!(left.as_ref(), LogicalPlan::Scan(s) if s.table.name == "f"), "{plan}");
    assert!(matches!(right.as_ref(), LogicalPlan::Scan(s) if s.table.name == "d1"), "{plan}");
}

/// `SELECT count(*) FROM t t0, t t1, ... WHERE <predicates>` over one 10-row table t(a, b).
fn self_join(relations: usize, predicate: impl Fn(usize) -> String) -> String {
    let from: Vec<String> = (0..relations).map(|i| format!("t t{i}")).collect();
    let predicates: Vec<String> = (1..relations).map(predicate).collect();
    format!("SELECT count(*) FROM {} WHERE {}", from.join(", "), predicates.join(" AND "))
}

fn check_large_join(relations: usize, sql: &str) {
    let db = TestDb::new().table("t", 10, "a, b");
    let plan = db.plan(sql, RULES);
    assert_eq!(inner_joins(&plan).len(), relations - 1, "{relations} relations");
    assert_eq!(find(&plan, &|p| matches!(p, LogicalPlan::Scan(_))).len(), relations);
    assert_eq!(cross_products(&plan), 0, "{relations} relations");
}

#[test]
fn a_join_of_12_relations_is_searched_exhaustively() {
    // The largest join the dynamic programming takes: a star, so most subsets connect.
    check_large_join(12, &self_join(12, |i| format!("t0.a = t{i}.b")));
}

#[test]
fn a_join_of_13_relations_is_ordered_greedily() {
    check_large_join(13, &self_join(13, |i| format!("t{}.a = t{i}.b", i - 1)));
}

#[test]
fn a_join_of_64_relations_plans() {
    // Issue 10: exactly 64 relations panicked (u64 relation sets).
    check_large_join(64, &self_join(64, |i| format!("t{}.a = t{i}.a", i - 1)));
}

#[test]
fn a_join_of_200_relations_plans() {
    // Issue 10: "column n_nationkey (#768) is not in the input".
    check_large_join(200, &self_join(200, |i| format!("t0.a = t{i}.b")));
}

#[test]
fn too_many_relations_is_a_clean_error() {
    let db = TestDb::new().table("t", 10, "a, b");
    let relations = MAX_JOIN_RELATIONS + 1;
    let error = db.try_plan(&self_join(relations, |i| format!("t{}.a = t{i}.a", i - 1)), RULES);
    assert!(matches!(error, Err(ApiaryError::NotImplemented(_))), "{error:?}");
}

#[test]
fn a_union_of_fact_tables_joined_with_a_small_dimension_is_not_estimated_below_it() {
    // The union's keys have the distinct values of its inputs' keys (10 + 10), not one per
    // row: joined with 10 dimension rows it keeps about all its 2,000 rows (TPC-DS Q05
    // built its hash table on the union, estimated at a dozen rows, instead of on dates).
    let db = TestDb::new().table("s", 1000, "sk MOD 10, v").table("r", 1000, "rk MOD 10, w").table("dim", 10, "k");
    let plan = db.plan("SELECT count(*) FROM (SELECT sk AS key FROM s UNION ALL SELECT rk FROM r) u JOIN dim ON key = k", RULES);
    let join = inner_joins(&plan)[0];
    assert!(estimate(join).rows >= 900.0, "{plan}: {} rows", estimate(join).rows);
}

#[test]
fn rows_without_a_partner_in_a_left_join_are_not_estimated_away_by_is_null() {
    // `f LEFT JOIN r ... WHERE r.k IS NULL` keeps f's rows without a partner: r's columns
    // are NULL there even though r.k has no NULLs (TPC-DS Q78's unreturned sales were
    // estimated at one row and built on, with the date dimension probing them).
    let db = TestDb::new().table("f", 1000, "fk MOD 500, fd MOD 10").table("r", 100, "rk, rv").table("dim", 10, "dk");
    let plan = db.plan("SELECT count(*) FROM (SELECT fk, fd FROM f LEFT JOIN r ON fk = rk WHERE rk IS NULL) s JOIN dim ON fd = dk", RULES);
    let filter = find(&plan, &|p| matches!(p, LogicalPlan::Filter { .. }))[0];
    assert!(estimate(filter).rows >= 500.0, "{plan}: {} rows", estimate(filter).rows);
    // So the dimension is the build (right) side.
    let LogicalPlan::Join { right, .. } = inner_joins(&plan)[0] else { unreachable!() };
    assert!(matches!(right.as_ref(), LogicalPlan::Scan(s) if s.table.name == "dim"), "{plan}");
}

#[test]
fn a_list_of_values_keeps_that_many_distinct_values_and_repeated_lists_count_once() {
    // 1,000 rows, 100 years of 10 rows each: `y IN (1, 2)` keeps 20 rows and 2 distinct
    // years (sampling 2% of the rows would keep about 18 of the 100 years), and the same
    // list again as `y = 1 OR y = 2` (a CTE's pushed filter) does not halve it again.
    let db = TestDb::new().table("d", 1000, "k, y MOD 100");
    for sql in ["SELECT k, y FROM d WHERE y IN (1, 2)", "SELECT k, y FROM d WHERE y IN (1, 2) AND (y = 1 OR y = 2)"] {
        let plan = db.plan(sql, RULES);
        let scan = find(&plan, &|p| matches!(p, LogicalPlan::Scan(_)))[0];
        let e = estimate(scan);
        assert!((15.0..=25.0).contains(&e.rows), "{sql}: {} rows", e.rows);
        let LogicalPlan::Scan(s) = scan else { unreachable!() };
        let year = s.columns.iter().find(|(_, c)| &*c.name == "y").expect("y").1.id;
        assert!(e.columns[&year].ndv <= 2.0, "{sql}: {} years", e.columns[&year].ndv);
    }
}

#[test]
fn equalities_between_different_pairs_of_relations_are_independent() {
    // A triangle: each relation's 100 distinct keys meet each other's once, so the three
    // equalities together keep 100^3 / 100^3 = 1 row. The last join has two equalities of
    // different pairs (TPC-DS Q72's d1.d_week_seq = d2.d_week_seq beside inv_date_sk =
    // d2.d_date_sk): taken as one composite key, it was estimated at 100 rows.
    let db = TestDb::new().table("ta", 100, "ax, az").table("tb", 100, "bx, by").table("tc", 100, "cy, cz");
    let plan = db.plan("SELECT count(*) FROM ta, tb, tc WHERE ax = bx AND by = cy AND az = cz", RULES);
    let top = inner_joins(&plan)[0];
    assert!(estimate(top).rows < 10.0, "{plan}: {} rows", estimate(top).rows);
}

#[test]
fn a_composite_key_is_read_from_one_relation_and_estimated_as_one_key() {
    // TPC-H Q9's shape: partsupp's (part, supplier) key meets lineitem's, and through
    // equivalence classes also part's and supplier's keys. The join with partsupp takes
    // both keys from one relation, so the estimate reads them as one composite key.
    let db = TestDb::new()
        .table("l", 1000, "l_p MOD 100, l_s MOD 10")
        .table("ps", 1000, "ps_p MOD 100, ps_s MOD 10")
        .table("p", 100, "p_p")
        .table("s", 10, "s_s");
    let plan = db.plan("SELECT count(*) FROM l, ps, p, s WHERE l_p = p_p AND l_s = s_s AND ps_p = p_p AND ps_s = s_s", RULES);
    let mut composite = 0;
    for join in inner_joins(&plan) {
        let LogicalPlan::Join { condition: Some(condition), .. } = join else { continue };
        let conjuncts = condition.clone().split_conjunction();
        if conjuncts.len() < 2 {
            continue;
        }
        composite += 1;
        let mut tables = BTreeSet::new();
        condition.visit(&mut |e| {
            if let Expr::Column(c) = e {
                tables.insert(c.name.split('_').next().expect("prefix").to_string());
            }
        });
        assert_eq!(tables.len(), 2, "{condition} reads keys of {tables:?}\n{plan}");
    }
    assert_eq!(composite, 1, "{plan}");
}
