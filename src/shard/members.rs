//! Changes of a cluster's members (`pagurus cluster add-node` / `remove-node`): any core
//! takes the request and hands it to the node's controller core, which asks the cluster's
//! controller (the server's [`TopicController`](crate::shard::TopicController)). A broker
//! started without the cluster flags has no members to change and refuses.

use std::rc::Rc;

use crate::shard::calls::{ChangeMember, Run};
use crate::shard::{Shard, ShardError};

/// What to change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberChange {
    /// Make `node` a voter, reached by its peers at `cluster_addr` (`HOST:PORT`).
    Add { node: u16, cluster_addr: String },
    /// Take `node` out of the voters, then forget it.
    Remove { node: u16 },
}

/// The cluster after a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberChanged {
    /// The id a joining node is started with (`serve --cluster-join`).
    pub cluster_id: [u8; 16],
    /// The controller's voters once the change was applied, by id.
    pub voters: Vec<u16>,
}

impl Shard {
    /// Changes the cluster's members (on any core; forwarded to the controller core).
    pub async fn change_member(
        self: &Rc<Self>,
        change: MemberChange,
    ) -> Result<MemberChanged, ShardError> {
        self.route(self.placement().controller(), ChangeMember { change })
            .await
    }
}

impl Run for ChangeMember {
    async fn run(self, shard: &Rc<Shard>) -> Result<MemberChanged, ShardError> {
        let Some(controller) = shard.topic_controller() else {
            return Err(ShardError::MembershipRefused {
                reason: String::from(
                    "this broker was started without the cluster flags, so it has no members to change: start its nodes with --node-id, --cluster-listen and --cluster-peers",
                ),
            });
        };
        Box::pin(controller.change_member(self.change)).await
    }
}
