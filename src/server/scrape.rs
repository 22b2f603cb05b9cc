//! The metrics endpoint. Core 0 serves `GET /metrics` on `--metrics-listen`: it asks every
//! core for a snapshot of its counters over the mesh ([`MetricsSnapshot`]), renders
//! them (`metrics::exposition`) and closes the connection. Nothing on the request path
//! changes for it: cores read their own `Cell`s when asked.
//!
//! Bounded: one request head of at most 8 KiB, a deadline for the whole exchange, and a
//! few scrapes at once. A core that does not answer in time is left out of that scrape and
//! reported as `pagurus_core_up{core} 0`, so a stuck core never hides the others.

use std::cell::{Cell, RefCell};
use std::io;
use std::rc::Rc;
use std::time::{Duration, Instant};

use futures_lite::FutureExt;
use glommio::net::{TcpListener, TcpStream};
use tracing::{debug, warn};

use crate::metrics::counters::Metrics;
use crate::metrics::exposition::{self, CONTENT_TYPE};
use crate::metrics::http::{self, HttpError, REQUEST_HEAD_MAX_BYTES, Status, Target};
use crate::metrics::snapshot::CoreSnapshot;
use crate::server::io::{read_some, write_all};
use crate::server::stream::Stream;
use crate::shard::Shard;
use crate::shard::calls::MetricsSnapshot;
use crate::shard::snapshot::collect;

/// Longest one scrape connection may take, from accept to the last byte written.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a scrape waits for the other cores' snapshots.
const CORE_ANSWER_TIMEOUT: Duration = Duration::from_secs(3);
/// Scrape connections served at once; more are answered 503 at once.
const SCRAPES_IN_FLIGHT_MAX: usize = 8;

/// Every core's snapshot, indexed by core; `None` for a core that did not answer in time.
pub async fn gather(shard: &Rc<Shard>) -> Vec<Option<CoreSnapshot>> {
    let deadline = Instant::now() + CORE_ANSWER_TIMEOUT;
    // Ask every other core first, so they all work on it at once.
    let mut calls = Vec::new();
    for core in (0..shard.cores()).filter(|&c| c != shard.core) {
        Metrics::inc(&shard.metrics.mesh_calls);
        match shard.mesh.start(core, MetricsSnapshot).await {
            Ok(id) => calls.push((core, id)),
            Err(failure) => warn!(core, error = %failure, "cannot ask core for metrics"),
        }
    }
    let mut snapshots = vec![None; shard.cores()];
    snapshots[shard.core] = Some(collect(shard));
    for (core, in_flight) in calls {
        let answer = async { Some(shard.mesh.finish(in_flight).await) }
            .or(async {
                glommio::timer::sleep(deadline.saturating_duration_since(Instant::now())).await;
                None
            })
            .await;
        match answer {
            Some(Ok(snapshot)) => snapshots[core] = Some(*snapshot),
            Some(Err(failure)) => {
                warn!(core, error = %failure, "core could not report its metrics")
            }
            None => {
                // `finish` forgot the call when it was dropped: a late answer is discarded.
                warn!(core, timeout = ?CORE_ANSWER_TIMEOUT, "core did not answer the scrape in time; left out");
            }
        }
    }
    snapshots
}

/// Accepts scrape connections until the broker stops.
pub async fn serve_metrics(shard: Rc<Shard>, listener: TcpListener) {
    debug!(addr = ?listener.local_addr().ok(), "metrics endpoint serving /metrics");
    let in_flight = Rc::new(Cell::new(0usize));
    loop {
        let Some(stream) =
            crate::server::listeners::accept_or_stop(&shard, &listener, "metrics").await
        else {
            return;
        };
        if in_flight.get() >= SCRAPES_IN_FLIGHT_MAX {
            Metrics::inc(&shard.metrics.metrics_bad_requests);
            warn!(
                limit = SCRAPES_IN_FLIGHT_MAX,
                "too many scrapes at once; answered 503"
            );
            let busy = http::plain_response(Status::Unavailable, "too many scrapes at once");
            glommio::spawn_local(async move {
                let stream = RefCell::new(Stream::Plain(stream));
                let _ = write_all(&stream, &busy)
                    .or(give_up_after(SCRAPE_TIMEOUT))
                    .await;
            })
            .detach();
            continue;
        }
        in_flight.set(in_flight.get() + 1);
        let (shard, in_flight) = (Rc::clone(&shard), Rc::clone(&in_flight));
        glommio::spawn_local(async move {
            let peer = stream.peer_addr().ok();
            let served = serve_one(&shard, stream)
                .or(give_up_after(SCRAPE_TIMEOUT))
                .await;
            if let Err(error) = served {
                if error.kind() == io::ErrorKind::TimedOut {
                    Metrics::inc(&shard.metrics.metrics_bad_requests);
                    warn!(?peer, "scrape connection timed out; closed");
                } else {
                    debug!(?peer, %error, "scrape connection ended");
                }
            }
            in_flight.set(in_flight.get() - 1);
        })
        .detach();
    }
}

