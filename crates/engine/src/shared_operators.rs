//! Shared operators between concurrent queries (DataPath's shared selection and
//! aggregation waypoints, ../shared/papers/003).
//!
//! Queries that aggregate the same tables the same way and differ only in the constants
//! of their scan filters (the TPC-H queries with different substitution parameters, a
//! dashboard's tiles over different date ranges) run as one **group**: one scan of each
//! table, one pass of every predicate, one join of each pair, one hash aggregation for
//! all of them.
//!
//! ```text
//!   member i:  upper_i ── Aggregate[g](aggs) ── Scan t  filter: common ∧ own_i
//!
//!   the group: Aggregate[g, mask](partial aggs) ── Project mask = query_mask(own_0, own_1, ...)
//!                ── Scan t  filter: common ∧ query_mask(own_0, own_1, ...) ≠ 0
//!
//!   member i then:  upper_i ── Project ── Aggregate[g](merge partials)
//!                     ── Scan shared_rows  filter: mask & 2^i ≠ 0
//! ```
//!
//! Over inner joins (the aggregation's input may be any tree of inner joins, filters and
//! projections of scans), each scan whose filters differ between members computes its
//! rows' masks as above, and each join whose inputs both carry masks gives its output row
//! `mask_and(left, right)` and drops it when that is 0: a joined row qualifies for a
//! member exactly when both its rows do (DataPath's shared join waypoint, with per-row
//! query bits on the build and the probe side). Outer, semi and anti joins are not
//! shared: their output depends on rows their own query did not keep.
//!
//! Every row carries the set of member queries it qualifies for (`mask`, DataPath's query
//! bitmap), and is aggregated once, keyed by its group *and* its mask. Rows qualifying for
//! the same queries fall in the same (group, mask) entry, so for range predicates over
//! one column (which nest), eight queries produce at most nine masks per group: the
//! aggregation costs what one query's does. Each member then merges the entries of its
//! bit into its own groups (sums of sums, sums of counts, min of mins, `avg` from its sum
//! and count) and runs the rest of its plan (HAVING, ORDER BY, LIMIT, ...) on its own.
//!
//! **Forming groups.** A query that can share joins an open group of its template (its
//! aggregation with the filter constants blanked), or opens one. The opener waits until
//! no other query is being planned and none has joined for a quiet window, at most
//! [`MAX_WAIT`]. The window is [`QUIET_WINDOW`] when a partner is likely (other queries
//! are being planned, or a query of the template runs alone) and `SET
//! shared_operators_wait` (default 0) otherwise: by default a query whose template nobody
//! else runs starts at once (it may be folded later), and only queries arriving together
//! or after one of their template wait, briefly, for partners. (Waiting whenever the
//! engine was busy made a late query of a mix of templates 40% slower.) A group of one
//! runs the query's own plan, registered (like a query that started alone) so that a group
//! of its template forming while it has done less than [`FOLD_BEFORE`] of its work folds
//! it in. If the group's execution fails (a member's filter raises an error, the memory
//! limit), every member runs alone, so one failing query fails only itself.
//!
//! Groups are formed over aggregations the optimizer expects to have at most
//! [`MAX_GROUPS`] groups: the group's (group, mask) rows are kept as a table that each
//! member scans for its bit, so the merge costs a scan of those rows per member.
//!
//! This is work sharing, not result caching: nothing outlives the group.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use apiary_common::{internal_err, ApiaryError, Result};
use apiary_execution::{execute, QueryMeta};
use apiary_optimizer::cardinality;
use apiary_sql::binder::sum_type;
use apiary_sql::expr::{ColumnId, ColumnRef};
use apiary_sql::plan::{JoinKind, Scan};
use apiary_sql::{AggregateCall, AggregateFunction, BinaryOp, Expr, LogicalPlan, ScalarFunction};
use apiary_storage::Table;
use apiary_types::{DataChunk, DataType, Field, ScalarValue, Schema};

use crate::connection::Connection;

/// How long a group's opener waits for another member after the last one joined, when
/// the engine is busy (`SET shared_operators_wait` sets it for an idle engine too).
pub const QUIET_WINDOW: Duration = Duration::from_millis(2);
/// The longest a group's opener waits for members (unless `shared_operators_wait` is
/// longer).
pub const MAX_WAIT: Duration = Duration::from_millis(10);
/// The most queries in one group (the bits of the mask).
pub const MAX_MEMBERS: usize = 64;
/// Groups are formed only over aggregations expected to have at most this many groups:
/// each member scans all the group's (group, mask) rows for those of its bit (TPC-H Q3
/// and Q10, at about 0.3M expected groups at SF1, still gain).
pub const MAX_GROUPS: f64 = 1_000_000.0;
/// A query running alone is folded into a group of its template only while it has done
/// less than this fraction of its work orders.
pub const FOLD_BEFORE: f64 = 0.5;
/// How often a member waiting for its group checks whether it was cancelled.
const CANCEL_POLL: Duration = Duration::from_millis(2);

/// The groups still gathering members, across the database's connections.
#[derive(Default)]
pub(crate) struct SharedGroups {
    open: Mutex<Vec<Arc<Group>>>,
    /// Queries being parsed and planned now: each may join a group once planned.
    planning: AtomicUsize,
    /// Queries that could share but started alone (nobody else was there): a group that
    /// forms while one has done little of its work folds it in.
    alone: Mutex<Vec<Arc<LoneQuery>>>,
}

