//! `push_down_semi_joins`: a semi or anti join on top of inner joins moves down to the one
//! relation its condition reads, when the subquery side is not larger than that relation.

use apiary_optimizer::rules::{push_down_predicates, push_down_semi_joins, unnest_subqueries};

use crate::common::{assert_plan, Rule, TestDb};

/// big (1,000 rows), mid (100), small (10).
fn db() -> TestDb {
    TestDb::new().table("big", 1000, "bk, bv").table("mid", 100, "mk, mv").table("small", 10, "sk")
}

const RULES: &[Rule] = &[unnest_subqueries::run, push_down_predicates::run, push_down_semi_joins::run];

#[test]
fn semi_join_moves_to_the_relation_it_filters() {
    assert_plan(
        &db().explain("SELECT bk FROM big JOIN mid ON bk = mk WHERE EXISTS (SELECT 1 FROM small WHERE sk = bv)", RULES),
        "
        Project bk AS bk
          Join INNER ON bk = mk
            Join SEMI ON sk = bv
              Scan big [bk, bv]
              Project 1 AS 1, sk AS sk
                Scan small [sk]
            Scan mid [mk, mv]
        ",
    );
}

#[test]
fn anti_join_moves_to_the_relation_it_filters() {
    assert_plan(
        &db().explain("SELECT bk FROM mid JOIN big ON bk = mk WHERE NOT EXISTS (SELECT 1 FROM small WHERE sk = bv)", RULES),
        "
        Project bk AS bk
          Join INNER ON bk = mk
            Scan mid [mk, mv]
            Join ANTI ON sk = bv
              Scan big [bk, bv]
              Project 1 AS 1, sk AS sk
                Scan small [sk]
        ",
    );
}

#[test]
fn stays_on_top_when_the_subquery_side_is_larger() {
    // Filtering small by big is cheaper after the join has reduced the rows (TPC-H Q21).
    assert_plan(
        &db().explain("SELECT sk FROM small JOIN mid ON sk = mk WHERE EXISTS (SELECT 1 FROM big WHERE bk = sk)", RULES),
        "
        Project sk AS sk
          Join SEMI ON bk = sk
            Join INNER ON sk = mk
              Scan small [sk]
              Scan mid [mk, mv]
            Project 1 AS 1, bk AS bk
              Scan big [bk, bv]
        ",
    );
}

#[test]
fn stays_on_top_when_the_condition_reads_both_sides() {
    assert_plan(
        &db().explain("SELECT bk FROM big JOIN mid ON bk = mk WHERE EXISTS (SELECT 1 FROM small WHERE sk = bv AND sk = mv)", RULES),
        "
        Project bk AS bk
          Join SEMI ON sk = bv AND sk = mv
            Join INNER ON bk = mk
              Scan big [bk, bv]
              Scan mid [mk, mv]
            Project 1 AS 1, sk AS sk
              Scan small [sk]
        ",
    );
}

#[test]
fn not_into_the_null_extended_side_of_an_outer_join() {
    // Filtering mid before the LEFT join would NULL-extend big rows instead of removing them.
    assert_plan(
        &db().explain("SELECT bk FROM big LEFT JOIN mid ON bk = mk WHERE EXISTS (SELECT 1 FROM small WHERE sk = mv)", RULES),
        "
        Project bk AS bk
          Join SEMI ON sk = mv
            Join LEFT ON bk = mk
              Scan big [bk, bv]
              Scan mid [mk, mv]
            Project 1 AS 1, sk AS sk
              Scan small [sk]
        ",
    );
}

#[test]
fn uncorrelated_exists_stays_on_top() {
    assert_plan(
        &db().explain("SELECT bk FROM big JOIN mid ON bk = mk WHERE EXISTS (SELECT 1 FROM small)", RULES),
        "
        Project bk AS bk
          Join SEMI
            Join INNER ON bk = mk
              Scan big [bk, bv]
              Scan mid [mk, mv]
            Project 1 AS 1
              Scan small [sk]
        ",
    );
}
