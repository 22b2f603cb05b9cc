//! [`GroupConsumer`]: a member of a native group on the glommio [`Client`], reading the
//! partitions the broker assigns it, heartbeating, committing and rejoining as members
//! come and go. The member's decisions are the sans-IO [`Membership`], shared with
//! [`crate::client::blocking::GroupConsumer`]; this driver only does the I/O, each call
//! bounded (a join by the rebalance timeout plus `timeout`, a fetch by its wait plus
//! `timeout`, any other call by `timeout`). On a cluster its group calls go to the group's
//! coordinator and each partition's calls to its owner node ([`Nodes`]).

use std::future::Future;
use std::io;
use std::time::{Duration, Instant};

use futures_lite::FutureExt;

use crate::client::ClientError;
use crate::client::consume::{FetchedBatches, Record};
use crate::client::glommio::nodes::Nodes;
use crate::client::glommio::{Client, Polled};
use crate::client::group::{GroupConfig, Membership, Next, next_after};
use crate::protocol::native::{ErrorCode, OffsetSpec, Request};

/// Batches one poll read from one partition.
pub struct GroupFetch {
    pub topic: String,
    pub partition: u32,
    pub polled: Polled,
}

impl GroupFetch {
    /// The batches, as fetched (the first may begin before the position polled from).
    pub fn batches(&self) -> FetchedBatches<'_> {
        self.polled.batches()
    }

    /// The records from the position polled from on.
    pub fn records(&self) -> impl Iterator<Item = Record<'_>> + '_ {
        self.polled.records()
    }
}

pub struct GroupConsumer {
    nodes: Nodes,
    member: Membership,
    /// Where a partition with no committed offset starts.
    reset: OffsetSpec,
    /// Longest wait for an answer outside joins (a fetch's wait comes on top).
    timeout: Duration,
    max_bytes: u32,
}

