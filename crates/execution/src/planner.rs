//! Physical planning: from an optimized [`LogicalPlan`] to a [`PhysicalPlan`] of pipelines.
//!
//! The planner walks the logical tree bottom-up keeping a set of *open branches*: a source
//! plus the streaming operators appended so far, with the column layout they produce.
//! Streaming nodes (filter, projection, hash-join probe) append an operator to every open
//! branch; a pipeline breaker (hash-join build, aggregation, sort, limit) closes the
//! branches into pipelines feeding its sink and opens a new branch reading from it. UNION
//! ALL simply returns the branches of all its inputs, so everything above a union runs
//! once per branch, into one shared sink.
//!
//! Decisions taken here, from the optimizer's cardinality estimates:
//! * the build side of each hash join (the smaller input, where the join type allows);
//! * the number of hash-aggregation partitions (1 for few groups, more for many);
//! * which columns each operator carries (only what is needed above).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use apiary_common::{internal_err, Result};
use apiary_optimizer::cardinality::{estimate, group_count};
use apiary_sql::expr::{AggregateFunction, BinaryOp, ColumnId, ColumnRef, Expr};
use apiary_sql::plan::Scan;
use apiary_sql::{JoinKind, LogicalPlan};
use apiary_types::{DataType, PhysicalType, ScalarValue};

use crate::config::ExecutionConfig;
use crate::expr::{comparison_kind, compile_with, evaluate_constant_in, simd, CompileOptions, ExprRef, Layout};
use crate::hash::group_table::GroupEstimate;
use crate::hash::keys::value_bits;
use crate::operators::aggregate::{AggregateInput, AggregateSink, AggregateSource, HashAggregate};
use crate::operators::aggregate_functions::AggregateSpec;
use crate::operators::collect::{CollectSink, CollectedSource, CteScanSource, DiscardSink};
use crate::operators::filter::FilterOperator;
use crate::operators::hash_join::{
    integer_key, HashJoin, HashJoinBuild, HashJoinProbe, HashJoinSpec, HashJoinUnmatched, JoinMode, ResidualComparison,
};
use crate::operators::project::ProjectOperator;
use crate::operators::recursive::{RecursiveCteSink, RecursiveResultSource, WorkTableSource};
use crate::operators::scan::{KeyRangeSource, ScanConjunct, TableScan, ValueRange, ZonePredicate};
use crate::operators::sort::{Sort, SortOrder, SortSink, SortSource};
use crate::operators::stage::StageBoundary;
use crate::operators::values::ValuesSource;
use crate::operators::window::{Bound as WindowBound, Window, WindowCallPlan, WindowSink, WindowSource};
use crate::operators::{Operator, Sink, Source, StateSlot, Stateful, StatefulParts};
use crate::pipeline::{PhysicalPlan, Pipeline, PipelineLoop};

/// Expected groups above which hash aggregation partitions its tables for a parallel merge.
const PARTITIONED_AGGREGATION_GROUPS: f64 = 20_000.0;

/// A string group key estimated to have at most this many distinct values, each in at
/// least [`STRING_ID_MIN_ROWS_PER_VALUE`] input rows on average, is keyed by id
/// ([`crate::hash::string_ids`]). Ids pay off where values repeat: each distinct value
/// costs a map insertion per worker, each repeat only a cache probe.
const STRING_ID_MAX_DISTINCT: f64 = 65_536.0;
const STRING_ID_MIN_ROWS_PER_VALUE: f64 = 8.0;

/// A source plus streaming operators, not yet attached to a sink.
struct Branch {
    id: usize,
    source: Arc<dyn Source>,
    operators: Vec<Arc<dyn Operator>>,
    layout: Vec<ColumnRef>,
    after_branches: Vec<usize>,
    after_sinks: Vec<usize>,
    /// Plan text of this branch so far (source first).
    steps: Vec<String>,
    /// When the source is a table scan: the scan and the ids of the columns it reads, in
    /// order (for runtime filters from the joins the branch probes).
    scan: Option<(Arc<TableScan>, Vec<ColumnId>)>,
    /// Pairs of columns equal in every row of the branch (an inner join's probe and build
    /// keys, a projection's renamed column): a runtime filter on a key the scan does not
    /// read can filter the scan's column that the key equals (TPC-DS Q95: a semi join on
    /// `wr_order_number` filters the `ws_order_number` of web_sales, joined to it below).
    equal_columns: Vec<(ColumnId, ColumnId)>,
}

impl Branch {
    fn ids(&self) -> Vec<ColumnId> {
        self.layout.iter().map(|c| c.id).collect()
    }

    /// The position among the scan's columns `read_ids` of `key` or of a column equal to
    /// it in every row.
    fn scan_position(&self, read_ids: &[ColumnId], key: ColumnId) -> Option<usize> {
        let mut equal = vec![key];
        let mut next = 0;
        while let Some(&id) = equal.get(next) {
            if let Some(position) = read_ids.iter().position(|&r| r == id) {
                return Some(position);
            }
            for &(a, b) in &self.equal_columns {
                for (from, to) in [(a, b), (b, a)] {
                    if from == id && !equal.contains(&to) {
                        equal.push(to);
                    }
                }
            }
            next += 1;
        }
        None
    }
}

struct PendingPipeline {
    branch_id: usize,
    pipeline: Pipeline,
    after_branches: Vec<usize>,
}

pub struct PhysicalPlanner<'a> {
    config: &'a ExecutionConfig,
    threads: usize,
    next_branch: usize,
    sink_count: usize,
    pending: Vec<PendingPipeline>,
    explain: Vec<String>,
    /// Parts with state per execution, by slot.
    stateful: StatefulParts,
    /// The materialized CTEs whose bodies are being planned: their sink, its id, and the
    /// definition's column ids in the collected layout.
    ctes: HashMap<usize, (Arc<CollectSink>, usize, Vec<ColumnId>)>,
    /// The recursive CTEs whose recursive terms are being planned: their sinks.
    work_tables: HashMap<usize, Arc<RecursiveCteSink>>,
    /// For the recursive CTE about to be planned: the most rows its reader takes (an
    /// outer `LIMIT` right over its only scan), so the iterations may stop there.
    recursive_row_limit: Option<u64>,
    loops: Vec<PipelineLoop>,
}

impl<'a> PhysicalPlanner<'a> {
    pub fn new(config: &'a ExecutionConfig, threads: usize) -> Self {
        PhysicalPlanner {
            config,
            threads: threads.max(1),
            next_branch: 0,
            sink_count: 0,
            pending: Vec::new(),
            explain: Vec::new(),
            stateful: Vec::new(),
            ctes: HashMap::new(),
            work_tables: HashMap::new(),
            recursive_row_limit: None,
            loops: Vec::new(),
        }
    }

    /// Plans `plan`; its output columns, in order, form the result.
    pub fn plan(mut self, plan: &LogicalPlan) -> Result<PhysicalPlan> {
        let output = plan.output();
        let required: BTreeSet<ColumnId> = output.iter().map(|c| c.id).collect();
        let mut branches = self.plan_node(plan, &required)?;
        for branch in branches.iter_mut() {
            self.reorder_to(branch, &output)?;
        }
        let types: Vec<DataType> = output.iter().map(|c| c.data_type).collect();
        let result = self.stateful(|slot| Arc::new(CollectSink::new(types, None, 0, slot)));
        self.close(branches, result.clone() as Arc<dyn Sink>, "Result".to_string());
        // Resolve branch dependencies to pipeline indices.
        let branch_to_pipeline: HashMap<usize, usize> = self.pending.iter().enumerate().map(|(idx, p)| (p.branch_id, idx)).collect();
        let mut pipelines = Vec::with_capacity(self.pending.len());
        for pending in self.pending {
            let mut pipeline = pending.pipeline;
            pipeline.after_pipelines = pending.after_branches.iter().filter_map(|b| branch_to_pipeline.get(b).copied()).collect();
            pipelines.push(pipeline);
        }
        Ok(PhysicalPlan {
            pipelines,
            sink_count: self.sink_count,
            result,
            stateful: self.stateful,
            explain: self.explain.join("\n"),
            loops: self.loops,
        })
    }

