//! Test fixtures: a catalog of small tables with data (so statistics and cardinality
//! estimates are real), SQL bound through [`Binder`], rules applied one at a
//! time, and checks on the resulting plans.
//!
//! ```text
//! TestDb::new().table("t", 100, "a NOT NULL, b")   tables: INTEGER or DATE columns, row i holds i
//!   .plan(sql, &[rule, ...]) ─▶ Binder ─▶ rule ─▶ rule ─▶ LogicalPlan (checked after each)
//! ```

use std::collections::BTreeSet;
use std::sync::Arc;

use apiary_common::{not_impl_err, Result};
use apiary_optimizer::{optimize, ConstantEvaluator, OptimizerContext, RuleReport};
use apiary_sql::binder::NoTableFunctions;
use apiary_sql::expr::{BinaryOp, ColumnId, ColumnRef, Expr, ScalarFunction, UnaryOp};
use apiary_sql::parser::parse_sql;
use apiary_sql::{Binder, LogicalPlan};
use apiary_storage::{Catalog, Table};
use apiary_types::{DataChunk, DataType, Field, ScalarValue, Schema, Vector};

/// Where [`TestDb::context`] starts numbering new columns.
const FIRST_HAND_BUILT_COLUMN_ID: u32 = 1_000_000;

/// A rule's entry point (`apiary_optimizer::rules::<name>::run`).
pub type Rule = fn(LogicalPlan, &mut OptimizerContext) -> Result<LogicalPlan>;

/// A catalog of test tables.
pub struct TestDb {
    catalog: Catalog,
}

impl TestDb {
    pub fn new() -> TestDb {
        TestDb { catalog: Catalog::new() }
    }

    /// Adds table `name` with `rows` rows and columns described as `"a NOT NULL, b, d DATE"`
    /// (INTEGER unless DATE is given); row `i` holds `i` in every column (so each
    /// column has `rows` distinct values, and the estimates scale with `rows`), or `i % n`
    /// in a column described as `"c MOD n"`.
    pub fn table(self, name: &str, rows: usize, columns: &str) -> TestDb {
        let fields: Vec<Field> = columns
            .split(',')
            .map(|spec| {
                let words: Vec<&str> = spec.split_whitespace().collect();
                let nullable = !words.ends_with(&["NOT", "NULL"]);
                let data_type = if words.get(1) == Some(&"DATE") { DataType::Date } else { DataType::Integer };
                Field::new(words[0], data_type, nullable)
            })
            .collect();
        let values: Vec<i32> = (0..rows).map(|i| i32::try_from(i).expect("test tables are small")).collect();
        // DATE is stored as i32 days, like INTEGER; `MOD n` makes a column of `i % n`.
        let vectors: Vec<Vector> = columns
            .split(',')
            .zip(&fields)
            .map(|(spec, f)| {
                let words: Vec<&str> = spec.split_whitespace().collect();
                let modulo =
                    words.iter().position(|w| *w == "MOD").and_then(|p| words.get(p + 1)).map(|n| n.parse::<i32>().expect("MOD n"));
                Vector::from_native(f.data_type, values.iter().map(|v| modulo.map_or(*v, |m| v % m)).collect::<Vec<i32>>())
            })
            .collect();
        let table = Arc::new(Table::new(name, Schema::new(fields), 1 << 16));
        let mut appender = table.appender().expect("appender");
        appender.append(&DataChunk::new(vectors, rows)).expect("append");
        appender.commit().expect("commit");
        self.catalog.create_table(table).expect("new table name");
        self
    }

