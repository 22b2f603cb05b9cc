//! Where a glommio group member's requests go on a cluster, as
//! [`crate::client::routing::Routed`] does for the blocking one: the group's calls to its
//! coordinator's node, a partition's fetches and list offsets to its owner node. Everything
//! goes to the connection the member was given until a `NotHere` answer says otherwise;
//! then FindCoordinator (for a group call) or the metadata (for a partition's) is asked of
//! that connection's node and the call is made again where they say, at most
//! [`NOT_HERE_RETRIES`] times in a row. A broker alone never answers `NotHere`, so there
//! nothing changes.

use std::net::SocketAddr;
use std::time::Duration;

use crate::client::ClientError;
use crate::client::glommio::group::within;
use crate::client::glommio::{Client, OwnedReply};
use crate::client::routing::{NOT_HERE_RETRIES, Routes};
use crate::protocol::native::{self, ErrorCode, MetadataResponse, Request};

pub(super) struct Nodes {
    /// The connection the member was given: its node answers FindCoordinator and Metadata.
    bootstrap: Client,
    /// One connection per other node used, made when first needed.
    others: Vec<Client>,
    routes: Routes,
    /// The coordinator's node, once a `NotHere` made it known.
    coordinator: Option<SocketAddr>,
    /// Longest wait for a connection and for a FindCoordinator or Metadata answer.
    timeout: Duration,
}

impl Nodes {
    pub(super) fn new(bootstrap: Client, timeout: Duration) -> Nodes {
        let nothing = MetadataResponse {
            core_ports: Vec::new(),
            topics: Vec::new(),
            cluster: None,
        };
        Nodes {
            routes: Routes::new(bootstrap.peer(), &nothing),
            bootstrap,
            others: Vec::new(),
            coordinator: None,
            timeout,
        }
    }

    /// A new bootstrap connection after the old one was lost: everything is learned again.
    pub(super) fn reset(&mut self, bootstrap: Client) {
        *self = Nodes::new(bootstrap, self.timeout);
    }

    /// `request`, a call of `group`, on its coordinator's node; a broker error is `Err`.
    /// Each try waits up to `bound` for its answer.
    pub(super) async fn on_coordinator(
        &mut self,
        group: &str,
        bound: Duration,
        request: &Request<'_>,
    ) -> Result<OwnedReply, ClientError> {
        let mut tries = 0;
        loop {
            let addr = self.coordinator.unwrap_or(self.bootstrap.peer());
            let client = self.client_at(addr).await?;
            match within(bound, client.call(request)).await {
                Err(e) if e.code() == Some(ErrorCode::NotHere) && tries < NOT_HERE_RETRIES => {
                    tries += 1;
                    self.coordinator = Some(self.find_coordinator(group).await?);
                }
                other => return other,
            }
        }
    }

    /// `request`, a call on `topic`'s `partition`, on its owner node; a broker error is
    /// `Err`. Each try waits up to `bound` for its answer.
    pub(super) async fn on_owner(
        &mut self,
        topic: &str,
        partition: u32,
        bound: Duration,
        request: &Request<'_>,
    ) -> Result<OwnedReply, ClientError> {
        let mut tries = 0;
        loop {
            let addr = self
                .routes
                .owner_node(topic, partition)
                .and_then(|node| self.routes.node_address(node))
                .unwrap_or(self.bootstrap.peer());
            let client = self.client_at(addr).await?;
            match within(bound, client.call(request)).await {
                Err(e) if e.code() == Some(ErrorCode::NotHere) && tries < NOT_HERE_RETRIES => {
                    tries += 1;
                    let asked = Request::Metadata {
                        topics: vec![topic.as_bytes()],
                    };
                    let reply = within(self.timeout, self.bootstrap.call(&asked)).await?;
                    self.routes.update(&reply.metadata()?);
                }
                other => return other,
            }
        }
    }

    /// The connection to `addr`, made now if there is none or it broke.
    async fn client_at(&mut self, addr: SocketAddr) -> Result<Client, ClientError> {
        if addr == self.bootstrap.peer() {
            return Ok(self.bootstrap.clone());
        }
        self.others.retain(|c| !c.is_broken());
        if let Some(client) = self.others.iter().find(|c| c.peer() == addr) {
            return Ok(client.clone());
        }
        let client = Client::connect_timeout(addr, self.timeout).await?;
        self.others.push(client.clone());
        Ok(client)
    }

    /// The address of `group`'s coordinator node, as the bootstrap node answers.
    async fn find_coordinator(&mut self, group: &str) -> Result<SocketAddr, ClientError> {
        let asked = Request::FindCoordinator {
            group: group.as_bytes(),
        };
        let reply = within(self.timeout, self.bootstrap.call(&asked)).await?;
        let found = native::decode_coordinator_response(reply.body()?)
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        crate::client::routing::coordinator_addr(&found, self.bootstrap.peer())
    }
}