/// A query running alone that a group of its template may fold in.
struct LoneQuery {
    template: LogicalPlan,
    filters: ScanFilters,
    connection: u64,
    interrupted: Arc<AtomicBool>,
    /// Set (with the query's interrupt flag) by the group that folded it: the group and
    /// its member number there.
    folded: Mutex<Option<(Arc<Group>, usize)>>,
}

/// Counts a query as being planned while it lives (see [`SharedGroups::planning`]).
pub(crate) struct Planning<'a>(&'a SharedGroups);

impl<'a> Planning<'a> {
    pub(crate) fn start(groups: &'a SharedGroups) -> Self {
        groups.planning.fetch_add(1, Ordering::SeqCst);
        Planning(groups)
    }
}

impl Drop for Planning<'_> {
    fn drop(&mut self) {
        self.0.planning.fetch_sub(1, Ordering::SeqCst);
    }
}

struct Group {
    /// The shared aggregation with the constants of its scan filters blanked.
    template: LogicalPlan,
    /// The opener's aggregation (the group's plan is built from it).
    core: LogicalPlan,
    state: Mutex<GroupState>,
    changed: Condvar,
    /// Cancels the group's execution (set once every member has gone).
    cancel: Arc<AtomicBool>,
}

/// A query's filters of each scan of its shared core, in [`find_core`]'s order of the
/// scans: conjunct `j` of scan `k` has the same template in every member of a group.
type ScanFilters = Vec<Vec<Expr>>;

#[derive(Default)]
struct GroupState {
    /// Each member's scan filters.
    filters: Vec<ScanFilters>,
    /// Each member's connection.
    connections: Vec<u64>,
    gone: Vec<bool>,
    last_join: Option<Instant>,
    outcome: Option<Outcome>,
}

impl GroupState {
    /// Adds a member with these scan filters; its member number.
    fn add_member(&mut self, filters: ScanFilters, connection: u64) -> usize {
        self.filters.push(filters);
        self.connections.push(connection);
        self.gone.push(false);
        self.last_join = Some(Instant::now());
        self.filters.len() - 1
    }
}

#[derive(Clone)]
enum Outcome {
    /// The group ran: its (group, mask) rows.
    Shared(Arc<SharedRows>),
    /// Each member runs alone (a group of one, or the group's execution failed).
    Alone,
}

/// The group's result: per (group key, mask), the keys, the mask and the partial
/// aggregates, as a table of the group's (no catalog's) that each member scans for the
/// rows of its bit.
struct SharedRows {
    table: Arc<Table>,
    /// How many group keys come before the mask.
    keys: usize,
    /// How many queries the group had.
    members: usize,
}

/// Runs `plan` in a group with other queries of its template when it can share; `None`
/// when it runs alone (the caller then runs it as usual).
pub(crate) fn run_shared(connection: &Connection, plan: &LogicalPlan) -> Result<Option<Vec<DataChunk>>> {
    let Some((core, scans)) = find_core(plan) else { return Ok(None) };
    if !can_share(connection, core) {
        return Ok(None);
    }
    let filters: ScanFilters = scans.iter().map(|scan| scan.filters.clone()).collect();
    let db = connection.db();
    let template = blank_filter_constants(core);
    let wait = connection.settings().shared_operators_wait;
    // Waiting for partners pays only when one is likely: other queries are being planned
    // now (arriving together), or a query of the template runs (alone, foldable).
    // Otherwise the query starts at once and can be folded itself.
    let others_planning = db.shared_groups.planning.load(Ordering::SeqCst) > 0;
    let partner_running = db.shared_groups.alone.lock().unwrap_or_else(|e| e.into_inner()).iter().any(|a| a.template == template);
    let quiet_window = if others_planning || partner_running { wait.max(QUIET_WINDOW) } else { wait };
    let (group, member) = {
        let mut open = db.shared_groups.open.lock().unwrap_or_else(|e| e.into_inner());
        let joined = open.iter().find(|g| g.template == template).and_then(|group| {
            let mut state = group.state.lock().unwrap_or_else(|e| e.into_inner());
            (state.outcome.is_none() && state.filters.len() < MAX_MEMBERS).then(|| {
                let member = state.add_member(filters.clone(), connection.id());
                group.changed.notify_all();
                (Arc::clone(group), member)
            })
        });
        match joined {
            Some(joined) => joined,
            None if quiet_window.is_zero() => {
                drop(open);
                return run_alone(connection, plan, core, &template, filters);
            }
            None => {
                let mut state = GroupState::default();
                let member = state.add_member(filters.clone(), connection.id());
                let group = Arc::new(Group {
                    template: template.clone(),
                    core: core.clone(),
                    state: Mutex::new(state),
                    changed: Condvar::new(),
                    cancel: Arc::new(AtomicBool::new(false)),
                });
                open.push(Arc::clone(&group));
                (group, member)
            }
        }
    };
    if member == 0 {
        gather_and_start(connection, &group, quiet_window);
    }
    match finish_as_member(connection, plan, core, &group, member)? {
        Some(chunks) => Ok(Some(chunks)),
        // Nobody joined (or the group failed): it runs alone, where a group of its
        // template forming while it has done little can still fold it in. Under load,
        // that is how queries arriving apart meet: each runs slowly, sharing the workers
        // with the others, and the next one of its template folds it.
        None => run_alone(connection, plan, core, &template, filters),
    }
}