async fn give_up_after(timeout: Duration) -> io::Result<()> {
    glommio::timer::sleep(timeout).await;
    Err(io::Error::new(
        io::ErrorKind::TimedOut,
        "scrape took too long",
    ))
}

/// Reads one request head, answers it, and returns (the caller closes the connection).
async fn serve_one(shard: &Rc<Shard>, stream: TcpStream) -> io::Result<()> {
    let stream = RefCell::new(Stream::Plain(stream));
    let mut buf = vec![0u8; REQUEST_HEAD_MAX_BYTES];
    let mut len = 0;
    let parsed = loop {
        match http::parse_request(&buf[..len]) {
            Ok(None) => {
                // `parse_request` refuses a full buffer, so there is room to read into.
                let n = read_some(&stream, &mut buf[len..]).await?;
                if n == 0 {
                    return Ok(());
                }
                len += n;
            }
            done => break done,
        }
    };
    let refused = parsed.is_err();
    let response = match parsed {
        Ok(Some(Target::Metrics { head_only })) => {
            let mut text = exposition::render(&gather(shard).await);
            if let Some(view) = shard.cluster_view() {
                text.push_str(&exposition::render_cluster(&view.snapshot()));
            }
            Metrics::inc(&shard.metrics.metrics_scrapes);
            let mut out = http::response_head(Status::Ok, CONTENT_TYPE, text.len()).into_bytes();
            if !head_only {
                out.extend_from_slice(text.as_bytes());
            }
            out
        }
        Ok(Some(Target::NotFound)) => http::plain_response(Status::NotFound, "try /metrics"),
        Ok(Some(Target::MethodNotAllowed)) => {
            http::plain_response(Status::MethodNotAllowed, "only GET and HEAD")
        }
        Ok(None) => unreachable!("the loop reads until the head is complete or refused"),
        Err(error) => refuse(shard, &error),
    };
    write_all(&stream, &response).await?;
    if refused {
        linger(&stream, &mut buf).await;
    }
    Ok(())
}

/// Reads and drops what a refused client is still sending, for a little while, before the
/// connection closes: closing with unread bytes makes the kernel send a reset, which can
/// destroy the error response before the client reads it.
async fn linger(stream: &RefCell<Stream>, scratch: &mut [u8]) {
    const LINGER: Duration = Duration::from_secs(1);
    const LINGER_BYTES_MAX: usize = 1 << 20;
    {
        use std::os::fd::AsRawFd;
        let fd = stream.borrow().tcp().as_raw_fd();
        // A plain shutdown(2): it does not block, and glommio's own is async only to go
        // through the ring.
        if nix::sys::socket::shutdown(fd, nix::sys::socket::Shutdown::Write).is_err() {
            return;
        }
    }
    let drain = async {
        let mut drained = 0;
        while drained < LINGER_BYTES_MAX {
            match read_some(stream, scratch).await {
                Ok(0) | Err(_) => break,
                Ok(n) => drained += n,
            }
        }
    };
    drain
        .or(async { glommio::timer::sleep(LINGER).await })
        .await;
}

fn refuse(shard: &Shard, error: &HttpError) -> Vec<u8> {
    Metrics::inc(&shard.metrics.metrics_bad_requests);
    warn!(%error, "bad request on the metrics port; refused");
    http::plain_response(error.status(), &error.to_string())
}
