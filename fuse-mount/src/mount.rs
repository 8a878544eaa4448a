//! `tessera-fuse MOUNTPOINT [--config FILE] [--daemon] [--allow-other] [-o opt,...]`: checks the mount
//! point, connects to the cluster, mounts, prints `READY <mountpoint>` and serves until unmounted or until
//! SIGINT/SIGTERM (then unmounts cleanly).

use crate::fs::{FsOptions, TesseraFs};
use anyhow::{anyhow, bail, Context};
use clap::Parser;
use fuser::{Config, MountOption, Session, SessionACL};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;
use tessera_client::Client;
use tessera_ops::child;

/// Threads reading requests from /dev/fuse (each request is then served by a tokio task).
const FUSE_THREADS: usize = 2;
/// Read-ahead the kernel may do on the mount (KiB), set through the mount's bdi.
const KERNEL_READ_AHEAD_KB: u32 = 8192;

#[derive(Parser, Debug)]
#[command(name = "tessera-fuse", version, about = "Mount a Tessera file system with FUSE")]
pub struct Args {
    /// Directory to mount on.
    pub mountpoint: PathBuf,
    /// The cluster's configuration (`tessera up` writes DIR/client.toml).
    #[command(flatten)]
    pub config: tessera_ops::daemon::ConfigArgs,
    /// Detach: return once mounted and keep serving in the background.
    #[arg(long)]
    pub daemon: bool,
    /// Let other users use the mount (needs root or user_allow_other in /etc/fuse.conf). The default when
    /// root mounts: the MDS checks every request against its caller's credentials, as a shared file system.
    #[arg(long)]
    pub allow_other: bool,
    /// Mount options, comma-separated: allow_other, allow_root, owner_only, default_permissions (the default),
    /// server_permissions, ro, rw, noatime, nodev, nosuid, noexec, readdirplus, page_cache (reads and writes
    /// through the kernel's page cache instead of direct I/O), sync_creates (every create waits for the
    /// metadata server: no directory leases), local_locks (fcntl and flock locks only within this node,
    /// instead of across every mount), noacl (no POSIX ACLs: setfacl fails; on by default, off with
    /// server_permissions), nocache_leases (no leases on names and attributes: the kernel caches them
    /// for 1 s instead of until the metadata server recalls them; off with server_permissions), fsname=NAME.
    #[arg(short = 'o', value_delimiter = ',', value_name = "OPTS")]
    pub options: Vec<String>,
}

/// What the command line asks for, as fuser options.
#[derive(Debug)]
pub struct MountPlan {
    pub config: Config,
    pub fs: FsOptions,
}

/// Translates `--allow-other` and `-o` options.
pub fn plan(args: &Args) -> anyhow::Result<MountPlan> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    plan_as(args, unsafe { libc::geteuid() } == 0)
}

/// `plan` for a mount by root (`root`) or by an ordinary user: root's mount serves every user, like any
/// multi-user file system (pjdfstest and other suites switch uids), unless `-o owner_only`.
fn plan_as(args: &Args, root: bool) -> anyhow::Result<MountPlan> {
    let mut opts = vec![MountOption::FSName("tessera".into()), MountOption::Subtype("tessera".into())];
    let mut acl = if args.allow_other || root { SessionACL::All } else { SessionACL::Owner };
    let mut fs = FsOptions::default();
    // The kernel checks modes itself (as the MDS does too): without it FIFOs, sockets and device nodes,
    // whose opens never reach the file system, could be opened by anyone.
    let mut kernel_perms = true;
    let mut acl_opt = true;
    for o in args.options.iter().map(|o| o.trim()).filter(|o| !o.is_empty()) {
        match o {
            "allow_other" => acl = SessionACL::All,
            "allow_root" => {
                if acl != SessionACL::All {
                    acl = SessionACL::RootAndOwner
                }
            }
            "owner_only" => acl = SessionACL::Owner,
            "default_permissions" => kernel_perms = true,
            // Only the MDS decides (the kernel caches no permission decisions; special files are unchecked).
            "server_permissions" => kernel_perms = false,
            "sync_creates" => fs.sync_creates = true,
            "local_locks" => fs.local_locks = true,
            "acl" => acl_opt = true,
            "noacl" => acl_opt = false,
            "nocache_leases" => fs.no_cache_leases = true,
            "ro" => opts.push(MountOption::RO),
            "rw" => opts.push(MountOption::RW),
            "noatime" => opts.push(MountOption::NoAtime),
            "atime" => opts.push(MountOption::Atime),
            "nodev" => opts.push(MountOption::NoDev),
            "dev" => opts.push(MountOption::Dev),
            "nosuid" => opts.push(MountOption::NoSuid),
            "suid" => opts.push(MountOption::Suid),
            "noexec" => opts.push(MountOption::NoExec),
            "exec" => opts.push(MountOption::Exec),
            "readdirplus" => fs.readdirplus = true,
            "page_cache" => fs.page_cache = true,
            // fstab noise.
            "defaults" | "_netdev" | "noauto" | "auto" | "user" | "nouser" => {}
            o if o.starts_with("fsname=") => {
                opts.retain(|x| !matches!(x, MountOption::FSName(_)));
                opts.push(MountOption::FSName(o["fsname=".len()..].to_string()));
            }
            o => bail!("unknown mount option '{o}'"),
        }
    }
    fs.acl = acl_opt && kernel_perms;
    if kernel_perms {
        opts.push(MountOption::DefaultPermissions);
    } else {
        // Creates in a leased directory are checked by the kernel alone, and so would be names and
        // attributes it cached for long: only the MDS decides.
        fs.sync_creates = true;
        fs.no_cache_leases = true;
    }
    let mut config = Config::default();
    config.mount_options = opts;
    config.acl = acl;
    config.n_threads = Some(FUSE_THREADS);
    config.clone_fd = true;
    Ok(MountPlan { config, fs })
}

