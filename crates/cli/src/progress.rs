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

use apiary::Connection;

/// Statements shorter than this show no bar.
pub const PROGRESS_AFTER: Duration = Duration::from_secs(1);
const REDRAW_EVERY: Duration = Duration::from_millis(100);

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
                        let _ = write!(stderr, "\r\x1b[K{}", progress.bar_line());
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
