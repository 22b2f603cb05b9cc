//! Zero-copy sends: segment bytes go from the page cache to the socket with sendfile(2),
//! never through user space.
//!
//! glommio 0.9 has no public sendfile and no public "wait until writable". So:
//! - The socket is non-blocking; sendfile runs inline on the executor as long as the socket
//!   takes bytes.
//! - When the socket is full (`EAGAIN`), the next single byte is read from the file and
//!   written through glommio's own async write, which parks the task until the socket is
//!   writable (an io_uring poll); then sendfile resumes. One byte per full socket buffer
//!   passes through user space; the rest never does.
//! - A socket that never drains is bounded by the stream's write timeout.
//! - Cold data (not in the active segment) is first pulled into the page cache with
//!   readahead(2) on glommio's blocking thread, so sendfile never stalls the executor on disk.

use std::cell::RefCell;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::FileExt;
use std::rc::Rc;

use glommio::net::TcpStream;

use crate::server::io::write_all;

/// Bytes per sendfile call: large enough to amortise the syscall, small enough that the task
/// yields to others between calls.
const SENDFILE_CHUNK_BYTES: usize = 1 << 20;

/// Sends `length` bytes of `file` from `position` to the socket.
pub async fn send_range(
    stream: &RefCell<TcpStream>,
    file: &Rc<File>,
    position: u64,
    length: u64,
    hot: bool,
) -> io::Result<()> {
    if length == 0 {
        return Ok(());
    }
    if !hot {
        let fd = file.as_raw_fd();
        let len = usize::try_from(length).unwrap_or(usize::MAX);
        // readahead(2) blocks until the range is in the page cache, which is the point: it
        // runs on the blocking thread. `file` stays open (borrowed) until this resolves.
        glommio::executor()
            .spawn_blocking(move || {
                // SAFETY: plain syscall on a descriptor kept open by the caller.
                unsafe { libc::readahead(fd, position as libc::off64_t, len) };
            })
            .await;
    }
    let mut offset = position as i64;
    let end = (position + length) as i64;
    while offset < end {
        let chunk = ((end - offset) as usize).min(SENDFILE_CHUNK_BYTES);
        let result = {
            let stream = stream.borrow();
            // SAFETY: the descriptor belongs to `stream`, borrowed for the duration of the call.
            let socket = unsafe { std::os::fd::BorrowedFd::borrow_raw(stream.as_raw_fd()) };
            nix::sys::sendfile::sendfile(socket, file.as_fd(), Some(&mut offset), chunk)
        };
        match result {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "segment file shorter than its index says",
                ));
            }
            Ok(_) => glommio::yield_if_needed().await,
            Err(nix::errno::Errno::EAGAIN) => {
                // Socket full: let glommio wait for room by writing the next byte itself.
                let mut byte = [0u8; 1];
                file.read_exact_at(&mut byte, offset as u64)?;
                write_all(stream, &byte).await?;
                offset += 1;
            }
            Err(nix::errno::Errno::EINTR) => {}
            Err(errno) => return Err(errno.into()),
        }
    }
    Ok(())
}
