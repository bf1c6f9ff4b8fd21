//! The buffer pool: the memory budget (`SET memory_limit`) and the cache of decoded column
//! stripes of a database file, evicted LRU-2 when the budget is reached.
//!
//! A stripe that is stored in the file and resident in memory is *cached*: the pool
//! counts its bytes and may drop them (the next read loads the stripe again). LRU-2
//! (O'Neil et al.) evicts the stripe whose second-most-recent access is oldest, so one
//! large scan does not flush stripes that are used again and again.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use apiary_common::{ApiaryError, Result};

use crate::block::ColumnStripe;
use crate::file::StoredStripe;

/// Eviction frees memory down to this fraction (per mille) of the limit, so it does not
/// run again on the very next load.
const EVICT_TARGET_PER_MILLE: usize = 900;

pub struct BufferPool {
    limit: AtomicUsize,
    /// Decoded stripes of the database file held in memory (evictable).
    cached: AtomicUsize,
    /// Table data that exists only in memory (an in-memory database's tables).
    tables: AtomicUsize,
    /// Hash tables and intermediate results of running queries.
    queries: AtomicUsize,
    /// Tables' indexes: the key sets that check PRIMARY KEY and UNIQUE constraints and the
    /// maps of CREATE INDEX (see `Table::attach_memory`). Not evictable.
    indexes: AtomicUsize,
    clock: AtomicU64,
    /// Cached stripes by file offset.
    entries: Mutex<HashMap<u64, Weak<ColumnStripe>>>,
}

impl std::fmt::Debug for BufferPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BufferPool")
            .field("limit", &self.limit())
            .field("cached", &self.cached_bytes())
            .field("tables", &self.table_bytes())
            .field("queries", &self.query_bytes())
            .field("indexes", &self.index_bytes())
            .finish()
    }
}

/// 80% of physical memory (the default `memory_limit`).
pub fn default_memory_limit() -> usize {
    // SAFETY: sysconf has no preconditions; it returns -1 for unknown names.
    let (pages, page_size) = unsafe { (libc::sysconf(libc::_SC_PHYS_PAGES), libc::sysconf(libc::_SC_PAGESIZE)) };
    if pages <= 0 || page_size <= 0 {
        return 8 << 30;
    }
    (pages as u128 * page_size as u128 * 8 / 10).min(usize::MAX as u128) as usize
}

impl BufferPool {
    pub fn new(limit: usize) -> Arc<BufferPool> {
        Arc::new(BufferPool {
            limit: AtomicUsize::new(limit),
            cached: AtomicUsize::new(0),
            tables: AtomicUsize::new(0),
            queries: AtomicUsize::new(0),
            indexes: AtomicUsize::new(0),
            clock: AtomicU64::new(1),
            entries: Mutex::default(),
        })
    }

    pub fn limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    /// Changes the budget, evicting cached stripes if they no longer fit.
    pub fn set_limit(&self, limit: usize) {
        self.limit.store(limit, Ordering::Relaxed);
        self.evict_if_over();
    }

    /// Bytes of decoded stripes cached from the database file.
    pub fn cached_bytes(&self) -> usize {
        self.cached.load(Ordering::Relaxed)
    }

    /// Bytes reserved by running queries.
    pub fn query_bytes(&self) -> usize {
        self.queries.load(Ordering::Relaxed)
    }

    /// Bytes of table data that lives only in memory.
    pub fn table_bytes(&self) -> usize {
        self.tables.load(Ordering::Relaxed)
    }

    /// Sets the bytes of table data that lives only in memory.
    pub fn set_table_bytes(&self, bytes: usize) {
        self.tables.store(bytes, Ordering::Relaxed);
        self.evict_if_over();
    }

    /// Bytes of tables' indexes (see [`BufferPool::reserve_index`]).
    pub fn index_bytes(&self) -> usize {
        self.indexes.load(Ordering::Relaxed)
    }

    /// Memory that cannot be evicted: in-memory tables, running queries, indexes.
    fn fixed_bytes(&self) -> usize {
        self.tables.load(Ordering::Relaxed) + self.query_bytes() + self.index_bytes()
    }