/// Waits for the group's rows and merges this member's; `None` when it must run alone.
fn finish_as_member(
    connection: &Connection,
    plan: &LogicalPlan,
    core: &LogicalPlan,
    group: &Group,
    member: usize,
) -> Result<Option<Vec<DataChunk>>> {
    let shared = match wait_for_outcome(connection, group, member)? {
        Outcome::Alone => return Ok(None),
        Outcome::Shared(rows) => rows,
    };
    let member_plan = member_plan(plan, core, &shared, member)?;
    let chunks = connection.run_plan(&member_plan)?;
    connection.last_shared_with.store(shared.members, Ordering::Relaxed);
    Ok(Some(chunks))
}

/// Runs the query's own plan, where a group forming meanwhile can fold it in: the group
/// takes its filters as a member and interrupts the run, and the query then waits for the
/// group like any member (the little work it did is lost; the group does it again).
fn run_alone(
    connection: &Connection,
    plan: &LogicalPlan,
    core: &LogicalPlan,
    template: &LogicalPlan,
    filters: ScanFilters,
) -> Result<Option<Vec<DataChunk>>> {
    let groups = &connection.db().shared_groups;
    let alone = Arc::new(LoneQuery {
        template: template.clone(),
        filters,
        connection: connection.id(),
        interrupted: connection.interrupt_flag(),
        folded: Mutex::new(None),
    });
    groups.alone.lock().unwrap_or_else(|e| e.into_inner()).push(Arc::clone(&alone));
    let result = connection.run_plan(plan);
    // No group folds it from here on.
    groups.alone.lock().unwrap_or_else(|e| e.into_inner()).retain(|a| !Arc::ptr_eq(a, &alone));
    let folded = alone.folded.lock().unwrap_or_else(|e| e.into_inner()).take();
    match (result, folded) {
        (Err(ApiaryError::Interrupted), Some((group, member))) => {
            // The interrupt was the fold's (a query interrupted by its user is never
            // folded: the group checks the flag first).
            alone.interrupted.store(false, Ordering::Relaxed);
            match finish_as_member(connection, plan, core, &group, member)? {
                Some(chunks) => Ok(Some(chunks)),
                None => connection.run_plan(plan).map(Some),
            }
        }
        (result, folded) => {
            if let Some((group, member)) = folded {
                // It finished before the fold's interrupt stopped it: the group need not
                // wait for it, and the interrupt is not the user's.
                group.state.lock().unwrap_or_else(|e| e.into_inner()).gone[member] = true;
                alone.interrupted.store(false, Ordering::Relaxed);
            }
            result.map(Some)
        }
    }
}

/// Folds into `group` the queries of its template running alone that have done less than
/// [`FOLD_BEFORE`] of their work orders.
fn fold_lone_queries(connection: &Connection, group: &Arc<Group>) {
    let db = connection.db();
    let alone = db.shared_groups.alone.lock().unwrap_or_else(|e| e.into_inner());
    if !alone.iter().any(|a| a.template == group.template) {
        return;
    }
    let progress = db.scheduler.queries();
    for candidate in alone.iter().filter(|a| a.template == group.template) {
        let done = progress
            .iter()
            .filter(|q| q.connection == candidate.connection)
            .map(|q| q.work_orders_done as f64 / q.work_orders_total.max(1) as f64)
            .fold(0.0, f64::max);
        let mut folded = candidate.folded.lock().unwrap_or_else(|e| e.into_inner());
        let mut state = group.state.lock().unwrap_or_else(|e| e.into_inner());
        if folded.is_some() || done >= FOLD_BEFORE || state.filters.len() >= MAX_MEMBERS {
            continue;
        }
        // A query its user has interrupted is not folded (its interrupt must stop it). A
        // user's interrupt landing between this check and the fold's is taken for the
        // fold's, and the query finishes as a member.
        if candidate.interrupted.load(Ordering::Relaxed) {
            continue;
        }
        let member = state.add_member(candidate.filters.clone(), candidate.connection);
        *folded = Some((Arc::clone(group), member));
        candidate.interrupted.store(true, Ordering::Relaxed);
    }
}

/// The query's aggregation a group can share, and the scans under it (in pre-order):
/// reached from the root through operators with one input, an aggregation over inner
/// joins, filters and projections of table scans.
fn find_core(plan: &LogicalPlan) -> Option<(&LogicalPlan, Vec<&Scan>)> {
    match plan {
        LogicalPlan::Sort { input, .. }
        | LogicalPlan::Limit { input, .. }
        | LogicalPlan::Project { input, .. }
        | LogicalPlan::Filter { input, .. } => find_core(input),
        LogicalPlan::Aggregate { input, grouping_sets: None, .. } => {
            let mut scans = Vec::new();
            collect_scans(input, &mut scans).then_some((plan, scans))
        }
        _ => None,
    }
}

