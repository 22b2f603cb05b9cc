//! Changes to the metadata asked of the controller by this node (a topic created or
//! deleted through any node): a [`Proposer`] hands a command to the driver task on the
//! same executor, which proposes it (forwarded to the leader by raft-rs when this node
//! follows) and answers once the command is applied here, with the outcome every node
//! reached. A proposal made while no leader is known waits for one; one forwarded to a
//! leader that then changes (lost with it, or not) is made again to the new one, under
//! the same id: the first to apply answers, a second one is applied as a refusal
//! (`TopicExists`, `UnknownTopic`) that nobody waits for. Every wait is bounded.
//!
//! A change of the controller's voters ([`Proposer::change_voters`]) goes the same way and
//! is answered with the voters once applied here. Its refusals (`VoterError`) are answered
//! at once, except the removal of the leader, which the leader answers by handing its
//! leadership over: it is proposed again to the next leader.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};

use crate::cluster::NodeId;
use crate::cluster::controller::driver::{Controller, DriverError, VoterChange, VoterError};
use crate::cluster::controller::state::{Command, CommandError};

/// Longest wait for a proposal to be applied on this node.
pub const PROPOSE_TIMEOUT: Duration = Duration::from_secs(10);
/// Proposals waiting for the driver at most.
const REQUESTS_MAX: usize = 256;

#[derive(Debug, Clone, thiserror::Error)]
pub enum ProposeError {
    #[error(transparent)]
    Refused(#[from] CommandError),
    #[error(transparent)]
    Voters(#[from] VoterError),
    #[error(
        "the controller did not apply the change within {0:?} (no leader, or no quorum); it may still be applied"
    )]
    TimedOut(Duration),
    #[error("the controller is not running")]
    Stopped,
    #[error("the controller: {0}")]
    Driver(String),
}

/// What a proposal changes.
#[derive(Debug, Clone)]
enum Change {
    Command(Command),
    Voters(VoterChange),
}

/// What an applied proposal answers: the voters after a change of them, else nothing.
type Reply = Result<Vec<NodeId>, ProposeError>;

/// A change and where its outcome goes.
pub(super) struct Request {
    change: Change,
    reply: LocalSender<Reply>,
}

/// Asks this node's controller for changes; cheap to clone, used on the driver's executor.
#[derive(Clone)]
pub struct Proposer {
    requests: std::rc::Rc<LocalSender<Request>>,
}

impl Proposer {
    pub(super) fn new() -> (Proposer, LocalReceiver<Request>) {
        let (requests, rx) = local_channel::new_bounded(REQUESTS_MAX);
        let requests = std::rc::Rc::new(requests);
        (Proposer { requests }, rx)
    }

    /// Proposes `command` and waits until it is applied on this node (or refused).
    pub async fn propose(&self, command: Command) -> Result<(), ProposeError> {
        self.ask(Change::Command(command)).await.map(|_| ())
    }

    /// Proposes a change of the controller's voters and waits until it is applied on this
    /// node (or refused); the voters after it.
    pub async fn change_voters(&self, change: VoterChange) -> Result<Vec<NodeId>, ProposeError> {
        self.ask(Change::Voters(change)).await
    }

    async fn ask(&self, change: Change) -> Reply {
        let (reply, outcome) = local_channel::new_bounded(1);
        let request = Request { change, reply };
        self.requests
            .try_send(request)
            .map_err(|_| ProposeError::Driver(String::from("too many changes waiting")))?;
        futures_lite::future::or(
            async { outcome.recv().await.unwrap_or(Err(ProposeError::Stopped)) },
            async {
                glommio::timer::sleep(PROPOSE_TIMEOUT).await;
                Err(ProposeError::TimedOut(PROPOSE_TIMEOUT))
            },
        )
        .await
    }
}

/// A proposal not yet applied.
struct Waiter {
    since: Instant,
    change: Change,
    reply: LocalSender<Reply>,
    /// The leader it was last proposed to; `None` while not proposed yet.
    proposed_to: Option<crate::cluster::NodeId>,
}

/// The driver's side: proposals made and not yet applied, by proposal id.
#[derive(Default)]
pub(super) struct Waiting {
    waiters: HashMap<u64, Waiter>,
}

impl Waiting {
    /// Takes `request` under `id`; it is proposed by the next [`Waiting::propose`].
    pub(super) fn start(&mut self, id: u64, request: Request) {
        let waiter = Waiter {
            since: Instant::now(),
            change: request.change,
            reply: request.reply,
            proposed_to: None,
        };
        self.waiters.insert(id, waiter);
    }

    /// Proposes every waiting command not yet proposed to the leader known now; one this
    /// node's state refuses is answered at once.
    pub(super) fn propose(&mut self, controller: &mut Controller) {
        let Some(leader) = controller.leader() else {
            return;
        };
        let mut refused = Vec::new();
        for (id, waiter) in &mut self.waiters {
            if waiter.proposed_to == Some(leader) {
                continue;
            }
            let proposed = match &waiter.change {
                Change::Command(command) => controller.propose_anywhere(command, *id),
                Change::Voters(change) => controller.propose_voter_change(*change, *id),
            };
            match proposed {
                Ok(()) => waiter.proposed_to = Some(leader),
                // Proposed again each round until the leadership moved.
                Err(DriverError::NotLeader { .. })
                | Err(DriverError::Voters(VoterError::LeaderMovingAway(_))) => {}
                Err(DriverError::Refused(why)) => refused.push((*id, ProposeError::Refused(why))),
                Err(DriverError::Voters(why)) => refused.push((*id, ProposeError::Voters(why))),
                Err(other) => refused.push((*id, ProposeError::Driver(other.to_string()))),
            }
        }
        for (id, failure) in refused {
            if let Some(waiter) = self.waiters.remove(&id) {
                let _ = waiter.reply.try_send(Err(failure));
            }
        }
    }

    /// The proposal `id` was applied here with `result`.
    pub(super) fn applied(&mut self, id: u64, result: Result<(), CommandError>) {
        if let Some(Waiter { reply, .. }) = self.waiters.remove(&id) {
            // The proposer may have timed out and gone: nothing to tell then.
            let _ = reply.try_send(result.map(|()| Vec::new()).map_err(ProposeError::from));
        }
    }

    /// The change of the voters proposed under `id` was applied here: `voters` now.
    pub(super) fn voters_applied(&mut self, id: u64, voters: Vec<NodeId>) {
        if let Some(Waiter { reply, .. }) = self.waiters.remove(&id) {
            let _ = reply.try_send(Ok(voters));
        }
    }

    /// Forgets proposals their proposers stopped waiting for.
    pub(super) fn expire(&mut self, now: Instant) {
        self.waiters
            .retain(|_, waiter| now.duration_since(waiter.since) < PROPOSE_TIMEOUT);
    }
}