impl GroupConsumer {
    /// A consumer on `client`; it joins at the first [`GroupConsumer::poll`].
    pub fn new(
        client: Client,
        config: GroupConfig,
        reset: OffsetSpec,
        timeout: Duration,
    ) -> GroupConsumer {
        GroupConsumer {
            nodes: Nodes::new(client, timeout),
            member: Membership::new(config),
            reset,
            timeout,
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

    /// Replaces a lost connection (the caller reconnected); the member joins again.
    pub fn reconnected(&mut self, client: Client) {
        self.nodes.reset(client);
        self.member.rejoin(Next::Rejoin);
    }

    /// Joins if needed, heartbeats when due, and reads the next assigned partition that
    /// has records, waiting up to `max_wait` (less when a heartbeat is due sooner).
    /// `Ok(None)`: nothing arrived in time.
    pub async fn poll(&mut self, max_wait: Duration) -> Result<Option<GroupFetch>, ClientError> {
        if self.member.generation().is_none() {
            self.join().await?;
        }
        if self.member.heartbeat_due(Instant::now()) {
            self.heartbeat().await?;
            if self.member.generation().is_none() {
                return Ok(None);
            }
        }
        let wait = max_wait.min(self.member.until_heartbeat(Instant::now()));
        let fetches = self.member.fetches_per_poll();
        if fetches == 0 {
            ::glommio::timer::sleep(wait).await;
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
            if let Some(fetch) = self.fetch(topic, partition, wait).await? {
                return Ok(Some(fetch));
            }
        }
        Ok(None)
    }

    async fn fetch(
        &mut self,
        topic: String,
        partition: u32,
        wait: Duration,
    ) -> Result<Option<GroupFetch>, ClientError> {
        let from = self
            .member
            .position(&topic, partition)
            .expect("assigned partitions have positions");
        let request = Request::Fetch {
            topic: topic.as_bytes(),
            partition,
            offset: from,
            max_bytes: self.max_bytes,
            max_wait_ms: millis(wait),
        };
        let bound = self.timeout + wait;
        let reply = self
            .nodes
            .on_owner(&topic, partition, bound, &request)
            .await;
        let (outcome, polled) = match reply.and_then(|reply| {
            let fetched = reply.fetched()?;
            let (next, high_watermark) = (fetched.next_offset(), fetched.high_watermark);
            Ok((next, high_watermark, reply))
        }) {
            Ok((next, high_watermark, reply)) => {
                let polled = Polled {
                    reply,
                    from,
                    high_watermark,
                };
                (Ok(next), Some(polled))
            }
            Err(e) => (Err(e), None),
        };
        if !self.member.fetched(&topic, partition, from, outcome)? {
            return Ok(None);
        }
        Ok(polled.map(|polled| GroupFetch {
            topic,
            partition,
            polled,
        }))
    }

    /// Sets the next offset to read from a partition this member holds.
    pub fn seek(&mut self, topic: &str, partition: u32, offset: u64) {
        if self.member.position(topic, partition).is_some() {
            self.member.seek(topic, partition, offset, false);
        }
    }

    /// Commits every position that moved, fenced by the generation. A refusal because the
    /// group moved on is not an error: the member joins again at its next poll.
    pub async fn commit(&mut self) -> Result<(), ClientError> {
        let Some(generation) = self.member.generation() else {
            return Ok(());
        };
        for (topic, partition, offset) in self.member.uncommitted() {
            let request = Request::CommitGroupOffset {
                group: self.member.config.group.as_bytes(),
                member_id: self.member.member_id.as_bytes(),
                generation,
                topic: topic.as_bytes(),
                partition,
                offset,
            };
            let group = &self.member.config.group;
            match self
                .nodes
                .on_coordinator(group, self.timeout, &request)
                .await
            {
                Ok(_) => self.member.committed_at(&topic, partition, offset),
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
    pub async fn close(mut self) -> Result<(), ClientError> {
        self.commit().await?;
        if self.member.generation().is_some() {
            let request = Request::LeaveGroup {
                group: self.member.config.group.as_bytes(),
                member_id: self.member.member_id.as_bytes(),
            };
            let group = &self.member.config.group;
            self.nodes
                .on_coordinator(group, self.timeout, &request)
                .await?;
        }
        Ok(())
    }

    async fn heartbeat(&mut self) -> Result<(), ClientError> {
        let generation = self.member.generation().expect("joined");
        self.member.heartbeat_sent(Instant::now());
        let request = Request::Heartbeat {
            group: self.member.config.group.as_bytes(),
            member_id: self.member.member_id.as_bytes(),
            generation,
        };
        let group = &self.member.config.group;
        match self
            .nodes
            .on_coordinator(group, self.timeout, &request)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => match next_after(&e) {
                Next::Fail => Err(e),
                next => {
                    // Keep what was read: commit it (allowed while the group gathers its
                    // members) before joining again.
                    if next == Next::Rejoin {
                        self.commit().await?;
                    }
                    self.member.rejoin(next);
                    Ok(())
                }
            },
        }
    }

    async fn join(&mut self) -> Result<(), ClientError> {
        let bound = self.member.config.rebalance_timeout + self.timeout;
        let joined = loop {
            let request = Request::JoinGroup(self.member.join_request());
            let group = &self.member.config.group;
            let answer = self.nodes.on_coordinator(group, bound, &request).await;
            match answer.and_then(|reply| reply.joined()) {
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
            let request = Request::FetchOffset {
                group: self.member.config.group.as_bytes(),
                topic: topic.as_bytes(),
                partition,
            };
            let group = &self.member.config.group;
            let committed = self
                .nodes
                .on_coordinator(group, self.timeout, &request)
                .await;
            match committed.and_then(|reply| reply.offset()) {
                Ok(offset) => self.member.seek(&topic, partition, offset, true),
                Err(e) if e.code() == Some(ErrorCode::NoCommittedOffset) => {
                    let request = Request::ListOffsets {
                        topic: topic.as_bytes(),
                        partition,
                        spec: self.reset,
                    };
                    let reply = self
                        .nodes
                        .on_owner(&topic, partition, self.timeout, &request)
                        .await?;
                    self.member.seek(&topic, partition, reply.offset()?, false);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// `call`'s answer, or a timeout error once `bound` passed (the answer, if it comes, is
/// thrown away; the connection stays usable).
pub(super) async fn within<T>(
    bound: Duration,
    call: impl Future<Output = Result<T, ClientError>>,
) -> Result<T, ClientError> {
    call.or(async move {
        ::glommio::timer::sleep(bound).await;
        Err(ClientError::Io(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("no answer from the broker within {bound:?}"),
        )))
    })
    .await
}

fn millis(d: Duration) -> u32 {
    u32::try_from(d.as_millis()).unwrap_or(u32::MAX)
}
