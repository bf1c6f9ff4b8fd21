//! Hash keys and hash tables for joins, aggregation and DISTINCT.
//!
//! ```text
//! keys.rs         key packing: the key columns of a row become one u64 or u128 when
//!                 their widths allow (most join and group keys), else a byte string
//! join_table.rs   the join hash table: open addressing, key and chain head in one slot,
//!                 built in parallel by hash-range partitions
//! group_table.rs  the aggregation hash table: key -> dense group id
//! string_ids.rs   ids for few-valued string group keys, so their keys pack fixed-width
//! ```

pub mod bloom;
pub mod group_table;
pub mod join_table;
pub mod keys;
pub mod string_ids;

pub use keys::{KeyPacker, KeyWidth, PackedKeys};
