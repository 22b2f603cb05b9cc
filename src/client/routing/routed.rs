//! Blocking connections routed by partition owner: one to the bootstrap address, and one
//! to each other node a partition lives on, made when first needed. On a broker alone
//! every partition goes to the bootstrap connection, as it always did (its main port hands
//! a partition to its owner core); on a cluster, a partition of another node goes to that
//! node's address. A `NotHere` answer (the placement moved, or the routes were stale)
//! makes the caller refresh the routes and try again, a bounded number of times.
//!
//! A group's calls go to its coordinator's node the same way: to the bootstrap
//! connection until a `NotHere` answer, then to the node FindCoordinator names.

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
    /// The last group whose coordinator was looked up, and its node's address.
    coordinator: Option<(String, SocketAddr)>,
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
            coordinator: None,
        };
        Ok((routed, metadata))
    }

    /// Routes that know nothing yet: every call goes to `client` (connected to
    /// `bootstrap`) until a `NotHere` answer makes them learn (no request is sent now).
    pub fn bare(bootstrap: SocketAddr, client: Client, connect: Connect) -> Routed {
        let nothing = MetadataResponse {
            core_ports: Vec::new(),
            topics: Vec::new(),
            cluster: None,
        };
        Routed {
            routes: Routes::new(bootstrap, &nothing),
            connect,
            clients: vec![(bootstrap, client)],
            coordinator: None,
        }
    }

    /// A new bootstrap connection after the old one was lost; the other nodes'
    /// connections are dropped too (made again when used).
    pub fn reset(&mut self, client: Client) {
        self.clients.clear();
        self.clients.push((self.routes.bootstrap(), client));
    }

    /// The bootstrap connection.
    pub fn bootstrap_client(&mut self) -> &mut Client {
        &mut self.clients[0].1
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

    /// Runs `call`, a call of `group`, on the connection to its coordinator's node (the
    /// bootstrap one until told otherwise); answered `NotHere`, it asks the bootstrap
    /// address where the coordinator is (FindCoordinator, on a connection of its own) and
    /// tries there, at most [`NOT_HERE_RETRIES`] times.
    pub fn on_coordinator<T>(
        &mut self,
        group: &str,
        mut call: impl FnMut(&mut Client) -> Result<T, ClientError>,
    ) -> Result<T, ClientError> {
        let mut tries = 0;
        loop {
            let addr = match &self.coordinator {
                Some((known, addr)) if known == group => *addr,
                _ => self.routes.bootstrap(),
            };
            match call(self.client_at(addr)?) {
                Err(e) if e.code() == Some(ErrorCode::NotHere) && tries < NOT_HERE_RETRIES => {
                    tries += 1;
                    let addr = self.find_coordinator(group)?;
                    self.coordinator = Some((group.to_string(), addr));
                }
                other => return other,
            }
        }
    }

    /// The address of `group`'s coordinator node, as the bootstrap address answers.
    fn find_coordinator(&mut self, group: &str) -> Result<SocketAddr, ClientError> {
        let bootstrap = self.routes.bootstrap();
        let found = (self.connect)(bootstrap)?.find_coordinator(group)?;
        super::coordinator_addr(&found, bootstrap)
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