/// Whether `path` (canonical) is the mount point of a mounted file system.
fn is_mount_point(path: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else { return false };
    let want = path.to_string_lossy();
    info.lines().filter_map(|l| l.split(' ').nth(4)).any(|mp| unescape_mountinfo(mp) == want)
}

/// mountinfo escapes space, tab, newline and backslash as octal `\NNN`.
pub fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            let v = (b[i + 1] - b'0') as u32 * 64 + (b[i + 2] - b'0') as u32 * 8 + (b[i + 3] - b'0') as u32;
            out.push(v as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Clear errors for the usual mistakes, before anything is mounted.
pub fn check_mount_point(mp: &Path) -> anyhow::Result<PathBuf> {
    let meta = match std::fs::metadata(mp) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!("mount point {} does not exist", mp.display())
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => {
            bail!(
                "mount point {} is busy: a FUSE file system whose daemon died is still mounted there \
                 (unmount it with `fusermount3 -u {0}` or `umount -l {0}`)",
                mp.display()
            )
        }
        Err(e) => bail!("mount point {}: {e}", mp.display()),
    };
    if !meta.is_dir() {
        bail!("mount point {} is not a directory", mp.display());
    }
    let canon = std::fs::canonicalize(mp).with_context(|| format!("mount point {}", mp.display()))?;
    if is_mount_point(&canon) {
        bail!("mount point {} is busy: something is already mounted there (unmount it first)", canon.display());
    }
    if !Path::new("/dev/fuse").exists() {
        bail!(
            "/dev/fuse is missing: load the fuse kernel module (`modprobe fuse`) or, in a container, \
             pass the device in (--device /dev/fuse)"
        );
    }
    Ok(canon)
}

/// Raises the kernel's read-ahead for the mount (root only; best effort).
fn set_kernel_read_ahead(mp: &Path) {
    let Ok(meta) = std::fs::metadata(mp) else { return };
    let dev = meta.dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let path = format!("/sys/class/bdi/{major}:{minor}/read_ahead_kb");
    if let Err(e) = std::fs::write(&path, KERNEL_READ_AHEAD_KB.to_string()) {
        tracing::debug!("cannot set {path}: {e}");
    }
}

/// How long `--daemon` waits for the daemon to mount.
const DAEMON_READY_TIMEOUT: Duration = Duration::from_secs(120);

