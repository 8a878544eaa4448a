//! The job id this process's I/O is tagged with, found like Lustre's `jobid_var`: an explicit
//! `TESSERA_JOB`, else the batch scheduler's job id, else the login session.

use crate::mds_client::MdsClient;
use tessera_proto::types::{Caller, JOB_ID_MAX};

/// The caller of one request: the credentials sent to the MDS, the job id the data servers see, and
/// the calling process (0: the kernel itself). The mount finds them from the calling process in /proc;
/// the library's own calls are its process's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Who {
    pub caller: Caller,
    pub job: String,
    pub pid: u32,
}

impl Who {
    /// The MDS connection calling for this process: its credentials, job and process id.
    pub fn mds(&self, base: &MdsClient) -> MdsClient {
        base.for_process(self.caller.clone(), &self.job, self.pid)
    }
}

/// Explicit job id; wins over everything else.
pub const JOB_ENV: &str = "TESSERA_JOB";

/// Batch-scheduler variables in the order they are consulted, with the prefix their value gets
/// (so `1234` from Slurm and `1234` from PBS stay distinct jobs).
pub const SCHEDULER_VARS: [(&str, &str); 3] =
    [("SLURM_JOB_ID", "slurm-"), ("PBS_JOBID", "pbs-"), ("LSB_JOBID", "lsf-")];

/// The job id of this process.
pub fn detect() -> String {
    // SAFETY: getsid(0) only queries the calling process and cannot fail for it.
    let sid = unsafe { libc::getsid(0) };
    detect_from(|k| std::env::var(k).ok(), sid)
}

/// The job id given an environment lookup and a session id (factored out for testing).
pub fn detect_from(env: impl Fn(&str) -> Option<String>, sid: i32) -> String {
    let get = |k: &str| env(k).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
    if let Some(j) = get(JOB_ENV) {
        return sanitize(&j);
    }
    for (var, prefix) in SCHEDULER_VARS {
        if let Some(j) = get(var) {
            return sanitize(&format!("{prefix}{j}"));
        }
    }
    format!("sess-{sid}")
}

/// Makes `job` fit an [`IoTag`](tessera_proto::types::IoTag): printable, at most `JOB_ID_MAX` bytes.
pub fn sanitize(job: &str) -> String {
    let mut out = String::new();
    for c in job.trim().chars() {
        let c = if c.is_control() || c.is_whitespace() { '_' } else { c };
        if out.len() + c.len_utf8() > JOB_ID_MAX {
            break;
        }
        out.push(c);
    }
    if out.is_empty() {
        "unknown".to_string()
    } else {
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn detection_order() {
        let all = [("TESSERA_JOB", "mine"), ("SLURM_JOB_ID", "11"), ("PBS_JOBID", "22"), ("LSB_JOBID", "33")];
        assert_eq!(detect_from(env(&all), 7), "mine");
        assert_eq!(detect_from(env(&all[1..]), 7), "slurm-11");
        assert_eq!(detect_from(env(&all[2..]), 7), "pbs-22");
        assert_eq!(detect_from(env(&all[3..]), 7), "lsf-33");
        assert_eq!(detect_from(env(&[]), 4711), "sess-4711");
        // Empty values do not count.
        assert_eq!(detect_from(env(&[("TESSERA_JOB", " "), ("PBS_JOBID", "9.server")]), 1), "pbs-9.server");
    }

    #[test]
    fn sanitize_bounds_length_and_controls() {
        assert_eq!(sanitize("a b\n"), "a_b");
        assert_eq!(sanitize(""), "unknown");
        let long = "é".repeat(200);
        let s = sanitize(&long);
        assert!(s.len() <= JOB_ID_MAX && s.len() >= JOB_ID_MAX - 1);
    }
}
