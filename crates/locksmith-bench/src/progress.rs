//! A progress bar on stderr, shown only when stderr is a terminal (never in piped output).

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

/// Steps done out of all planned, and what runs now; silent when stderr is not a terminal.
#[derive(Debug, Clone)]
pub(crate) struct Progress(Option<ProgressBar>);

impl Progress {
    /// A bar of `total` steps on stderr if it is a terminal.
    pub(crate) fn new(total: u64) -> Self {
        if !std::io::stderr().is_terminal() {
            return Self(None);
        }
        let bar = ProgressBar::new(total);
        // The template is a constant; should it ever be refused, the default style does.
        if let Ok(style) = ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {wide_msg}") {
            bar.set_style(style.progress_chars("=> "));
        }
        Self(Some(bar))
    }

    /// Says what runs now.
    pub(crate) fn say(&self, message: String) {
        if let Some(bar) = &self.0 {
            bar.set_message(message);
        }
    }

    /// One step done.
    pub(crate) fn step(&self) {
        if let Some(bar) = &self.0 {
            bar.inc(1);
        }
    }

    /// Removes the bar, so the table starts on a clean line.
    pub(crate) fn finish(&self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
    }
}