    /// Creates a part with state per execution, giving it the next slot.
    fn stateful<T: Stateful + 'static>(&mut self, make: impl FnOnce(StateSlot) -> Arc<T>) -> Arc<T> {
        let part = make(StateSlot(self.stateful.len()));
        self.stateful.push(Arc::clone(&part) as Arc<dyn Stateful>);
        part
    }

    /// Compiles an expression with this session's options (`SET simd`).
    fn compile_expr(&self, expr: &Expr, layout: &dyn Layout) -> Result<ExprRef> {
        let options = CompileOptions {
            simd: if self.config.simd { simd::detected_level() } else { simd::SimdLevel::Scalar },
            time_zone: self.config.time_zone,
            narrow_decimals: self.config.narrow_decimals,
            jit: self.config.jit,
        };
        compile_with(expr, layout, &options)
    }

    fn new_branch(&mut self, source: Arc<dyn Source>, layout: Vec<ColumnRef>, step: String) -> Branch {
        let id = self.next_branch;
        self.next_branch += 1;
        Branch {
            id,
            source,
            operators: Vec::new(),
            layout,
            after_branches: Vec::new(),
            after_sinks: Vec::new(),
            steps: vec![step],
            scan: None,
            equal_columns: Vec::new(),
        }
    }

    /// Attaches branches to a new sink as pipelines; returns the sink id.
    fn close(&mut self, branches: Vec<Branch>, sink: Arc<dyn Sink>, sink_label: String) -> usize {
        let sink_id = self.sink_count;
        self.sink_count += 1;
        self.attach(branches, sink, &sink_label, sink_id, 0);
        sink_id
    }

    /// Attaches branches to sink `sink_id` as pipelines, numbering them as its feeders
    /// from `first_feeder`.
    fn attach(&mut self, branches: Vec<Branch>, sink: Arc<dyn Sink>, sink_label: &str, sink_id: usize, first_feeder: usize) {
        for (feeder, branch) in branches.into_iter().enumerate() {
            let feeder = first_feeder + feeder;
            let index = self.pending.len();
            let mut text = format!("Pipeline {index}");
            if !branch.after_sinks.is_empty() || !branch.after_branches.is_empty() {
                let mut waits: Vec<String> = branch.after_sinks.iter().map(|s| format!("sink #{s}")).collect();
                waits.extend(branch.after_branches.iter().map(|b| format!("branch {b}")));
                text.push_str(&format!(" (after {})", waits.join(", ")));
            }
            text.push_str(":\n");
            for step in &branch.steps {
                text.push_str(&format!("    {step}\n"));
            }
            text.push_str(&format!("    -> {sink_label} [sink #{sink_id}]"));
            self.explain.push(text);
            let pipeline = Pipeline {
                source: branch.source,
                operators: branch.operators,
                sink: Arc::clone(&sink),
                sink_id,
                feeder,
                after_pipelines: Vec::new(),
                after_sinks: branch.after_sinks,
                index,
            };
            self.pending.push(PendingPipeline { branch_id: branch.id, pipeline, after_branches: branch.after_branches });
        }
    }

    /// Plans `input` and maps its columns positionally onto `output` (a union's input).
    fn plan_positional_input(&mut self, input: &LogicalPlan, output: &[ColumnRef], label: &str) -> Result<Vec<Branch>> {
        let input_columns = input.output();
        let needed: BTreeSet<ColumnId> = input_columns.iter().take(output.len()).map(|c| c.id).collect();
        let mut branches = self.plan_node(input, &needed)?;
        for branch in branches.iter_mut() {
            let ids = branch.ids();
            let exprs = input_columns.iter().map(|c| self.compile_expr(&c.expr(), &ids)).collect::<Result<Vec<_>>>()?;
            branch.operators.push(Arc::new(ProjectOperator { exprs, description: label.to_string() }));
            branch.steps.push(format!("-> Project ({label})"));
            branch.layout = output.to_vec();
        }
        Ok(branches)
    }

    /// A recursive CTE: the anchor's pipelines and, as a loop the scheduler reruns, the
    /// recursive term's feed one [`RecursiveCteSink`]; the branch returned reads its rows
    /// once the iterations ended.
    fn plan_recursive_cte(
        &mut self,
        id: usize,
        name: &str,
        distinct: bool,
        anchor: &LogicalPlan,
        recursive: &LogicalPlan,
        output: &[ColumnRef],
    ) -> Result<Vec<Branch>> {
        if !self.work_tables.is_empty() {
            return Err(apiary_common::not_impl_err!("a recursive CTE inside the recursive term of another recursive CTE"));
        }
        let types = output.iter().map(|c| c.data_type).collect();
        let row_limit = self.recursive_row_limit.take();
        let sink = self.stateful(|slot| Arc::new(RecursiveCteSink::new(name.to_string(), types, distinct, row_limit, slot)));
        let sink_id = self.sink_count;
        self.sink_count += 1;
        let label = sink.name();
        let anchor_branches = self.plan_positional_input(anchor, output, "recursive CTE input")?;
        let anchor_feeders = anchor_branches.len();
        if anchor_feeders == 0 {
            return Err(internal_err!("the non-recursive term of {name} has no pipelines"));
        }
        self.attach(anchor_branches, sink.clone(), &label, sink_id, 0);
        // Everything planned from here to the end of the recursive term is the loop.
        let (first_pipeline, first_sink, first_slot) = (self.pending.len(), self.sink_count, self.stateful.len());
        self.work_tables.insert(id, Arc::clone(&sink));
        let recursive_branches = self.plan_positional_input(recursive, output, "recursive CTE input");
        self.work_tables.remove(&id);
        let recursive_branches = recursive_branches?;
        let feeders = recursive_branches.len();
        self.attach(recursive_branches, sink.clone(), &label, sink_id, anchor_feeders);
        let pipelines: Vec<usize> = (first_pipeline..self.pending.len()).collect();
        let until = match row_limit {
            Some(rows) => format!("until one adds no rows or {rows} rows were produced"),
            None => "until one adds no rows".to_string(),
        };
        self.explain.push(format!(
            "Loop: pipelines {} run once per iteration of {name} ({until}) [sink #{sink_id}]",
            pipelines.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(", ")
        ));
        self.loops.push(PipelineLoop {
            sink: Arc::clone(&sink),
            sink_id,
            pipelines,
            feeders,
            sinks: (first_sink..self.sink_count).collect(),
            slots: (first_slot..self.stateful.len()).collect(),
        });
        let step = format!(
            "RecursiveCteScan {name} [{}] [sink #{sink_id}]",
            output.iter().map(|c| c.name.to_string()).collect::<Vec<_>>().join(", ")
        );
        let mut branch = self.new_branch(Arc::new(RecursiveResultSource(sink)), output.to_vec(), step);
        branch.after_sinks.push(sink_id);
        Ok(vec![branch])
    }

    /// Adds a projection putting `columns` in order (a no-op if already so).
    fn reorder_to(&self, branch: &mut Branch, columns: &[ColumnRef]) -> Result<()> {
        let current = branch.ids();
        if current.iter().eq(columns.iter().map(|c| &c.id)) {
            return Ok(());
        }
        let exprs = columns.iter().map(|c| self.compile_expr(&c.expr(), &current)).collect::<Result<Vec<_>>>()?;
        let description = columns.iter().map(|c| c.name.to_string()).collect::<Vec<_>>().join(", ");
        branch.operators.push(Arc::new(ProjectOperator { exprs, description: description.clone() }));
        branch.steps.push(format!("-> Project {description}"));
        branch.layout = columns.to_vec();
        Ok(())
    }

    fn plan_node(&mut self, plan: &LogicalPlan, required: &BTreeSet<ColumnId>) -> Result<Vec<Branch>> {
        match plan {
            LogicalPlan::Scan(scan) => Ok(vec![self.plan_scan(scan, required)?]),
            LogicalPlan::Values { rows, output } => {
                let zone = self.config.time_zone;
                let values = rows
                    .iter()
                    .map(|row| row.iter().map(|e| evaluate_constant_in(e, zone)).collect::<Result<Vec<_>>>())
                    .collect::<Result<Vec<_>>>()?;
                let types = output.iter().map(|c| c.data_type).collect();
                let source = Arc::new(ValuesSource::new(values, types));
                let step = source.name();
                Ok(vec![self.new_branch(source, output.clone(), step)])
            }
            LogicalPlan::Filter { predicate, input } => {
                let mut needed = required.clone();
                predicate.collect_columns(&mut needed);
                let mut branches = self.plan_node(input, &needed)?;
                for branch in branches.iter_mut() {
                    let compiled = self.compile_expr(predicate, &branch.ids())?;
                    branch.operators.push(Arc::new(FilterOperator { predicate: compiled, description: predicate.to_string() }));
                    branch.steps.push(format!("-> Filter {predicate}"));
                }
                Ok(branches)
            }
            LogicalPlan::Project { exprs, input } => {
                let mut needed = BTreeSet::new();
                for (e, _) in exprs {
                    e.collect_columns(&mut needed);
                }
                let mut branches = self.plan_node(input, &needed)?;
                for branch in branches.iter_mut() {
                    let ids = branch.ids();
                    let compiled = exprs.iter().map(|(e, _)| self.compile_expr(e, &ids)).collect::<Result<Vec<_>>>()?;
                    let description = exprs
                        .iter()
                        .map(|(e, c)| if e == &c.expr() { c.name.to_string() } else { format!("{e} AS {}", c.name) })
                        .collect::<Vec<_>>()
                        .join(", ");
                    branch.operators.push(Arc::new(ProjectOperator { exprs: compiled, description: description.clone() }));
                    branch.steps.push(format!("-> Project {description}"));
                    for (expr, column) in exprs {
                        if let Expr::Column(input) = expr {
                            if input.id != column.id {
                                branch.equal_columns.push((input.id, column.id));
                            }
                        }
                    }
                    branch.layout = exprs.iter().map(|(_, c)| c.clone()).collect();
                }
                Ok(branches)
            }
            LogicalPlan::Aggregate { groups, aggregates, grouping_sets, input } => {
                self.plan_aggregate(groups, aggregates, grouping_sets.as_ref(), input)
            }
            LogicalPlan::Sort { keys, input } => self.plan_sort(keys, input, None, 0),
            LogicalPlan::Window { windows, input } => self.plan_window(windows, input),
            LogicalPlan::Cte { id, name, definition, body } => {
                // The definition's rows are collected once; the body's scans of the CTE
                // read them after that sink finished.
                let layout = definition.output();
                if matches!(definition.as_ref(), LogicalPlan::RecursiveCte { .. }) {
                    self.recursive_row_limit = rows_read_by_limit(body, *id);
                }
                let branches = self.plan_node(definition, &definition.output_ids());
                self.recursive_row_limit = None;
                let mut branches = branches?;
                for branch in branches.iter_mut() {
                    self.reorder_to(branch, &layout)?;
                }
                let types = layout.iter().map(|c| c.data_type).collect();
                let sink = self.stateful(|slot| Arc::new(CollectSink::new(types, None, 0, slot)));
                let sink_id = self.close(branches, sink.clone(), format!("Materialize CTE {name}"));
                let ids = layout.iter().map(|c| c.id).collect();
                let previous = self.ctes.insert(*id, (sink, sink_id, ids));
                let body = self.plan_node(body, required);
                match previous {
                    Some(previous) => self.ctes.insert(*id, previous),
                    None => self.ctes.remove(id),
                };
                body
            }
            LogicalPlan::CteScan(scan) => {
                let (sink, sink_id, ids) =
                    self.ctes.get(&scan.id).cloned().ok_or_else(|| internal_err!("CTE #{} scanned outside its definition", scan.id))?;
                let mut positions = Vec::new();
                let mut layout = Vec::new();
                for (source, column) in &scan.columns {
                    if !required.contains(&column.id) {
                        continue;
                    }
                    let position =
                        ids.iter().position(|i| i == source).ok_or_else(|| internal_err!("CTE #{} has no column {source}", scan.id))?;
                    positions.push(position);
                    layout.push(column.clone());
                }
                let step = format!(
                    "CteScan {} [{}] [sink #{sink_id}]",
                    scan.label,
                    layout.iter().map(|c| c.name.to_string()).collect::<Vec<_>>().join(", ")
                );
                let mut branch = self.new_branch(Arc::new(CteScanSource { sink, positions }), layout, step);
                branch.after_sinks.push(sink_id);
                Ok(vec![branch])
            }
            LogicalPlan::RecursiveCte { id, name, distinct, anchor, recursive, output } => {
                self.plan_recursive_cte(*id, name, *distinct, anchor, recursive, output)
            }
            LogicalPlan::WorkTableScan(scan) => {
                let sink = self
                    .work_tables
                    .get(&scan.id)
                    .cloned()
                    .ok_or_else(|| internal_err!("work table #{} read outside its recursive term", scan.id))?;
                let mut positions = Vec::new();
                let mut layout = Vec::new();
                for (position, column) in scan.columns.iter().enumerate() {
                    if required.contains(&column.id) {
                        positions.push(position);
                        layout.push(column.clone());
                    }
                }
                let step = format!(
                    "WorkTableScan {} [{}] (the rows the last iteration added)",
                    scan.label,
                    layout.iter().map(|c| c.name.to_string()).collect::<Vec<_>>().join(", ")
                );
                // No dependency: the loop's pipelines start when an iteration begins.
                Ok(vec![self.new_branch(Arc::new(WorkTableSource { sink, positions }), layout, step)])
            }
            LogicalPlan::Limit { limit, offset, input } => {
                if let LogicalPlan::Sort { keys, input: sort_input } = input.as_ref() {
                    return self.plan_sort(keys, sort_input, *limit, *offset);
                }
                let branches = self.plan_node(input, required)?;
                let layout = branches.first().map(|b| b.layout.clone()).unwrap_or_default();
                let mut aligned = branches;
                for branch in aligned.iter_mut() {
                    self.reorder_to(branch, &layout)?;
                }
                let types = layout.iter().map(|c| c.data_type).collect();
                let sink = self.stateful(|slot| Arc::new(CollectSink::new(types, *limit, *offset, slot)));
                let label = sink.name();
                let sink_id = self.close(aligned, sink.clone(), label);
                let mut branch = self.new_branch(Arc::new(CollectedSource(sink)), layout, format!("CollectedScan [sink #{sink_id}]"));
                branch.after_sinks.push(sink_id);
                Ok(vec![branch])
            }
            LogicalPlan::Union { inputs, output } => {
                let mut all = Vec::new();
                for input in inputs {
                    let input_columns = input.output();
                    let positions: Vec<usize> = (0..output.len()).collect();
                    let needed: BTreeSet<ColumnId> = positions.iter().map(|&i| input_columns[i].id).collect();
                    let mut branches = self.plan_node(input, &needed)?;
                    for branch in branches.iter_mut() {
                        // Map the input's columns positionally onto the union's columns.
                        let ids = branch.ids();
                        let exprs = input_columns.iter().map(|c| self.compile_expr(&c.expr(), &ids)).collect::<Result<Vec<_>>>()?;
                        branch.operators.push(Arc::new(ProjectOperator { exprs, description: "union input".to_string() }));
                        branch.steps.push("-> Project (union input)".to_string());
                        branch.layout = output.clone();
                    }
                    all.extend(branches);
                }
                Ok(all)
            }
            LogicalPlan::Join { kind, left, right, condition, mark } => {
                self.plan_join(*kind, left, right, condition.as_ref(), mark.as_ref(), required)
            }
        }
    }

    fn plan_scan(&mut self, scan: &Scan, required: &BTreeSet<ColumnId>) -> Result<Branch> {
        let read_columns: Vec<usize> = scan.columns.iter().map(|(idx, _)| *idx).collect();
        let read_ids: Vec<ColumnId> = scan.columns.iter().map(|(_, c)| c.id).collect();
        let filter = match Expr::conjunction(scan.filters.iter().cloned()) {
            Some(f) => Some(self.compile_expr(&f, &read_ids)?),
            None => None,
        };
        let zone_predicates = zone_predicates(scan);
        // Each conjunct on its own, and for one on one or two string columns also over
        // those columns alone: dictionary-encoded stripes evaluate it once per distinct
        // value (or combination of values).
        let mut conjuncts = Vec::with_capacity(scan.filters.len());
        for conjunct in &scan.filters {
            let mut columns = BTreeSet::new();
            conjunct.collect_columns(&mut columns);
            let ids: Vec<ColumnId> = columns.into_iter().collect();
            let positions: Option<Vec<usize>> =
                ids.iter().map(|id| read_ids.iter().position(|r| r == id).filter(|&p| scan.columns[p].1.data_type.is_string())).collect();
            let on_codes = match positions {
                Some(positions) if (1..=2).contains(&positions.len()) => Some((positions, self.compile_expr(conjunct, &ids)?)),
                _ => None,
            };
            let range = value_range(conjunct, &read_ids, scan);
            let columns = ids.iter().filter_map(|id| read_ids.iter().position(|r| r == id)).collect();
            conjuncts.push(ScanConjunct { expr: self.compile_expr(conjunct, &read_ids)?, dictionary: on_codes, range, columns });
        }
        let output: Vec<usize> = scan.columns.iter().enumerate().filter(|(_, (_, c))| required.contains(&c.id)).map(|(i, _)| i).collect();
        let layout: Vec<ColumnRef> = output.iter().map(|&i| scan.columns[i].1.clone()).collect();
        let mut step = format!("Scan {} [{}]", scan.label, layout.iter().map(|c| c.name.to_string()).collect::<Vec<_>>().join(", "));
        if !scan.filters.is_empty() {
            // Each conjunct bracketed when it is a disjunction, so the text reads as the predicate.
            let conjunct = |f: &Expr| match f {
                Expr::Binary { op: BinaryOp::Or, .. } => format!("({f})"),
                _ => f.to_string(),
            };
            step.push_str(&format!(" filter: {}", scan.filters.iter().map(conjunct).collect::<Vec<_>>().join(" AND ")));
        }
        // A table function's deferred table (read_parquet) reads only the columns scanned,
        // now: they become a table of their own, in scan order.
        let (table, read_columns, zone_predicates) = match scan.table.deferred_rows() {
            Some(rows) => {
                // With no column scanned (count(*)), only the row count matters.
                let table = if read_columns.is_empty() && !scan.table.schema.fields.is_empty() {
                    rows.materialize_row_count()?
                } else {
                    rows.materialize(&read_columns)?
                };
                let zone_predicates = zone_predicates
                    .into_iter()
                    .filter_map(|mut p| {
                        p.column = read_columns.iter().position(|&c| c == p.column)?;
                        Some(p)
                    })
                    .collect();
                (table, (0..read_columns.len()).collect(), zone_predicates)
            }
            None => (Arc::clone(&scan.table), read_columns, zone_predicates),
        };
        let source = self.stateful(|slot| {
            Arc::new(TableScan::new(scan.label.clone(), table, read_columns, filter, conjuncts, zone_predicates, output, slot))
        });
        let mut branch = self.new_branch(Arc::clone(&source) as Arc<dyn Source>, layout, step);
        branch.scan = Some((source, read_ids));
        Ok(branch)
    }

    fn plan_aggregate(
        &mut self,
        groups: &[(Expr, ColumnRef)],
        aggregates: &[(apiary_sql::AggregateCall, ColumnRef)],
        grouping_sets: Option<&apiary_sql::GroupingSets>,
        input: &LogicalPlan,
    ) -> Result<Vec<Branch>> {
        let mut needed = BTreeSet::new();
        for (e, _) in groups {
            e.collect_columns(&mut needed);
        }
        for (call, _) in aggregates {
            for a in &call.args {
                a.collect_columns(&mut needed);
            }
            if let Some(f) = &call.filter {
                f.collect_columns(&mut needed);
            }
        }
        let branches = self.plan_node(input, &needed)?;
        let layout = branches.first().map(|b| b.layout.clone()).unwrap_or_default();
        let mut aligned = branches;
        for branch in aligned.iter_mut() {
            self.reorder_to(branch, &layout)?;
        }
        let ids: Vec<ColumnId> = layout.iter().map(|c| c.id).collect();
        let group_exprs = groups.iter().map(|(e, _)| self.compile_expr(e, &ids)).collect::<Result<Vec<_>>>()?;
        let group_nullable = groups.iter().map(|(e, _)| e.nullable()).collect();
        let mut inputs = Vec::new();
        // Aggregates with equal FILTERs (merged scalar subqueries: one per bucket) share one
        // compiled filter, which the aggregation evaluates once per chunk.
        let mut compiled_filters: Vec<(&Expr, ExprRef)> = Vec::new();
        for (call, column) in aggregates {
            let arguments = if call.func == AggregateFunction::CountStar {
                Vec::new()
            } else {
                call.args.iter().map(|a| self.compile_expr(a, &ids)).collect::<Result<Vec<_>>>()?
            };
            let filter = match call.filter.as_deref() {
                None => None,
                Some(f) => match compiled_filters.iter().find(|(e, _)| *e == f) {
                    Some((_, compiled)) => Some(Arc::clone(compiled)),
                    None => {
                        let compiled = self.compile_expr(f, &ids)?;
                        compiled_filters.push((f, Arc::clone(&compiled)));
                        Some(compiled)
                    }
                },
            };
            let spec = AggregateSpec {
                func: call.func,
                input_type: arguments.first().map(|a| a.data_type()),
                argument_types: arguments.iter().map(|a| a.data_type()).collect(),
                output_type: column.data_type,
                distinct: call.distinct,
                constants: call.args.iter().map(|a| if let Expr::Literal(v, _) = a { Some(v.clone()) } else { None }).collect(),
                order_by: call.order_by.clone(),
            };
            inputs.push(AggregateInput { spec, arguments, filter });
        }
        let input_estimate = estimate(input);
        let expected_groups = match grouping_sets {
            None if groups.is_empty() => 1.0,
            None => group_count(groups.iter().map(|(e, _)| e), &input_estimate),
            Some(g) => g
                .sets
                .iter()
                .map(|set| if set.is_empty() { 1.0 } else { group_count(set.iter().map(|&k| &groups[k].0), &input_estimate) })
                .sum(),
        };
        // One plain column of a table read whole: its distinct count in the table's
        // statistics is the number of groups (not a guess compounded through filters and
        // joins), and the group table may size itself for it at once.
        let from_statistics = grouping_sets.is_none()
            && matches!(groups, [(Expr::Column(key), _)] if input_estimate.columns.contains_key(&key.id))
            && reads_a_whole_table(input);
        let expected_count = expected_groups.min(usize::MAX as f64) as usize;
        let expected = if from_statistics { GroupEstimate::Statistics(expected_count) } else { GroupEstimate::Guess(expected_count) };
        let string_ids: Vec<bool> = groups
            .iter()
            .map(|(e, _)| {
                let data_type = e.data_type();
                // No fixed width: a string that may be longer than a packed key holds.
                self.config.string_group_ids
                    && value_bits(&data_type).is_none()
                    && input_estimate.ndv(e) <= STRING_ID_MAX_DISTINCT
                    && input_estimate.ndv(e) * STRING_ID_MIN_ROWS_PER_VALUE <= input_estimate.rows
            })
            .collect();
        let sets = grouping_sets.map(|g| g.sets.iter().map(|set| (0..groups.len()).map(|k| set.contains(&k)).collect()).collect());
        let partition_bits = if expected_groups >= PARTITIONED_AGGREGATION_GROUPS && self.threads > 1 {
            (self.threads * 2).next_power_of_two().trailing_zeros().min(6)
        } else {
            0
        };
        let description = format!(
            "groups=[{}]{} aggregates=[{}]",
            groups.iter().map(|(e, _)| e.to_string()).collect::<Vec<_>>().join(", "),
            grouping_sets.map_or(String::new(), |g| format!(" sets=[{}]", g.display_sets())),
            aggregates.iter().map(|(a, _)| a.to_string()).collect::<Vec<_>>().join(", ")
        );
        let vector_size = self.config.vector_size;
        let aggregate = self.stateful(|slot| {
            HashAggregate::new(
                group_exprs,
                group_nullable,
                string_ids.clone(),
                sets,
                inputs,
                partition_bits,
                expected,
                vector_size,
                description.clone(),
                slot,
            )
        });
        let source = if from_statistics { " from statistics" } else { "" };
        let by_id: Vec<String> = groups.iter().zip(&string_ids).filter(|(_, by_id)| **by_id).map(|((e, _), _)| e.to_string()).collect();
        let by_id = if by_id.is_empty() { String::new() } else { format!(", strings keyed by id: {}", by_id.join(", ")) };
        let label = format!(
            "HashAggregate {description} (expected groups {expected_groups:.0}{source}, partitions {}{by_id})",
            1 << partition_bits
        );
        let sink_id = self.close(aligned, Arc::new(AggregateSink(Arc::clone(&aggregate))), label);
        let output: Vec<ColumnRef> = groups
            .iter()
            .map(|(_, c)| c.clone())
            .chain(grouping_sets.map(|g| g.id.clone()))
            .chain(aggregates.iter().map(|(_, c)| c.clone()))
            .collect();
        let mut branch = self.new_branch(Arc::new(AggregateSource(aggregate)), output, format!("HashAggregateScan [sink #{sink_id}]"));
        branch.after_sinks.push(sink_id);
        Ok(vec![branch])
    }

    fn plan_sort(&mut self, keys: &[apiary_sql::SortKey], input: &LogicalPlan, limit: Option<u64>, offset: u64) -> Result<Vec<Branch>> {
        let mut needed: BTreeSet<ColumnId> = input.output_ids();
        for k in keys {
            k.expr.collect_columns(&mut needed);
        }
        let branches = self.plan_node(input, &needed)?;
        let layout = input.output();
        let mut aligned = branches;
        for branch in aligned.iter_mut() {
            self.reorder_to(branch, &layout)?;
        }
        let ids: Vec<ColumnId> = layout.iter().map(|c| c.id).collect();
        let compiled = keys.iter().map(|k| self.compile_expr(&k.expr, &ids)).collect::<Result<Vec<_>>>()?;
        let orders = keys.iter().map(|k| SortOrder { ascending: k.ascending, nulls_first: k.nulls_first }).collect();
        let types = layout.iter().map(|c| c.data_type).collect();
        let description = keys.iter().map(|k| k.to_string()).collect::<Vec<_>>().join(", ");
        let vector_size = self.config.vector_size;
        let sort = self.stateful(|slot| {
            Sort::new(
                compiled,
                orders,
                types,
                limit.map(|l| l.min(usize::MAX as u64) as usize),
                offset as usize,
                vector_size,
                description,
                slot,
            )
        });
        let sink = SortSink(Arc::clone(&sort));
        let label = sink.name();
        let sink_id = self.close(aligned, Arc::new(sink), label);
        let mut branch = self.new_branch(Arc::new(SortSource(sort)), layout, format!("SortScan [sink #{sink_id}]"));
        branch.after_sinks.push(sink_id);
        Ok(vec![branch])
    }

    fn plan_window(&mut self, windows: &[(apiary_sql::WindowCall, ColumnRef)], input: &LogicalPlan) -> Result<Vec<Branch>> {
        use apiary_sql::window::WindowFunction;
        use apiary_sql::FrameBound as B;
        let layout = input.output();
        let mut needed: BTreeSet<ColumnId> = input.output_ids();
        for (call, _) in windows {
            for e in call.expressions() {
                e.collect_columns(&mut needed);
            }
        }
        let mut aligned = self.plan_node(input, &needed)?;
        for branch in aligned.iter_mut() {
            self.reorder_to(branch, &layout)?;
        }
        let ids: Vec<ColumnId> = layout.iter().map(|c| c.id).collect();
        // Each distinct expression is evaluated once, stored after the input's columns.
        let mut exprs: Vec<Expr> = Vec::new();
        let slot = |e: &Expr, exprs: &mut Vec<Expr>| match exprs.iter().position(|x| x == e) {
            Some(i) => layout.len() + i,
            None => {
                exprs.push(e.clone());
                layout.len() + exprs.len() - 1
            }
        };
        let mut calls = Vec::new();
        for (call, _) in windows {
            let bound = |b: &B| -> Result<WindowBound> {
                Ok(match b {
                    B::UnboundedPreceding => WindowBound::UnboundedPreceding,
                    B::Preceding(e) => WindowBound::Preceding(evaluate_constant_in(e, self.config.time_zone)?),
                    B::CurrentRow => WindowBound::CurrentRow,
                    B::Following(e) => WindowBound::Following(evaluate_constant_in(e, self.config.time_zone)?),
                    B::UnboundedFollowing => WindowBound::UnboundedFollowing,
                })
            };
            let aggregate = match call.func {
                WindowFunction::Aggregate(func) if needs_aggregate_state(call, func) => Some(AggregateSpec {
                    func,
                    input_type: call.args.first().map(Expr::data_type),
                    argument_types: call.args.iter().map(Expr::data_type).collect(),
                    output_type: call.data_type,
                    distinct: call.distinct,
                    constants: call.args.iter().map(|a| if let Expr::Literal(v, _) = a { Some(v.clone()) } else { None }).collect(),
                    order_by: call.aggregate_order.clone(),
                }),
                _ => None,
            };
            calls.push(WindowCallPlan {
                func: call.func,
                args: call.args.iter().map(|e| slot(e, &mut exprs)).collect(),
                filter: call.filter.as_deref().map(|e| slot(e, &mut exprs)),
                ignore_nulls: call.ignore_nulls,
                partition: call.partition_by.iter().map(|e| slot(e, &mut exprs)).collect(),
                order: call
                    .order_by
                    .iter()
                    .map(|k| (slot(&k.expr, &mut exprs), SortOrder { ascending: k.ascending, nulls_first: k.nulls_first }))
                    .collect(),
                units: call.frame.units,
                start: bound(&call.frame.start)?,
                end: bound(&call.frame.end)?,
                exclude: call.frame.exclude,
                aggregate,
                data_type: call.data_type,
            });
        }
        let compiled = exprs.iter().map(|e| self.compile_expr(e, &ids)).collect::<Result<Vec<_>>>()?;
        let types = layout.iter().map(|c| c.data_type).collect();
        let description = windows.iter().map(|(w, c)| format!("{w} AS {}", c.name)).collect::<Vec<_>>().join(", ");
        let vector_size = self.config.vector_size;
        let window = self.stateful(|slot| Window::new(compiled, types, calls, vector_size, description, slot));
        let sink = WindowSink(Arc::clone(&window));
        let label = sink.name();
        let sink_id = self.close(aligned, Arc::new(sink), label);
        let output: Vec<ColumnRef> = layout.iter().cloned().chain(windows.iter().map(|(_, c)| c.clone())).collect();
        let mut branch = self.new_branch(Arc::new(WindowSource(window)), output, format!("WindowScan [sink #{sink_id}]"));
        branch.after_sinks.push(sink_id);
        Ok(vec![branch])
    }

    fn plan_join(
        &mut self,
        kind: JoinKind,
        left: &LogicalPlan,
        right: &LogicalPlan,
        condition: Option<&Expr>,
        mark: Option<&ColumnRef>,
        required: &BTreeSet<ColumnId>,
    ) -> Result<Vec<Branch>> {
        let left_ids = left.output_ids();
        let right_ids = right.output_ids();
        // Which side builds.
        let left_rows = estimate(left).rows;
        let right_rows = estimate(right).rows;
        let build_left = match kind {
            JoinKind::Inner | JoinKind::Left | JoinKind::Right | JoinKind::Full => left_rows < right_rows,
            // Semi/anti joins can build on the preserved side and mark it while probing.
            JoinKind::Semi | JoinKind::Anti { null_aware: false } => left_rows < right_rows,
            _ => false,
        };
        let mode = match (kind, build_left) {
            (JoinKind::Inner, _) => JoinMode::Inner,
            (JoinKind::Left, false) | (JoinKind::Right, true) => JoinMode::ProbeOuter,
            (JoinKind::Left, true) | (JoinKind::Right, false) => JoinMode::BuildOuter,
            (JoinKind::Full, _) => JoinMode::FullOuter,
            (JoinKind::Semi, false) => JoinMode::Semi,
            (JoinKind::Semi, true) => JoinMode::BuildSemi,
            (JoinKind::Anti { null_aware: false }, false) => JoinMode::Anti,
            (JoinKind::Anti { null_aware: false }, true) => JoinMode::BuildAnti,
            (JoinKind::Anti { null_aware: true }, _) => JoinMode::NullAwareAnti,
            (JoinKind::Mark { null_aware }, _) => JoinMode::Mark { null_aware },
            (JoinKind::Single, _) => JoinMode::Single,
        };
        let (probe_plan, build_plan, probe_ids, build_ids) =
            if build_left { (right, left, &right_ids, &left_ids) } else { (left, right, &left_ids, &right_ids) };

        // Split the condition into equi-keys and a residual.
        let mut probe_keys = Vec::new();
        let mut build_keys = Vec::new();
        let mut residual = Vec::new();
        let mut null_safe_keys = 0;
        let mut plain_keys = 0;
        let conjuncts = condition.cloned().map(|c| c.split_conjunction()).unwrap_or_default();
        let subset = |e: &Expr, ids: &BTreeSet<ColumnId>| {
            let cols = e.columns();
            !cols.is_empty() && cols.iter().all(|c| ids.contains(c))
        };
        let mut candidates = Vec::new();
        for conjunct in conjuncts {
            if let Expr::Binary { op: op @ (BinaryOp::Eq | BinaryOp::IsNotDistinctFrom), left: a, right: b, .. } = &conjunct {
                let pair = if subset(a, probe_ids) && subset(b, build_ids) {
                    Some(((**a).clone(), (**b).clone()))
                } else if subset(b, probe_ids) && subset(a, build_ids) {
                    Some(((**b).clone(), (**a).clone()))
                } else {
                    None
                };
                if let Some((p, b)) = pair {
                    if p.data_type().physical() == b.data_type().physical() {
                        if *op == BinaryOp::IsNotDistinctFrom {
                            null_safe_keys += 1;
                        } else {
                            plain_keys += 1;
                        }
                        candidates.push((p, b, *op == BinaryOp::IsNotDistinctFrom, conjunct));
                        continue;
                    }
                }
            }
            residual.push(conjunct);
        }
        // One packer per join: keys are either all null-safe or none; the minority moves
        // to the residual.
        let null_safe = null_safe_keys > 0 && plain_keys == 0;
        for (p, b, is_null_safe, conjunct) in candidates {
            if is_null_safe == null_safe {
                probe_keys.push(p);
                build_keys.push(b);
            } else {
                residual.push(conjunct);
            }
        }
        let residual_expr = Expr::conjunction(residual);

        // Columns each side must provide.
        let mut residual_columns = BTreeSet::new();
        if let Some(r) = &residual_expr {
            r.collect_columns(&mut residual_columns);
        }
        let mut probe_needed: BTreeSet<ColumnId> = required.iter().filter(|c| probe_ids.contains(c)).copied().collect();
        let mut build_needed: BTreeSet<ColumnId> = required.iter().filter(|c| build_ids.contains(c)).copied().collect();
        for k in &probe_keys {
            k.collect_columns(&mut probe_needed);
        }
        for k in &build_keys {
            k.collect_columns(&mut build_needed);
        }
        probe_needed.extend(residual_columns.iter().filter(|c| probe_ids.contains(c)));
        build_needed.extend(residual_columns.iter().filter(|c| build_ids.contains(c)));

        // Build side.
        let build_branches = self.plan_node(build_plan, &build_needed)?;
        let build_layout = build_branches.first().map(|b| b.layout.clone()).unwrap_or_default();
        let mut aligned = build_branches;
        for branch in aligned.iter_mut() {
            self.reorder_to(branch, &build_layout)?;
        }
        let build_layout_ids: Vec<ColumnId> = build_layout.iter().map(|c| c.id).collect();
        let build_payload: Vec<usize> = build_layout
            .iter()
            .enumerate()
            .filter(|(_, c)| (required.contains(&c.id) && mode_outputs_build(mode)) || residual_columns.contains(&c.id))
            .map(|(i, _)| i)
            .collect();
        let build_payload_columns: Vec<ColumnRef> = build_payload.iter().map(|&i| build_layout[i].clone()).collect();
        let compiled_build_keys = build_keys.iter().map(|k| self.compile_expr(k, &build_layout_ids)).collect::<Result<Vec<_>>>()?;

        // Probe side.
        let mut probe_branches = self.plan_node(probe_plan, &probe_needed)?;
        let probe_layout = probe_branches.first().map(|b| b.layout.clone()).unwrap_or_default();
        for branch in probe_branches.iter_mut() {
            self.reorder_to(branch, &probe_layout)?;
        }
        let probe_layout_ids: Vec<ColumnId> = probe_layout.iter().map(|c| c.id).collect();
        let compiled_probe_keys = probe_keys.iter().map(|k| self.compile_expr(k, &probe_layout_ids)).collect::<Result<Vec<_>>>()?;
        let probe_output: Vec<usize> = if matches!(mode, JoinMode::BuildSemi | JoinMode::BuildAnti) {
            Vec::new()
        } else {
            probe_layout.iter().enumerate().filter(|(_, c)| required.contains(&c.id)).map(|(i, _)| i).collect()
        };
        let build_output: Vec<usize> = if mode_outputs_build(mode) {
            build_payload_columns.iter().enumerate().filter(|(_, c)| required.contains(&c.id)).map(|(i, _)| i).collect()
        } else {
            Vec::new()
        };
        // Residual over [probe columns it reads..., build payload columns it reads...].
        let probe_residual: Vec<usize> =
            probe_layout.iter().enumerate().filter(|(_, c)| residual_columns.contains(&c.id)).map(|(i, _)| i).collect();
        let build_residual: Vec<usize> =
            build_payload_columns.iter().enumerate().filter(|(_, c)| residual_columns.contains(&c.id)).map(|(i, _)| i).collect();
        let residual_layout: Vec<ColumnId> =
            probe_residual.iter().map(|&i| probe_layout[i].id).chain(build_residual.iter().map(|&i| build_payload_columns[i].id)).collect();
        let compiled_residual = residual_expr.as_ref().map(|r| self.compile_expr(r, &residual_layout)).transpose()?;
        let residual_comparison = residual_expr.as_ref().and_then(|r| residual_comparison(r, &probe_layout, &build_payload_columns));

        let mut description = format!("{mode:?}");
        if !probe_keys.is_empty() {
            let keys: Vec<String> = probe_keys.iter().zip(&build_keys).map(|(p, b)| format!("{p} = {b}")).collect();
            description.push_str(&format!(" ON {}", keys.join(" AND ")));
        }
        if let Some(r) = &residual_expr {
            description.push_str(&format!(" WHERE {r}"));
        }
        let probe_output_types: Vec<DataType> = probe_output.iter().map(|&i| probe_layout[i].data_type).collect();
        let spec = HashJoinSpec {
            mode,
            build_keys: compiled_build_keys,
            probe_keys: compiled_probe_keys,
            null_safe,
            build_payload: build_payload.clone(),
            build_payload_types: build_payload_columns.iter().map(|c| c.data_type).collect(),
            probe_output: probe_output.clone(),
            probe_output_types,
            build_output: build_output.clone(),
            residual: compiled_residual,
            probe_residual,
            build_residual,
            residual_comparison,
            parallelism: self.threads,
            prefetch_group: self.config.prefetch_group,
            description: description.clone(),
        };
        let join = self.stateful(|slot| HashJoin::new(spec, slot));
        let output_rows = apiary_optimizer::cardinality::join_estimate(kind, &estimate(left), &estimate(right), condition, None).rows;
        let estimate_note = format!(
            "(build ~{:.0} rows, probe ~{:.0} rows, output ~{output_rows:.0} rows)",
            if build_left { left_rows } else { right_rows },
            if build_left { right_rows } else { left_rows }
        );
        let build_sink =
            self.close(aligned, Arc::new(HashJoinBuild(Arc::clone(&join))), format!("HashJoinBuild {description} {estimate_note}"));

        // Output layout: probe outputs, then build outputs, then the mark.
        let mut layout: Vec<ColumnRef> = probe_output.iter().map(|&i| probe_layout[i].clone()).collect();
        layout.extend(build_output.iter().map(|&i| build_payload_columns[i].clone()));
        if let (JoinMode::Mark { .. }, Some(mark)) = (mode, mark) {
            layout.push(mark.clone());
        }
        let outer_nullable = |mut c: ColumnRef| {
            c.nullable = true;
            c
        };
        // A probe row without a partner leaves the join: the scan producing a probe key can
        // drop rows outside the range of the build keys (runtime filter).
        let drops_unmatched_probe_rows =
            matches!(mode, JoinMode::Inner | JoinMode::Semi | JoinMode::BuildOuter | JoinMode::BuildSemi | JoinMode::BuildAnti);
        if drops_unmatched_probe_rows && !null_safe {
            for branch in probe_branches.iter_mut() {
                let Some((scan, read_ids)) = &branch.scan else { continue };
                // Keys that are columns of the scan: (position in the scan's columns, column).
                let scan_keys: Vec<Option<(usize, &ColumnRef)>> = probe_keys
                    .iter()
                    .map(|key| match key {
                        Expr::Column(column) => branch.scan_position(read_ids, column.id).map(|position| (position, column)),
                        _ => None,
                    })
                    .collect();
                // The scan tests the keys against the build's Bloom filter (or direct table)
                // before it decodes its other columns when it has them all: rows that cannot
                // match never reach a vector, and the survivors are gathered densely (a stage
                // boundary), also when the probe comes right after the scan.
                let all_keys: Option<Vec<(usize, &ColumnRef)>> = scan_keys.iter().copied().collect();
                let mut membership = false;
                if let Some(all_keys) = all_keys.filter(|keys| !keys.is_empty()) {
                    let positions = all_keys.iter().map(|(position, _)| *position).collect();
                    if scan.add_membership_filter(positions, Arc::clone(&join) as Arc<dyn KeyRangeSource>) {
                        membership = true;
                        let names: Vec<&str> = all_keys.iter().map(|(_, column)| &column.name[..]).collect();
                        let keys = if names.len() == 1 { names[0].to_string() } else { format!("({})", names.join(", ")) };
                        branch.steps[0].push_str(&format!(" runtime filter: {keys} in build keys [sink #{build_sink}]"));
                    }
                }
                // Integer keys are also filtered by the range of their build keys: blocks
                // whose zone map is outside are skipped (implied by "in build keys" in the
                // plan), and rows outside are dropped one by one only without a membership
                // test, which drops them anyway.
                for (k, key) in scan_keys.iter().enumerate() {
                    let Some((position, column)) = key else { continue };
                    if integer_key(column.data_type) {
                        scan.add_range_filter(*position, Arc::clone(&join) as Arc<dyn KeyRangeSource>, k, !membership);
                        if !membership {
                            branch.steps[0]
                                .push_str(&format!(" runtime filter: {} in range of build keys [sink #{build_sink}]", column.name));
                        }
                    }
                }
            }
        }
        let probe_branch_ids: Vec<usize> = probe_branches.iter().map(|b| b.id).collect();
        if matches!(mode, JoinMode::BuildSemi | JoinMode::BuildAnti) {
            // The probe only marks build rows; the build rows are emitted afterwards.
            for branch in probe_branches.iter_mut() {
                branch.operators.push(Arc::new(HashJoinProbe(Arc::clone(&join))));
                branch.after_sinks.push(build_sink);
                branch.steps.push(format!("-> HashJoinProbe {description} (marks build rows) [build sink #{build_sink}]"));
            }
            self.close(probe_branches, Arc::new(DiscardSink), "Discard".to_string());
            let mut emitted = self.new_branch(
                Arc::new(HashJoinUnmatched(Arc::clone(&join))),
                layout.clone(),
                format!("HashJoinBuildRows {description} [build sink #{build_sink}]"),
            );
            emitted.after_branches = probe_branch_ids;
            emitted.after_sinks.push(build_sink);
            return Ok(vec![emitted]);
        }
        for branch in probe_branches.iter_mut() {
            // A stage boundary in front of a probe that follows another operator (whose
            // output may be sparse); it is active only for tables larger than the cache.
            if self.config.staging && !branch.operators.is_empty() {
                branch.operators.push(Arc::new(StageBoundary::before_probe(Arc::clone(&join))));
                branch.steps.push("-> StageBoundary".to_string());
            }
            branch.operators.push(Arc::new(HashJoinProbe(Arc::clone(&join))));
            branch.after_sinks.push(build_sink);
            branch.steps.push(format!("-> HashJoinProbe {description} [build sink #{build_sink}]"));
            branch.layout = layout.clone().into_iter().map(|c| if mode == JoinMode::Inner { c } else { outer_nullable(c) }).collect();
            if mode == JoinMode::Inner && !null_safe {
                for (probe_key, build_key) in probe_keys.iter().zip(&build_keys) {
                    if let (Expr::Column(p), Expr::Column(b)) = (probe_key, build_key) {
                        branch.equal_columns.push((p.id, b.id));
                    }
                }
            }
        }
        if matches!(mode, JoinMode::BuildOuter | JoinMode::FullOuter) {
            let mut unmatched = self.new_branch(
                Arc::new(HashJoinUnmatched(Arc::clone(&join))),
                layout.clone(),
                format!("HashJoinUnmatched {description} [build sink #{build_sink}]"),
            );
            unmatched.after_branches = probe_branch_ids;
            unmatched.after_sinks.push(build_sink);
            probe_branches.push(unmatched);
        }
        Ok(probe_branches)
    }
}

