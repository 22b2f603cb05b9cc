//! Moving a TLS connection into kernel TLS after its handshake (where the kernel offers
//! the `tls` ULP and `--ktls` is not off): rustls does the handshake, then its traffic keys
//! and record sequence numbers go to the socket, and from then on the kernel encrypts what
//! is written (sendfile included) and decrypts what is read. docs/SECURITY.md.
//!
//! The kernel must see the record stream from exactly where rustls stopped, so rustls may
//! not have taken bytes from the socket that it has not turned into plaintext: [`RecordIo`]
//! hands it whole records only. Plaintext rustls already decrypted (the client's first
//! request, sent right behind its Finished) is kept and read first ([`KtlsStream`]).
//!
//! What can fail, and what becomes of the connection:
//!
//! | step                                   | on failure                                    |
//! |----------------------------------------|-----------------------------------------------|
//! | rustls has TLS bytes not yet sent      | user space (fallback, counted, logged)        |
//! | a record half read when rustls stopped | waits for the rest (handshake deadline), then |
//! |                                        | rustls decrypts it; a bad one closes          |
//! | cipher suite the kernel cannot take    | user space (fallback)                         |
//! | `setsockopt(TCP_ULP, "tls")`           | user space (fallback): the socket is unchanged|
//! | rustls gives no secrets                | closed (rustls is consumed; counted, logged)  |
//! | `setsockopt(SOL_TLS, TLS_TX)`          | closed: rustls gave its keys up. The socket   |
//! |                                        | still sends plain bytes (the ULP alone passes |
//! |                                        | them through), but nothing can encrypt them   |
//! | `setsockopt(SOL_TLS, TLS_RX)`          | closed: the kernel encrypts, nothing decrypts |
//! | broker crash at any step               | the socket closes with the process; the       |
//! |                                        | client sees a reset and reconnects            |
//!
//! The only secrets-losing steps come after every check that can be made first, so a
//! connection is closed only when the kernel refuses keys for a version and cipher suite
//! it announced (`tcp_available_ulp` lists `tls`, but a kernel built without, say,
//! ChaCha20 support).

use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Instant;

use futures_lite::{AsyncRead, AsyncWrite};
use glommio::net::TcpStream;
use nix::libc;
use rustls::{ProtocolVersion, ServerConnection};
use tracing::debug;

use crate::security::tls::ktls::{CryptoInfo, kernel_has_cipher};
use crate::server::connection::handshake;
use crate::server::stream::TlsStream;

/// A TLS record's header: type, version, length (RFC 8446 5.1).
const RECORD_HEADER: usize = 5;
/// The largest record body: 2^14 bytes of plaintext and up to 2048 of expansion (TLS 1.2,
/// RFC 5246 6.2.3; TLS 1.3 allows 256).
const RECORD_BODY_MAX: usize = (1 << 14) + 2048;
/// Plaintext rustls decrypted before the hand-over that a [`KtlsStream`] keeps: after the
/// handshake rustls reads on only while it holds no plaintext, so one or two records.
const PENDING_MAX: usize = 4 * (1 << 14);

// linux/tls.h: the options of level SOL_TLS (libc has SOL_TLS and TCP_ULP, not these).
const TLS_TX: libc::c_int = 1;
const TLS_RX: libc::c_int = 2;

/// The socket under rustls during and after the handshake. With `whole` set (kernel TLS
/// will be tried) it reads a record at a time and gives rustls a record only once all of
/// it has arrived, so that nothing read from the socket is left half-processed when the
/// handshake ends; otherwise it passes reads through.
pub struct RecordIo {
    tcp: TcpStream,
    whole: bool,
    /// The record being read (`whole`), or what is left of it after `pass_through`.
    record: Vec<u8>,
    filled: usize,
    handed: usize,
    eof: bool,
}

impl RecordIo {
    pub fn new(tcp: TcpStream, whole: bool) -> RecordIo {
        RecordIo {
            tcp,
            whole,
            record: Vec::new(),
            filled: 0,
            handed: 0,
            eof: false,
        }
    }

    pub fn tcp(&self) -> &TcpStream {
        &self.tcp
    }

    fn into_tcp(self) -> TcpStream {
        self.tcp
    }

    /// From now on reads pass through (user-space TLS for the rest of the connection),
    /// starting with the bytes of a record already read.
    pub fn pass_through(&mut self) {
        self.whole = false;
    }

    /// True when bytes were read from the socket that rustls has not been given.
    fn holds_bytes(&self) -> bool {
        self.filled > self.handed
    }

