//! Spec: specs/periodic.md "In the file system" — the registry of periodic jobs as the MDS shares it
//! between its request handlers, the detector and the metrics. Changes and reads take a short lock; the
//! planner ([`super::live::PlanInput::solve`]: up to about 2 s with K' = 10 and many jobs) runs on the
//! blocking pool outside it, one plan at a time, so a plan never holds up the polls, rates and status of
//! other jobs, nor a runtime worker.

use super::live::Registry;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// The registry behind a lock, and the right to plan.
#[derive(Debug)]
pub struct Shared {
    registry: Mutex<Registry>,
    planning: tokio::sync::Mutex<()>,
    /// A [`Shared::settle_later`] task is spawned and has not started yet.
    queued: AtomicBool,
}

impl Shared {
    pub fn new(registry: Registry) -> Shared {
        Shared { registry: Mutex::new(registry), planning: tokio::sync::Mutex::new(()), queued: AtomicBool::new(false) }
    }

    /// The registry, for a change or a read (a panic elsewhere does not lock it for good).
    pub fn lock(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Plans until the pattern matches the current jobs (nothing to do if it does). Callers that changed
    /// the jobs await this before they answer, so a registration is answered with its grant; while one
    /// caller plans, the others wait here (not on the lock), and a plan whose jobs changed meanwhile is
    /// discarded and redone.
    pub async fn settle(&self) {
        let _one = self.planning.lock().await;
        self.plan_until_current().await;
    }

    /// The planning loop of [`Shared::settle`]; the caller holds `planning`.
    async fn plan_until_current(&self) {
        loop {
            let Some(input) = self.lock().plan_input() else { return };
            let plan = match tokio::task::spawn_blocking(move || input.solve()).await {
                Ok(plan) => plan,
                Err(e) => {
                    tracing::error!("PerSched's planner failed: {e}; the old pattern stays");
                    return;
                }
            };
            self.lock().install(plan, tessera_proto::types::unix_us() / 1000);
        }
    }

    /// [`Shared::settle`] in a task, for callers that answer at once. While one such task waits for its
    /// turn to plan, no other is spawned (it reads the jobs only once its turn comes, so it covers their
    /// changes): a stream of polls during a long plan queues one task, not one per poll.
    pub fn settle_later(self: &Arc<Self>) {
        if self.queued.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = self.clone();
        tokio::spawn(async move {
            let _one = me.planning.lock().await;
            me.queued.store(false, Ordering::Release);
            me.plan_until_current().await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::persched::live::{LiveConfig, Profile};

    /// 24 registered jobs of unrelated cycles (PERSCHED's sweep takes ~230 ms on this machine) and a task
    /// planning them.
    fn planning_24_jobs() -> (Arc<Shared>, tokio::task::JoinHandle<()>) {
        let shared = Arc::new(Shared::new(Registry::new(LiveConfig::test_cluster())));
        for i in 0..24u64 {
            let p = Profile { nodes: 1 + (i % 3) as u32, compute_ms: 1_000 + 331 * i, volume: 1_000_000 + 277_777 * i };
            shared.lock().register(&format!("j{i}"), p, 0).unwrap();
        }
        let s = shared.clone();
        (shared, tokio::spawn(async move { s.settle().await }))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_lock_is_free_while_a_plan_is_computed() {
        let (shared, planner) = planning_24_jobs();
        // While it plans, reads and polls are served: the lock is never held by the planner.
        let t0 = std::time::Instant::now();
        let mut served_while_planning = 0;
        while !planner.is_finished() {
            assert_eq!(shared.lock().status(0).jobs.len(), 24);
            served_while_planning += 1;
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        planner.await.unwrap();
        println!("planned in {:?}, {served_while_planning} status reads meanwhile", t0.elapsed());
        // A planner holding the lock would let through one read at most (before it took the lock).
        assert!(served_while_planning >= 10, "{served_while_planning} reads while planning");
        let r = shared.lock();
        assert!(r.plan_input().is_none(), "settled");
        assert!(r.grant("j0").unwrap().period_ms > 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_change_during_a_plan_is_planned_by_one_queued_task() {
        let (shared, planner) = planning_24_jobs();
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        // A job leaves while the plan runs; polls answered at once ask for a plan later, many times.
        assert!(shared.lock().leave("j3"));
        for _ in 0..100 {
            shared.settle_later();
        }
        if !planner.is_finished() {
            // The first call's task waits for its turn; the other 99 calls spawned nothing.
            assert!(shared.queued.load(Ordering::Acquire));
        }
        planner.await.unwrap();
        let t = std::time::Instant::now();
        let busy = || shared.lock().plan_input().is_some() || shared.queued.load(Ordering::Acquire);
        while busy() && t.elapsed() < std::time::Duration::from_secs(30) {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let r = shared.lock();
        assert!(r.plan_input().is_none(), "the departure was planned");
        assert!(r.grant("j3").is_none() && r.grant("j4").unwrap().period_ms > 0);
        assert!(!shared.queued.load(Ordering::Acquire), "the queued task ran");
    }
}
