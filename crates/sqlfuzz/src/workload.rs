//! Workloads for other engines: the setup statements of a schema and the queries of its
//! oracle cases (both sides of each), for `bench/differential.py` to replay on DuckDB and
//! on Apiary and compare.

use crate::campaign::schema_and_cases;
use crate::generator::Features;
use crate::oracle::Case;

/// One query of a workload.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadQuery {
    pub sql: String,
    /// Whether the rows must come in the order the query returns them.
    pub ordered: bool,
    /// The oracle case it came from (`optimizer`: a whole random query).
    pub source: &'static str,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    pub setup: Vec<String>,
    pub queries: Vec<WorkloadQuery>,
}

/// The workload of schema `index` of `seed`: about `queries` queries.
pub fn workload(seed: u64, index: usize, queries: usize, features: &Features) -> Workload {
    let (schema, cases) = schema_and_cases(seed, index, queries.max(1), features);
    let mut out = Vec::with_capacity(queries);
    for case in &cases {
        let source = case.oracle().name();
        match case {
            Case::Optimizer { query } => {
                let ordered = query.limit.is_none() && query.is_totally_ordered();
                out.push(WorkloadQuery { sql: query.sql(), ordered, source });
            }
            _ => {
                for sql in case.queries() {
                    out.push(WorkloadQuery { sql, ordered: false, source });
                }
            }
        }
        if out.len() >= queries {
            break;
        }
    }
    out.truncate(queries);
    Workload { setup: schema.setup_sql(), queries: out }
}
