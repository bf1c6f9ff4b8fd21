//! `eager_aggregation`: an aggregation over inner joins aggregates the relations its
//! arguments read (and those that only filter them) before joining the relations that only
//! provide group keys.

use apiary_optimizer::rules::{eager_aggregation, push_down_predicates};
use apiary_sql::LogicalPlan;

use crate::common::{assert_plan, find, Rule, TestDb};

const RULES: &[Rule] = &[push_down_predicates::run, eager_aggregation::run];

/// fact: 10,000 rows, 100 items, 50 dates and 4 values of `w`; item: 100 rows of 10 names; dates: 50 rows
/// of 5 years.
fn db() -> TestDb {
    TestDb::new().table("fact", 10_000, "fk MOD 100, dk MOD 50, v, u, w MOD 4").table("item", 100, "ik, name MOD 10").table(
        "dates",
        50,
        "dk2, year MOD 5",
    )
}

fn aggregates(plan: &LogicalPlan) -> usize {
    find(plan, &|p| matches!(p, LogicalPlan::Aggregate { .. })).len()
}

#[test]
fn the_fact_side_is_aggregated_by_its_key_before_the_join_that_provides_the_group_keys() {
    assert_plan(
        &db().explain(
            "SELECT name, sum(v), count(*), avg(v), max(u) FROM fact, item, dates WHERE fk = ik AND dk = dk2 AND year = 1 GROUP BY name",
            RULES,
        ),
        "
        Project name AS name, sum(v) AS sum(v), count(*) AS count(*), avg(v) AS avg(v), max(u) AS max(u)
          Project name AS name, sum AS sum(v), count AS count(*), average_of(sum, count) AS avg(v), max AS max(u)
            Aggregate groups=[name] aggregates=[sum(sum), sum(count), sum(sum), sum(count), max(max)]
              Join INNER ON fk = ik
                Aggregate groups=[fk] aggregates=[sum(v), count(*), sum(v), count(v), max(u)]
                  Join INNER ON dk = dk2
                    Scan fact [fk, dk, v, u, w]
                    Scan dates [dk2, year] filters=[year = 1]
                Scan item [ik, name]
        ",
    );
}

#[test]
fn the_fact_sides_own_group_keys_join_the_pre_aggregation_keys() {
    let plan = db().explain("SELECT name, w, sum(v) FROM fact JOIN item ON fk = ik GROUP BY name, w", RULES);
    assert!(plan.contains("Aggregate groups=[fk, w] aggregates=[sum(v)]"), "{plan}");
}

#[test]
fn not_when_an_aggregate_cannot_be_merged() {
    for call in ["count(DISTINCT v)", "median(v)", "string_agg(v::varchar, ',')"] {
        let plan = db().plan(&format!("SELECT name, {call} FROM fact JOIN item ON fk = ik GROUP BY name"), RULES);
        assert_eq!(aggregates(&plan), 1, "{call}: {plan}");
    }
}

#[test]
fn not_when_the_join_key_is_nearly_unique() {
    let db = TestDb::new().table("fact", 10_000, "fk, v").table("item", 100, "ik, name MOD 10");
    let plan = db.plan("SELECT name, sum(v) FROM fact JOIN item ON fk = ik GROUP BY name", RULES);
    assert_eq!(aggregates(&plan), 1, "{plan}");
}

#[test]
fn not_over_outer_joins_or_without_a_relation_that_only_provides_keys() {
    let plan = db().plan("SELECT name, sum(v) FROM fact LEFT JOIN item ON fk = ik GROUP BY name", RULES);
    assert_eq!(aggregates(&plan), 1, "{plan}");
    // The arguments read both relations: nothing is left to join after the aggregation.
    let plan = db().plan("SELECT name, sum(v + ik) FROM fact JOIN item ON fk = ik GROUP BY name", RULES);
    assert_eq!(aggregates(&plan), 1, "{plan}");
    // Dates only filter: joined below the aggregation, with nothing after it.
    let plan = db().plan("SELECT fk, sum(v) FROM fact JOIN dates ON dk = dk2 WHERE year = 1 GROUP BY fk", RULES);
    assert_eq!(aggregates(&plan), 1, "{plan}");
}