/// Appends the scans of a subtree of inner joins, filters and projections over scans;
/// `false` when the subtree has another operator. Only through those do the query masks
/// of the scans combine exactly (a joined row qualifies for the queries both its rows
/// qualify for); an outer, semi or anti join's output depends on rows its query did not
/// keep.
fn collect_scans<'a>(plan: &'a LogicalPlan, scans: &mut Vec<&'a Scan>) -> bool {
    match plan {
        LogicalPlan::Scan(scan) => {
            scans.push(scan);
            true
        }
        LogicalPlan::Filter { input, .. } | LogicalPlan::Project { input, .. } => collect_scans(input, scans),
        LogicalPlan::Join { kind: JoinKind::Inner, left, right, mark: None, .. } => {
            collect_scans(left, scans) && collect_scans(right, scans)
        }
        _ => false,
    }
}

/// Whether the aggregation's partial results merge exactly, it reads only the catalog's
/// tables (not a table function's), has neither subqueries nor parameters, and has few
/// groups.
fn can_share(connection: &Connection, core: &LogicalPlan) -> bool {
    let LogicalPlan::Aggregate { aggregates, .. } = core else { return false };
    use AggregateFunction as F;
    let mergeable = aggregates.iter().all(|(call, _)| {
        !call.distinct
            && matches!(call.func, F::CountStar | F::Count | F::Sum | F::Avg | F::Min | F::Max | F::AnyValue | F::BoolAnd | F::BoolOr)
    });
    fn plain(plan: &LogicalPlan) -> bool {
        plan.expressions().iter().all(|e| !e.contains_subquery() && !e.contains_parameter()) && plan.children().into_iter().all(plain)
    }
    mergeable && plain(core) && connection.reads_only_catalog_tables(core) && cardinality::estimate(core).rows <= MAX_GROUPS
}

/// The aggregation with every literal of its scan filters replaced by a NULL of its type:
/// queries whose templates are equal differ only in those constants.
fn blank_filter_constants(core: &LogicalPlan) -> LogicalPlan {
    fn blank(plan: &mut LogicalPlan) {
        match plan {
            LogicalPlan::Scan(scan) => {
                let filters = std::mem::take(&mut scan.filters);
                scan.filters = filters
                    .into_iter()
                    .map(|f| {
                        f.transform_up(&mut |e| match e {
                            Expr::Literal(_, data_type) => Expr::Literal(ScalarValue::Null, data_type),
                            other => other,
                        })
                    })
                    .collect();
            }
            LogicalPlan::Aggregate { input, .. } | LogicalPlan::Filter { input, .. } | LogicalPlan::Project { input, .. } => blank(input),
            LogicalPlan::Join { left, right, .. } => {
                blank(left);
                blank(right);
            }
            _ => {}
        }
    }
    let mut template = core.clone();
    blank(&mut template);
    template
}

/// The opener: waits for members while they keep coming, closes the group, and starts its
/// execution on a thread of its own (so that it goes on if the opener is cancelled).
fn gather_and_start(connection: &Connection, group: &Arc<Group>, quiet_window: Duration) {
    let db = connection.db();
    let opened = Instant::now();
    let max_wait = MAX_WAIT.max(quiet_window);
    loop {
        let state = group.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        // While other queries are being planned, they may join: wait for them too.
        let others_planning = db.shared_groups.planning.load(Ordering::SeqCst) > 0;
        let quiet_until = state.last_join.unwrap_or(opened) + quiet_window;
        let deadline = if others_planning { opened + max_wait } else { quiet_until.min(opened + max_wait) };
        if now >= deadline || state.filters.len() >= MAX_MEMBERS || connection.interrupt_flag().load(Ordering::Relaxed) {
            break;
        }
        // Planning ends without a notification: look again soon while it goes on.
        let timeout = if others_planning { (deadline - now).min(Duration::from_micros(200)) } else { deadline - now };
        drop(group.changed.wait_timeout(state, timeout).unwrap_or_else(|e| e.into_inner()));
    }
    // Close: from here on, queries of this template open a new group.
    db.shared_groups.open.lock().unwrap_or_else(|e| e.into_inner()).retain(|g| !Arc::ptr_eq(g, group));
    fold_lone_queries(connection, group);
    let (filters, connections) = {
        let state = group.state.lock().unwrap_or_else(|e| e.into_inner());
        (state.filters.clone(), state.connections.clone())
    };
    if filters.len() < 2 {
        finish(group, Outcome::Alone);
        return;
    }
    let plan = match group_plan(&group.core, &filters) {
        Ok(plan) => plan,
        Err(_) => {
            finish(group, Outcome::Alone);
            return;
        }
    };
    let db = Arc::clone(db);
    let config = connection.settings().execution.clone();
    let meta = QueryMeta {
        sql: format!(
            "/* shared operators: {} queries, connections {} */ {}",
            filters.len(),
            connections.iter().map(u64::to_string).collect::<Vec<_>>().join(", "),
            connection.current_sql()
        ),
        ..connection.query_meta(&plan)
    };
    let group = Arc::clone(group);
    let members = filters.len();
    let keys = match &group.core {
        LogicalPlan::Aggregate { groups, .. } => groups.len(),
        _ => 0,
    };
    let block_rows = connection.settings().block_rows;
    std::thread::spawn(move || {
        let outcome = execute(&db.scheduler, &plan, &config, Arc::clone(&group.cancel), meta)
            .and_then(|(chunks, _, _)| shared_rows(&chunks, &plan.output(), keys, members, block_rows))
            .map_or(Outcome::Alone, |rows| Outcome::Shared(Arc::new(rows)));
        finish(&group, outcome);
    });
}

