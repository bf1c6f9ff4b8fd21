//! Execution settings (`SET threads`, `SET vector_size`, ...).

use apiary_types::TimeZone;

pub use crate::expr::jit::JitMode;

/// Settings that shape how one query runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionConfig {
    /// Rows per vector handed between operators.
    pub vector_size: usize,
    /// Whether hash-table probes hash a whole vector before looking up (prefetch groups).
    pub prefetch_group: usize,
    /// Evaluate filters with SIMD-friendly branch-free selection loops.
    pub simd: bool,
    /// Materialise selection vectors between stages (relaxed operator fusion).
    pub staging: bool,
    /// Key few-valued string GROUP BY keys by shared ids, so that they pack fixed-width
    /// (`crate::hash::string_ids`).
    pub string_group_ids: bool,
    /// Compute 38-digit decimal `+ - *` on 64-bit integers where the values fit, with the
    /// 128-bit kernels as the per-chunk fallback (`crate::expr` narrow_decimal).
    pub narrow_decimals: bool,
    /// When expression programs run as machine code (`crate::expr::jit`): `on` compiles
    /// an expression once it is hot and uses the code where it beats the kernels.
    pub jit: JitMode,
    /// Scans test range predicates on packed blocks' codes (64 one-byte codes per
    /// instruction) and decode only the survivors; off: decode, then test the values.
    pub code_predicates: bool,
    /// Most rows of a table scan's work order (a range of one block).
    pub morsel_size: usize,
    /// Scans of a table that run at the same time share each block read (DataPath's
    /// circular scans): a scan starting while others run starts where they are and wraps
    /// around, and the scheduler runs the work orders of one block together. Off by
    /// default until it pays: in memory, sharing only the block reads saves nothing
    /// measurable (the scans are bound by per-row work, not by reading the block).
    pub shared_scans: bool,
    /// The session's time zone (`SET TimeZone`): TIMESTAMPTZ values are shown, read from
    /// text, split into fields and truncated in it. Part of the configuration so a plan
    /// made under another zone is made again.
    pub time_zone: TimeZone,
}

pub const DEFAULT_MORSEL_SIZE: usize = 16_384;

pub const MIN_VECTOR_SIZE: usize = 64;
pub const MAX_VECTOR_SIZE: usize = 16_384;
pub const DEFAULT_VECTOR_SIZE: usize = 2048;

impl Default for ExecutionConfig {
    fn default() -> Self {
        ExecutionConfig {
            vector_size: DEFAULT_VECTOR_SIZE,
            prefetch_group: 16,
            simd: true,
            staging: true,
            string_group_ids: true,
            narrow_decimals: true,
            jit: JitMode::On,
            code_predicates: true,
            morsel_size: DEFAULT_MORSEL_SIZE,
            shared_scans: false,
            time_zone: TimeZone::UTC,
        }
    }
}
