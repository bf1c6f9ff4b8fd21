//! Per-connection settings changed with `SET name = value`.

use std::collections::BTreeSet;

use std::time::Duration;

use apiary_common::{bind_err, Result};
use apiary_execution::config::{ExecutionConfig, MAX_VECTOR_SIZE, MIN_VECTOR_SIZE};
use apiary_execution::scheduler::{DEFAULT_PRIORITY, DEFAULT_QUEUE_TIMEOUT, MAX_PRIORITY};
use apiary_storage::BLOCK_ROWS;
use apiary_types::TimeZone;

#[derive(Debug, Clone)]
pub struct Settings {
    pub execution: ExecutionConfig,
    /// Maximum rows per block of tables created from now on.
    pub block_rows: usize,
    /// Whether tables created from now on hold their sealed blocks packed in memory
    /// (frame-of-reference and dictionary codes, `apiary_storage::packed`).
    pub packed_blocks: bool,
    /// Optimizer rules switched off.
    pub disabled_optimizers: BTreeSet<String>,
    /// This session's share of the workers relative to others (1..=10, fair share).
    pub priority: u32,
    /// How long a query may wait for admission (`max_concurrent_queries`, memory).
    pub queue_timeout: Duration,
    /// Whether concurrent queries differing only in filter constants share one scan,
    /// selection and aggregation (`shared_operators.rs`).
    pub shared_operators: bool,
    /// How long a query arriving at an idle engine waits for others to share with.
    pub shared_operators_wait: Duration,
    /// The `TimeZone` setting as `SHOW` prints it (the zone itself is
    /// `execution.time_zone`).
    pub time_zone_name: String,
}

/// The session time zone a new connection has.
pub const DEFAULT_TIME_ZONE: &str = "UTC";

impl Default for Settings {
    fn default() -> Self {
        Settings {
            execution: ExecutionConfig::default(),
            block_rows: BLOCK_ROWS,
            packed_blocks: true,
            disabled_optimizers: BTreeSet::new(),
            priority: DEFAULT_PRIORITY,
            queue_timeout: DEFAULT_QUEUE_TIMEOUT,
            shared_operators: false,
            shared_operators_wait: Duration::ZERO,
            time_zone_name: DEFAULT_TIME_ZONE.to_string(),
        }
    }
}

/// Names accepted by SET (threads, memory_limit, max_concurrent_queries and
/// scheduler_policy are handled by the database: they apply to every session).
pub const SETTING_NAMES: &[&str] = &[
    "threads",
    "memory_limit",
    "max_concurrent_queries",
    "scheduler_policy",
    "priority",
    "queue_timeout",
    "vector_size",
    "morsel_size",
    "prefetch_group",
    "simd",
    "staging",
    "string_group_ids",
    "narrow_decimals",
    "jit",
    "code_predicates",
    "shared_scans",
    "shared_operators",
    "shared_operators_wait",
    "block_size",
    "packed_blocks",
    "disabled_optimizers",
    "timezone",
];

