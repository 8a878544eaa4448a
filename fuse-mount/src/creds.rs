//! Who is calling: the credentials (uid, gid, supplementary groups) sent to the MDS and the job id the
//! data servers see, both found from the calling process in /proc and cached per process.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tessera_client::job;
pub use tessera_client::job::Who;
use tessera_client::Caller;

/// Most processes remembered; the cache is emptied when it grows past this.
const CACHE_MAX: usize = 4096;
/// How long a process's groups and job id are trusted (a process may change its groups).
const CACHE_TTL: Duration = Duration::from_secs(10);

type Cache = HashMap<(u32, u32, u32), (Instant, Arc<Who>)>;

/// Per-process cache keyed by (pid, uid, gid), so a process that changes identity is looked up anew.
#[derive(Default)]
pub struct Creds {
    cache: Mutex<Cache>,
}

impl Creds {
    pub fn new() -> Creds {
        Creds::default()
    }

    /// The caller of a request from process `pid` running as `uid`/`gid` (from the FUSE header).
    pub fn get(&self, pid: u32, uid: u32, gid: u32) -> Arc<Who> {
        let key = (pid, uid, gid);
        if let Ok(c) = self.cache.lock() {
            if let Some((at, who)) = c.get(&key) {
                if at.elapsed() < CACHE_TTL {
                    return who.clone();
                }
            }
        }
        let who = Arc::new(lookup(pid, uid, gid));
        if let Ok(mut c) = self.cache.lock() {
            if c.len() >= CACHE_MAX {
                c.clear();
            }
            c.insert(key, (Instant::now(), who.clone()));
        }
        who
    }
}

fn lookup(pid: u32, uid: u32, gid: u32) -> Who {
    if pid == 0 {
        // Requests the kernel makes on its own (write-back of dirty pages).
        return Who { caller: Caller { uid, gid, groups: vec![] }, job: "kernel".to_string(), pid };
    }
    let groups = std::fs::read_to_string(format!("/proc/{pid}/status")).map(|s| parse_groups(&s)).unwrap_or_default();
    let env = std::fs::read(format!("/proc/{pid}/environ")).map(|b| parse_environ(&b)).unwrap_or_default();
    let sid = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok().and_then(|s| parse_session(&s)).unwrap_or(0);
    let job = job::detect_from(|k| env.get(k).cloned(), sid);
    Who { caller: Caller { uid, gid, groups: groups.into_iter().filter(|&g| g != gid).collect() }, job, pid }
}

/// The `Groups:` line of /proc/PID/status.
pub fn parse_groups(status: &str) -> Vec<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|g| g.split_whitespace().filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_default()
}

/// /proc/PID/environ: NUL-separated `KEY=VALUE` pairs.
pub fn parse_environ(raw: &[u8]) -> HashMap<String, String> {
    raw.split(|&b| b == 0)
        .filter_map(|kv| {
            let kv = String::from_utf8_lossy(kv);
            let (k, v) = kv.split_once('=')?;
            Some((k.to_string(), v.to_string()))
        })
        .collect()
}

/// The session id (field 6) of /proc/PID/stat; the command name (field 2) may contain spaces and ')'.
pub fn parse_session(stat: &str) -> Option<i32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // After the name: state ppid pgrp session ...
    rest.split_whitespace().nth(3)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_parsing() {
        assert_eq!(parse_groups("Name:\tx\nGroups:\t4 24 27 \nNSpid:\t1\n"), vec![4, 24, 27]);
        assert_eq!(parse_groups("Groups:\n"), Vec::<u32>::new());
        let env = parse_environ(b"A=1\0TESSERA_JOB=j=2\0\0B\0");
        assert_eq!(env.get("TESSERA_JOB").map(String::as_str), Some("j=2"));
        assert_eq!(env.len(), 2);
        assert_eq!(parse_session("123 (a b) c) S 1 123 4711 0 -1"), Some(4711));
        assert_eq!(parse_session("garbage"), None);
    }

    #[test]
    fn own_process_is_found() {
        let c = Creds::new();
        let me = std::process::id();
        let who = c.get(me, 0, 0);
        assert!(!who.job.is_empty());
        assert!(Arc::ptr_eq(&who, &c.get(me, 0, 0)));
        assert!(!Arc::ptr_eq(&who, &c.get(me, 1, 0)));
        assert_eq!(c.get(0, 5, 6).job, "kernel");
    }
}