#[test]
fn applying_it_twice_changes_nothing_more() {
    let db = db();
    let once = db.plan("SELECT name, sum(v) FROM fact, item, dates WHERE fk = ik AND dk = dk2 AND year = 1 GROUP BY name", RULES);
    let twice = eager_aggregation::run(once.clone(), &mut db.context()).expect("eager aggregation");
    assert_eq!(once.display_indent(), twice.display_indent());
}

#[test]
fn not_when_the_joins_after_it_would_drop_most_rows() {
    // Only the items of one name join: aggregating every fact row first costs more.
    let plan = db().plan("SELECT name, sum(v) FROM fact JOIN item ON fk = ik WHERE name = 3 GROUP BY name", RULES);
    assert_eq!(aggregates(&plan), 1, "{plan}");
}

#[test]
fn a_relation_that_provides_a_few_group_keys_joins_below_the_aggregation() {
    // By (fk, dk) the fact side has 5,000 groups of 10,000 rows; by (fk, year), 500 (and by
    // (dk, name) 2,500): dates join before the aggregation, items after it (TPC-DS Q04:
    // sales by customer and year).
    let db = TestDb::new().table("fact", 10_000, "fk MOD 100, dk MOD 50, v").table("item", 100, "ik, name MOD 50").table(
        "dates",
        50,
        "dk2, year MOD 5",
    );
    let plan = db.explain("SELECT name, year, sum(v) FROM fact JOIN item ON fk = ik JOIN dates ON dk = dk2 GROUP BY name, year", RULES);
    assert!(plan.contains("Aggregate groups=[fk, year] aggregates=[sum(v)]"), "{plan}");
}

#[test]
fn a_dimension_joined_below_counts_only_the_keys_the_fact_side_refers_to() {
    // 1,000 dates of 200 years, of which the fact side refers to 50 dates: estimated at 10
    // years there (not 200), so (fk, year) makes fewer groups than (dk, name).
    let db = TestDb::new().table("fact", 10_000, "fk MOD 100, dk MOD 50, v").table("item", 100, "ik, name MOD 50").table(
        "dates",
        1000,
        "dk2, year MOD 200",
    );
    let plan = db.explain("SELECT name, year, sum(v) FROM fact JOIN item ON fk = ik JOIN dates ON dk = dk2 GROUP BY name, year", RULES);
    assert!(plan.contains("Aggregate groups=[fk, year] aggregates=[sum(v)]"), "{plan}");
}

#[test]
fn a_core_condition_left_at_a_join_with_a_later_relation_still_filters_the_core() {
    // `NOT (v = year AND v < 0)` reads fact and dates but sits in the item join's
    // condition: taking item out of the core must not lose it.
    let plan = db().explain(
        "SELECT name, sum(u) FROM fact JOIN dates ON dk = dk2 JOIN item ON fk = ik AND NOT (v = year AND v < 0) GROUP BY name",
        &[eager_aggregation::run],
    );
    let pre_aggregation = plan.split("Aggregate groups=[fk]").nth(1).unwrap_or_else(|| panic!("{plan}"));
    assert!(pre_aggregation.contains("v = year"), "{plan}");
}

#[test]
fn string_group_keys_accept_a_larger_share_of_groups() {
    // By (fk, year) the 10,000 fact rows are expected to fill about 4,300 of 5,000
    // combinations: too many for integer keys, but every row the pre-aggregation removes
    // spares gathering, hashing and comparing a string key (TPC-DS Q04's catalog and web
    // channels, grouped by seven customer strings).
    let db = TestDb::new().table("fact", 10_000, "fk MOD 1000, dk MOD 50, v").table("item", 1000, "ik, name").table(
        "dates",
        50,
        "dk2, year MOD 5",
    );
    let integers = db.plan("SELECT name, year, sum(v) FROM fact JOIN item ON fk = ik JOIN dates ON dk = dk2 GROUP BY name, year", RULES);
    assert_eq!(aggregates(&integers), 1, "{integers}");
    let strings = db.explain(
        "SELECT name::varchar, year, sum(v) FROM fact JOIN item ON fk = ik JOIN dates ON dk = dk2 GROUP BY name::varchar, year",
        RULES,
    );
    assert!(strings.contains("Aggregate groups=[fk, year] aggregates=[sum(v)]"), "{strings}");
}
