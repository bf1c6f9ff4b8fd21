//! # apiary-sqlfuzz
//!
//! Random schemas, data and queries for Apiary, and the oracles that check the answers
//! without a second database (SQLancer's ternary logic partitioning and NoREC), plus a
//! comparison of the same query with and without the optimizer and across settings, and a
//! check that DISTINCT / GROUP BY / UNION results hold no row twice.
//!
//! ```text
//! Rng(seed) ─▶ Schema (tables, NULL-heavy rows) ─▶ setup SQL
//!          └─▶ Generator ─▶ Query trees ─▶ oracle cases (TLP, NoREC, optimizer)
//!                                              │  run on a Target (a configured database)
//!                                              ▼
//!                       Outcome (rows | error) ─▶ compare as multisets ─▶ Verdict
//!                                              └─ on a finding: reduce ─▶ minimal SQL
//! ```
//!
//! `tests/oracles.rs` runs a fixed seed under the configuration matrix in `cargo test`;
//! `apiary bench fuzz` runs long campaigns and writes workloads `bench/differential.py`
//! replays on DuckDB.

pub mod ast;
pub mod campaign;
pub mod compare;
pub mod generator;
pub mod oracle;
pub mod reduce;
pub mod rng;
pub mod schema;
pub mod target;
pub mod types;
pub mod workload;

pub use campaign::{Options, Report, Summary};
pub use generator::{Features, Generator, FEATURE_NAMES};
pub use rng::Rng;
pub use schema::Schema;
pub use target::{Config, Storage};
