//! Fetch: the plan comes from the shard (here or the owner, long-polling), the bytes go
//! from this core's descriptor of the segment file to the socket with sendfile.

use std::io;
use std::rc::Rc;

use crate::metrics::counters::Metrics;
use crate::protocol::native::{self, ErrorCode};
use crate::server::native::refusal::Refusal;
use crate::server::native::{Pending, Tag, error_frame};
use crate::server::session::pipeline::Outcome;
use crate::server::session::{FileRange, Outbox, Session};
use crate::shard::calls::{Fetch, SendPlan};
use crate::shard::used::UsedTopics;
use crate::shard::{Shard, ShardError};

/// Largest fetch response a client may ask for.
pub const FETCH_BYTES_MAX: u32 = 64 * 1024 * 1024;

pub(super) fn start(
    tag: Tag,
    topic: &[u8],
    partition: u32,
    offset: u64,
    max_bytes: u32,
    max_wait_ms: u32,
) -> Pending {
    // A name that is not UTF-8 is refused by the shard's name check.
    let topic = String::from_utf8_lossy(topic).into_owned();
    Pending::Fetch {
        correlation_id: tag.1,
        fetch: Fetch {
            topic,
            partition,
            offset,
            max_bytes: max_bytes.min(FETCH_BYTES_MAX),
            max_wait_ms,
        },
    }
}

/// Plans the fetch when the writer reaches it (a long poll waits here).
pub(super) async fn plan(
    shard: &Rc<Shard>,
    used: &UsedTopics,
    fetch: Fetch,
) -> Result<SendPlan, ShardError> {
    // A tailing consumer's next fetch must not bring back a topic deleted under it: the
    // shard refuses it with this connection's view (`shard::used`).
    shard.fetch(used, fetch).await
}

/// Writes a fetch answer: the head from user space, the batches from the segment file.
pub(super) fn write(
    session: &Session,
    correlation_id: u32,
    mut plan: SendPlan,
    out: &mut Outbox,
) -> Outcome {
    let range = if plan.length > 0 {
        match FileRange::of_plan(&plan) {
            Ok(range) => Some(range),
            // Compaction replaced the segment (or retention deleted it) between the plan and
            // now. Answer "nothing yet" at the same offset: the consumer fetches again and
            // gets the new segment's batches (or the coded out-of-range error).
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                Metrics::inc(&session.shard.metrics.fetches_replanned);
                tracing::debug!(path = %plan.wal_path.display(), %error, "fetch planned on a replaced segment; the client fetches again");
                plan.length = 0;
                plan.batches.clear();
                None
            }
            Err(error) => {
                let failure = Refusal::new(
                    ErrorCode::StorageError,
                    format!("cannot open {}: {error}", plan.wal_path.display()),
                );
                out.bytes()
                    .extend_from_slice(&error_frame(correlation_id, &failure));
                return Outcome::Failed(failure.code);
            }
        }
    } else {
        None
    };
    let data_bytes = u32::try_from(plan.length).expect("fetches are capped under 4 GiB");
    native::encode_fetch_head(
        out.bytes(),
        correlation_id,
        plan.high_watermark,
        plan.log_start_offset,
        plan.batches.iter().map(|b| b.crc),
        data_bytes,
    );
    if let Some(range) = range {
        out.file(range);
    }
    Outcome::Done
}
