//! Independent pieces of work spread over a few threads (decoding Parquet row groups,
//! parsing CSV pieces, converting result batches to Arrow): outside the scheduler, for
//! work that runs before or after a query's pipelines.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// `f` of each item, on up to `threads` threads that each take the next item until none
/// is left (so unequal items balance); the results in the items' order. One thread (or
/// one item) runs on the caller's thread.
pub fn map_in_parallel<T: Sync, R: Send>(items: &[T], threads: usize, f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = threads.clamp(1, items.len().max(1));
    if threads == 1 {
        return items.iter().map(f).collect();
    }
    let next = AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<R>>> = items.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(index) else { break };
                let result = f(item);
                *slots[index].lock().unwrap_or_else(|e| e.into_inner()) = Some(result);
            });
        }
    });
    slots
        .into_iter()
        // A worker that panicked made the scope panic above: every slot is filled here.
        .map(|slot| slot.into_inner().unwrap_or_else(|e| e.into_inner()).expect("every item was mapped"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_keep_the_items_order() {
        let items: Vec<u64> = (0..100).collect();
        for threads in [0, 1, 2, 7, 200] {
            assert_eq!(map_in_parallel(&items, threads, |&x| x * x), items.iter().map(|x| x * x).collect::<Vec<_>>());
        }
        assert!(map_in_parallel(&[] as &[u8], 4, |&x| x).is_empty());
    }
}
