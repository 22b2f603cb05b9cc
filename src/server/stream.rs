//! A connection's byte stream: the TCP socket itself, or TLS over it.
//!
//! TLS is rustls driven by `futures-rustls`, encrypting in user space: segment bytes must
//! then pass through a buffer to be encrypted, so [`Stream::sends_files`] is false and the
//! outbox reads file ranges instead of sendfile-ing them. (Kernel TLS, where the kernel has
//! the `tls` ULP, would keep sendfile; see docs/SECURITY.md for where that stands.)
//!
//! The reader and the writer tasks of a session share one stream in a `RefCell` and borrow
//! it only within one `poll` (`server::io`); a TLS stream's read and write halves share the
//! rustls state, which this keeps consistent: never two polls at once.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_lite::{AsyncRead, AsyncWrite};
use glommio::net::TcpStream;

/// A TLS session over a TCP socket, server side.
pub type TlsStream = futures_rustls::server::TlsStream<TcpStream>;

pub enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream>),
}

impl Stream {
    /// The TCP socket under the stream: for its timeouts, addresses and descriptor.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(tcp) => tcp,
            Stream::Tls(tls) => tls.get_ref().0,
        }
    }

    /// True when bytes written to the socket itself reach the client as they are, so file
    /// ranges may go with sendfile; false under user-space TLS.
    pub fn sends_files(&self) -> bool {
        self.is_plain()
    }

    /// True for a plain TCP stream: all its state is in the descriptor (it may be handed to
    /// another core).
    pub fn is_plain(&self) -> bool {
        matches!(self, Stream::Plain(_))
    }

    /// The client certificate the TLS handshake verified (the first of its chain), if any.
    pub fn peer_certificate(&self) -> Option<&[u8]> {
        match self {
            Stream::Plain(_) => None,
            Stream::Tls(tls) => tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|chain| chain.first())
                .map(|cert| cert.as_ref()),
        }
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
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_flush(cx),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_flush(cx),
        }
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_close(cx),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_close(cx),
        }
    }
}
