//! Produce: staged (or sent to the owner) by the reader in request order, answered by the
//! writer once acknowledged.

use std::rc::Rc;

use crate::protocol::native::{self, ProduceBatches};
use crate::server::native::{Pending, Tag, error_frame};
use crate::shard::Shard;
use crate::shard::data::{Batches, ProduceInFlight};
use crate::shard::used::UsedTopics;

const PRODUCE: crate::metrics::requests::RequestKind =
    crate::metrics::requests::RequestKind::Native(native::ApiKey::Produce);

pub(super) async fn start(
    shard: &Rc<Shard>,
    used: &UsedTopics,
    tag: Tag,
    topic: &[u8],
    partition: u32,
    batches: ProduceBatches<'_>,
) -> Pending {
    // Checked right before the produce may create the topic (see `UsedTopics`).
    let started = match used.check(shard, topic) {
        Ok(()) => {
            shard
                .start_produce(topic, partition, Batches::Checked(batches))
                .await
        }
        Err(failure) => Err(failure),
    };
    match started {
        Ok(produce) => {
            used.record(shard, topic);
            Pending::Produce {
                correlation_id: tag.1,
                produce,
            }
        }
        Err(failure) => Pending::Ready(error_frame(shard, tag, &failure)),
    }
}

pub(super) async fn answer(
    shard: &Shard,
    out: &mut Vec<u8>,
    correlation_id: u32,
    produce: ProduceInFlight,
) {
    match shard.finish_produce(produce).await {
        Ok(produced) => native::encode_produce_response(
            out,
            correlation_id,
            produced.base_offset,
            produced.next_offset,
        ),
        Err(failure) => out.extend(error_frame(shard, (PRODUCE, correlation_id), &failure)),
    }
}
