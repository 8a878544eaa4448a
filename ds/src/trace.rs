//! The request trace (`ds_options.trace`): every served request as a CSV line
//! `time_us,job,address,len,op,client,pid` (client: the originating client id, kept by forwarding nodes;
//! pid: its process) appended to `<data_dir>/lba-trace.csv` by a background thread through a
//! buffered writer. The data path only does a non-blocking channel send; lines are dropped (and
//! counted) rather than ever slowing requests down.

use crate::device::OpKind;
use crate::observe::{Observer, Request};
use std::fs::OpenOptions;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Duration;
use tessera_proto::{FsError, FsResult};

pub use tessera_proto::config::TRACE_FILE;
const HEADER: [&str; 7] = ["time_us", "job", "address", "len", "op", "client", "pid"];
const BACKLOG: usize = 1 << 16;

enum Msg {
    Line { time_us: u64, job: Arc<str>, addr: u64, len: u64, op: OpKind, client: u64, pid: u32 },
    Flush(mpsc::Sender<()>),
}

pub struct Trace {
    tx: SyncSender<Msg>,
    dropped: AtomicU64,
    path: PathBuf,
}

pub use tessera_proto::types::unix_us;

impl Trace {
    /// Opens (appending to) `<dir>/lba-trace.csv` and starts the writer thread.
    pub fn start(dir: &Path) -> FsResult<Arc<Trace>> {
        let path = dir.join(TRACE_FILE);
        let ctx = |e: std::io::Error| FsError::io(format!("{}: {e}", path.display()));
        let file = OpenOptions::new().create(true).append(true).open(&path).map_err(ctx)?;
        let fresh = file.metadata().map_err(ctx)?.len() == 0;
        // The csv crate quotes a job id holding a separator, quote or line break.
        let mut out = csv::WriterBuilder::new().has_headers(false).from_writer(BufWriter::with_capacity(1 << 20, file));
        if fresh {
            out.write_record(HEADER).map_err(|e| ctx(e.into()))?;
        }
        let (tx, rx) = mpsc::sync_channel::<Msg>(BACKLOG);
        let p = path.clone();
        std::thread::Builder::new()
            .name("tessera-trace".into())
            .spawn(move || {
                let mut failed = false;
                loop {
                    let msg = match rx.recv_timeout(Duration::from_secs(1)) {
                        Ok(m) => m,
                        Err(RecvTimeoutError::Timeout) => {
                            let _ = out.flush();
                            continue;
                        }
                        Err(RecvTimeoutError::Disconnected) => break,
                    };
                    match msg {
                        Msg::Line { time_us, job, addr, len, op, client, pid } => {
                            let r = out.serialize((time_us, &*job, addr, len, op.as_str(), client, pid));
                            if let Err(e) = r {
                                if !failed {
                                    tracing::warn!(path = %p.display(), "trace write failed: {e}");
                                    failed = true;
                                }
                            }
                        }
                        Msg::Flush(ack) => {
                            let _ = out.flush();
                            let _ = ack.send(());
                        }
                    }
                }
                let _ = out.flush();
            })
            .map_err(|e| FsError::io(format!("starting the trace thread: {e}")))?;
        Ok(Arc::new(Trace { tx, dropped: AtomicU64::new(0), path }))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Queues one line for a request of `job` from `client`'s process `pid`.
    pub fn record(&self, job: Arc<str>, client: u64, pid: u32, addr: u64, len: u64, op: OpKind) {
        let msg = Msg::Line { time_us: unix_us(), job, addr, len, op, client, pid };
        match self.tx.try_send(msg) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Lines dropped because the writer fell behind.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Writes out everything recorded so far (waits at most `timeout`).
    pub fn flush(&self, timeout: Duration) {
        let (ack, done) = mpsc::channel();
        if self.tx.send(Msg::Flush(ack)).is_ok() {
            let _ = done.recv_timeout(timeout);
        }
    }
}

/// A line per run with an address of every request served.
impl Observer for Trace {
    fn served(&self, req: &Request<'_>, _real: Duration) {
        let (client, pid) = (req.tag.origin.client, req.tag.origin.pid);
        for run in &req.runs {
            if let Some(addr) = run.addr {
                self.record(req.job.clone(), client, pid, addr, run.len, req.op.kind);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_csv_lines() {
        let d = tempfile::tempdir().unwrap();
        let t = Trace::start(d.path()).unwrap();
        t.record(Arc::from("job-1"), 77, 5, 4096, 65536, OpKind::Read);
        t.record(Arc::from("a,\"b\""), 77, 5, 0, 10, OpKind::Write);
        t.flush(Duration::from_secs(5));
        let text = std::fs::read_to_string(t.path()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "time_us,job,address,len,op,client,pid");
        assert!(lines[1].ends_with(",job-1,4096,65536,read,77,5"), "{}", lines[1]);
        assert!(lines[2].ends_with(",\"a,\"\"b\"\"\",0,10,write,77,5"), "{}", lines[2]);
        let ts: u64 = lines[1].split(',').next().unwrap().parse().unwrap();
        assert!(ts > 1_600_000_000_000_000);
        assert_eq!(t.dropped(), 0);
        drop(t);
        // Reopened: appends without a second header.
        let t = Trace::start(d.path()).unwrap();
        t.record(Arc::from("j"), 77, 5, 1, 1, OpKind::Read);
        t.flush(Duration::from_secs(5));
        let text = std::fs::read_to_string(t.path()).unwrap();
        assert_eq!(text.lines().count(), 4);
        assert_eq!(text.matches("time_us").count(), 1);
    }
}
