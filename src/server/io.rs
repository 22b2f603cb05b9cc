//! Socket reads and writes shared by a connection's reader and writer tasks.
//!
//! Both tasks hold the stream in a `RefCell` and borrow it only inside a single `poll` call,
//! never across an await, so they never collide. glommio's non-buffered stream reads with
//! a non-blocking recv and otherwise waits on readiness, so dropping a read future in the
//! middle loses no bytes (the reader races reads against shutdown).

use std::cell::RefCell;
use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::time::{Duration, Instant};

use crate::server::stream::Stream;
use futures_lite::{AsyncRead, AsyncWrite};

/// Reads what is available (at least one byte, or 0 at end of stream).
pub async fn read_some(stream: &RefCell<Stream>, buf: &mut [u8]) -> io::Result<usize> {
    poll_fn(|cx| Pin::new(&mut *stream.borrow_mut()).poll_read(cx, buf)).await
}

/// Reads exactly `buf.len()` bytes.
pub async fn read_exact(stream: &RefCell<Stream>, buf: &mut [u8]) -> io::Result<()> {
    let mut at = 0;
    while at < buf.len() {
        let n = read_some(stream, &mut buf[at..]).await?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        at += n;
    }
    Ok(())
}

/// Writes all of `buf`.
pub async fn write_all(stream: &RefCell<Stream>, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        let n = poll_fn(|cx| Pin::new(&mut *stream.borrow_mut()).poll_write(cx, buf)).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        buf = &buf[n..];
    }
    // Under TLS what was written may wait in the TLS layer for room in the socket.
    if !stream.borrow().sends_files() {
        poll_fn(|cx| Pin::new(&mut *stream.borrow_mut()).poll_flush(cx)).await?;
    }
    Ok(())
}

/// Bounds how long one request may take to arrive. A read timeout alone restarts with
/// every byte, so a client sending a byte a second would hold its connection (and the
/// request's buffer) forever; this gives the whole request `request_limit` from its first
/// bytes, and the wait between requests `idle_limit`.
pub struct RequestDeadline {
    idle_limit: Duration,
    request_limit: Duration,
    started: Option<Instant>,
}

impl RequestDeadline {
    pub fn new(idle_limit: Duration, request_limit: Duration) -> Self {
        RequestDeadline {
            idle_limit,
            request_limit,
            started: None,
        }
    }

    /// The current request arrived whole; the next one starts its own clock.
    pub fn done(&mut self) {
        self.started = None;
    }

    /// Sets the read timeout of the next read: the idle limit between requests; in the
    /// middle of one, the time left of the request limit (and never more than the idle
    /// limit: a silence that long closes the connection wherever it falls). `TimedOut` if
    /// none is left.
    pub fn before_read(&mut self, stream: &RefCell<Stream>, mid_request: bool) -> io::Result<()> {
        let timeout = if mid_request {
            let started = *self.started.get_or_insert_with(Instant::now);
            let left = self.request_limit.saturating_sub(started.elapsed());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "request not complete within the request timeout",
                ));
            }
            left.min(self.idle_limit)
        } else {
            self.idle_limit
        };
        stream.borrow().tcp().set_read_timeout(Some(timeout))?;
        Ok(())
    }
}