/// Whether `plan` gives every row of one stored table, as its columns: no filter, join,
/// limit or computed column in between, and not a file read in place (whose statistics
/// may lack distinct counts).
fn reads_a_whole_table(plan: &LogicalPlan) -> bool {
    match plan {
        LogicalPlan::Scan(scan) => scan.filters.is_empty() && scan.table.deferred_rows().is_none(),
        LogicalPlan::Project { exprs, input } => exprs.iter().all(|(e, _)| matches!(e, Expr::Column(_))) && reads_a_whole_table(input),
        _ => false,
    }
}

fn mode_outputs_build(mode: JoinMode) -> bool {
    matches!(
        mode,
        JoinMode::Inner
            | JoinMode::ProbeOuter
            | JoinMode::BuildOuter
            | JoinMode::FullOuter
            | JoinMode::Single
            | JoinMode::BuildSemi
            | JoinMode::BuildAnti
    )
}

/// A join's residual when it compares an integer column of the probe side with one of the
/// build side (either maybe widened by a cast): tested on the candidate pairs in place.
fn residual_comparison(residual: &Expr, probe: &[ColumnRef], build: &[ColumnRef]) -> Option<ResidualComparison> {
    let Expr::Binary { op, left, right, .. } = residual else { return None };
    let kind = comparison_kind(*op)?;
    fn width(t: DataType) -> Option<u8> {
        match t {
            DataType::SmallInt => Some(16),
            DataType::Integer => Some(32),
            DataType::BigInt => Some(64),
            _ => None,
        }
    }
    fn integer_column(e: &Expr) -> Option<&ColumnRef> {
        match e {
            Expr::Column(c) => width(c.data_type).map(|_| c),
            // Widening casts keep every value; narrowing ones could fail.
            Expr::Cast { expr, to } => match expr.as_ref() {
                Expr::Column(c) if width(c.data_type)? <= width(*to)? => Some(c),
                _ => None,
            },
            _ => None,
        }
    }
    let (l, r) = (integer_column(left)?, integer_column(right)?);
    let position = |columns: &[ColumnRef], c: &ColumnRef| columns.iter().position(|x| x.id == c.id);
    if let (Some(p), Some(b)) = (position(probe, l), position(build, r)) {
        return Some(ResidualComparison { probe: p, build: b, op: kind });
    }
    Some(ResidualComparison { probe: position(probe, r)?, build: position(build, l)?, op: comparison_kind(op.flipped())? })
}

