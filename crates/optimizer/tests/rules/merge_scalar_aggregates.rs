//! `merge_scalar_aggregates`: cross-joined aggregations without GROUP BY over one table
//! become one aggregation whose aggregates keep their own filters.

use apiary_optimizer::rules::{fold_constants, merge_scalar_aggregates, push_down_predicates, unnest_subqueries};
use apiary_sql::LogicalPlan;

use crate::common::{assert_plan, assert_well_formed, find, Rule, TestDb};

const RULES: &[Rule] = &[unnest_subqueries::run, fold_constants::run, push_down_predicates::run, merge_scalar_aggregates::run];

fn db() -> TestDb {
    TestDb::new().table("x", 100, "xk, xd").table("y", 100, "yd, ye")
}

fn scans(plan: &LogicalPlan) -> usize {
    find(plan, &|p| matches!(p, LogicalPlan::Scan(_))).len()
}

#[test]
fn scalar_subqueries_over_one_table_are_one_scan_with_filtered_aggregates() {
    // TPC-DS Q09's shape: buckets of one column, counted and averaged.
    let plan = db().plan(
        "SELECT (SELECT count(*) FROM x WHERE xk BETWEEN 1 AND 20) AS a, \
                (SELECT avg(xd) FROM x WHERE xk BETWEEN 21 AND 40) AS b, \
                (SELECT max(xd) FROM x WHERE xk > 90) AS c",
        RULES,
    );
    assert_well_formed(&plan);
    assert_eq!(scans(&plan), 1, "{plan}");
    let text = plan.display_indent().to_string();
    assert!(text.contains("count(*) FILTER (WHERE xk >= 1 AND xk <= 20)"), "{text}");
    assert!(text.contains("avg(xd) FILTER (WHERE xk >= 21 AND xk <= 40)"), "{text}");
    assert!(text.contains("max(xd) FILTER (WHERE xk > 90)"), "{text}");
    // Every member bounds xk from below; the third has no upper bound.
    assert!(text.contains("filters=[xk >= 1]"), "{text}");
}

#[test]
fn derived_tables_in_from_are_merged_and_other_tables_stay() {
    // TPC-DS Q28's shape, with a table that is not aggregated in between.
    assert_plan(
        &db().explain(
            "SELECT * FROM (SELECT count(xd) AS c1 FROM x WHERE xk < 10) a, y, \
                           (SELECT sum(xd) AS s2 FROM x WHERE xk >= 50 AND xk < 60) b",
            RULES,
        ),
        // The join's columns are restored to their order (count, y's, sum) for consumers
        // that read them by position.
        "
        Project count(xd) AS count(xd), yd AS yd, ye AS ye, sum(xd) AS sum(xd)
          Project count(xd) AS count(xd), yd AS yd, ye AS ye, sum(xd) AS sum(xd)
            Join INNER
              Project count(xd) AS count(xd), sum(xd) AS sum(xd)
                Aggregate groups=[] aggregates=[count(xd) FILTER (WHERE xk < 10), sum(xd) FILTER (WHERE xk >= 50 AND xk < 60)]
                  Scan x [xk, xd] filters=[xk < 60]
              Scan y [yd, ye]
        ",
    );
}

#[test]
fn merged_members_inside_a_union_keep_their_columns_in_order() {
    let sql = "SELECT * FROM (SELECT count(xd) AS c1 FROM x WHERE xk < 10) a, y, (SELECT sum(xd) AS s2 FROM x WHERE xk > 50) b \
               UNION ALL SELECT 1, 2, 3, 4";
    let before = db().plan(sql, &[unnest_subqueries::run, fold_constants::run, push_down_predicates::run]);
    let after = db().plan(sql, RULES);
    assert_well_formed(&after);
    assert_eq!(scans(&after), 2, "{after}");
    let types = |p: &LogicalPlan| p.output().iter().map(|c| c.data_type).collect::<Vec<_>>();
    assert_eq!(types(&before), types(&after));
}

#[test]
fn a_member_without_a_filter_reads_every_row() {
    let plan = db().plan("SELECT (SELECT count(*) FROM x) AS a, (SELECT sum(xd) FROM x WHERE xk = 3) AS b", RULES);
    assert_eq!(scans(&plan), 1, "{plan}");
    let text = plan.display_indent().to_string();
    assert!(text.contains("Scan x [xk, xd]\n") || text.ends_with("Scan x [xk, xd]"), "{text}");
    assert!(text.contains("count(*),") || text.contains("count(*)]"), "the unfiltered count keeps no FILTER: {text}");
}

#[test]
fn not_merged_when_arguments_compute_groups_differ_or_tables_differ() {
    for sql in [
        // An argument evaluated on the other member's rows could fail (a division by zero).
        "SELECT (SELECT sum(100 / xd) FROM x WHERE xd > 0) AS a, (SELECT count(*) FROM x WHERE xd = 0) AS b",
        // A grouped aggregation has a row per group, not one.
        "SELECT * FROM (SELECT xk, count(*) AS c FROM x WHERE xk < 5 GROUP BY xk) a, (SELECT count(*) AS d FROM x WHERE xk > 5) b",
        // An aggregate with its own FILTER.
        "SELECT (SELECT count(*) FILTER (WHERE xd > 1) FROM x WHERE xk < 5) AS a, (SELECT count(*) FROM x WHERE xk > 5) AS b",
        "SELECT (SELECT count(*) FROM x WHERE xk < 5) AS a, (SELECT count(*) FROM y WHERE yd > 5) AS b",
    ] {
        let plan = db().plan(sql, RULES);
        assert_eq!(scans(&plan), 2, "{sql}\n{plan}");
    }
}
