//! The live progress line of an experiment (on stderr, only when stderr is a terminal): how
//! many of its runs are done, which one is running, and the last result.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::time::Duration;

/// A progress line over `total` runs.
pub(crate) struct Progress {
    bar: ProgressBar,
}

impl Progress {
    pub(crate) fn new(scenario: &str, total: u64) -> Progress {
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template(
                "{prefix} [{elapsed_precise}] {bar:30} {pos}/{len} runs  {msg}",
            )
            .expect("valid template"),
        );
        bar.set_prefix(scenario.to_string());
        bar.enable_steady_tick(Duration::from_millis(250));
        Progress { bar }
    }

    /// What is running now.
    pub(crate) fn running(&self, what: impl Into<String>) {
        self.bar.set_message(what.into());
    }

    /// One run done; `result` stays on the line until the next.
    pub(crate) fn done(&self, result: impl Into<String>) {
        self.bar.set_message(result.into());
        self.bar.inc(1);
    }

    /// A line above the progress line (plain stderr when it is hidden).
    pub(crate) fn println(&self, line: impl AsRef<str>) {
        if self.bar.is_hidden() {
            eprintln!("{}", line.as_ref());
        } else {
            self.bar.println(line.as_ref());
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}
