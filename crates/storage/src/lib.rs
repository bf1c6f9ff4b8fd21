//! # apiary-storage
//!
//! Tables as lists of immutable blocks (Quickstep §3).
//!
//! ```text
//! Catalog ── name ──▶ Table ── snapshot ──▶ TableData { blocks: [Arc<Block>], stats, layout }
//!    │                                                   │
//!    │                         Block { row_count, columns: [Arc<ColumnStripe>], deleted rows }
//!    │                                                   │
//!    │                     ColumnStripe { encoded values, validity, ZoneMap(min, max, nulls) }
//!    ├── name ──▶ View { SQL text, columns, dependencies }      (see [`view`])
//!    └── name ──▶ Sequence { options, state }                   (see [`sequence`])
//! ```
//!
//! * A block holds at most [`BLOCK_ROWS`] rows, one stripe per column. Blocks never change
//!   once published: an append builds new blocks (copying a small trailing partial block)
//!   and publishes a new [`TableData`] snapshot atomically, so a failed statement leaves the
//!   table untouched and running queries keep reading the snapshot they started with. A
//!   delete publishes blocks with the same stripes and a bitmap of deleted rows; rows are
//!   named by `block << 32 | position` ([`table::row_id`]) until a compaction
//!   ([`Table::compact`], at CHECKPOINT) moves them. A transaction writes private versions
//!   ([`Table::private_writer`]) and reads them through [`Table::at`].
//! * The block is the unit of work: a scan work order reads one block, zone maps let
//!   scans skip whole blocks.
//! * [`stats`] keeps per-column min/max/null counts and a HyperLogLog distinct-count
//!   sketch that the optimizer's cardinality estimates use.

pub mod block;
pub mod catalog;
pub mod codec;
pub mod encoding;
pub mod file;
pub mod index;
pub mod packed;
pub mod pool;
pub mod sequence;
pub mod stats;
pub mod store;
pub mod table;
pub mod unique;
pub mod view;

pub use block::{Block, ColumnStripe, StripeValues, ZoneMap, BLOCK_ROWS};
pub use catalog::Catalog;
pub use index::{IndexDefinition, TableIndex};
pub use pool::BufferPool;
pub use sequence::{OwnedSequence, Sequence, SequenceOptions, SequenceState, SessionValues};
pub use stats::{ColumnStats, TableStats};
pub use store::{CommitGuard, DurableStore, LogEntry};
pub use table::{
    CheckConstraint, Compaction, DeferredColumnStats, DeferredRows, ForeignKey, PreparedAppend, PrivateKeys, ReferentialAction, Table,
    TableAppender, TableData,
};
pub use view::View;
