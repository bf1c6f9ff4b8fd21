//! The shell's live progress bar: for a statement running longer than about a second, a
//! bar with the share of work orders done and the estimated time left, redrawn on
//! stderr (only when stderr is a terminal) until the statement ends.
//!
//! ```text
//! [##########..........................]  27%  12.3 s elapsed, ~33 s left
//! ```

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use apiary::{Connection, QueryProgress};

/// Statements shorter than this show no bar.
pub const PROGRESS_AFTER: Duration = Duration::from_secs(1);
const REDRAW_EVERY: Duration = Duration::from_millis(100);
const BAR_WIDTH: usize = 36;

/// Draws while it lives; dropping it stops the drawing and clears the line.
pub struct ProgressBar {
    done: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ProgressBar {
    pub fn start(conn: &Connection) -> ProgressBar {
        let done = Arc::new(AtomicBool::new(false));
        if !std::io::stderr().is_terminal() {
            return ProgressBar { done, thread: None };
        }
        let handle = conn.progress_handle();
        let stop = Arc::clone(&done);
        let thread = std::thread::Builder::new()
            .name("apiary-progress".to_string())
            .spawn(move || {
                let started = Instant::now();
                let mut drawn = false;
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(REDRAW_EVERY);
                    if stop.load(Ordering::Relaxed) || started.elapsed() < PROGRESS_AFTER {
                        continue;
                    }
                    if let Some(progress) = handle.current() {
                        let mut stderr = std::io::stderr().lock();
                        let _ = write!(stderr, "\r\x1b[K{}", bar_line(&progress));
                        let _ = stderr.flush();
                        drawn = true;
                    }
                }
                if drawn {
                    let mut stderr = std::io::stderr().lock();
                    let _ = write!(stderr, "\r\x1b[K");
                    let _ = stderr.flush();
                }
            })
            .ok();
        ProgressBar { done, thread }
    }
}

impl Drop for ProgressBar {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// One line: the bar, the percentage, elapsed and estimated time left.
pub fn bar_line(progress: &QueryProgress) -> String {
    let fraction = progress.fraction();
    let filled = ((fraction * BAR_WIDTH as f64).round() as usize).min(BAR_WIDTH);
    let mut line = format!(
        "[{}{}] {:>3.0}%  {:.1} s elapsed",
        "#".repeat(filled),
        ".".repeat(BAR_WIDTH - filled),
        fraction * 100.0,
        progress.elapsed.as_secs_f64()
    );
    match (progress.state, progress.estimated_left) {
        ("running", Some(left)) => line.push_str(&format!(", ~{} left", seconds(left))),
        ("running", None) => {}
        (state, _) => line.push_str(&format!(" ({state})")),
    }
    line
}

fn seconds(duration: Duration) -> String {
    let s = duration.as_secs_f64();
    if s < 10.0 {
        format!("{s:.1} s")
    } else {
        format!("{s:.0} s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(done: usize, total: usize, left: Option<f64>, state: &'static str) -> QueryProgress {
        QueryProgress {
            id: 1,
            connection: 1,
            user: String::new(),
            state,
            sql: String::new(),
            priority: 5,
            elapsed: Duration::from_secs(3),
            pipelines: vec![(done, total)],
            work_orders_done: done,
            work_orders_total: total,
            rows: 0,
            memory_bytes: 0,
            estimated_left: left.map(Duration::from_secs_f64),
            shared_work_orders: 0,
            shared_with: Vec::new(),
        }
    }

    #[test]
    fn the_bar_shows_share_done_and_time_left() {
        assert_eq!(
            bar_line(&progress(1, 4, Some(9.0), "running")),
            format!("[{}{}]  25%  3.0 s elapsed, ~9.0 s left", "#".repeat(9), ".".repeat(27))
        );
        assert_eq!(bar_line(&progress(0, 0, None, "queued")), format!("[{}]   0%  3.0 s elapsed (queued)", ".".repeat(36)));
        assert!(bar_line(&progress(10, 10, Some(0.0), "running")).starts_with(&format!("[{}] 100%", "#".repeat(36))));
    }
}