/// `--daemon`: runs this program again without it in a new session, and returns once it is mounted.
fn daemonize() -> ExitCode {
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("tessera-fuse: cannot find my own executable: {e}");
            return ExitCode::FAILURE;
        }
    };
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--daemon").collect();
    let mut cmd = Command::new(exe);
    cmd.args(&args);
    // SAFETY: setsid is async-signal-safe; it detaches the child from our terminal session.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    // Its stderr stays ours, so its errors reach the user until it has mounted.
    let mut child = match child::spawn("the daemon", &mut cmd, None) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("tessera-fuse: cannot start the daemon: {e}");
            return ExitCode::FAILURE;
        }
    };
    match child.wait_ready(DAEMON_READY_TIMEOUT) {
        Ok(rest) => {
            tessera_ops::child::announce_ready(rest);
            child.detach();
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tessera-fuse: the daemon did not mount: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Entry point of `tessera-fuse`.
pub fn main_entry() -> ExitCode {
    let args = Args::parse();
    if args.daemon {
        return daemonize();
    }
    tessera_ops::daemon::tune_allocator();
    tessera_ops::daemon::init_logging();
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tessera-fuse: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> anyhow::Result<()> {
    let plan = plan(&args)?;
    let mp = check_mount_point(&args.mountpoint)?;
    let cfg = args.config.load()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("tessera-fuse")
        .build()
        .context("cannot start the async runtime")?;
    let client = rt
        .block_on(Client::connect(&cfg))
        .with_context(|| format!("cannot reach the cluster of {}", cfg.mds0().addr))?;
    let fs = TesseraFs::new(client, plan.fs, rt.handle().clone());
    let state = fs.state();
    let mut session = Session::new(fs, &mp, &plan.config).map_err(|e| {
        if e.kind() == std::io::ErrorKind::PermissionDenied || e.raw_os_error() == Some(libc::EPERM) {
            anyhow!(
                "cannot mount on {}: {e} (mounting needs root, or fusermount3 from the fuse3 package)",
                mp.display()
            )
        } else {
            anyhow::Error::new(e).context(format!("cannot mount on {}", mp.display()))
        }
    })?;
    state.set_notifier(session.notifier(), rt.handle());
    let mut unmounter = session.unmount_callable();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let serve = std::thread::Builder::new()
        .name("fuse-session".into())
        .spawn(move || {
            let r = session.run();
            let _ = done_tx.send(r);
        })
        .context("cannot start the session thread")?;
    set_kernel_read_ahead(&mp);
    tracing::info!("mounted {} on {}", cfg.mds0().addr, mp.display());
    tessera_ops::child::announce_ready(mp.display());

    let outcome = rt.block_on(async {
        let mut signals = child::Signals::new().context("cannot watch SIGINT/SIGTERM")?;
        tokio::select! {
            _ = signals.recv() => Ok::<Option<std::io::Result<()>>, anyhow::Error>(None),
            r = done_rx => Ok(Some(r.unwrap_or(Ok(())))),
        }
    })?;
    let result = match outcome {
        Some(r) => r.context("FUSE session ended"),
        None => {
            tracing::info!("signal received: unmounting {}", mp.display());
            if let Err(e) = unmounter.unmount() {
                tracing::warn!("unmount of {} failed ({e}); detaching it", mp.display());
                let c = std::ffi::CString::new(mp.as_os_str().as_encoded_bytes())?;
                // SAFETY: a valid NUL-terminated path.
                unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
            }
            Ok(())
        }
    };
    // The session thread ends once the kernel closes the connection; do not wait forever for it.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !serve.is_finished() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    if serve.is_finished() {
        let _ = serve.join();
    }
    // Files still open (a lazily detached mount, or a session that died): their writes still land.
    let _ = rt.block_on(async { tokio::time::timeout(Duration::from_secs(30), state.shutdown()).await });
    rt.shutdown_timeout(Duration::from_millis(500));
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Args {
        Args::try_parse_from(std::iter::once("tessera-fuse").chain(v.iter().copied())).unwrap()
    }

    #[test]
    fn options_are_translated() {
        let p = plan(&args(&["/mnt", "-o", "allow_other,default_permissions,readdirplus"])).unwrap();
        assert_eq!(p.config.acl, SessionACL::All);
        assert!(p.config.mount_options.contains(&MountOption::DefaultPermissions));
        assert!(p.fs.readdirplus);
        assert!(!p.fs.page_cache, "direct I/O is the default");
        assert!(plan(&args(&["/mnt", "-o", "page_cache"])).unwrap().fs.page_cache);
        let p = plan_as(&args(&["/mnt"]), false).unwrap();
        assert_eq!(p.config.acl, SessionACL::Owner);
        assert_eq!(plan_as(&args(&["/mnt"]), true).unwrap().config.acl, SessionACL::All);
        assert_eq!(plan_as(&args(&["/mnt", "-o", "owner_only"]), true).unwrap().config.acl, SessionACL::Owner);
        assert!(p.config.mount_options.contains(&MountOption::DefaultPermissions));
        let p = plan(&args(&["/mnt", "-o", "server_permissions"])).unwrap();
        assert!(!p.config.mount_options.contains(&MountOption::DefaultPermissions));
        assert!(!p.fs.acl, "the kernel's ACL checks need its permission checks");
        assert!(plan(&args(&["/mnt"])).unwrap().fs.acl, "POSIX ACLs by default");
        assert!(!plan(&args(&["/mnt", "-o", "noacl"])).unwrap().fs.acl);
        assert!(!plan(&args(&["/mnt"])).unwrap().fs.no_cache_leases, "leases on names and attributes by default");
        assert!(plan(&args(&["/mnt", "-o", "nocache_leases"])).unwrap().fs.no_cache_leases);
        assert!(plan(&args(&["/mnt", "-o", "server_permissions"])).unwrap().fs.no_cache_leases);
        assert!(plan(&args(&["/mnt", "-o", "bogus"])).is_err());
        let p = plan(&args(&["/mnt", "--allow-other", "-o", "fsname=x"])).unwrap();
        assert_eq!(p.config.acl, SessionACL::All);
        assert!(p.config.mount_options.contains(&MountOption::FSName("x".into())));
    }

    #[test]
    fn mount_point_checks() {
        let d = tempfile::tempdir().unwrap();
        let missing = d.path().join("nope");
        assert!(check_mount_point(&missing).unwrap_err().to_string().contains("does not exist"));
        let f = d.path().join("file");
        std::fs::write(&f, b"x").unwrap();
        assert!(check_mount_point(&f).unwrap_err().to_string().contains("not a directory"));
        assert!(check_mount_point(Path::new("/proc")).unwrap_err().to_string().contains("busy"));
        assert_eq!(unescape_mountinfo("/a\\040b"), "/a b");
    }
}
