//! The I/O API a benchmark task drives, written once over two implementations: the Tessera client
//! library (one connection per task, tasks on the tokio runtime) and POSIX (`std::fs`, one OS thread per task).

use anyhow::{anyhow, Context, Result};
use bytes::Bytes;
use std::future::Future;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use tessera_client::{Client, ClusterConfig, ErrorCode, LayoutSpec, OpenOptions};
use tokio::sync::oneshot;

/// What `stat` tells a benchmark.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    pub size: u64,
    pub is_dir: bool,
}

/// One task's view of a file system. Futures are `Send` so tessera tasks can run on the multi-thread runtime.
pub trait Backend: Send + Sync + 'static {
    type File: Send + Sync + 'static;

    /// Creates (or truncates) a file open for writing; `layout` applies to Tessera only.
    fn create(&self, path: &str, layout: Option<LayoutSpec>) -> impl Future<Output = Result<Self::File>> + Send;
    /// Opens an existing file for writing without truncating it.
    fn open_write(&self, path: &str) -> impl Future<Output = Result<Self::File>> + Send;
    fn open_read(&self, path: &str) -> impl Future<Output = Result<Self::File>> + Send;
    fn write_at(&self, f: &Self::File, offset: u64, data: Bytes) -> impl Future<Output = Result<()>> + Send;
    /// Reads exactly `len` bytes; a short read is an error.
    fn read_at(&self, f: &Self::File, offset: u64, len: usize) -> impl Future<Output = Result<Bytes>> + Send;
    /// [`Backend::read_at`] for a caller that does not look at the bytes as one buffer (IOR without
    /// `--verify`): the Tessera library hands them over in the pieces they arrived in, without gathering
    /// them (`File::read_pieces`); POSIX reads into one buffer as ever.
    fn read_pieces(&self, f: &Self::File, offset: u64, len: usize) -> impl Future<Output = Result<Vec<Bytes>>> + Send {
        async move { Ok(vec![self.read_at(f, offset, len).await?]) }
    }
    fn fsync(&self, f: &Self::File) -> impl Future<Output = Result<()>> + Send;
    fn close(&self, f: Self::File) -> impl Future<Output = Result<()>> + Send;
    fn stat(&self, path: &str) -> impl Future<Output = Result<Meta>> + Send;
    fn unlink(&self, path: &str) -> impl Future<Output = Result<()>> + Send;
    fn mkdir_all(&self, path: &str) -> impl Future<Output = Result<()>> + Send;
    fn remove_all(&self, path: &str) -> impl Future<Output = Result<()>> + Send;

    /// Runs one task's future the way this API's tasks run; the receiver yields its output.
    fn spawn<T, F>(name: String, fut: F) -> Result<oneshot::Receiver<T>>
    where
        T: Send + 'static,
        F: Future<Output = T> + Send + 'static;
}

/// Options every benchmark command has: which cluster, which job id, where the JSON goes.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ClusterArgs {
    /// Job id the servers see (Tessera API; default: TESSERA_JOB or the session id — `workload`: NAME-PID).
    #[arg(long)]
    pub job: Option<String>,
    /// Cluster configuration (else $TESSERA_CONFIG).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Write results as JSON to FILE.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// The Tessera client library; each task owns its own connection. Files are opened on the client's I/O
/// engine, the data path the mount and `tessera put/get` run on: writes go into its write-behind (their
/// errors come back from `fsync` or `close`); reads are exact unless [`TesseraBackend::with_read_ahead`]:
/// a benchmark asks for the reads it wants, and read-ahead costs the client CPU and memory for its window
/// (`results/house/engine-ab.md`).
#[derive(Clone)]
pub struct TesseraBackend {
    client: Client,
    read_ahead: bool,
    /// Writes through, each as the benchmark issues it (IOR's `--posix.odirect`), not into the write-behind.
    direct: bool,
}

impl TesseraBackend {
    pub async fn connect(cfg: &ClusterConfig, job: Option<&str>) -> Result<TesseraBackend> {
        let client = Client::connect(cfg).await.context("connecting to the Tessera cluster")?;
        let client = match job {
            Some(j) => client.with_job(j),
            None => client,
        };
        Ok(TesseraBackend { client, read_ahead: false, direct: false })
    }

    /// Reads through the engine's read-ahead too, as the mount's.
    pub fn with_read_ahead(self, read_ahead: bool) -> TesseraBackend {
        TesseraBackend { read_ahead, ..self }
    }

    /// Writes through and reads exactly (IOR's `--posix.odirect`): the data servers see each transfer as
    /// the benchmark issued it, as a job's characterisation from their traces expects.
    pub fn with_direct(self, direct: bool) -> TesseraBackend {
        TesseraBackend { direct, ..self }
    }