fn finish(group: &Group, outcome: Outcome) {
    let mut state = group.state.lock().unwrap_or_else(|e| e.into_inner());
    state.outcome = Some(outcome);
    group.changed.notify_all();
}

/// Waits for the group's rows; a member cancelled meanwhile leaves (the last one to
/// leave cancels the group's execution).
fn wait_for_outcome(connection: &Connection, group: &Group, member: usize) -> Result<Outcome> {
    let interrupted = connection.interrupt_flag();
    let mut state = group.state.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        if let Some(outcome) = &state.outcome {
            return Ok(outcome.clone());
        }
        if interrupted.load(Ordering::Relaxed) {
            state.gone[member] = true;
            if state.gone.iter().all(|&gone| gone) {
                group.cancel.store(true, Ordering::Relaxed);
            }
            return Err(ApiaryError::Interrupted);
        }
        state = group.changed.wait_timeout(state, CANCEL_POLL).unwrap_or_else(|e| e.into_inner()).0;
    }
}

/// The group's plan: each scan keeps the rows some member wants (the filters every member
/// has, and a nonzero mask of the members whose own filters the row passes), joined rows
/// carry the intersection of their rows' masks (and are dropped when it is empty), and the
/// aggregation is keyed by group and mask.
fn group_plan(core: &LogicalPlan, members: &[ScanFilters]) -> Result<LogicalPlan> {
    let LogicalPlan::Aggregate { groups, aggregates, input, .. } = core else {
        return Err(internal_err!("shared core is not an aggregation"));
    };
    let mut ids = FreshIds::after(core);
    let mut next_scan = 0;
    let (masked, mask) = with_masks(input, members, &mut next_scan, &mut ids)?;
    let (masked, mask) = match mask {
        Some(mask) => (masked, mask),
        // Every member has the same filters: every row is every member's.
        None => {
            let mask = ids.column("query_mask", DataType::BigInt, false);
            let everyone = Expr::Function {
                func: ScalarFunction::QueryMask,
                args: vec![Expr::boolean(true); members.len()],
                data_type: DataType::BigInt,
            };
            (project_with(masked, (everyone, mask.clone())), mask)
        }
    };
    let mut shared_groups = groups.clone();
    shared_groups.push((mask.expr(), ids.column("query_mask", DataType::BigInt, false)));
    let mut partials = Vec::new();
    for (call, _) in aggregates {
        for partial in partial_calls(call) {
            let output = ids.column("partial", partial.data_type, true);
            partials.push((partial, output));
        }
    }
    Ok(LogicalPlan::Aggregate { groups: shared_groups, aggregates: partials, grouping_sets: None, input: Box::new(masked) })
}

/// `plan` with its outputs and one more column.
fn project_with(plan: LogicalPlan, extra: (Expr, ColumnRef)) -> LogicalPlan {
    let mut exprs: Vec<(Expr, ColumnRef)> = plan.output().into_iter().map(|c| (c.expr(), c)).collect();
    exprs.push(extra);
    LogicalPlan::Project { exprs, input: Box::new(plan) }
}

