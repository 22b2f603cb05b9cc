//! [`GroupConsumer`]: a member of a native group on a blocking [`Client`], reading the
//! partitions the broker assigns it, heartbeating, committing and rejoining as members
//! come and go. Every call waits at most its bound (the join the rebalance timeout plus
//! the connection's timeout, a fetch the wait asked for). The member's decisions are the
//! sans-IO [`Membership`], shared with [`crate::client::glommio::GroupConsumer`].
//!
//! On a cluster its calls are [`Routed`]: the group's to its coordinator's node, a
//! partition's to its owner's, each learnt from a `NotHere` answer; on a broker alone
//! everything goes to the one connection, as it always did.

use std::thread;
use std::time::{Duration, Instant};

use crate::client::ClientError;
use crate::client::blocking::{Client, Fetched};
use crate::client::group::{GroupConfig, Membership, Next, next_after};
use crate::client::routing::Routed;
use crate::protocol::native::OffsetSpec;

/// Batches one poll read from one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupFetch {
    pub topic: String,
    pub partition: u32,
    /// The position the fetch read from: records before it in the first batch were
    /// already consumed.
    pub from: u64,
    pub fetched: Fetched,
}

pub struct GroupConsumer {
    routed: Routed,
    member: Membership,
    /// Where a partition with no committed offset starts.
    reset: OffsetSpec,
    /// Read timeout of the connection outside joins.
    read_timeout: Duration,
    max_bytes: u32,
}

impl GroupConsumer {
    /// A consumer on `client`; it joins at the first [`GroupConsumer::poll`]. `read_timeout`
    /// is the connection's answer timeout outside joins (a fetch's wait comes on top).
    /// Connections to other nodes of a cluster are plain ones with that timeout.
    pub fn new(
        mut client: Client,
        config: GroupConfig,
        reset: OffsetSpec,
        read_timeout: Duration,
    ) -> Result<GroupConsumer, ClientError> {
        let bootstrap = client.stream().tcp().peer_addr()?;
        let connect = Box::new(move |addr: std::net::SocketAddr| {
            let client = Client::connect_timeout(addr, read_timeout)?;
            client.set_read_timeout(Some(read_timeout))?;
            Ok(client)
        });
        let routed = Routed::bare(bootstrap, client, connect);
        Ok(GroupConsumer::routed(routed, config, reset, read_timeout))
    }

    /// A consumer on `routed`'s connections (the caller's TLS and login on each).
    pub fn routed(
        routed: Routed,
        config: GroupConfig,
        reset: OffsetSpec,
        read_timeout: Duration,
    ) -> GroupConsumer {
        GroupConsumer {
            routed,
            member: Membership::new(config),
            reset,
            read_timeout,
            max_bytes: 1 << 20,
        }
    }

    /// Soft limit on the bytes of one fetch.
    pub fn set_max_bytes(&mut self, max_bytes: u32) {
        self.max_bytes = max_bytes;
    }

    pub fn member(&self) -> &Membership {
        &self.member
    }

    /// The partitions this member reads now.
    pub fn partitions(&self) -> &[(String, u32)] {
        self.member.partitions()
    }

    /// Replaces a lost connection (the driver reconnected); the member joins again.
    pub fn reconnected(&mut self, client: Client) {
        self.routed.reset(client);
        self.member.rejoin(Next::Rejoin);
    }

    /// Joins if needed, heartbeats when due, and reads the next assigned partition that
    /// has records, waiting up to `max_wait` (less when a heartbeat is due sooner).
    /// `Ok(None)`: nothing arrived in time.
    pub fn poll(&mut self, max_wait: Duration) -> Result<Option<GroupFetch>, ClientError> {
        if self.member.generation().is_none() {
            self.join()?;
        }
        if self.member.heartbeat_due(Instant::now()) {
            self.heartbeat()?;
            if self.member.generation().is_none() {
                return Ok(None);
            }
        }
        let wait = max_wait.min(self.member.until_heartbeat(Instant::now()));
        let fetches = self.member.fetches_per_poll();
        if fetches == 0 {
            thread::sleep(wait);
            return Ok(None);
        }
        // Every partition once without waiting, then a long poll on the next one.
        for round in 1..=fetches {
            let (topic, partition) = self.member.next_partition().expect("assigned");
            let wait = if round == fetches {
                wait
            } else {
                Duration::ZERO
            };
            if let Some(fetch) = self.fetch(&topic, partition, wait)? {
                return Ok(Some(fetch));
            }
        }
        Ok(None)
    }

