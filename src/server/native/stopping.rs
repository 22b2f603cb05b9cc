//! The end of a native connection in a clean stop: requests that arrive once the reader
//! stopped are answered `ShuttingDown`, not left unread.
//!
//! A request left unread in the socket makes the close a reset, which can discard answers
//! still on their way to the client; and a client that sees the connection end cannot tell
//! whether its unanswered requests were executed, so a producer must send them again and
//! may store them twice. Answered `ShuttingDown`, a request is known not executed: the
//! client sends it again elsewhere or later, exactly once. The refusal lasts until the
//! client has been quiet for [`QUIET`], so the close finds nothing unread, and at most
//! [`REFUSING_MAX`], so a client that never stops sending cannot hold the stop.

use std::cell::RefCell;
use std::time::{Duration, Instant};

use futures_lite::FutureExt;
use glommio::channels::local_channel::LocalSender;
use glommio::net::TcpStream;

use crate::protocol::native::{self, ErrorCode, FrameCheck, encode_error};
use crate::server::io::read_some;
use crate::server::native::{Pending, READ_CHUNK_BYTES};
use crate::server::read_buf::ReadBuf;

/// Silence after which a stopping connection is closed.
const QUIET: Duration = Duration::from_millis(100);
/// Longest a stopping connection keeps refusing requests.
const REFUSING_MAX: Duration = Duration::from_secs(1);

/// Reads what the client still sends, answering each whole request `ShuttingDown`, until
/// it is quiet, closes, sends a frame over `body_max`, or [`REFUSING_MAX`] is up. `buf`
/// is empty (the reader stops at a frame boundary).
pub(super) async fn refuse_the_rest(
    stream: &RefCell<TcpStream>,
    tx: &LocalSender<Pending>,
    buf: &mut ReadBuf,
    body_max: usize,
) {
    let until = Instant::now() + REFUSING_MAX;
    loop {
        loop {
            match native::check_frame(buf, body_max) {
                FrameCheck::Complete { frame_bytes } => {
                    let answer = refusal(&buf[native::FRAME_LEN_BYTES..frame_bytes]);
                    buf.advance(frame_bytes);
                    if tx.send(Pending::Ready(answer)).await.is_err() {
                        return;
                    }
                }
                FrameCheck::Incomplete { .. } => break,
                FrameCheck::TooLarge { .. } => return,
            }
        }
        let wait = QUIET.min(until.saturating_duration_since(Instant::now()));
        if wait.is_zero() {
            return;
        }
        let read = async { Some(read_some(stream, buf.spare(READ_CHUNK_BYTES)).await) };
        let quiet = async {
            glommio::timer::sleep(wait).await;
            None
        };
        match read.or(quiet).await {
            Some(Ok(n)) if n > 0 => buf.filled(n),
            _ => return,
        }
    }
}

/// A `ShuttingDown` answer to the request `body` (its correlation id is after the api key
/// and version; a body too short to hold one gets id 0).
fn refusal(body: &[u8]) -> Vec<u8> {
    let correlation_id = body
        .get(4..8)
        .map_or(0, |id| u32::from_be_bytes(id.try_into().expect("4 bytes")));
    let mut out = Vec::new();
    encode_error(
        &mut out,
        correlation_id,
        ErrorCode::ShuttingDown,
        "the broker is stopping; nothing of this request was done",
        None,
    );
    out
}
