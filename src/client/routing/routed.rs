//! Blocking connections routed by partition owner: one to the bootstrap address, and one
//! to each other node a partition lives on, made when first needed. On a broker alone
//! every partition goes to the bootstrap connection, as it always did (its main port hands
//! a partition to its owner core); on a cluster, a partition of another node goes to that
//! node's address. A `NotHere` answer (the placement moved, or the routes were stale)
//! makes the caller refresh the routes and try again, a bounded number of times.

use std::net::SocketAddr;

use super::Routes;
use crate::client::ClientError;
use crate::client::blocking::Client;
use crate::protocol::native::{ErrorCode, MetadataResponse};

/// How many times a call answered `NotHere` is tried again after refreshing the routes.
pub const NOT_HERE_RETRIES: u32 = 3;

/// How a new connection is made (the caller's timeouts and greeting).
pub type Connect = Box<dyn FnMut(SocketAddr) -> Result<Client, ClientError>>;

pub struct Routed {
    routes: Routes,
    connect: Connect,
    /// The bootstrap connection first, then one per other node used.
    clients: Vec<(SocketAddr, Client)>,
}

impl Routed {
    /// Routes learned from `client` (connected to `bootstrap`) asked for `topics`' metadata
    /// (every topic when empty); also returns that answer.
    pub fn new(
        bootstrap: SocketAddr,
        mut client: Client,
        topics: &[&str],
        connect: Connect,
    ) -> Result<(Routed, MetadataResponse), ClientError> {
        let metadata = client.metadata(topics)?;
        let routed = Routed {
            routes: Routes::new(bootstrap, &metadata),
            connect,
            clients: vec![(bootstrap, client)],
        };
        Ok((routed, metadata))
    }

    pub fn routes(&self) -> &Routes {
        &self.routes
    }

    /// Asks the bootstrap address for `topics`' metadata again, on a connection of its own
    /// (the others may have requests in flight), and routes by the answer from now on.
    pub fn refresh(&mut self, topics: &[&str]) -> Result<MetadataResponse, ClientError> {
        let mut client = (self.connect)(self.routes.bootstrap())?;
        let metadata = client.metadata(topics)?;
        self.routes.update(&metadata);
        Ok(metadata)
    }

    /// Where a partition's requests go: the owner's node when it is another node, else
    /// the bootstrap address.
    pub fn address(&self, topic: &str, partition: u32) -> SocketAddr {
        match self.routes.owner_node(topic, partition) {
            Some(node) => self
                .routes
                .node_address(node)
                .unwrap_or(self.routes.bootstrap()),
            None => self.routes.bootstrap(),
        }
    }

    /// The connection to `addr`, made now if there is none.
    pub fn client_at(&mut self, addr: SocketAddr) -> Result<&mut Client, ClientError> {
        let at = match self.clients.iter().position(|(a, _)| *a == addr) {
            Some(at) => at,
            None => {
                let client = (self.connect)(addr)?;
                self.clients.push((addr, client));
                self.clients.len() - 1
            }
        };
        Ok(&mut self.clients[at].1)
    }

    /// The connection to `addr` if there is one (without making it).
    pub fn existing(&mut self, addr: SocketAddr) -> Option<&mut Client> {
        self.clients
            .iter_mut()
            .find(|(a, _)| *a == addr)
            .map(|(_, c)| c)
    }

    /// Puts `client` in place of `addr`'s connection (after it was lost).
    pub fn replace(&mut self, addr: SocketAddr, client: Client) {
        match self.clients.iter_mut().find(|(a, _)| *a == addr) {
            Some((_, old)) => *old = client,
            None => self.clients.push((addr, client)),
        }
    }

    /// Runs `call` on the connection to the partition's owner; answered `NotHere`, it
    /// refreshes the routes and tries again, at most [`NOT_HERE_RETRIES`] times.
    pub fn on_owner<T>(
        &mut self,
        topic: &str,
        partition: u32,
        mut call: impl FnMut(&mut Client) -> Result<T, ClientError>,
    ) -> Result<T, ClientError> {
        let mut tries = 0;
        loop {
            let addr = self.address(topic, partition);
            match call(self.client_at(addr)?) {
                Err(e) if e.code() == Some(ErrorCode::NotHere) && tries < NOT_HERE_RETRIES => {
                    tries += 1;
                    self.refresh(&[topic])?;
                }
                other => return other,
            }
        }
    }
}