    /// The bytes of the current record that rustls has not been given, once it is whole.
    async fn rest_of_record(&mut self) -> io::Result<Vec<u8>> {
        futures_lite::future::poll_fn(|cx| self.poll_whole_record(cx)).await?;
        if !self.record_is_whole() {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let rest = self.record[self.handed..self.filled].to_vec();
        (self.filled, self.handed) = (0, 0);
        Ok(rest)
    }

    fn body_len(&self) -> usize {
        usize::from(u16::from_be_bytes([self.record[3], self.record[4]]))
    }

    fn record_is_whole(&self) -> bool {
        self.filled >= RECORD_HEADER && self.filled == RECORD_HEADER + self.body_len()
    }

    /// Reads until the current record is whole or the socket reaches its end.
    fn poll_whole_record(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.record_is_whole() && !self.eof {
            let want = if self.filled < RECORD_HEADER {
                RECORD_HEADER
            } else {
                let body = self.body_len();
                if body > RECORD_BODY_MAX {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("a TLS record of {body} bytes (at most {RECORD_BODY_MAX})"),
                    )));
                }
                RECORD_HEADER + body
            };
            if self.record.len() < want {
                self.record.resize(want, 0);
            }
            let dest = &mut self.record[self.filled..want];
            match ready!(Pin::new(&mut self.tcp).poll_read(cx, dest))? {
                0 => self.eof = true,
                n => self.filled += n,
            }
        }
        Poll::Ready(Ok(()))
    }

    /// Copies bytes of the record already read into `buf`.
    fn hand(&mut self, buf: &mut [u8]) -> usize {
        let n = (self.filled - self.handed).min(buf.len());
        buf[..n].copy_from_slice(&self.record[self.handed..self.handed + n]);
        self.handed += n;
        if self.handed == self.filled {
            (self.filled, self.handed) = (0, 0);
            if !self.whole {
                self.record = Vec::new();
            }
        }
        n
    }
}

impl AsyncRead for RecordIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        // `handed > 0`: handing out a record already whole.
        if this.whole && this.handed == 0 {
            // Also at the end of the stream, when a partial record is handed on as it is:
            // rustls then fails the connection with its own error.
            ready!(this.poll_whole_record(cx))?;
        }
        if this.holds_bytes() {
            return Poll::Ready(Ok(this.hand(buf)));
        }
        if this.whole {
            return Poll::Ready(Ok(0));
        }
        Pin::new(&mut this.tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for RecordIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_close(cx)
    }
}

/// A connection in kernel TLS: reads and writes go straight to the socket (the kernel
/// decrypts and encrypts), after the plaintext rustls had already decrypted.
pub struct KtlsStream {
    tcp: TcpStream,
    pending: Vec<u8>,
    at: usize,
    /// The kernel refused a record that is not application data; the stream has ended.
    ended: bool,
}

impl KtlsStream {
    pub fn tcp(&self) -> &TcpStream {
        &self.tcp
    }
}

impl AsyncRead for KtlsStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.at < this.pending.len() {
            let n = (this.pending.len() - this.at).min(buf.len());
            buf[..n].copy_from_slice(&this.pending[this.at..this.at + n]);
            this.at += n;
            if this.at == this.pending.len() {
                (this.pending, this.at) = (Vec::new(), 0);
            }
            return Poll::Ready(Ok(n));
        }
        if this.ended {
            return Poll::Ready(Ok(0));
        }
        match ready!(Pin::new(&mut this.tcp).poll_read(cx, buf)) {
            // A plain recv on a kTLS socket fails with EIO when the next record is not
            // application data: an alert (close_notify, or an error) or a handshake message
            // (a KeyUpdate; kernels that can take new keys report EKEYEXPIRED after one).
            // pagurus hands the kernel no new keys, and an alert ends the session anyway,
            // so either is the end of the connection.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EIO | libc::EKEYEXPIRED)) => {
                this.ended = true;
                debug!(error = %e, "kernel TLS: the client sent an alert or a KeyUpdate (a record that is not application data); the connection closes");
                Poll::Ready(Ok(0))
            }
            other => Poll::Ready(other),
        }
    }
}

impl AsyncWrite for KtlsStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_close(cx)
    }
}

/// What became of a TLS connection offered to the kernel.
pub enum Handover {
    /// Its keys are in the kernel.
    Kernel(KtlsStream),
    /// It stays in user space, and why; the connection is sound.
    UserSpace(Box<TlsStream>, String),
    /// The kernel refused the keys after rustls gave them up: the connection cannot go on.
    Failed(String),
}

