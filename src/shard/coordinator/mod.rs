//! The group coordinator: the sans-IO [`membership`](crate::shard::membership) state machine
//! driven with real time on the core that owns the group.
//!
//! - Which core: the placement's `coordinator` (on one node, FNV-1a of the group name
//!   modulo the cores), so every front-end, FindCoordinator included, names the same place,
//!   and every group call is routed there by the shard ([`api`]).
//! - Waits: a join waits until its generation forms (every known member rejoined, or the
//!   rebalance deadline passed), a Kafka follower's sync until the leader's assignment.
//!   Replies the machine makes for a waiting member are left in [`Coordinator`]'s answer box
//!   and the waiters are woken; each waiter takes its own. Every wait is bounded (the
//!   member's rebalance timeout plus a second, at most five minutes) and ends at shutdown.
//! - Time: one task per core ([`run_timers`]) ticks the machine every 100 ms, which
//!   expires sessions and ends rebalances at their deadline.
//! - Groups live in memory: after a restart members join again (their offsets are durable,
//!   in the offsets shards).

pub mod api;
pub mod calls;
mod run;

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use futures_lite::FutureExt;
use tracing::info;

use crate::shard::membership::{GroupError, GroupLimits, Groups, Reply};
use crate::shard::{Shard, ShardError};
use crate::watch::Watch;

/// Most groups one core coordinates.
pub const GROUPS_PER_CORE_MAX: usize = 10_000;
/// How often sessions and rebalance deadlines are checked.
pub const TICK_EVERY: Duration = Duration::from_millis(100);
/// Longest a join or sync waits, whatever rebalance timeout the member gave.
pub const GROUP_WAIT_MAX: Duration = Duration::from_secs(300);
/// Added to a member's rebalance timeout for its wait, so that the tick that ends the
/// rebalance at its deadline answers before the wait gives up.
const WAIT_SLACK: Duration = Duration::from_secs(1);
/// An answer nobody took within this long is dropped (its waiter gave up or went away).
const ANSWER_KEPT: Duration = Duration::from_secs(5);

/// Which answer a waiter wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Want {
    Join,
    Sync,
}

/// One core's groups, their waiting answers, and the clock they run on.
pub struct Coordinator {
    pub(crate) groups: RefCell<Groups>,
    /// (group, member id) → the reply the machine made for that member, and when.
    answers: RefCell<HashMap<(String, String), (Reply, Instant)>>,
    answered: Watch,
    epoch: Instant,
}

impl Default for Coordinator {
    fn default() -> Self {
        Coordinator {
            groups: RefCell::new(Groups::new(GROUPS_PER_CORE_MAX, GroupLimits::default())),
            answers: RefCell::new(HashMap::new()),
            answered: Watch::default(),
            epoch: Instant::now(),
        }
    }
}

impl Coordinator {
    /// Milliseconds on this coordinator's monotonic clock.
    pub(crate) fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Leaves replies for their members' waiters and wakes them.
    pub(crate) fn deliver(&self, group: &str, replies: Vec<Reply>) {
        if replies.is_empty() {
            return;
        }
        let now = Instant::now();
        let mut answers = self.answers.borrow_mut();
        for reply in replies {
            let member = match &reply {
                Reply::Joined { member_id, .. }
                | Reply::Synced { member_id, .. }
                | Reply::Failed { member_id, .. } => member_id.clone(),
            };
            answers.insert((group.to_string(), member), (reply, now));
        }
        drop(answers);
        self.answered.notify_all();
    }

    /// Forgets an answer a member left behind (a wait that gave up), before a new call of
    /// that member can make a fresh one.
    pub(crate) fn forget(&self, group: &str, member_id: &str) {
        self.answers
            .borrow_mut()
            .remove(&(group.to_string(), member_id.to_string()));
    }

    fn take(&self, group: &str, member_id: &str, want: Want) -> Option<Reply> {
        let key = (group.to_string(), member_id.to_string());
        let mut answers = self.answers.borrow_mut();
        let fits = match answers.get(&key) {
            Some((Reply::Failed { .. }, _)) => true,
            Some((Reply::Joined { .. }, _)) => want == Want::Join,
            Some((Reply::Synced { .. }, _)) => want == Want::Sync,
            None => false,
        };
        if fits {
            answers.remove(&key).map(|(reply, _)| reply)
        } else {
            None
        }
    }

    /// Waits for the member's reply, at most `bound` (capped at [`GROUP_WAIT_MAX`]).
    pub(crate) async fn wait(
        &self,
        shard: &Shard,
        group: &str,
        member_id: &str,
        want: Want,
        bound: Duration,
    ) -> Result<Reply, ShardError> {
        let deadline = Instant::now() + bound.min(GROUP_WAIT_MAX) + WAIT_SLACK;
        loop {
            if let Some(reply) = self.take(group, member_id, want) {
                return Ok(reply);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(ShardError::RebalanceTimeout {
                    group: group.to_string(),
                    bound_ms: u64::try_from(bound.as_millis()).unwrap_or(u64::MAX),
                });
            }
            if shard.shutdown.is_requested() {
                return Err(ShardError::shutting_down("the broker is stopping"));
            }
            let changed = self.answered.changed();
            let timer = glommio::timer::sleep(deadline - now);
            let stop = shard.shutdown.wait();
            changed
                .or(async {
                    timer.await;
                })
                .or(stop)
                .await;
        }
    }

    /// Time passing: expires sessions, ends rebalances at their deadline, drops answers
    /// nobody took.
    pub(crate) fn tick(&self) {
        let now_ms = self.now_ms();
        let replies = self.groups.borrow_mut().tick(now_ms);
        let mut by_group: HashMap<String, Vec<Reply>> = HashMap::new();
        for (group, reply) in replies {
            if let Reply::Failed {
                member_id,
                error: GroupError::UnknownMember { .. },
            } = &reply
            {
                info!(group, member = member_id, "group member's session expired");
            }
            by_group.entry(group).or_default().push(reply);
        }
        for (group, replies) in by_group {
            self.deliver(&group, replies);
        }
        self.answers
            .borrow_mut()
            .retain(|_, (_, at)| at.elapsed() < ANSWER_KEPT);
    }
}

/// Ticks this core's groups until the broker stops.
pub async fn run_timers(shard: Rc<Shard>) {
    while !shard.shutdown.is_requested() {
        glommio::timer::sleep(TICK_EVERY).await;
        if !shard.coordinator.groups.borrow().is_empty() {
            shard.coordinator.tick();
        }
    }
}

/// The answer for a refused group call.
pub fn group_failure(group: &str, error: GroupError) -> ShardError {
    ShardError::group(group, error)
}