/// The subtree of the group's plan for `plan` (a subtree that [`collect_scans`] accepts),
/// and its column of query masks (`None` where every member keeps the same rows).
fn with_masks(
    plan: &LogicalPlan,
    members: &[ScanFilters],
    next_scan: &mut usize,
    ids: &mut FreshIds,
) -> Result<(LogicalPlan, Option<ColumnRef>)> {
    Ok(match plan {
        LogicalPlan::Scan(scan) => {
            let k = *next_scan;
            *next_scan += 1;
            let filters: Vec<&[Expr]> = members
                .iter()
                .map(|m| m.get(k).map(Vec::as_slice))
                .collect::<Option<_>>()
                .ok_or_else(|| internal_err!("members of a shared group with different scans"))?;
            let conjuncts = filters[0].len();
            if filters.iter().any(|f| f.len() != conjuncts) {
                return Err(internal_err!("members of a shared group with different filters"));
            }
            let common: Vec<bool> = (0..conjuncts).map(|j| filters.iter().all(|f| f[j] == filters[0][j])).collect();
            if common.iter().all(|&c| c) {
                return Ok((LogicalPlan::Scan(Scan { filters: filters[0].to_vec(), ..scan.clone() }), None));
            }
            // Each member's own conjuncts (those that differ between members).
            let own: Vec<Vec<Expr>> =
                filters.iter().map(|f| f.iter().zip(&common).filter(|(_, &c)| !c).map(|(f, _)| f.clone()).collect()).collect();
            let query_mask = Expr::Function {
                func: ScalarFunction::QueryMask,
                args: own.iter().map(|conjuncts| Expr::conjunction(conjuncts.iter().cloned()).unwrap_or(Expr::boolean(true))).collect(),
                data_type: DataType::BigInt,
            };
            // The scan keeps the rows some member wants (and gathers them into full
            // vectors); the projection computes the masks again, for those rows only.
            let mut kept: Vec<Expr> = filters[0].iter().zip(&common).filter(|(_, &c)| c).map(|(f, _)| f.clone()).collect();
            // Bounds every member puts on a column hold for the rows some member wants: the
            // scan tests their hull first (on packed codes and zone maps), and the masks
            // only for the rows inside it.
            kept.extend(hull_of_bounds(&own));
            kept.push(Expr::compare(BinaryOp::NotEq, query_mask.clone(), Expr::literal(ScalarValue::Int64(0))));
            let mask = ids.column("query_mask", DataType::BigInt, false);
            (project_with(LogicalPlan::Scan(Scan { filters: kept, ..scan.clone() }), (query_mask, mask.clone())), Some(mask))
        }
        LogicalPlan::Filter { predicate, input } => {
            let (input, mask) = with_masks(input, members, next_scan, ids)?;
            (LogicalPlan::Filter { predicate: predicate.clone(), input: Box::new(input) }, mask)
        }
        LogicalPlan::Project { exprs, input } => {
            let (input, mask) = with_masks(input, members, next_scan, ids)?;
            let mut exprs = exprs.clone();
            exprs.extend(mask.iter().map(|m| (m.expr(), m.clone())));
            (LogicalPlan::Project { exprs, input: Box::new(input) }, mask)
        }
        LogicalPlan::Join { kind: JoinKind::Inner, left, right, condition, mark: None } => {
            let (left, left_mask) = with_masks(left, members, next_scan, ids)?;
            let (right, right_mask) = with_masks(right, members, next_scan, ids)?;
            let join = LogicalPlan::Join {
                kind: JoinKind::Inner,
                left: Box::new(left),
                right: Box::new(right),
                condition: condition.clone(),
                mark: None,
            };
            match (left_mask, right_mask) {
                (Some(l), Some(r)) => {
                    // The joined row is the queries' that both its rows are.
                    let mask = ids.column("query_mask", DataType::BigInt, false);
                    let both =
                        Expr::Function { func: ScalarFunction::MaskAnd, args: vec![l.expr(), r.expr()], data_type: DataType::BigInt };
                    let exprs = join
                        .output()
                        .into_iter()
                        .filter(|c| c.id != l.id && c.id != r.id)
                        .map(|c| (c.expr(), c))
                        .chain([(both, mask.clone())])
                        .collect();
                    let projected = LogicalPlan::Project { exprs, input: Box::new(join) };
                    let some_query = Expr::compare(BinaryOp::NotEq, mask.expr(), Expr::literal(ScalarValue::Int64(0)));
                    (LogicalPlan::Filter { predicate: some_query, input: Box::new(projected) }, Some(mask))
                }
                (mask, None) | (None, mask) => (join, mask),
            }
        }
        _ => return Err(internal_err!("a shared aggregation over {}", plan.display_indent().lines().next().unwrap_or_default())),
    })
}

/// A bound `column <op> constant` puts on its column: the side, the constant (a literal
/// expression) and whether the bound is inclusive.
struct Bound {
    column: ColumnRef,
    lower: bool,
    value: Expr,
    inclusive: bool,
}

/// The bounds of a conjunct `column <op> literal` (either way round; `=` bounds both
/// sides).
fn bounds_of(conjunct: &Expr) -> Vec<Bound> {
    let Expr::Binary { op, left, right, .. } = conjunct else { return Vec::new() };
    let (column, literal, op) = match (&**left, &**right) {
        (Expr::Column(c), l @ Expr::Literal(v, _)) if !v.is_null() => (c, l, *op),
        (l @ Expr::Literal(v, _), Expr::Column(c)) if !v.is_null() => (c, l, op.flipped()),
        _ => return Vec::new(),
    };
    let bound = |lower, inclusive| Bound { column: column.clone(), lower, value: literal.clone(), inclusive };
    match op {
        BinaryOp::Gt => vec![bound(true, false)],
        BinaryOp::GtEq => vec![bound(true, true)],
        BinaryOp::Lt => vec![bound(false, false)],
        BinaryOp::LtEq => vec![bound(false, true)],
        BinaryOp::Eq => vec![bound(true, true), bound(false, true)],
        _ => Vec::new(),
    }
}

/// Whether bound `a` keeps fewer values than `b` on their (common) side.
fn tighter(a: &Bound, b: &Bound) -> bool {
    let (Expr::Literal(x, _), Expr::Literal(y, _)) = (&a.value, &b.value) else { return false };
    match x.total_cmp(y) {
        std::cmp::Ordering::Equal => !a.inclusive && b.inclusive,
        std::cmp::Ordering::Greater => a.lower,
        std::cmp::Ordering::Less => !a.lower,
    }
}

