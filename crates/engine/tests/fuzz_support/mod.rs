//! Shared pieces of the seeded fuzz loops (`fuzz_sql.rs`, `fuzz_csv.rs`, `fuzz_file.rs`).
//!
//! * [`Rng`]: a small deterministic generator (SplitMix64); no dependency, same sequence
//!   on every platform, so a failure reproduces from its seed and case number.
//! * [`FuzzConfig`]: how many cases to run and from which seed, from the environment:
//!
//!   ```text
//!   APIARY_FUZZ_ITERATIONS=1000000   cases per loop (default: a few seconds' worth)
//!   APIARY_FUZZ_SEED=42              base seed (default: fixed, so `cargo test` is stable)
//!   APIARY_FUZZ_FIRST=1234           first case number (replay one case with ITERATIONS=1)
//!   APIARY_FUZZ_HANG_SECS=300        a case running this long aborts the run, naming it
//!   ```
//!
//! * [`Watchdog`]: names the case that hangs instead of letting `cargo test` wait
//!   forever. It never decides pass or fail on time: a slow case only interrupts the
//!   statement (the loop counts it) and a hung one ends the process with its case.
//! * [`is_bug`] / [`catch`]: the pass criteria shared by the loops: no panic and no
//!   error that says "internal error".

#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use apiary::ApiaryError;

/// SplitMix64: tiny, fast, and good enough to drive mutations.
#[derive(Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// A number in `low..high` (`high` > `low`).
    pub fn range(&mut self, low: usize, high: usize) -> usize {
        low + self.below(high - low)
    }

    /// True with probability `numerator / denominator`.
    pub fn chance(&mut self, numerator: u32, denominator: u32) -> bool {
        (self.next_u64() % denominator as u64) < numerator as u64
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// A generator for one case: independent of every other case, so a case replays alone.
    pub fn for_case(seed: u64, case: u64) -> Rng {
        let mut mixer = Rng::new(seed.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ case);
        Rng::new(mixer.next_u64())
    }
}

/// What to run: read once from the environment (see the module comment).
#[derive(Clone, Copy, Debug)]
pub struct FuzzConfig {
    pub seed: u64,
    pub first: u64,
    pub iterations: u64,
}

fn env_number(name: &str) -> Option<u64> {
    let value = std::env::var(name).ok()?;
    match value.trim().parse() {
        Ok(number) => Some(number),
        Err(_) => panic!("{name} must be a number, not {value:?}"),
    }
}

impl FuzzConfig {
    /// The configuration for a loop whose `cargo test` run does `default_iterations` cases.
    pub fn from_env(default_iterations: u64) -> FuzzConfig {
        FuzzConfig {
            seed: env_number("APIARY_FUZZ_SEED").unwrap_or(0x00A7_1A2F),
            first: env_number("APIARY_FUZZ_FIRST").unwrap_or(0),
            iterations: env_number("APIARY_FUZZ_ITERATIONS").unwrap_or(default_iterations),
        }
    }

    /// The case numbers to run.
    pub fn cases(&self) -> std::ops::Range<u64> {
        self.first..self.first + self.iterations
    }

    /// How to rerun one case.
    pub fn replay(&self, test: &str, case: u64) -> String {
        format!("APIARY_FUZZ_SEED={} APIARY_FUZZ_FIRST={case} APIARY_FUZZ_ITERATIONS=1 cargo test -p apiary --test {test}", self.seed)
    }
}

/// Whether an error is a bug in Apiary rather than a user error.
pub fn is_bug(error: &ApiaryError) -> bool {
    matches!(error, ApiaryError::Internal(_)) || error.to_string().contains("internal error")
}

/// Runs `f`, turning a panic into `Err` with its message.
pub fn catch<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|payload| {
        payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".to_string())
    })
}

/// `text` cut to `max` characters for a report.
pub fn excerpt(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(max).collect();
    cut.push_str(&format!("... ({} bytes)", text.len()));
    cut
}

struct WatchedCase {
    started: Instant,
    description: String,
    /// Set to interrupt the running statement once it is slow.
    interrupt: Option<Arc<AtomicBool>>,
    interrupted: bool,
}

/// Watches the running case from another thread: interrupts a slow statement (through
/// the connection's interrupt flag) after `slow`, and ends the process naming the case
/// after `APIARY_FUZZ_HANG_SECS` (a hang would otherwise stall `cargo test` silently).
pub struct Watchdog {
    current: Arc<Mutex<Option<WatchedCase>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watchdog {
    pub fn start(name: &'static str, slow: Duration) -> Watchdog {
        let hang = Duration::from_secs(env_number("APIARY_FUZZ_HANG_SECS").unwrap_or(300));
        let current: Arc<Mutex<Option<WatchedCase>>> = Arc::new(Mutex::new(None));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let current = Arc::clone(&current);
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(100));
                    let mut guard = current.lock().unwrap_or_else(|e| e.into_inner());
                    let Some(case) = guard.as_mut() else { continue };
                    let elapsed = case.started.elapsed();
                    if elapsed >= slow && !case.interrupted {
                        if let Some(flag) = &case.interrupt {
                            flag.store(true, Ordering::Relaxed);
                        }
                        case.interrupted = true;
                    }
                    if elapsed >= hang {
                        eprintln!("{name}: a case ran for {elapsed:?} (APIARY_FUZZ_HANG_SECS): {}", case.description);
                        std::process::exit(101);
                    }
                }
            })
        };
        Watchdog { current, stop, thread: Some(thread) }
    }

    /// Marks the start of a case; `interrupt` is the connection's interrupt flag.
    pub fn begin(&self, description: String, interrupt: Option<Arc<AtomicBool>>) {
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) =
            Some(WatchedCase { started: Instant::now(), description, interrupt, interrupted: false });
    }

    /// Marks the end of the case; returns whether it was interrupted for being slow.
    pub fn end(&self) -> bool {
        self.current.lock().unwrap_or_else(|e| e.into_inner()).take().is_some_and(|case| case.interrupted)
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A fresh directory for one fuzz loop's files.
pub fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("apiary-fuzz-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}