/// Inclusive-flagged bounds on a value (`None`: unbounded).
type Bounds<T> = (Option<(T, bool)>, Option<(T, bool)>);

/// For a conjunct `column <op> constant` (either side) with a comparison `op`: the column,
/// the constant, and the bounds the comparison puts on the column's values, the constant
/// mapped by `bound` (`None` when it does not map).
fn column_bounds<'e, T: Clone>(
    conjunct: &'e Expr,
    bound: impl FnOnce(&'e ColumnRef, &'e ScalarValue) -> Option<T>,
) -> Option<(&'e ColumnRef, Bounds<T>)> {
    let Expr::Binary { op, left, right, .. } = conjunct else { return None };
    let (column, value, op) = match (left.as_ref(), right.as_ref()) {
        (Expr::Column(c), Expr::Literal(v, _)) => (c, v, *op),
        (Expr::Literal(v, _), Expr::Column(c)) => (c, v, op.flipped()),
        _ => return None,
    };
    if !matches!(op, BinaryOp::Eq | BinaryOp::Lt | BinaryOp::LtEq | BinaryOp::Gt | BinaryOp::GtEq) {
        return None;
    }
    let v = bound(column, value)?;
    let bounds = match op {
        BinaryOp::Eq => (Some((v.clone(), true)), Some((v, true))),
        BinaryOp::Lt => (None, Some((v, false))),
        BinaryOp::LtEq => (None, Some((v, true))),
        BinaryOp::Gt => (Some((v, false)), None),
        _ => (Some((v, true)), None),
    };
    Some((column, bounds))
}

