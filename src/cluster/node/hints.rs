//! A partition's new leader tells the controller (`SetLeaderHint`), so nodes that hold no
//! replica of it (and every node's view before its own replica hears a leader) route
//! clients there. The driver asks every round, for the groups this node's replicas lead
//! (the node's `ReplicaDirectory`); a hint is proposed again at most once a second while
//! the applied state does not show it (a proposal forwarded to a leader that changes is
//! lost).

use std::collections::HashMap;
use std::time::Instant;

use tracing::debug;

use crate::cluster::NodeId;
use crate::cluster::controller::driver::Controller;
use crate::cluster::controller::state::{Command, Replica};
use crate::cluster::status::ClusterView;

/// When each group's hint was last proposed.
#[derive(Default)]
pub(super) struct Hints {
    sent: HashMap<u64, Instant>,
}

impl Hints {
    /// Proposes the hints the applied state lacks for the groups this node leads.
    pub(super) fn propose(
        &mut self,
        me: NodeId,
        view: &ClusterView,
        controller: &mut Controller,
        mut next_id: impl FnMut() -> u64,
        now: Instant,
    ) {
        if controller.leader().is_none() {
            return;
        }
        let led: Vec<u64> = view
            .replicas
            .leaders()
            .into_iter()
            .filter(|(_, leader)| leader.node == me)
            .map(|(group, _)| group)
            .collect();
        self.sent.retain(|group, _| led.contains(group));
        for group in led {
            let Some(command) = stale_hint(controller, me, group) else {
                continue;
            };
            if !super::due(self.sent.get(&group).copied(), now) {
                continue;
            }
            self.sent.insert(group, now);
            if let Err(error) = controller.propose_anywhere(&command, next_id()) {
                debug!(group, %error, "leader hint not proposed");
            }
        }
    }
}

/// The `SetLeaderHint` group `group` needs when this node leads it and the applied state
/// names another replica.
fn stale_hint(controller: &Controller, me: NodeId, group: u64) -> Option<Command> {
    let state = controller.state();
    let topic = state.topics().find(|t| {
        t.group_base != 0
            && (t.group_base..t.group_base + t.partitions.len() as u64).contains(&group)
    })?;
    let partition = u32::try_from(group - topic.group_base).ok()?;
    let placed = &topic.partitions[partition as usize];
    let mine: Replica = *placed.replicas.iter().find(|r| r.node == me)?;
    (placed.leader_hint != Some(mine)).then(|| Command::SetLeaderHint {
        topic: topic.name.clone(),
        partition,
        leader: mine,
    })
}

impl super::Driver {
    /// [`Hints::propose`] with this driver's proposal ids.
    pub(super) fn propose_hints(&mut self, now: Instant) {
        let (me, view) = (self.me, std::sync::Arc::clone(&self.view));
        let mut next = self.next_proposal;
        let controller = self.controller.as_mut().expect("the controller is here");
        self.hints.propose(
            me,
            &view,
            controller,
            || {
                next += 1;
                next
            },
            now,
        );
        self.next_proposal = next;
    }
}