    fn open_opts(&self, read: bool, write: bool) -> OpenOptions {
        let o = OpenOptions { read, write, perm: 0o644, write_behind: !self.direct, ..OpenOptions::default() };
        OpenOptions { read_ahead: self.read_ahead && !self.direct, ..o }
    }
}

impl Backend for TesseraBackend {
    type File = tessera_client::File;

    /// Creates with `layout`; a file that exists already is truncated and keeps its layout (IOR's
    /// `O_CREAT | O_TRUNC`, as the posix backend does), so a run with `-k` can be repeated.
    async fn create(&self, path: &str, layout: Option<LayoutSpec>) -> Result<Self::File> {
        let opts = OpenOptions { create: true, exclusive: true, ..self.open_opts(true, true) };
        match self.client.create_with(path, opts, layout).await {
            Err(e) if e.code == ErrorCode::Exists => {
                let opts = OpenOptions { truncate: true, ..self.open_opts(false, true) };
                self.client.open(path, opts).await.with_context(|| format!("open {path} for rewriting"))
            }
            r => r.with_context(|| format!("create {path}")),
        }
    }
    async fn open_write(&self, path: &str) -> Result<Self::File> {
        self.client.open(path, self.open_opts(false, true)).await.with_context(|| format!("open {path} for writing"))
    }
    async fn open_read(&self, path: &str) -> Result<Self::File> {
        self.client.open(path, self.open_opts(true, false)).await.with_context(|| format!("open {path} for reading"))
    }
    async fn write_at(&self, f: &Self::File, offset: u64, data: Bytes) -> Result<()> {
        let len = data.len();
        f.write_at(offset, data).await.with_context(|| format!("write {len} bytes at offset {offset}"))
    }
    async fn read_at(&self, f: &Self::File, offset: u64, len: usize) -> Result<Bytes> {
        let data =
            f.read_at(offset, len as u64).await.with_context(|| format!("read {len} bytes at offset {offset}"))?;
        if data.len() != len {
            return Err(anyhow!("short read at offset {offset}: got {} of {len} bytes", data.len()));
        }
        Ok(data)
    }
    async fn read_pieces(&self, f: &Self::File, offset: u64, len: usize) -> Result<Vec<Bytes>> {
        let data =
            f.read_pieces(offset, len as u64).await.with_context(|| format!("read {len} bytes at offset {offset}"))?;
        let got: usize = data.iter().map(Bytes::len).sum();
        if got != len {
            return Err(anyhow!("short read at offset {offset}: got {got} of {len} bytes"));
        }
        Ok(data)
    }
    async fn fsync(&self, f: &Self::File) -> Result<()> {
        f.fsync().await.context("fsync")
    }
    async fn close(&self, f: Self::File) -> Result<()> {
        f.close().await.context("close")
    }
    async fn stat(&self, path: &str) -> Result<Meta> {
        let a = self.client.stat(path).await.with_context(|| format!("stat {path}"))?;
        Ok(Meta { size: a.size, is_dir: a.kind == tessera_client::FileKind::Dir })
    }
    async fn unlink(&self, path: &str) -> Result<()> {
        self.client.unlink(path).await.with_context(|| format!("unlink {path}"))
    }
    async fn mkdir_all(&self, path: &str) -> Result<()> {
        self.client.mkdir_all(path, 0o755).await.with_context(|| format!("mkdir -p {path}"))
    }
    async fn remove_all(&self, path: &str) -> Result<()> {
        self.client.remove_all(path).await.with_context(|| format!("rm -r {path}"))
    }

    fn spawn<T, F>(_name: String, fut: F) -> Result<oneshot::Receiver<T>>
    where
        T: Send + 'static,
        F: Future<Output = T> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        tokio::spawn(async move {
            // The receiver only disappears if the coordinator gave up; nothing to report then.
            let _ = tx.send(fut.await);
        });
        Ok(rx)
    }
}

/// Local POSIX files through `std::fs` (pread/pwrite). Its futures never suspend on I/O: each task
/// runs on its own OS thread, like one IOR rank.
#[derive(Clone, Copy, Default)]
pub struct PosixBackend;

fn posix_open(path: &str, read: bool, write: bool, create: bool) -> Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .read(read)
        .write(write)
        .create(create)
        .truncate(create)
        .open(path)
        .with_context(|| format!("open {path}"))
}

thread_local! {
    /// The posix tasks' read buffer (one OS thread per task).
    static READ_BUF: std::cell::RefCell<bytes::BytesMut> = std::cell::RefCell::new(bytes::BytesMut::new());
}