/// Moves a connection whose handshake just finished into kernel TLS (the table at the top
/// of this module). `Err`: the socket failed, or the client sent a bad record, while the
/// last record was read (within the handshake `deadline`).
pub async fn into_kernel(mut tls: Box<TlsStream>, deadline: Instant) -> io::Result<Handover> {
    let (plaintext, version) = match check(&mut tls, deadline).await? {
        Ok(ready) => ready,
        Err(reason) => {
            tls.get_mut().0.pass_through();
            return Ok(Handover::UserSpace(tls, reason));
        }
    };
    let (io, conn) = tls.get_mut();
    if let Err(e) = set_ulp(io.tcp()) {
        io.pass_through();
        return Ok(Handover::UserSpace(
            tls,
            format!("setsockopt(TCP_ULP, \"tls\"): {e}"),
        ));
    }
    let mut pending = vec![0u8; plaintext];
    conn.reader().read_exact(&mut pending)?;
    let (io, conn) = tls.into_inner();
    let infos = conn
        .dangerous_extract_secrets()
        .map_err(|e| e.to_string())
        .and_then(|secrets| CryptoInfo::pair(version, &secrets).map_err(|e| e.to_string()));
    let (tx, rx) = match infos {
        Ok(infos) => infos,
        Err(e) => {
            return Ok(Handover::Failed(format!(
                "rustls gave no usable secrets: {e}"
            )));
        }
    };
    let tcp = io.into_tcp();
    if let Err(e) = set_crypto(&tcp, TLS_TX, &tx) {
        return Ok(Handover::Failed(format!(
            "setsockopt(SOL_TLS, TLS_TX): {e}"
        )));
    }
    if let Err(e) = set_crypto(&tcp, TLS_RX, &rx) {
        return Ok(Handover::Failed(format!(
            "setsockopt(SOL_TLS, TLS_RX): {e}"
        )));
    }
    Ok(Handover::Kernel(KtlsStream {
        tcp,
        pending,
        at: 0,
        ended: false,
    }))
}

/// How many bytes of plaintext rustls holds and the TLS version, or why the connection
/// cannot go to the kernel, found before anything changes. A record half read is first
/// read whole and given to rustls.
async fn check(
    tls: &mut TlsStream,
    deadline: Instant,
) -> io::Result<Result<(usize, ProtocolVersion), String>> {
    let (io, conn) = tls.get_mut();
    if conn.wants_write() {
        return Ok(Err("rustls holds TLS records not yet sent".into()));
    }
    if io.holds_bytes() {
        let rest = handshake(deadline, io.rest_of_record()).await?;
        give(conn, &rest)?;
    }
    let (Some(suite), Some(version)) = (conn.negotiated_cipher_suite(), conn.protocol_version())
    else {
        return Ok(Err("no cipher suite or version after the handshake".into()));
    };
    if !kernel_has_cipher(suite.suite()) {
        return Ok(Err(format!(
            "{:?} has no kernel TLS equivalent",
            suite.suite()
        )));
    }
    let state = conn
        .process_new_packets()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    if state.peer_has_closed() {
        return Ok(Err("the client already closed its side".into()));
    }
    let plaintext = state.plaintext_bytes_to_read();
    if plaintext > PENDING_MAX {
        return Ok(Err(format!(
            "rustls holds {plaintext} bytes of plaintext (at most {PENDING_MAX} move)"
        )));
    }
    Ok(Ok((plaintext, version)))
}

/// Gives rustls TLS bytes read for it, and has it decrypt them.
fn give(conn: &mut ServerConnection, mut bytes: &[u8]) -> io::Result<()> {
    let bad = |e: rustls::Error| io::Error::new(io::ErrorKind::InvalidData, e);
    while !bytes.is_empty() {
        if conn.read_tls(&mut bytes)? == 0 {
            return Err(io::Error::other("rustls takes no more TLS bytes"));
        }
        conn.process_new_packets().map_err(bad)?;
    }
    Ok(())
}

fn set_ulp(tcp: &TcpStream) -> io::Result<()> {
    setsockopt(tcp, libc::SOL_TCP, libc::TCP_ULP, b"tls")
}

fn set_crypto(tcp: &TcpStream, direction: libc::c_int, info: &CryptoInfo) -> io::Result<()> {
    setsockopt(tcp, libc::SOL_TLS, direction, &info.to_bytes())
}

fn setsockopt(
    tcp: &TcpStream,
    level: libc::c_int,
    name: libc::c_int,
    value: &[u8],
) -> io::Result<()> {
    let len = libc::socklen_t::try_from(value.len()).map_err(io::Error::other)?;
    // SAFETY: the descriptor belongs to `tcp`, borrowed for the call; `value` is valid for
    // `len` bytes, which the kernel copies before returning.
    let rc = unsafe { libc::setsockopt(tcp.as_raw_fd(), level, name, value.as_ptr().cast(), len) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests;