/// The range of physical values a conjunct `column <op> constant` keeps, for a column
/// stored as integers (integers, dates, times, timestamps, decimals of up to 18 digits)
/// compared with a constant of its own type: packed stripes test it on their codes.
fn value_range(conjunct: &Expr, read_ids: &[ColumnId], scan: &Scan) -> Option<ValueRange> {
    let mut position = 0;
    let (_, (lower, upper)) = column_bounds(conjunct, |column, value| {
        position = read_ids.iter().position(|id| *id == column.id)?;
        let data_type = scan.columns[position].1.data_type;
        if !matches!(data_type.physical(), PhysicalType::I16 | PhysicalType::I32 | PhysicalType::I64) {
            return None;
        }
        // The constant's physical value, when it is of the column's type (a decimal of the
        // column's scale): then comparing physical values compares the SQL values.
        match (value, data_type) {
            (
                ScalarValue::Int16(_) | ScalarValue::Int32(_) | ScalarValue::Int64(_),
                DataType::SmallInt | DataType::Integer | DataType::BigInt,
            ) => value.as_i128(),
            (ScalarValue::Date(v), DataType::Date) => Some(*v as i128),
            (ScalarValue::Timestamp(v), DataType::Timestamp) | (ScalarValue::TimestampTz(v), DataType::TimestampTz) => Some(*v as i128),
            (ScalarValue::Time(v), DataType::Time) => Some(*v as i128),
            (ScalarValue::Decimal(v, _, scale), DataType::Decimal { scale: column_scale, .. }) if *scale == column_scale => Some(*v),
            _ => None,
        }
    })?;
    Some(ValueRange { position, lower, upper })
}

