//! `--watch`: a status redrawn every second in place (like `top`) until Ctrl-C; on a pipe, one frame
//! after another.

use std::future::Future;
use std::io::{IsTerminal, Write};

/// Prints `frame()` every second until Ctrl-C.
pub async fn every_second<F, Fut>(mut frame: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = String>,
{
    let tty = std::io::stdout().is_terminal();
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        let text = frame().await;
        let mut out = std::io::stdout().lock();
        let _ = if tty { write!(out, "\x1b[H\x1b[2J{text}") } else { writeln!(out, "{text}") };
        let _ = out.flush();
        drop(out);
        tokio::select! {
            _ = &mut ctrl_c => return,
            _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
        }
    }
}
