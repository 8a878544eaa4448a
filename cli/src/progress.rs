//! Progress bars for long transfers (`put`, `get`), drawn on stderr.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;

/// Transfers smaller than this finish before a bar would help.
pub const MIN_BAR_BYTES: u64 = 8 << 20;

/// Whether a transfer of `total` bytes shows a bar.
pub fn wants_bar(total: u64, quiet: bool, stderr_is_tty: bool) -> bool {
    !quiet && stderr_is_tty && total >= MIN_BAR_BYTES
}

/// A byte-count bar with rate and ETA, or a hidden one when it is not wanted.
pub fn transfer_bar(total: u64, label: &str, quiet: bool) -> ProgressBar {
    if !wants_bar(total, quiet, std::io::stderr().is_terminal()) {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template(
        "{prefix} [{bar:40.cyan/blue}] {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar())
    .progress_chars("=> ");
    bar.set_style(style);
    bar.set_prefix(label.to_string());
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bar_only_for_large_interactive_transfers() {
        assert!(wants_bar(MIN_BAR_BYTES, false, true));
        assert!(!wants_bar(MIN_BAR_BYTES - 1, false, true));
        assert!(!wants_bar(1 << 30, true, true));
        assert!(!wants_bar(1 << 30, false, false));
        // A hidden bar is safe to drive.
        let b = transfer_bar(1 << 30, "x", true);
        b.inc(5);
        b.finish_and_clear();
    }
}
