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

use futures_lite::{AsyncRead, AsyncWrite};
use glommio::net::TcpStream;

/// Reads what is available (at least one byte, or 0 at end of stream).
pub async fn read_some(stream: &RefCell<TcpStream>, buf: &mut [u8]) -> io::Result<usize> {
    poll_fn(|cx| Pin::new(&mut *stream.borrow_mut()).poll_read(cx, buf)).await
}

/// Reads exactly `buf.len()` bytes.
pub async fn read_exact(stream: &RefCell<TcpStream>, buf: &mut [u8]) -> io::Result<()> {
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
pub async fn write_all(stream: &RefCell<TcpStream>, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        let n = poll_fn(|cx| Pin::new(&mut *stream.borrow_mut()).poll_write(cx, buf)).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        buf = &buf[n..];
    }
    Ok(())
}