/// Range conditions of scan filters that zone maps can test.
fn zone_predicates(scan: &Scan) -> Vec<ZonePredicate> {
    let mut predicates = Vec::new();
    for filter in &scan.filters {
        // Zone maps hold values of the column's own type; the literal has the same type.
        let usable = |_: &ColumnRef, value: &ScalarValue| {
            (!value.is_null() && !matches!(value, ScalarValue::Interval(_) | ScalarValue::Boolean(_))).then(|| value.clone())
        };
        let Some((column, (lower, upper))) = column_bounds(filter, usable) else { continue };
        let Some(table_column) = scan.columns.iter().find(|(_, c)| c.id == column.id).map(|(i, _)| *i) else { continue };
        predicates.push(ZonePredicate { column: table_column, lower, upper });
    }
    predicates
}

/// Whether a window aggregate is computed with a grouping state rather than the window
/// operator's prefix sums and segment trees: DISTINCT, ORDER BY inside the call, and the
/// aggregates (or argument types) those do not cover.
fn needs_aggregate_state(call: &apiary_sql::window::WindowCall, func: AggregateFunction) -> bool {
    use AggregateFunction as F;
    let numeric = call.args.first().is_some_and(|a| a.data_type().is_numeric());
    // min/max/bool_*/any_value are the same with DISTINCT.
    let distinct_matters = !matches!(func, F::Min | F::Max | F::BoolAnd | F::BoolOr | F::AnyValue);
    (call.distinct && distinct_matters)
        || !call.aggregate_order.is_empty()
        || match func {
            F::CountStar | F::Count | F::Min | F::Max | F::BoolAnd | F::BoolOr | F::AnyValue => false,
            F::StddevSamp | F::StddevPop | F::VarSamp | F::VarPop => call.args.first().is_none_or(|a| a.data_type() != DataType::Double),
            F::Sum | F::Avg => !numeric,
            _ => true,
        }
}

