//! Changes to the metadata asked of the controller by this node (a topic created or
//! deleted through any node): a [`Proposer`] hands a command to the driver task on the
//! same executor, which proposes it (forwarded to the leader by raft-rs when this node
//! follows) and answers once the command is applied here, with the outcome every node
//! reached. Every wait is bounded: a proposal lost in a leader change times out.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};

use crate::cluster::controller::driver::{Controller, DriverError};
use crate::cluster::controller::state::{Command, CommandError};

/// Longest wait for a proposal to be applied on this node.
pub const PROPOSE_TIMEOUT: Duration = Duration::from_secs(10);
/// Proposals waiting for the driver at most.
const REQUESTS_MAX: usize = 256;

#[derive(Debug, Clone, thiserror::Error)]
pub enum ProposeError {
    #[error("no controller leader is known (the cluster has no quorum, or is electing one)")]
    NoLeader,
    #[error(transparent)]
    Refused(#[from] CommandError),
    #[error("the controller did not apply the change within {0:?}; it may still be applied")]
    TimedOut(Duration),
    #[error("the controller is not running")]
    Stopped,
    #[error("the controller: {0}")]
    Driver(String),
}

/// A command and where its outcome goes.
pub(super) struct Request {
    command: Command,
    reply: LocalSender<Result<(), ProposeError>>,
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
        let (reply, outcome) = local_channel::new_bounded(1);
        let request = Request { command, reply };
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

/// The driver's side: proposals made and not yet applied, by proposal id.
#[derive(Default)]
pub(super) struct Waiting {
    waiters: HashMap<u64, (Instant, LocalSender<Result<(), ProposeError>>)>,
}

impl Waiting {
    /// Proposes `request` under `id`; a refusal is answered at once.
    pub(super) fn start(&mut self, controller: &mut Controller, id: u64, request: Request) {
        match controller.propose_anywhere(&request.command, id) {
            Ok(()) => {
                self.waiters.insert(id, (Instant::now(), request.reply));
            }
            Err(error) => {
                let failure = match error {
                    DriverError::NotLeader { .. } => ProposeError::NoLeader,
                    DriverError::Refused(refused) => ProposeError::Refused(refused),
                    other => ProposeError::Driver(other.to_string()),
                };
                let _ = request.reply.try_send(Err(failure));
            }
        }
    }

    /// The proposal `id` was applied here with `result`.
    pub(super) fn applied(&mut self, id: u64, result: Result<(), CommandError>) {
        if let Some((_, reply)) = self.waiters.remove(&id) {
            // The proposer may have timed out and gone: nothing to tell then.
            let _ = reply.try_send(result.map_err(ProposeError::from));
        }
    }

    /// Forgets proposals their proposers stopped waiting for.
    pub(super) fn expire(&mut self, now: Instant) {
        self.waiters
            .retain(|_, (since, _)| now.duration_since(*since) < PROPOSE_TIMEOUT * 2);
    }
}