/// For each column and side that every member bounds, the loosest of the members'
/// (tightest) bounds, as a conjunct: a row that passes some member's conjuncts passes
/// it. `members[i]` are member `i`'s conjuncts.
fn hull_of_bounds(members: &[Vec<Expr>]) -> Vec<Expr> {
    // Each member's tightest bound per (column, side).
    let tightest: Vec<Vec<Bound>> = members
        .iter()
        .map(|conjuncts| {
            let mut kept: Vec<Bound> = Vec::new();
            for bound in conjuncts.iter().flat_map(|c| c.clone().split_conjunction()).flat_map(|c| bounds_of(&c)) {
                match kept.iter_mut().find(|k| k.column.id == bound.column.id && k.lower == bound.lower) {
                    Some(k) if tighter(&bound, k) => *k = bound,
                    Some(_) => {}
                    None => kept.push(bound),
                }
            }
            kept
        })
        .collect();
    let Some((first, others)) = tightest.split_first() else { return Vec::new() };
    let mut hull = Vec::new();
    for bound in first {
        let mut loosest = bound;
        let mut everyone = true;
        for other in others {
            match other.iter().find(|o| o.column.id == bound.column.id && o.lower == bound.lower) {
                Some(o) if tighter(loosest, o) => loosest = o,
                Some(_) => {}
                None => everyone = false,
            }
        }
        if everyone {
            let op = match (loosest.lower, loosest.inclusive) {
                (true, true) => BinaryOp::GtEq,
                (true, false) => BinaryOp::Gt,
                (false, true) => BinaryOp::LtEq,
                (false, false) => BinaryOp::Lt,
            };
            hull.push(Expr::compare(op, loosest.column.expr(), loosest.value.clone()));
        }
    }
    hull
}

/// The aggregates each member merges into its own: `avg` as a sum and a count, the others
/// as themselves.
fn partial_calls(call: &AggregateCall) -> Vec<AggregateCall> {
    match call.func {
        AggregateFunction::Avg => {
            let input = call.args[0].data_type();
            vec![
                AggregateCall { func: AggregateFunction::Sum, data_type: sum_type(input), ..call.clone() },
                AggregateCall { func: AggregateFunction::Count, data_type: DataType::BigInt, ..call.clone() },
            ]
        }
        _ => vec![call.clone()],
    }
}

/// The group's result as a table: the columns of the group's plan (keys, mask,
/// partial aggregates).
fn shared_rows(chunks: &[DataChunk], output: &[ColumnRef], keys: usize, members: usize, block_rows: usize) -> Result<SharedRows> {
    let fields = output.iter().map(|c| Field::new(c.name.to_string(), c.data_type, c.nullable)).collect();
    let table = Arc::new(Table::new("shared_rows", Schema::new(fields), block_rows));
    let mut appender = table.appender()?;
    for chunk in chunks {
        appender.append(chunk)?;
    }
    appender.commit()?;
    Ok(SharedRows { table, keys, members })
}

/// Column ids above every id `plan` uses.
struct FreshIds {
    next: u32,
}

impl FreshIds {
    fn after(plan: &LogicalPlan) -> FreshIds {
        let mut max = 0;
        let mut pending = vec![plan];
        while let Some(node) = pending.pop() {
            for column in node.output() {
                max = max.max(column.id.0);
            }
            if let LogicalPlan::Scan(scan) = node {
                for (_, column) in &scan.columns {
                    max = max.max(column.id.0);
                }
            }
            pending.extend(node.children());
        }
        FreshIds { next: max + 1 }
    }

    fn column(&mut self, name: &str, data_type: DataType, nullable: bool) -> ColumnRef {
        let id = ColumnId(self.next);
        self.next += 1;
        ColumnRef { id, name: name.into(), data_type, nullable }
    }
}