    /// Whether `extra` more bytes fit beside table data, indexes and running queries,
    /// after evicting cached stripes if need be; the error names the limit and what uses
    /// memory.
    pub fn check_headroom(&self, extra: usize, what: &str) -> Result<()> {
        let fixed = self.fixed_bytes();
        let limit = self.limit();
        if fixed.saturating_add(extra) > limit {
            return Err(ApiaryError::Resource(format!(
                "{what} needs more memory than memory_limit allows ({} more, with {} held by running queries, {} by \
                 in-memory tables and {} by indexes, limit {}); raise it with SET memory_limit",
                format_bytes(extra),
                format_bytes(self.query_bytes()),
                format_bytes(self.tables.load(Ordering::Relaxed)),
                format_bytes(self.index_bytes()),
                format_bytes(limit)
            )));
        }
        if fixed + extra + self.cached_bytes() > limit {
            self.evict_down_to(limit.saturating_sub(fixed + extra));
        }
        Ok(())
    }

    /// Reserves `bytes` for a query (released with [`BufferPool::release_query`]).
    pub fn reserve_query(&self, bytes: usize) -> Result<()> {
        self.check_headroom(bytes, "the query")?;
        self.queries.fetch_add(bytes, Ordering::Relaxed);
        Ok(())
    }

    /// Charges `bytes` of an index being built or grown, if they fit (see
    /// [`BufferPool::check_headroom`]); released with [`BufferPool::release_index`].
    pub fn reserve_index(&self, bytes: usize, what: &str) -> Result<()> {
        self.check_headroom(bytes, what)?;
        self.indexes.fetch_add(bytes, Ordering::Relaxed);
        Ok(())
    }

    /// Charges `bytes` an index already holds (the keys a commit adds: it cannot fail
    /// once durable; the statement checked the headroom before).
    pub fn charge_index(&self, bytes: usize) {
        self.indexes.fetch_add(bytes, Ordering::Relaxed);
        self.evict_if_over();
    }

    pub fn release_index(&self, bytes: usize) {
        let _ = self.indexes.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| Some(held.saturating_sub(bytes)));
    }

    pub fn release_query(&self, bytes: usize) {
        self.queries.fetch_sub(bytes.min(self.query_bytes()), Ordering::Relaxed);
    }

    /// Records an access to a stripe (LRU-2 history).
    pub(crate) fn touch(&self, stripe: &ColumnStripe) {
        let now = self.clock.fetch_add(1, Ordering::Relaxed);
        let previous = stripe.accesses[1].swap(now, Ordering::Relaxed);
        stripe.accesses[0].store(previous, Ordering::Relaxed);
    }

    /// A stored stripe became resident (`bytes` decoded bytes).
    pub(crate) fn loaded(&self, stripe: &Arc<ColumnStripe>, stored: &StoredStripe, bytes: usize) {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).insert(stored.extent.offset, Arc::downgrade(stripe));
        self.cached.fetch_add(bytes, Ordering::Relaxed);
        self.evict_if_over();
    }

    /// A cached stripe was dropped or evicted.
    pub(crate) fn released(&self, stored: &StoredStripe, bytes: usize) {
        if bytes > 0 {
            self.cached.fetch_sub(bytes, Ordering::Relaxed);
        }
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.get(&stored.extent.offset).is_some_and(|w| w.strong_count() == 0) {
            entries.remove(&stored.extent.offset);
        }
    }

    fn evict_if_over(&self) {
        let limit = self.limit();
        let fixed = self.fixed_bytes();
        if self.cached_bytes() + fixed <= limit {
            return;
        }
        self.evict_down_to((limit / 1000 * EVICT_TARGET_PER_MILLE).saturating_sub(fixed));
    }

    /// Evicts cached stripes, least recently used (LRU-2) first, until at most `target`
    /// bytes are cached.
    fn evict_down_to(&self, target: usize) {
        let mut candidates: Vec<((u64, u64), Arc<ColumnStripe>)> = {
            let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
            entries.retain(|_, weak| weak.strong_count() > 0);
            entries
                .values()
                .filter_map(Weak::upgrade)
                .map(|s| ((s.accesses[0].load(Ordering::Relaxed), s.accesses[1].load(Ordering::Relaxed)), s))
                .collect()
        };
        candidates.sort_unstable_by_key(|(key, _)| *key);
        for (_, stripe) in candidates {
            if self.cached_bytes() <= target {
                break;
            }
            let freed = stripe.evict();
            if freed > 0 {
                self.cached.fetch_sub(freed, Ordering::Relaxed);
            }
        }
    }
}

/// A size for messages (`4.0 GB`).
pub fn format_bytes(bytes: usize) -> String {
    let units = [("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)];
    for (unit, size) in units {
        if bytes as f64 >= size {
            return format!("{:.1} {unit}", bytes as f64 / size);
        }
    }
    format!("{bytes} bytes")
}