/// `pread` of exactly `len` bytes into a buffer reused from one call to the next once the caller has
/// dropped the last result, like IOR's single buffer: a fresh zeroed buffer per call cost each task
/// a memset of every byte it read (2% of a mount read's system-wide profile).
fn pread_reusing(f: &std::fs::File, offset: u64, len: usize) -> std::io::Result<Bytes> {
    READ_BUF.with(|cell| {
        let mut buf = cell.borrow_mut();
        buf.clear();
        if tessera_proto::fileio::pread_append(f, &mut buf, offset, len)? < len {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        Ok(buf.split().freeze())
    })
}

impl Backend for PosixBackend {
    type File = std::fs::File;

    async fn create(&self, path: &str, _layout: Option<LayoutSpec>) -> Result<Self::File> {
        posix_open(path, true, true, true)
    }
    async fn open_write(&self, path: &str) -> Result<Self::File> {
        posix_open(path, false, true, false)
    }
    async fn open_read(&self, path: &str) -> Result<Self::File> {
        posix_open(path, true, false, false)
    }
    async fn write_at(&self, f: &Self::File, offset: u64, data: Bytes) -> Result<()> {
        f.write_all_at(&data, offset).with_context(|| format!("pwrite {} bytes at offset {offset}", data.len()))
    }
    async fn read_at(&self, f: &Self::File, offset: u64, len: usize) -> Result<Bytes> {
        pread_reusing(f, offset, len).with_context(|| format!("pread {len} bytes at offset {offset}"))
    }
    async fn fsync(&self, f: &Self::File) -> Result<()> {
        f.sync_all().context("fsync")
    }
    async fn close(&self, f: Self::File) -> Result<()> {
        drop(f);
        Ok(())
    }
    async fn stat(&self, path: &str) -> Result<Meta> {
        let m = std::fs::metadata(path).with_context(|| format!("stat {path}"))?;
        Ok(Meta { size: m.len(), is_dir: m.is_dir() })
    }
    async fn unlink(&self, path: &str) -> Result<()> {
        std::fs::remove_file(path).with_context(|| format!("unlink {path}"))
    }
    async fn mkdir_all(&self, path: &str) -> Result<()> {
        std::fs::create_dir_all(path).with_context(|| format!("mkdir -p {path}"))
    }
    async fn remove_all(&self, path: &str) -> Result<()> {
        match std::fs::remove_dir_all(path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e).with_context(|| format!("rm -r {path}")),
        }
    }

    fn spawn<T, F>(name: String, fut: F) -> Result<oneshot::Receiver<T>>
    where
        T: Send + 'static,
        F: Future<Output = T> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        std::thread::Builder::new()
            .name(name.clone())
            .spawn(move || {
                let _ = tx.send(futures::executor::block_on(fut));
            })
            .with_context(|| format!("spawning thread {name}"))?;
        Ok(rx)
    }
}

/// The parent directory of a file path, if it has a non-root one.
pub fn parent_dir(path: &str) -> Option<String> {
    let p = Path::new(path).parent()?;
    let s = p.to_str()?;
    if s.is_empty() || s == "/" {
        None
    } else {
        Some(s.to_string())
    }
}

/// Waits for a spawned task; a task that vanished without reporting panicked.
pub async fn join<T>(rx: oneshot::Receiver<Result<T>>, what: &str) -> Result<T> {
    rx.await.map_err(|_| anyhow!("{what} panicked"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parent_dirs() {
        assert_eq!(parent_dir("/a/b/c"), Some("/a/b".into()));
        assert_eq!(parent_dir("/a"), None);
        assert_eq!(parent_dir("a"), None);
        assert_eq!(parent_dir("a/b"), Some("a".into()));
    }

    #[test]
    fn posix_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f").to_str().unwrap().to_string();
        futures::executor::block_on(async {
            let b = PosixBackend;
            let f = b.create(&p, None).await.unwrap();
            b.write_at(&f, 4, Bytes::from_static(b"abcd")).await.unwrap();
            b.fsync(&f).await.unwrap();
            b.close(f).await.unwrap();
            assert_eq!(b.stat(&p).await.unwrap(), Meta { size: 8, is_dir: false });
            let f = b.open_read(&p).await.unwrap();
            assert_eq!(&b.read_at(&f, 4, 4).await.unwrap()[..], b"abcd");
            assert!(b.read_at(&f, 6, 4).await.is_err());
            // The read buffer is reused only once a result is dropped: a result kept stays intact.
            let kept = b.read_at(&f, 4, 4).await.unwrap();
            assert_eq!(&b.read_at(&f, 0, 6).await.unwrap()[..], b"\0\0\0\0ab");
            assert_eq!(&kept[..], b"abcd");
            b.close(f).await.unwrap();
            b.unlink(&p).await.unwrap();
            assert!(b.stat(&p).await.is_err());
        });
    }
}
