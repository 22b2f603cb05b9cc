//! The topics one connection has used, so that deleting a topic wins over the clients that
//! were using it.
//!
//! Topics are created on demand: a produce or fetch naming an unknown topic creates it.
//! Without this, a running producer's next batch (or a tailing consumer's next fetch)
//! would create a deleted topic again at once, with default settings, and the consumer
//! would fail on offsets that no longer exist. The rule (`docs/PROTOCOL.md`, "Deleting a
//! topic"): a connection that has produced to or fetched from a topic gets `UnknownTopic`
//! for every later request naming it once it is deleted (or deleted and made again, which
//! is another topic); such a request creates nothing. A new connection, or a CreateTopic
//! or DeleteTopic of that name on the same connection, starts afresh.
//!
//! A topic is known by its id (`TopicMeta::id`, new for every topic created): deleting and
//! creating a name again makes a new id, so the old one no longer matches, while altering a
//! topic's settings keeps it.
//!
//! Kafka connections count more as used (`docs/KAFKA.md`, "Deleting a topic"): a Kafka
//! client spreads over several connections (bootstrap, one per core, its group
//! coordinator's) and asks whichever for Metadata, which creates topics on demand, and for
//! commits. The connection that asks is rarely the one that produced, so a Kafka connection
//! also counts as having used every topic deleted while it was open ([`DeletedTopics`]),
//! from its first request on (a Kafka client's first request, ApiVersions, comes at once).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;

use crate::metrics::counters::Metrics;
use crate::shard::topics::TopicMeta;
use crate::shard::{Shard, ShardError};

/// Topics one connection remembers at most; past it, new ones are not remembered (such a
/// connection is back to plain on-demand creation for them).
const USED_TOPICS_MAX: usize = 10_000;
/// Deleted names one core remembers; past it the oldest deletion is forgotten (a Kafka
/// connection open since before it may then create that name again on demand).
const DELETED_TOPICS_MAX: usize = 10_000;

/// The topics deleted on this core, each with the number of its deletion (1, 2, ... in the
/// order this core forgot them).
#[derive(Default)]
pub struct DeletedTopics {
    last: Cell<u64>,
    names: RefCell<HashMap<String, u64>>,
}

impl DeletedTopics {
    /// The number of the last deletion: a connection opened now was open for every later one.
    pub fn now(&self) -> u64 {
        self.last.get()
    }

    /// This core forgot the published topic `name` (it was deleted).
    pub fn note(&self, name: &str) {
        let number = self.last.get() + 1;
        self.last.set(number);
        let mut names = self.names.borrow_mut();
        if names.len() >= DELETED_TOPICS_MAX && !names.contains_key(name) {
            let oldest = names
                .iter()
                .min_by_key(|(_, n)| **n)
                .map(|(name, _)| name.clone());
            if let Some(oldest) = oldest {
                names.remove(&oldest);
            }
        }
        names.insert(name.to_string(), number);
    }

    /// True if this core remembers deleting a topic named `name`.
    pub fn remembers(&self, name: &str) -> bool {
        self.names.borrow().contains_key(name)
    }

    /// True if `name` was deleted after deletion number `since`.
    fn deleted_after(&self, name: &str, since: u64) -> bool {
        self.last.get() > since && self.names.borrow().get(name).is_some_and(|n| *n > since)
    }
}

/// The topics one connection has used, each with the id of the topic it used.
#[derive(Default)]
pub struct UsedTopics {
    topics: RefCell<HashMap<String, u128>>,
    /// Kafka connections: the deletion number when the connection opened, and for names
    /// this connection created or deleted itself, the deletion number then. A deletion
    /// after those counts as a use.
    kafka: Option<KafkaSince>,
}

struct KafkaSince {
    opened: u64,
    known: RefCell<HashMap<String, u64>>,
}

impl UsedTopics {
    /// The used topics of a Kafka connection opening now (see the module's comment).
    pub fn kafka(shard: &Shard) -> UsedTopics {
        UsedTopics {
            topics: RefCell::default(),
            kafka: Some(KafkaSince {
                opened: shard.deleted_topics.now(),
                known: RefCell::default(),
            }),
        }
    }