    /// The bound (unoptimized) plan of `sql` and the next free column id.
    pub fn bind(&self, sql: &str) -> (LogicalPlan, u32) {
        let statements = parse_sql(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
        let [sqlparser::ast::Statement::Query(query)] = statements.as_slice() else { panic!("{sql}: not one query") };
        let functions = NoTableFunctions;
        let bound = Binder::new(&self.catalog, &functions).bind_query(query).unwrap_or_else(|e| panic!("{sql}: {e}"));
        assert_well_formed(&bound.plan);
        (bound.plan, bound.next_column_id)
    }

    /// A context for running a rule on a plan built by hand from [`TestDb::plan`]'s output:
    /// its new column ids start far above any the test plans use.
    pub fn context(&self) -> OptimizerContext<'static> {
        OptimizerContext::new(FIRST_HAND_BUILT_COLUMN_ID, &TestEvaluator)
    }

    /// `sql` bound, then rewritten by `rules` in order; checks the plan after every rule.
    pub fn try_plan(&self, sql: &str, rules: &[Rule]) -> Result<LogicalPlan> {
        let (mut plan, next_column_id) = self.bind(sql);
        let evaluator = TestEvaluator;
        let mut ctx = OptimizerContext::new(next_column_id, &evaluator);
        for rule in rules {
            plan = rule(plan, &mut ctx)?;
            assert_well_formed(&plan);
        }
        Ok(plan)
    }