/// A duration: a number of seconds, or a number with a unit (`ms`, `s`, `min`, `h`),
/// as PostgreSQL's time settings accept.
pub fn parse_duration(name: &str, value: &str) -> Result<Duration> {
    let text = value.trim().to_ascii_lowercase();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let invalid = || bind_err!("{name} must be a duration such as 60s, 500ms or 2min, not '{value}'");
    let number: f64 = number.parse().map_err(|_| invalid())?;
    let seconds = match unit.trim() {
        "" | "s" | "sec" | "second" | "seconds" => number,
        "ms" | "millisecond" | "milliseconds" => number / 1e3,
        "min" | "minute" | "minutes" => number * 60.0,
        "h" | "hour" | "hours" => number * 3600.0,
        _ => return Err(invalid()),
    };
    if !seconds.is_finite() || !(0.0..=1e7).contains(&seconds) {
        return Err(invalid());
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// `60s`, `500ms`: how SHOW prints a duration.
pub fn format_duration(duration: Duration) -> String {
    let ms = duration.as_millis();
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

fn parse_bool(name: &str, value: &str) -> Result<bool> {
    match value.to_ascii_lowercase().as_str() {
        "on" | "true" | "1" | "yes" => Ok(true),
        "off" | "false" | "0" | "no" => Ok(false),
        _ => Err(bind_err!("{name} must be on or off, not '{value}'")),
    }
}

fn parse_usize(name: &str, value: &str, min: usize, max: usize) -> Result<usize> {
    let parsed: usize = value.parse().map_err(|_| bind_err!("{name} must be an integer, not '{value}'"))?;
    if parsed < min || parsed > max {
        return Err(bind_err!("{name} must be between {min} and {max}, not {parsed}"));
    }
    Ok(parsed)
}

/// Parses a size such as `4GB`, `512 MiB` or `1000000` (bytes). KB, MB, GB and TB are
/// powers of 1000; KiB, MiB, GiB and TiB powers of 1024.
pub fn parse_byte_size(name: &str, value: &str) -> Result<usize> {
    let text = value.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = (text[..split].trim(), text[split..].trim());
    let invalid = || bind_err!("{name} must be a size such as '4GB' or '512MiB', not '{value}'");
    let number: f64 = number.parse().map_err(|_| invalid())?;
    let multiplier: f64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" | "bytes" => 1.0,
        "kb" | "k" => 1e3,
        "mb" | "m" => 1e6,
        "gb" | "g" => 1e9,
        "tb" | "t" => 1e12,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return Err(invalid()),
    };
    let bytes = number * multiplier;
    if !bytes.is_finite() || bytes < 1e6 || bytes > usize::MAX as f64 {
        return Err(bind_err!("{name} must be at least 1MB, not '{value}'"));
    }
    Ok(bytes as usize)
}

impl Settings {
    /// Applies `SET name = value` (all but `threads`).
    pub fn set(&mut self, name: &str, value: &str) -> Result<()> {
        match name {
            "vector_size" => {
                let size = parse_usize(name, value, MIN_VECTOR_SIZE, MAX_VECTOR_SIZE)?;
                if size % 64 != 0 {
                    return Err(bind_err!("vector_size must be a multiple of 64, not {size}"));
                }
                self.execution.vector_size = size;
            }
            "prefetch_group" => self.execution.prefetch_group = parse_usize(name, value, 0, 256)?,
            "morsel_size" => self.execution.morsel_size = parse_usize(name, value, MIN_VECTOR_SIZE, 1 << 24)?,
            "simd" => self.execution.simd = parse_bool(name, value)?,
            "string_group_ids" => self.execution.string_group_ids = parse_bool(name, value)?,
            "narrow_decimals" => self.execution.narrow_decimals = parse_bool(name, value)?,
            "jit" => {
                self.execution.jit = apiary_execution::config::JitMode::parse(value)
                    .ok_or_else(|| bind_err!("jit must be on, off or always, not '{value}'"))?
            }
            "code_predicates" => self.execution.code_predicates = parse_bool(name, value)?,
            "packed_blocks" => self.packed_blocks = parse_bool(name, value)?,
            "staging" => self.execution.staging = parse_bool(name, value)?,
            "shared_scans" => self.execution.shared_scans = parse_bool(name, value)?,
            "shared_operators" => self.shared_operators = parse_bool(name, value)?,
            "shared_operators_wait" => {
                let wait = parse_duration(name, value)?;
                if wait > Duration::from_secs(1) {
                    return Err(bind_err!("shared_operators_wait must be at most 1s, not '{value}'"));
                }
                self.shared_operators_wait = wait;
            }
            "block_size" => self.block_rows = parse_usize(name, value, 64, 1 << 24)?,
            "timezone" => {
                let (zone, shown) =
                    TimeZone::from_setting(value).ok_or_else(|| bind_err!("invalid value for parameter \"TimeZone\": \"{value}\""))?;
                self.execution.time_zone = zone;
                self.time_zone_name = shown;
            }
            "priority" => self.priority = parse_usize(name, value, 1, MAX_PRIORITY as usize)? as u32,
            "queue_timeout" => self.queue_timeout = parse_duration(name, value)?,
            "disabled_optimizers" => {
                let known = apiary_optimizer::rule_names();
                let mut disabled = BTreeSet::new();
                for rule in value.split(',').map(|r| r.trim()).filter(|r| !r.is_empty()) {
                    if rule == "unnest_subqueries" || !known.contains(&rule) {
                        return Err(bind_err!(
                            "unknown or required optimizer rule '{rule}' (rules that can be disabled: {})",
                            known.iter().filter(|r| **r != "unnest_subqueries").copied().collect::<Vec<_>>().join(", ")
                        ));
                    }
                    disabled.insert(rule.to_string());
                }
                self.disabled_optimizers = disabled;
            }
            other => {
                let hint = apiary_common::error::closest_name(other, SETTING_NAMES.iter().copied())
                    .map(|c| format!(" (did you mean {c}?)"))
                    .unwrap_or_default();
                return Err(bind_err!("unknown setting \"{other}\"{hint}"));
            }
        }
        Ok(())
    }

    /// Restores one setting to its default.
    pub fn reset(&mut self, name: &str) -> Result<()> {
        let defaults = Settings::default();
        match name {
            "vector_size" => self.execution.vector_size = defaults.execution.vector_size,
            "prefetch_group" => self.execution.prefetch_group = defaults.execution.prefetch_group,
            "morsel_size" => self.execution.morsel_size = defaults.execution.morsel_size,
            "simd" => self.execution.simd = defaults.execution.simd,
            "string_group_ids" => self.execution.string_group_ids = defaults.execution.string_group_ids,
            "narrow_decimals" => self.execution.narrow_decimals = defaults.execution.narrow_decimals,
            "jit" => self.execution.jit = defaults.execution.jit,
            "code_predicates" => self.execution.code_predicates = defaults.execution.code_predicates,
            "packed_blocks" => self.packed_blocks = defaults.packed_blocks,
            "staging" => self.execution.staging = defaults.execution.staging,
            "shared_scans" => self.execution.shared_scans = defaults.execution.shared_scans,
            "shared_operators" => self.shared_operators = defaults.shared_operators,
            "shared_operators_wait" => self.shared_operators_wait = defaults.shared_operators_wait,
            "block_size" => self.block_rows = defaults.block_rows,
            "timezone" => {
                self.execution.time_zone = defaults.execution.time_zone;
                self.time_zone_name = defaults.time_zone_name;
            }
            "priority" => self.priority = defaults.priority,
            "queue_timeout" => self.queue_timeout = defaults.queue_timeout,
            "disabled_optimizers" => self.disabled_optimizers = defaults.disabled_optimizers,
            other => {
                // Reuse SET's error (with its spelling hint) for unknown names.
                return self.set(other, "");
            }
        }
        Ok(())
    }

    /// The current value of a setting, as text.
    pub fn get(&self, name: &str) -> Option<String> {
        Some(match name {
            "vector_size" => self.execution.vector_size.to_string(),
            "prefetch_group" => self.execution.prefetch_group.to_string(),
            "morsel_size" => self.execution.morsel_size.to_string(),
            "simd" => if self.execution.simd { "on" } else { "off" }.to_string(),
            "string_group_ids" => if self.execution.string_group_ids { "on" } else { "off" }.to_string(),
            "narrow_decimals" => if self.execution.narrow_decimals { "on" } else { "off" }.to_string(),
            "jit" => self.execution.jit.name().to_string(),
            "code_predicates" => if self.execution.code_predicates { "on" } else { "off" }.to_string(),
            "packed_blocks" => if self.packed_blocks { "on" } else { "off" }.to_string(),
            "staging" => if self.execution.staging { "on" } else { "off" }.to_string(),
            "shared_scans" => if self.execution.shared_scans { "on" } else { "off" }.to_string(),
            "shared_operators" => if self.shared_operators { "on" } else { "off" }.to_string(),
            "shared_operators_wait" => format_duration(self.shared_operators_wait),
            "block_size" => self.block_rows.to_string(),
            "timezone" => self.time_zone_name.clone(),
            "priority" => self.priority.to_string(),
            "queue_timeout" => format_duration(self.queue_timeout),
            "disabled_optimizers" => self.disabled_optimizers.iter().cloned().collect::<Vec<_>>().join(","),
            _ => return None,
        })
    }
}
