//! Placement policies: which data servers hold a new file's stripes. `[defaults] placement` names one.

use crate::stats::DsInfo;
use std::sync::atomic::{AtomicUsize, Ordering};
use tessera_proto::error::ErrorCode;
use tessera_proto::{DsId, FsError, FsResult};

/// A placement policy. Load-aware policies (Lustre's allocator, Tarazu) read the reports in `servers`.
pub trait Placement: Send + Sync {
    fn name(&self) -> &'static str;
    /// Distinct data servers for `stripe_count` stripes (1 ≤ stripe_count ≤ servers.len()).
    fn place(&self, stripe_count: usize, servers: &[DsInfo]) -> FsResult<Vec<DsId>>;
}

/// The policy called `name`.
pub fn by_name(name: &str) -> FsResult<Box<dyn Placement>> {
    match name {
        "round-robin" | "roundrobin" | "rr" | "simple" => Ok(Box::new(RoundRobin::default())),
        other => Err(FsError::invalid(format!("unknown placement policy '{other}' (known: round-robin)"))),
    }
}

/// PVFS2 "simple stripe": consecutive data servers, the first one rotating from file to file.
#[derive(Default)]
pub struct RoundRobin {
    next: AtomicUsize,
}

impl Placement for RoundRobin {
    fn name(&self) -> &'static str {
        "round-robin"
    }

    fn place(&self, stripe_count: usize, servers: &[DsInfo]) -> FsResult<Vec<DsId>> {
        let n = servers.len();
        if n == 0 {
            return Err(FsError::new(ErrorCode::NoSpace, "no data servers configured"));
        }
        let count = if stripe_count == 0 { n } else { stripe_count.min(n) };
        let start = self.next.fetch_add(1, Ordering::Relaxed) % n;
        Ok((0..count).map(|k| servers[(start + k) % n].id).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn servers(n: u32) -> Vec<DsInfo> {
        (0..n).map(|id| DsInfo { id, addr: String::new(), report: None, age: None, silent: false }).collect()
    }

    #[test]
    fn round_robin_rotates_start_and_stays_distinct() {
        let p = by_name("round-robin").unwrap();
        let s = servers(4);
        assert_eq!(p.place(2, &s).unwrap(), vec![0, 1]);
        assert_eq!(p.place(2, &s).unwrap(), vec![1, 2]);
        assert_eq!(p.place(2, &s).unwrap(), vec![2, 3]);
        assert_eq!(p.place(2, &s).unwrap(), vec![3, 0]);
        let all = p.place(9, &s).unwrap();
        let mut sorted = all.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, vec![0, 1, 2, 3]);
        assert!(p.place(1, &[]).is_err());
        assert!(by_name("tarazu-nope").is_err());
    }
}
