//! A running query's share of the memory budget (`SET memory_limit`).
//!
//! Sinks report what their worker states hold (`Sink::local_memory`); the pipeline
//! charges growth after every chunk a sink consumes, so a single work order that keeps
//! producing (a cross join, a huge group-by) fails at the limit instead of running past
//! it. The reservation is released when the query ends.

use std::sync::{Arc, Mutex};

use apiary_common::Result;
use apiary_storage::BufferPool;

/// Growth below this is not reserved yet (reserving takes the pool's lock).
pub const MEMORY_REPORT_STEP: usize = 1 << 20;

pub struct QueryMemory {
    pool: Arc<BufferPool>,
    reserved: Mutex<usize>,
}

impl QueryMemory {
    pub fn new(pool: Arc<BufferPool>) -> QueryMemory {
        QueryMemory { pool, reserved: Mutex::new(0) }
    }

    /// Reserves `bytes` more for this query; fails (naming the limit) when they do not fit.
    pub fn grow(&self, bytes: usize) -> Result<()> {
        self.pool.reserve_query(bytes)?;
        *self.reserved.lock().unwrap_or_else(|e| e.into_inner()) += bytes;
        Ok(())
    }

    /// Brings a worker state's reservation up to `now` bytes: `reported` is what it
    /// reserved so far (updated). Cheap unless it grew by [`MEMORY_REPORT_STEP`].
    pub fn charge(&self, reported: &mut usize, now: usize) -> Result<()> {
        if now >= reported.saturating_add(MEMORY_REPORT_STEP) {
            let growth = now - *reported;
            *reported = now;
            self.grow(growth)?;
        }
        Ok(())
    }

    /// Returns `bytes` of the reservation to the budget early: what a recursive CTE's
    /// finished iteration held (its states are dropped).
    pub fn shrink(&self, bytes: usize) {
        let mut reserved = self.reserved.lock().unwrap_or_else(|e| e.into_inner());
        let bytes = bytes.min(*reserved);
        *reserved -= bytes;
        self.pool.release_query(bytes);
    }

    /// The budget all queries share.
    pub fn pool(&self) -> &BufferPool {
        &self.pool
    }

    /// Bytes this query holds in the budget.
    pub fn reserved(&self) -> usize {
        *self.reserved.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Returns everything to the budget (the query ended; a worker may still hold the
    /// query for a moment, so this does not wait for the drop).
    pub fn release(&self) {
        let mut reserved = self.reserved.lock().unwrap_or_else(|e| e.into_inner());
        self.pool.release_query(std::mem::take(&mut *reserved));
    }
}

impl Drop for QueryMemory {
    fn drop(&mut self) {
        self.release();
    }
}