/// Member `member`'s plan: its own plan with its aggregation replaced by the merge of the
/// group's rows whose mask has its bit.
fn member_plan(plan: &LogicalPlan, core: &LogicalPlan, shared: &SharedRows, member: usize) -> Result<LogicalPlan> {
    let LogicalPlan::Aggregate { groups, aggregates, .. } = core else { return Err(internal_err!("shared core is not an aggregation")) };
    let mut ids = FreshIds::after(plan);
    let columns: Vec<(usize, ColumnRef)> =
        shared.table.schema.fields.iter().enumerate().map(|(i, f)| (i, ids.column(&f.name, f.data_type, f.nullable))).collect();
    let mask = columns.get(shared.keys).map(|(_, c)| c.clone()).ok_or_else(|| internal_err!("shared rows without masks"))?;
    let bit = Expr::literal(ScalarValue::Int64((1u64 << member) as i64));
    let mine = Expr::compare(
        BinaryOp::NotEq,
        Expr::Function { func: ScalarFunction::MaskAnd, args: vec![mask.expr(), bit], data_type: DataType::BigInt },
        Expr::literal(ScalarValue::Int64(0)),
    );
    let values: Vec<ColumnRef> = columns.iter().filter(|(i, _)| *i != shared.keys).map(|(_, c)| c.clone()).collect();
    let rows = LogicalPlan::Scan(Scan { table: Arc::clone(&shared.table), label: "shared_rows".into(), columns, filters: vec![mine] });
    let mut merged_groups = Vec::with_capacity(groups.len());
    let mut outputs = Vec::with_capacity(groups.len() + aggregates.len());
    for ((_, key), value) in groups.iter().zip(&values) {
        merged_groups.push((value.expr(), key.clone()));
        outputs.push((key.expr(), key.clone()));
    }
    let mut partials = values[groups.len()..].iter();
    let mut next_partial = || partials.next().cloned().ok_or_else(|| internal_err!("shared aggregation has too few columns"));
    let mut merges = Vec::new();
    let merge = |func: AggregateFunction, partial: &ColumnRef, data_type: DataType| {
        AggregateCall::new(func, vec![partial.expr()], false, None, data_type)
    };
    use AggregateFunction as F;
    for (call, output) in aggregates {
        let result = match call.func {
            F::Avg => {
                let (sum, count) = (next_partial()?, next_partial()?);
                let merged_sum = ids.column("sum", sum.data_type, true);
                let merged_count = ids.column("count", DataType::BigInt, true);
                merges.push((merge(F::Sum, &sum, sum.data_type), merged_sum.clone()));
                merges.push((merge(F::Sum, &count, DataType::BigInt), merged_count.clone()));
                Expr::Function {
                    func: ScalarFunction::AverageOf,
                    args: vec![merged_sum.expr(), merged_count.expr()],
                    data_type: call.data_type,
                }
            }
            F::Count | F::CountStar => {
                let merged = ids.column("count", DataType::BigInt, true);
                merges.push((merge(F::Sum, &next_partial()?, DataType::BigInt), merged.clone()));
                // A sum over no rows is NULL; a count is 0.
                Expr::Function {
                    func: ScalarFunction::Coalesce,
                    args: vec![merged.expr(), Expr::Literal(ScalarValue::Int64(0), DataType::BigInt)],
                    data_type: DataType::BigInt,
                }
            }
            func => {
                let merged = ids.column(func.name(), call.data_type, true);
                merges.push((merge(func, &next_partial()?, call.data_type), merged.clone()));
                merged.expr()
            }
        };
        outputs.push((result, output.clone()));
    }
    let merged = LogicalPlan::Project {
        exprs: outputs,
        input: Box::new(LogicalPlan::Aggregate { groups: merged_groups, aggregates: merges, grouping_sets: None, input: Box::new(rows) }),
    };
    replace_core(plan, core, merged)
}

/// `plan` with the node `core` (reached as [`find_core`] reaches it) replaced.
fn replace_core(plan: &LogicalPlan, core: &LogicalPlan, replacement: LogicalPlan) -> Result<LogicalPlan> {
    if std::ptr::eq(plan, core) {
        return Ok(replacement);
    }
    let rebuilt = |input: &LogicalPlan| replace_core(input, core, replacement).map(Box::new);
    Ok(match plan {
        LogicalPlan::Sort { keys, input } => LogicalPlan::Sort { keys: keys.clone(), input: rebuilt(input)? },
        LogicalPlan::Limit { limit, offset, input } => LogicalPlan::Limit { limit: *limit, offset: *offset, input: rebuilt(input)? },
        LogicalPlan::Project { exprs, input } => LogicalPlan::Project { exprs: exprs.clone(), input: rebuilt(input)? },
        LogicalPlan::Filter { predicate, input } => LogicalPlan::Filter { predicate: predicate.clone(), input: rebuilt(input)? },
        _ => return Err(internal_err!("the shared aggregation is not where it was found")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn column(name: &str, id: u32) -> ColumnRef {
        ColumnRef { id: ColumnId(id), name: name.into(), data_type: DataType::Integer, nullable: true }
    }

    fn compare(op: BinaryOp, column: &ColumnRef, value: i32) -> Expr {
        Expr::compare(op, column.expr(), Expr::Literal(ScalarValue::Int32(value), DataType::Integer))
    }

    #[test]
    fn the_hull_takes_each_side_every_member_bounds_at_its_loosest() {
        let (x, y) = (column("x", 1), column("y", 2));
        use BinaryOp::*;
        let members = vec![
            vec![compare(GtEq, &x, 10), compare(Lt, &x, 20), compare(Eq, &y, 5), compare(GtEq, &x, 5)],
            // The constant on the left: 30 <= x.
            vec![Expr::compare(LtEq, Expr::Literal(ScalarValue::Int32(30), DataType::Integer), x.expr()), compare(LtEq, &x, 40)],
            vec![compare(Gt, &x, 10), compare(Lt, &x, 50), compare(Gt, &y, 1)],
        ];
        let hull: Vec<String> = hull_of_bounds(&members).iter().map(ToString::to_string).collect();
        // x >= 10 (10 inclusive is looser than 10 exclusive), x < 50; y has no upper bound
        // in the last member and no lower bound in the second.
        assert_eq!(hull, [compare(GtEq, &x, 10).to_string(), compare(Lt, &x, 50).to_string()]);
        // A member without a bound on a side leaves that side open.
        let open = vec![vec![compare(GtEq, &x, 10)], vec![compare(Lt, &x, 3)]];
        assert!(hull_of_bounds(&open).is_empty());
        // Equalities bound both sides.
        let points = vec![vec![compare(Eq, &x, 7)], vec![compare(Eq, &x, 3)]];
        let hull: Vec<String> = hull_of_bounds(&points).iter().map(ToString::to_string).collect();
        assert_eq!(hull, [compare(GtEq, &x, 3).to_string(), compare(LtEq, &x, 7).to_string()]);
    }
}