    /// Like [`TestDb::try_plan`], panicking on errors.
    pub fn plan(&self, sql: &str, rules: &[Rule]) -> LogicalPlan {
        self.try_plan(sql, rules).unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// [`TestDb::plan`] as EXPLAIN's indented text.
    pub fn explain(&self, sql: &str, rules: &[Rule]) -> String {
        self.plan(sql, rules).display_indent()
    }

    /// All rules (the optimizer as queries run it), with the report of which changed the plan.
    pub fn optimize(&self, sql: &str) -> (LogicalPlan, Vec<RuleReport>) {
        let (plan, next_column_id) = self.bind(sql);
        let evaluator = TestEvaluator;
        let mut ctx = OptimizerContext::new(next_column_id, &evaluator);
        let (plan, reports) = optimize(plan, &mut ctx).unwrap_or_else(|e| panic!("{sql}: {e}"));
        assert_well_formed(&plan);
        (plan, reports)
    }
}

/// Asserts that `actual` (EXPLAIN text) equals `expected`, written as an indented block:
/// the common leading indentation and the first and last blank lines are ignored.
#[track_caller]
pub fn assert_plan(actual: &str, expected: &str) {
    let lines: Vec<&str> = expected.lines().skip_while(|l| l.trim().is_empty()).collect();
    let lines = &lines[..lines.iter().rposition(|l| !l.trim().is_empty()).map_or(0, |p| p + 1)];
    let indent = lines.iter().filter(|l| !l.trim().is_empty()).map(|l| l.len() - l.trim_start().len()).min().unwrap_or(0);
    let expected: String = lines.iter().map(|l| format!("{}\n", l.get(indent..).unwrap_or("").trim_end())).collect();
    let actual: String = actual.lines().map(|l| format!("{}\n", l.trim_end())).collect();
    assert!(actual == expected, "plan differs\n--- expected\n{expected}--- actual\n{actual}");
}

/// Every expression reads only columns its node's inputs produce (or, inside a subquery,
/// the enclosing query's columns; in a join's right side, also its left side's: a LATERAL
/// subquery before `unnest_subqueries`), and no column id is produced twice: the
/// invariants the physical planner relies on ("column X (#N) is not in the input"
/// otherwise).
#[track_caller]
pub fn assert_well_formed(plan: &LogicalPlan) {
    let mut produced = BTreeSet::new();
    if let Err(problem) = check_node(plan, &BTreeSet::new(), &mut produced) {
        panic!("malformed plan: {problem}\n{}", plan.display_indent());
    }
}

fn check_node(plan: &LogicalPlan, outer: &BTreeSet<ColumnId>, produced: &mut BTreeSet<ColumnId>) -> std::result::Result<(), String> {
    let produced_before = produced.clone();
    match plan {
        LogicalPlan::Join { left, right, .. } => {
            check_node(left, outer, produced)?;
            let lateral: BTreeSet<ColumnId> = outer.iter().copied().chain(left.output_ids()).collect();
            check_node(right, &lateral, produced)?;
        }
        _ => {
            for child in plan.children() {
                check_node(child, outer, produced)?;
            }
        }
    }
    let mut visible: BTreeSet<ColumnId> = match plan {
        // Scan filters read the scan's own columns.
        LogicalPlan::Scan(_) => plan.output_ids(),
        _ => plan.children().iter().flat_map(|c| c.output_ids()).collect(),
    };
    visible.extend(outer.iter().copied());
    let line = plan.display_indent().lines().next().unwrap_or_default().to_string();
    for expr in plan.expressions() {
        let mut error = None;
        expr.visit(&mut |e| match e {
            Expr::Column(c) if !visible.contains(&c.id) && error.is_none() => {
                error = Some(format!("{line}: column {} ({}) is not in the input", c.name, c.id));
            }
            Expr::Subquery(s) if error.is_none() => {
                let mut inner_produced = BTreeSet::new();
                if let Err(e) = check_node(&s.plan, &visible, &mut inner_produced) {
                    error = Some(e);
                }
            }
            _ => {}
        });
        if let Some(error) = error {
            return Err(error);
        }
    }
    // A projection or grouping of a column under its own id passes it through.
    let computed = |(e, c): &(Expr, ColumnRef)| !matches!(e, Expr::Column(input) if input.id == c.id);
    let new_columns: Vec<ColumnRef> = match plan {
        LogicalPlan::Scan(scan) => scan.columns.iter().map(|(_, c)| c.clone()).collect(),
        LogicalPlan::Values { output, .. } | LogicalPlan::Union { output, .. } | LogicalPlan::RecursiveCte { output, .. } => output.clone(),
        LogicalPlan::WorkTableScan(scan) => scan.columns.clone(),
        LogicalPlan::Project { exprs, .. } => exprs.iter().filter(|e| computed(e)).map(|(_, c)| c.clone()).collect(),
        LogicalPlan::Aggregate { groups, aggregates, .. } => {
            groups.iter().filter(|e| computed(e)).map(|(_, c)| c.clone()).chain(aggregates.iter().map(|(_, c)| c.clone())).collect()
        }
        LogicalPlan::Join { mark, .. } => mark.iter().cloned().collect(),
        _ => Vec::new(),
    };
    for column in new_columns {
        // A union may give its output the id of a column inside its inputs (the planner maps
        // union columns by position, and nothing else sees the inner one): `fold_constants`
        // does so for a FULL join that never matches.
        let redefined = matches!(plan, LogicalPlan::Union { .. }) && !produced_before.contains(&column.id);
        if !produced.insert(column.id) && !redefined {
            return Err(format!("{line}: column {} ({}) is produced twice", column.name, column.id));
        }
    }
    Ok(())
}

/// Nodes of `plan` (pre-order) for which `f` holds.
pub fn find<'a>(plan: &'a LogicalPlan, f: &dyn Fn(&LogicalPlan) -> bool) -> Vec<&'a LogicalPlan> {
    let mut found = Vec::new();
    fn walk<'a>(plan: &'a LogicalPlan, f: &dyn Fn(&LogicalPlan) -> bool, found: &mut Vec<&'a LogicalPlan>) {
        if f(plan) {
            found.push(plan);
        }
        for child in plan.children() {
            walk(child, f, found);
        }
    }
    walk(plan, f, &mut found);
    found
}

/// Evaluates constant expressions for `fold_constants` in these tests. The optimizer crate
/// cannot use the execution kernels (they depend on it), so this covers what the tests
/// fold: integer arithmetic (division by zero and overflow fail), comparisons, boolean
/// logic, IS NULL, casts, and CASE/COALESCE evaluating only the branch taken, as the
/// kernels do. Anything else fails, which the rule must treat like any failed evaluation:
/// leave the expression as it is.
pub struct TestEvaluator;