/// The most rows of materialized CTE `id` that `body` can read: `offset + limit` when its
/// only scan in `body` sits under a LIMIT with nothing but projections between them
/// (PostgreSQL reads a recursive CTE lazily, so `WITH RECURSIVE t AS (... UNION ALL ...)
/// SELECT * FROM t LIMIT 10` ends although the recursion alone would not). `None` when it
/// is scanned more than once, or a filter, sort, join or aggregate could need more rows.
fn rows_read_by_limit(body: &LogicalPlan, id: usize) -> Option<u64> {
    /// Per scan of `id`: the LIMIT right above it (through projections), if any.
    fn visit(node: &LogicalPlan, id: usize, above: Option<u64>, found: &mut Vec<Option<u64>>) {
        match node {
            LogicalPlan::CteScan(scan) if scan.id == id => found.push(above),
            LogicalPlan::Limit { limit, offset, input } => {
                visit(input, id, limit.and_then(|l| l.checked_add(*offset)), found);
            }
            LogicalPlan::Project { exprs, input } if !exprs.iter().any(|(e, _)| e.contains_subquery()) => visit(input, id, above, found),
            other => {
                for child in other.children() {
                    visit(child, id, None, found);
                }
            }
        }
    }
    let mut found = Vec::new();
    visit(body, id, None, &mut found);
    match found.as_slice() {
        [only] => *only,
        _ => None,
    }
}
