//! A connection's byte stream: the TCP socket itself, or TLS over it.
//!
//! TLS is rustls driven by `futures-rustls`. Where the kernel offers the `tls` ULP the
//! connection moves into kernel TLS after its handshake ([`Stream::Ktls`], `server::ktls`):
//! the socket then reads and writes plaintext, and sendfile keeps working. Otherwise rustls
//! encrypts in user space ([`Stream::Tls`]): segment bytes must then pass through a buffer
//! to be encrypted, so [`Stream::sends_files`] is false and the outbox reads file ranges
//! instead of sendfile-ing them.
//!
//! The reader and the writer tasks of a session share one stream in a `RefCell` and borrow
//! it only within one `poll` (`server::io`); a TLS stream's read and write halves share the
//! rustls state, which this keeps consistent: never two polls at once.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_lite::{AsyncRead, AsyncWrite};
use glommio::net::TcpStream;

use crate::server::ktls::{KtlsStream, RecordIo};

/// A TLS session over a TCP socket, server side.
pub type TlsStream = futures_rustls::server::TlsStream<RecordIo>;

pub enum Stream {
    Plain(TcpStream),
    /// TLS encrypted in user space.
    Tls(Box<TlsStream>),
    /// TLS encrypted by the kernel.
    Ktls(KtlsStream),
}

impl Stream {
    /// The TCP socket under the stream: for its timeouts, addresses and descriptor.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(tcp) => tcp,
            Stream::Tls(tls) => tls.get_ref().0.tcp(),
            Stream::Ktls(ktls) => ktls.tcp(),
        }
    }

    /// True when bytes written to the socket itself reach the client (in the clear, or
    /// encrypted by the kernel), so file ranges may go with sendfile; false under
    /// user-space TLS.
    pub fn sends_files(&self) -> bool {
        matches!(self, Stream::Plain(_) | Stream::Ktls(_))
    }

    /// True for a plain TCP stream: all its state is in the descriptor (it may be handed to
    /// another core). A kTLS stream's keys are in the descriptor too, but its principal and
    /// any plaintext rustls decrypted before the hand-over are not, so it stays.
    pub fn is_plain(&self) -> bool {
        matches!(self, Stream::Plain(_))
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_read(cx, buf),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_read(cx, buf),
            Stream::Ktls(ktls) => Pin::new(ktls).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_write(cx, buf),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_write(cx, buf),
            Stream::Ktls(ktls) => Pin::new(ktls).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_flush(cx),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_flush(cx),
            Stream::Ktls(ktls) => Pin::new(ktls).poll_flush(cx),
        }
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_close(cx),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_close(cx),
            Stream::Ktls(ktls) => Pin::new(ktls).poll_close(cx),
        }
    }
}