impl ConstantEvaluator for TestEvaluator {
    fn evaluate(&self, expr: &Expr) -> Result<ScalarValue> {
        evaluate(expr)
    }
}

fn evaluate(expr: &Expr) -> Result<ScalarValue> {
    use ScalarValue as S;
    Ok(match expr {
        Expr::Literal(value, _) => value.clone(),
        Expr::Cast { expr, to } => evaluate(expr)?.cast_to(to)?,
        Expr::IsNull { expr, negated } => S::Boolean(evaluate(expr)?.is_null() != *negated),
        Expr::Unary(UnaryOp::Not, e) => match evaluate(e)? {
            S::Boolean(b) => S::Boolean(!b),
            _ => S::Null,
        },
        Expr::Unary(UnaryOp::Negate, e) => match evaluate(e)?.as_i128() {
            Some(v) => integer(-v, e.data_type())?,
            None => S::Null,
        },
        Expr::Binary { op: op @ (BinaryOp::And | BinaryOp::Or), left, right, .. } => {
            let (l, r) = (evaluate(left)?.as_bool(), evaluate(right)?.as_bool());
            let dominant = *op == BinaryOp::Or;
            match (l, r) {
                (Some(x), _) | (_, Some(x)) if x == dominant => S::Boolean(dominant),
                (Some(_), Some(_)) => S::Boolean(!dominant),
                _ => S::Null,
            }
        }
        Expr::Binary { op, left, right, data_type } => {
            let (l, r) = (evaluate(left)?, evaluate(right)?);
            if l.is_null() || r.is_null() {
                return Ok(S::Null);
            }
            let (Some(a), Some(b)) = (l.as_i128(), r.as_i128()) else {
                return Err(not_impl_err!("test evaluator: {op:?} on {l} and {r}"));
            };
            let overflow = || apiary_common::ApiaryError::Execution(format!("overflow in {expr}"));
            match op {
                BinaryOp::Add => integer(a.checked_add(b).ok_or_else(overflow)?, *data_type)?,
                BinaryOp::Sub => integer(a.checked_sub(b).ok_or_else(overflow)?, *data_type)?,
                BinaryOp::Mul => integer(a.checked_mul(b).ok_or_else(overflow)?, *data_type)?,
                BinaryOp::Div | BinaryOp::Mod if b == 0 => {
                    return Err(apiary_common::ApiaryError::Execution("division by zero".into()));
                }
                BinaryOp::Div => integer(a / b, *data_type)?,
                BinaryOp::Mod => integer(a % b, *data_type)?,
                BinaryOp::Eq => S::Boolean(a == b),
                BinaryOp::NotEq => S::Boolean(a != b),
                BinaryOp::Lt => S::Boolean(a < b),
                BinaryOp::LtEq => S::Boolean(a <= b),
                BinaryOp::Gt => S::Boolean(a > b),
                BinaryOp::GtEq => S::Boolean(a >= b),
                other => return Err(not_impl_err!("test evaluator: {other:?}")),
            }
        }
        Expr::Case { whens, otherwise, data_type } => {
            for (when, then) in whens {
                if evaluate(when)?.as_bool() == Some(true) {
                    return evaluate(then)?.cast_to(data_type);
                }
            }
            match otherwise {
                Some(e) => evaluate(e)?.cast_to(data_type)?,
                None => S::Null,
            }
        }
        Expr::Function { func: ScalarFunction::Coalesce, args, data_type } => {
            for arg in args {
                let value = evaluate(arg)?;
                if !value.is_null() {
                    return value.cast_to(data_type);
                }
            }
            S::Null
        }
        other => return Err(not_impl_err!("test evaluator: {other}")),
    })
}

fn integer(value: i128, data_type: DataType) -> Result<ScalarValue> {
    ScalarValue::Int64(i64::try_from(value).map_err(|_| not_impl_err!("test evaluator: {value} overflows"))?).cast_to(&data_type)
}
