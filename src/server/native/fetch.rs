//! Fetch: the plan comes from the shard (here or the owner, long-polling), the bytes go
//! from this core's descriptor of the segment file to the socket with sendfile.

use std::cell::RefCell;
use std::io;

use glommio::net::TcpStream;

use crate::metrics::counters::Metrics;
use crate::metrics::requests::RequestKind;
use crate::protocol::native::{self, ApiKey, ErrorCode};
use crate::server::native::{Pending, Tag, error_frame, flush};
use crate::server::sendfile::send_range;
use crate::shard::calls::{Fetch, SendPlan};
use crate::shard::used::UsedTopics;
use crate::shard::{Failure, Shard};

/// Largest fetch response a client may ask for.
pub const FETCH_BYTES_MAX: u32 = 64 * 1024 * 1024;

const FETCH: RequestKind = RequestKind::Native(ApiKey::Fetch);

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

pub(super) async fn answer(
    shard: &std::rc::Rc<Shard>,
    used: &UsedTopics,
    stream: &RefCell<TcpStream>,
    out: &mut Vec<u8>,
    correlation_id: u32,
    fetch: Fetch,
) -> io::Result<()> {
    let topic = fetch.topic.clone();
    // Checked right before the fetch may create the topic: a tailing consumer's next fetch
    // must not bring back a topic deleted under it.
    let fetched = match used.check(shard, topic.as_bytes()) {
        Ok(()) => shard.fetch(fetch).await,
        Err(failure) => Err(failure),
    };
    match fetched {
        Ok(plan) => {
            used.record(shard, topic.as_bytes());
            send_fetch(shard, stream, out, correlation_id, plan).await
        }
        Err(failure) => {
            out.extend(error_frame(shard, (FETCH, correlation_id), &failure));
            Ok(())
        }
    }
}

/// Writes a fetch response: the head from user space, the batches from the file.
async fn send_fetch(
    shard: &Shard,
    stream: &RefCell<TcpStream>,
    out: &mut Vec<u8>,
    correlation_id: u32,
    plan: SendPlan,
) -> io::Result<()> {
    let mut plan = plan;
    let file = if plan.length > 0 {
        match crate::server::sendfile::open_segment(&plan.wal_path, plan.file_id) {
            Ok(file) => Some(file),
            // Compaction replaced the segment (or retention deleted it) between the plan and
            // now. Answer "nothing yet" at the same offset: the consumer fetches again and
            // gets the new segment's batches (or the coded out-of-range error).
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                Metrics::inc(&shard.metrics.fetches_replanned);
                tracing::debug!(path = %plan.wal_path.display(), %error, "fetch planned on a replaced segment; the client fetches again");
                plan.length = 0;
                plan.batches.clear();
                None
            }
            Err(error) => {
                let failure = Failure::new(
                    ErrorCode::StorageError,
                    format!("cannot open {}: {error}", plan.wal_path.display()),
                );
                out.extend(error_frame(shard, (FETCH, correlation_id), &failure));
                return Ok(());
            }
        }
    } else {
        None
    };
    let data_bytes = u32::try_from(plan.length).expect("fetches are capped under 4 GiB");
    native::encode_fetch_head(
        out,
        correlation_id,
        plan.high_watermark,
        plan.log_start_offset,
        plan.batches.iter().map(|b| b.crc),
        data_bytes,
    );
    flush(stream, out).await?;
    if let Some(file) = file {
        send_range(stream, &file, plan.position, plan.length, plan.hot).await?;
        Metrics::add(&shard.metrics.bytes_out, plan.length);
        Metrics::add(&shard.metrics.records_out, plan.records);
    }
    Ok(())
}
