//! A consumer of one partition on the glommio client: long-polling fetches from the core
//! that owns the partition, every batch checked against its CRC, seeks to the earliest or
//! latest offset, an offset or a timestamp, and group offsets committed and resumed.

use std::net::SocketAddr;
use std::time::Duration;

use crate::client::ClientError;
use crate::client::consume::{FetchedBatches, Record, StartAt};
use crate::client::glommio::{Client, OwnedReply};
use crate::client::routing::Routes;
use crate::protocol::native::{ErrorCode, Request};

#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    /// Soft limit on the bytes of batches one fetch returns.
    pub max_bytes: u32,
    /// Longest a fetch waits for new records when the consumer is caught up.
    pub max_wait: Duration,
    /// Consumer group whose offset [`Consumer::resume`] starts from and
    /// [`Consumer::commit`] stores.
    pub group: Option<String>,
    /// Fetch from the port of the core that owns the partition.
    pub shard_aware: bool,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        ConsumerConfig {
            max_bytes: 1024 * 1024,
            max_wait: Duration::from_millis(500),
            group: None,
            shard_aware: true,
        }
    }
}

pub struct Consumer {
    client: Client,
    topic: String,
    partition: u32,
    config: ConsumerConfig,
    /// Offset of the next record to return.
    position: u64,
    committed: Option<u64>,
}

impl Consumer {
    /// Connects to the core that owns `topic`/`partition` and starts at the earliest
    /// offset. The topic must exist (a fetch alone would create it).
    pub async fn connect(
        bootstrap: SocketAddr,
        topic: &str,
        partition: u32,
        config: ConsumerConfig,
    ) -> Result<Consumer, ClientError> {
        let mut client = Client::connect(bootstrap).await?;
        if config.shard_aware {
            let metadata = client
                .call(&Request::Metadata {
                    topics: vec![topic.as_bytes()],
                })
                .await?
                .metadata()?;
            let addr = Routes::new(bootstrap, &metadata).address(topic, partition);
            if addr != bootstrap {
                client = Client::connect(addr).await?;
            }
        }
        let mut consumer = Consumer {
            client,
            topic: topic.to_string(),
            partition,
            config,
            position: 0,
            committed: None,
        };
        consumer.seek(StartAt::Earliest).await?;
        Ok(consumer)
    }

    /// Moves to `at`; returns the new position.
    pub async fn seek(&mut self, at: StartAt) -> Result<u64, ClientError> {
        self.position = match at.spec()? {
            Err(offset) => offset,
            Ok(spec) => self
                .client
                .call(&Request::ListOffsets {
                    topic: self.topic.as_bytes(),
                    partition: self.partition,
                    spec,
                })
                .await?
                .offset()?,
        };
        Ok(self.position)
    }

    /// Moves to the group's committed offset, or to `otherwise` if it has none; returns the
    /// new position.
    pub async fn resume(&mut self, otherwise: StartAt) -> Result<u64, ClientError> {
        let Some(group) = self.config.group.clone() else {
            return self.seek(otherwise).await;
        };
        let reply = self
            .client
            .request(&Request::FetchOffset {
                group: group.as_bytes(),
                topic: self.topic.as_bytes(),
                partition: self.partition,
            })
            .await?;
        match reply.offset() {
            Ok(offset) => {
                self.committed = Some(offset);
                self.position = offset;
                Ok(offset)
            }
            Err(e) if e.code() == Some(ErrorCode::NoCommittedOffset) => self.seek(otherwise).await,
            Err(e) => Err(e),
        }
    }

    /// Offset of the next record [`Consumer::poll`] returns.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// The group's offset as last committed or resumed.
    pub fn committed(&self) -> Option<u64> {
        self.committed
    }

    /// Fetches from the position, waiting up to `max_wait` when there is nothing new, and
    /// moves the position past what came back. Every batch was checked against its CRC.
    pub async fn poll(&mut self) -> Result<Polled, ClientError> {
        let reply = self
            .client
            .call(&Request::Fetch {
                topic: self.topic.as_bytes(),
                partition: self.partition,
                offset: self.position,
                max_bytes: self.config.max_bytes,
                max_wait_ms: u32::try_from(self.config.max_wait.as_millis()).unwrap_or(u32::MAX),
            })
            .await?;
        let fetched = reply.fetched()?;
        let from = self.position;
        let high_watermark = fetched.high_watermark;
        if let Some(next) = fetched.next_offset() {
            self.position = self.position.max(next);
        }
        Ok(Polled {
            reply,
            from,
            high_watermark,
        })
    }

    /// Stores the position as the group's offset (nothing to do without a group, or when
    /// it is already stored).
    pub async fn commit(&mut self) -> Result<(), ClientError> {
        let Some(group) = &self.config.group else {
            return Ok(());
        };
        if self.committed == Some(self.position) {
            return Ok(());
        }
        self.client
            .call(&Request::CommitOffset {
                group: group.as_bytes(),
                topic: self.topic.as_bytes(),
                partition: self.partition,
                offset: self.position,
            })
            .await?;
        self.committed = Some(self.position);
        Ok(())
    }
}

/// What one poll returned.
pub struct Polled {
    pub(super) reply: OwnedReply,
    pub(super) from: u64,
    pub high_watermark: u64,
}

impl Polled {
    /// The batches, as fetched (the first may begin before the position polled from).
    pub fn batches(&self) -> FetchedBatches<'_> {
        FetchedBatches::trusted(self.reply.body().expect("checked in poll"))
    }

    /// The records from the position polled from on.
    pub fn records(&self) -> impl Iterator<Item = Record<'_>> + '_ {
        let from = self.from;
        self.batches()
            .iter()
            .flat_map(|b| b.records())
            .filter(move |r| r.offset >= from)
    }
}
