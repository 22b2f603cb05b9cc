//! A connection's read buffer. The bytes received and not yet consumed are
//! `data[start..end]`; `data[end..]` is room already zeroed when the buffer grew, so a read
//! goes straight into it. Growing a `BytesMut` by a read's size before every read zeroed
//! that size each time (64 KiB, for a 10 KiB batch), and that memset was 3 % of the broker's
//! CPU at a moderate produce rate (docs/LATENCY.md (n)).
//!
//! The buffer never shrinks by itself: the connection replaces it with a new one when it is
//! idle and larger than it should keep.

use std::ops::Deref;

#[derive(Debug, Default)]
pub struct ReadBuf {
    data: Vec<u8>,
    start: usize,
    end: usize,
}

impl ReadBuf {
    pub fn new() -> ReadBuf {
        ReadBuf::default()
    }

    pub fn from_slice(bytes: &[u8]) -> ReadBuf {
        let mut buf = ReadBuf::new();
        buf.extend_from_slice(bytes);
        buf
    }

    /// The memory the buffer holds, filled or not.
    pub fn capacity(&self) -> usize {
        self.data.len()
    }

    /// Consumes the first `n` filled bytes.
    pub fn advance(&mut self, n: usize) {
        assert!(
            n <= self.len(),
            "advance {n} past {} filled bytes",
            self.len()
        );
        self.start += n;
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
        }
    }

    /// Room for at least `want` more bytes after the filled ones, to read into; then
    /// [`ReadBuf::filled`] says how many arrived. Moves the filled bytes to the front when
    /// that makes the room, and zeroes only what the buffer grows by.
    pub fn spare(&mut self, want: usize) -> &mut [u8] {
        if self.data.len() - self.end < want && self.start > 0 {
            self.data.copy_within(self.start..self.end, 0);
            (self.start, self.end) = (0, self.end - self.start);
        }
        if self.data.len() - self.end < want {
            self.data.resize(self.end + want, 0);
        }
        &mut self.data[self.end..self.end + want]
    }

    /// Counts `n` bytes read into the room [`ReadBuf::spare`] gave.
    pub fn filled(&mut self, n: usize) {
        assert!(
            self.end + n <= self.data.len(),
            "filled {n} bytes past the room given"
        );
        self.end += n;
    }

    pub fn extend_from_slice(&mut self, bytes: &[u8]) {
        self.spare(bytes.len()).copy_from_slice(bytes);
        self.filled(bytes.len());
    }
}

/// The filled bytes.
impl Deref for ReadBuf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.data[self.start..self.end]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_land_after_the_filled_bytes_and_advance_consumes_them() {
        let mut buf = ReadBuf::from_slice(b"hello");
        let room = buf.spare(4);
        room[..3].copy_from_slice(b" yo");
        buf.filled(3);
        assert_eq!(&buf[..], b"hello yo");
        buf.advance(6);
        assert_eq!(&buf[..], b"yo");
        buf.advance(2);
        assert!(buf.is_empty());
    }

    #[test]
    fn room_comes_from_moving_the_filled_bytes_before_growing() {
        let mut buf = ReadBuf::new();
        buf.spare(16).copy_from_slice(&[7u8; 16]);
        buf.filled(16);
        buf.advance(12);
        // 4 filled bytes at the end of 16: room for 12 by moving them to the front.
        buf.spare(12);
        assert_eq!(buf.capacity(), 16, "grew where moving sufficed");
        assert_eq!(&buf[..], &[7u8; 4]);
        buf.spare(13);
        assert_eq!(buf.capacity(), 17);
        assert_eq!(&buf[..], &[7u8; 4]);
    }

    #[test]
    fn space_is_zeroed_once_and_then_reused_as_it_is() {
        let mut buf = ReadBuf::new();
        buf.spare(8).copy_from_slice(b"abcdefgh");
        buf.filled(8);
        buf.advance(8);
        // Emptied: the room is the same memory, not zeroed again (a read overwrites it).
        assert_eq!(buf.spare(8), b"abcdefgh");
        assert_eq!(buf.capacity(), 8);
    }

    #[test]
    #[should_panic(expected = "past the room given")]
    fn filling_past_the_room_is_a_bug() {
        let mut buf = ReadBuf::new();
        buf.spare(4);
        buf.filled(5);
    }

    #[test]
    #[should_panic(expected = "past 2 filled bytes")]
    fn advancing_past_the_filled_bytes_is_a_bug() {
        let mut buf = ReadBuf::from_slice(b"ab");
        buf.advance(3);
    }
}