    fn fetch(
        &mut self,
        topic: &str,
        partition: u32,
        wait: Duration,
    ) -> Result<Option<GroupFetch>, ClientError> {
        let from = self
            .member
            .position(topic, partition)
            .expect("assigned partitions have positions");
        let max_bytes = self.max_bytes;
        let fetched = self.routed.on_owner(topic, partition, |client| {
            client.fetch(topic, partition, from, max_bytes, wait)
        });
        let (outcome, fetched) = match fetched {
            Ok(fetched) => (Ok(fetched.next_offset()), Some(fetched)),
            Err(e) => (Err(e), None),
        };
        if !self.member.fetched(topic, partition, from, outcome)? {
            return Ok(None);
        }
        Ok(fetched.map(|fetched| GroupFetch {
            topic: topic.to_string(),
            partition,
            from,
            fetched,
        }))
    }

    /// Sets the next offset to read from a partition this member holds (e.g. back to the
    /// record after the last one used, when a poll read more than was used).
    pub fn seek(&mut self, topic: &str, partition: u32, offset: u64) {
        if self.member.position(topic, partition).is_some() {
            self.member.seek(topic, partition, offset, false);
        }
    }

    /// Commits every position that moved, fenced by the generation. A refusal because the
    /// group moved on is not an error: the member joins again at its next poll.
    pub fn commit(&mut self) -> Result<(), ClientError> {
        let Some(generation) = self.member.generation() else {
            return Ok(());
        };
        for (topic, partition, offset) in self.member.uncommitted() {
            let member = (
                self.member.config.group.as_str(),
                self.member.member_id.as_str(),
                generation,
            );
            let committed = self.routed.on_coordinator(member.0, |client| {
                client.commit_group_offset(member, &topic, partition, offset)
            });
            match committed {
                Ok(()) => self.member.committed_at(&topic, partition, offset),
                Err(e) => match next_after(&e) {
                    Next::Fail => return Err(e),
                    next => {
                        self.member.rejoin(next);
                        return Ok(());
                    }
                },
            }
        }
        Ok(())
    }

    /// Commits and leaves the group, so the others take its partitions at once.
    pub fn close(mut self) -> Result<(), ClientError> {
        self.commit()?;
        if self.member.generation().is_some() {
            let (group, id) = (&self.member.config.group, &self.member.member_id);
            self.routed
                .on_coordinator(group, |client| client.leave_group(group, id))?;
        }
        Ok(())
    }

    fn heartbeat(&mut self) -> Result<(), ClientError> {
        let generation = self.member.generation().expect("joined");
        self.member.heartbeat_sent(Instant::now());
        let (group, id) = (&self.member.config.group, &self.member.member_id);
        let result = self
            .routed
            .on_coordinator(group, |client| client.heartbeat(group, id, generation));
        match result {
            Ok(()) => Ok(()),
            Err(e) => match next_after(&e) {
                Next::Fail => Err(e),
                next => {
                    // Keep what was read: commit it (allowed while the group gathers its
                    // members) before joining again.
                    if next == Next::Rejoin {
                        self.commit()?;
                    }
                    self.member.rejoin(next);
                    Ok(())
                }
            },
        }
    }

    fn join(&mut self) -> Result<(), ClientError> {
        let (bound, read_timeout) = (
            self.member.config.rebalance_timeout + self.read_timeout,
            self.read_timeout,
        );
        let joined = loop {
            let request = self.member.join_request();
            let group = self.member.config.group.as_str();
            let joined = self.routed.on_coordinator(group, |client| {
                client.set_read_timeout(Some(bound))?;
                let joined = client.join_group(&request);
                client.set_read_timeout(Some(read_timeout))?;
                joined
            });
            match joined {
                Ok(joined) => break joined,
                // The rebalance outlasted this join, or the group forgot the member:
                // join again.
                Err(e) => match next_after(&e) {
                    Next::Fail => return Err(e),
                    next => self.member.rejoin(next),
                },
            }
        };
        for (topic, partition) in self.member.joined(joined, Instant::now()) {
            let group = self.member.config.group.as_str();
            let committed = self.routed.on_coordinator(group, |client| {
                client.fetch_offset(group, &topic, partition)
            })?;
            match committed {
                Some(offset) => self.member.seek(&topic, partition, offset, true),
                None => {
                    let reset = self.reset;
                    let offset = self.routed.on_owner(&topic, partition, |client| {
                        client.list_offsets(&topic, partition, reset)
                    })?;
                    self.member.seek(&topic, partition, offset, false);
                }
            }
        }
        Ok(())
    }
}