    /// `UnknownTopic` if this connection used `name` and it has since been deleted. Call it
    /// right before the shard call that may create the topic, with no await between, so a
    /// delete cannot slip in.
    pub(in crate::shard) fn check(&self, shard: &Shard, name: &[u8]) -> Result<(), ShardError> {
        let Ok(name) = std::str::from_utf8(name) else {
            return Ok(()); // refused by the shard's name check
        };
        if self.used_older(shard, name) || self.deleted_while_open(shard, name) {
            Metrics::inc(&shard.metrics.deleted_topic_refusals);
            return Err(ShardError::DeletedWhileUsed {
                topic: name.to_string(),
            });
        }
        Ok(())
    }

    /// True if this connection used another topic of this name than the current one (or
    /// one that no longer exists).
    fn used_older(&self, shard: &Shard, name: &str) -> bool {
        let topics = self.topics.borrow();
        let Some(used) = topics.get(name) else {
            return false;
        };
        shard.topic(name).is_none_or(|current| current.id != *used)
    }

    /// Kafka connections: true if `name` was deleted while this connection was open, after
    /// any create or delete of it this connection made itself.
    fn deleted_while_open(&self, shard: &Shard, name: &str) -> bool {
        let Some(kafka) = &self.kafka else {
            return false;
        };
        let since = kafka
            .known
            .borrow()
            .get(name)
            .map_or(kafka.opened, |known| (*known).max(kafka.opened));
        shard.deleted_topics.deleted_after(name, since)
    }

    /// Remembers the topic `name` as it is now, after a request used it. A topic already
    /// remembered keeps its entry: a delete and re-create while the request waited does not
    /// make this connection adopt the new topic.
    pub(in crate::shard) fn record(&self, shard: &Shard, name: &[u8]) {
        let Ok(name) = std::str::from_utf8(name) else {
            return;
        };
        if self.topics.borrow().contains_key(name) {
            return;
        }
        let Some(meta) = shard.topic(name) else {
            return;
        };
        let mut topics = self.topics.borrow_mut();
        if topics.len() < USED_TOPICS_MAX {
            topics.insert(meta.name.clone(), meta.id);
        }
    }

    /// Forgets `name`: this connection created or deleted it itself, on purpose.
    /// `Shard::create_topic` and `delete_topic` call it once the change is done (every core
    /// knows it); a pipelining front-end also calls it when it dispatches the request, so
    /// the requests it dispatches after it (a produce to the topic it is creating again)
    /// are not refused while the change is under way.
    pub fn forget(&self, shard: &Shard, name: &[u8]) {
        let Ok(name) = std::str::from_utf8(name) else {
            return;
        };
        self.topics.borrow_mut().remove(name);
        if let Some(kafka) = &self.kafka {
            let mut known = kafka.known.borrow_mut();
            if known.len() < USED_TOPICS_MAX || known.contains_key(name) {
                known.insert(name.to_string(), shard.deleted_topics.now());
            }
        }
    }
}

impl Shard {
    /// A topic that must exist already, with the partition, as this connection sees it: a
    /// topic it used that was deleted since is unknown (a Kafka commit for it is refused).
    pub fn known_partition_in(
        &self,
        used: &UsedTopics,
        topic: &str,
        partition: u32,
    ) -> Result<std::rc::Rc<TopicMeta>, ShardError> {
        used.check(self, topic.as_bytes())?;
        self.known_partition(topic, partition)
    }

    /// True if Kafka Metadata answers `name` unknown on this connection: a topic it used
    /// was deleted since (even if made again), or a missing topic it may not create again
    /// (`auto_create`: the request would create it). A topic made again by someone else is
    /// listed to a connection that did not use the old one, even if the delete came while
    /// it was open: Metadata only lists, and the data requests refuse it.
    pub fn hidden_from(&self, used: &UsedTopics, name: &str, auto_create: bool) -> bool {
        if self.topic(name).is_some() {
            used.used_older(self, name)
        } else {
            auto_create && used.check(self, name.as_bytes()).is_err()
        }
    }
}
