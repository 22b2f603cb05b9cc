//! Produce: staged (or sent to the owner) by the reader in request order, answered by the
//! writer once acknowledged.

use std::rc::Rc;

use crate::protocol::native::ProduceBatches;
use crate::server::native::{Answer, Pending, Tag};
use crate::shard::Shard;
use crate::shard::data::Batches;
use crate::shard::used::UsedTopics;

pub(super) async fn start(
    shard: &Rc<Shard>,
    used: &UsedTopics,
    tag: Tag,
    topic: &[u8],
    partition: u32,
    batches: ProduceBatches<'_>,
) -> Pending {
    // A topic deleted since this connection used it is refused there (`shard::used`).
    let started = shard
        .start_produce(used, topic, partition, Batches::Checked(batches))
        .await;
    match started {
        Ok(produce) => Pending::Produce {
            correlation_id: tag.1,
            produce,
        },
        Err(failure) => Pending::Ready(Answer::failed(tag.1, failure)),
    }
}
