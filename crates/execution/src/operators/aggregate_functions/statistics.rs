//! Two-variable statistics over (y, x) pairs: `corr`, `covar_pop`, `covar_samp`,
//! `regr_slope`, `regr_intercept`, `regr_count`, `regr_r2`, `regr_avgx`, `regr_avgy`,
//! `regr_sxx`, `regr_syy`, `regr_sxy` (PostgreSQL's definitions; `y` is the first
//! argument). Rows where either value is NULL are skipped.
//!
//! Per group: the count, both means, and the sums of squared and cross deviations,
//! updated with Welford's method and merged with Chan et al.'s formulas, so partial
//! states of parallel workers combine without loss of precision.

use std::any::Any;

use apiary_common::{internal_err, Result};
use apiary_sql::expr::AggregateFunction;
use apiary_types::{DataType, Vector, VectorData};

use super::{downcast, validity_from, AggregateState};

#[derive(Clone, Copy, Default)]
struct Moments {
    n: f64,
    mean_x: f64,
    mean_y: f64,
    /// Sum of (x - mean_x)^2.
    sxx: f64,
    /// Sum of (y - mean_y)^2.
    syy: f64,
    /// Sum of (x - mean_x)(y - mean_y).
    sxy: f64,
}

impl Moments {
    #[inline]
    fn add(&mut self, y: f64, x: f64) {
        self.n += 1.0;
        let dx = x - self.mean_x;
        let dy = y - self.mean_y;
        self.mean_x += dx / self.n;
        self.mean_y += dy / self.n;
        self.sxx += dx * (x - self.mean_x);
        self.syy += dy * (y - self.mean_y);
        self.sxy += dx * (y - self.mean_y);
    }

    fn combine(&mut self, other: &Moments) {
        if other.n == 0.0 {
            return;
        }
        let n = self.n + other.n;
        let dx = other.mean_x - self.mean_x;
        let dy = other.mean_y - self.mean_y;
        let weight = self.n * other.n / n;
        self.sxx += other.sxx + dx * dx * weight;
        self.syy += other.syy + dy * dy * weight;
        self.sxy += other.sxy + dx * dy * weight;
        self.mean_x += dx * other.n / n;
        self.mean_y += dy * other.n / n;
        self.n = n;
    }

    /// The aggregate's value, `None` for NULL.
    fn result(&self, func: AggregateFunction) -> Option<f64> {
        use AggregateFunction as F;
        let n = self.n;
        if n == 0.0 {
            return None;
        }
        match func {
            F::CovarPop => Some(self.sxy / n),
            F::CovarSamp => (n > 1.0).then(|| self.sxy / (n - 1.0)),
            F::Corr => (self.sxx != 0.0 && self.syy != 0.0).then(|| self.sxy / (self.sxx * self.syy).sqrt()),
            F::RegrSlope => (self.sxx != 0.0).then(|| self.sxy / self.sxx),
            F::RegrIntercept => (self.sxx != 0.0).then(|| self.mean_y - self.sxy / self.sxx * self.mean_x),
            F::RegrR2 if self.sxx == 0.0 => None,
            F::RegrR2 if self.syy == 0.0 => Some(1.0),
            F::RegrR2 => Some(self.sxy * self.sxy / (self.sxx * self.syy)),
            F::RegrAvgX => Some(self.mean_x),
            F::RegrAvgY => Some(self.mean_y),
            F::RegrSxx => Some(self.sxx),
            F::RegrSyy => Some(self.syy),
            F::RegrSxy => Some(self.sxy),
            _ => None,
        }
    }
}

pub(super) struct TwoVariableState {
    moments: Vec<Moments>,
    func: AggregateFunction,
}

impl TwoVariableState {
    pub(super) fn new(func: AggregateFunction) -> TwoVariableState {
        TwoVariableState { moments: Vec::new(), func }
    }
}

impl AggregateState for TwoVariableState {
    fn resize(&mut self, groups: usize) {
        self.moments.resize(groups, Moments::default());
    }

    fn update(&mut self, inputs: &[Vector], rows: &[u32], groups: &[u32]) -> Result<()> {
        let [y, x, ..] = inputs else { return Err(internal_err!("{} needs two arguments", self.func.name())) };
        let (ys, xs) = (y.values::<f64>(), x.values::<f64>());
        for (&r, &g) in rows.iter().zip(groups) {
            let r = r as usize;
            if y.is_valid(r) && x.is_valid(r) {
                self.moments[g as usize].add(ys[r], xs[r]);
            }
        }
        Ok(())
    }

    fn merge(&mut self, other: &mut dyn AggregateState, mapping: &[u32]) -> Result<()> {
        let other = downcast::<TwoVariableState>(other)?;
        for (g, m) in other.moments.iter().enumerate() {
            self.moments[mapping[g] as usize].combine(m);
        }
        Ok(())
    }

    fn finalize(&mut self) -> Result<Vector> {
        if self.func == AggregateFunction::RegrCount {
            let counts: Vec<i64> = self.moments.iter().map(|m| m.n as i64).collect();
            return Ok(Vector::from_native(DataType::BigInt, counts));
        }
        let results: Vec<Option<f64>> = self.moments.iter().map(|m| m.result(self.func)).collect();
        let seen: Vec<bool> = results.iter().map(Option::is_some).collect();
        let values: Vec<f64> = results.iter().map(|r| r.unwrap_or(0.0)).collect();
        Ok(Vector::new(DataType::Double, VectorData::F64(values.into()), validity_from(&seen)))
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merged_moments_equal_one_pass() {
        let points = [(1.0, 2.0), (2.0, 3.5), (4.0, 1.0), (3.0, 7.0), (5.5, 2.5)];
        let mut whole = Moments::default();
        points.iter().for_each(|&(y, x)| whole.add(y, x));
        let (mut a, mut b) = (Moments::default(), Moments::default());
        points[..2].iter().for_each(|&(y, x)| a.add(y, x));
        points[2..].iter().for_each(|&(y, x)| b.add(y, x));
        a.combine(&b);
        for func in [AggregateFunction::Corr, AggregateFunction::CovarSamp, AggregateFunction::RegrSlope, AggregateFunction::RegrR2] {
            let (one, two) = (whole.result(func).unwrap(), a.result(func).unwrap());
            assert!((one - two).abs() < 1e-12, "{func:?}: {one} vs {two}");
        }
    }
}
