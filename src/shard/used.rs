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
//! A topic is known by its registry entry on this core (`Rc<TopicMeta>`): deleting and
//! creating a name again makes a new entry, so the old one's pointer no longer matches.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::{Rc, Weak};

use crate::protocol::native::ErrorCode;
use crate::shard::topics::TopicMeta;
use crate::shard::{Failure, Shard};

/// Topics one connection remembers at most; past it, new ones are not remembered (such a
/// connection is back to plain on-demand creation for them).
const USED_TOPICS_MAX: usize = 10_000;

/// The topics one connection has used, each as the registry entry it used.
#[derive(Default)]
pub struct UsedTopics {
    topics: RefCell<HashMap<String, Weak<TopicMeta>>>,
}

impl UsedTopics {
    /// `UnknownTopic` if this connection used `name` and it has since been deleted. Call it
    /// right before the shard call that may create the topic, with no await between, so a
    /// delete cannot slip in.
    pub fn check(&self, shard: &Shard, name: &[u8]) -> Result<(), Failure> {
        let Ok(name) = std::str::from_utf8(name) else {
            return Ok(()); // refused by the shard's name check
        };
        let topics = self.topics.borrow();
        let Some(used) = topics.get(name) else {
            return Ok(());
        };
        match shard.topic(name) {
            Some(current) if Weak::ptr_eq(used, &Rc::downgrade(&current)) => Ok(()),
            _ => Err(Failure::new(
                ErrorCode::UnknownTopic,
                format!(
                    "topic {name} was deleted while this connection used it; it is not created again from this connection (a new connection or CreateTopic may)"
                ),
            )),
        }
    }

    /// Remembers the topic `name` as it is now, after a request used it. A topic already
    /// remembered keeps its entry: a delete and re-create while the request waited does not
    /// make this connection adopt the new topic.
    pub fn record(&self, shard: &Shard, name: &[u8]) {
        let Some(meta) = std::str::from_utf8(name).ok().and_then(|n| shard.topic(n)) else {
            return;
        };
        let mut topics = self.topics.borrow_mut();
        if topics.len() < USED_TOPICS_MAX || topics.contains_key(&meta.name) {
            topics
                .entry(meta.name.clone())
                .or_insert_with(|| Rc::downgrade(&meta));
        }
    }

    /// Forgets `name`: this connection created or deleted it itself, on purpose.
    pub fn forget(&self, name: &[u8]) {
        if let Ok(name) = std::str::from_utf8(name) {
            self.topics.borrow_mut().remove(name);
        }
    }
}
