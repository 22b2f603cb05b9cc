//! Big-endian primitives over byte cursors: the building blocks of the native codec.

/// The input ended before a field did, or a field is malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed {what}")]
pub struct Malformed {
    pub what: &'static str,
}

/// Reads fields off the front of a byte slice.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }

    pub fn remaining(&self) -> usize {
        self.buf.len()
    }

    pub fn rest(&self) -> &'a [u8] {
        self.buf
    }

    pub fn bytes(&mut self, len: usize, what: &'static str) -> Result<&'a [u8], Malformed> {
        if self.buf.len() < len {
            return Err(Malformed { what });
        }
        let (head, tail) = self.buf.split_at(len);
        self.buf = tail;
        Ok(head)
    }

    pub fn u8(&mut self, what: &'static str) -> Result<u8, Malformed> {
        Ok(self.bytes(1, what)?[0])
    }

    pub fn u16(&mut self, what: &'static str) -> Result<u16, Malformed> {
        Ok(u16::from_be_bytes(
            self.bytes(2, what)?.try_into().expect("2"),
        ))
    }

    pub fn u32(&mut self, what: &'static str) -> Result<u32, Malformed> {
        Ok(u32::from_be_bytes(
            self.bytes(4, what)?.try_into().expect("4"),
        ))
    }

    pub fn u64(&mut self, what: &'static str) -> Result<u64, Malformed> {
        Ok(u64::from_be_bytes(
            self.bytes(8, what)?.try_into().expect("8"),
        ))
    }

    /// A `u16` length, then that many bytes.
    pub fn string(&mut self, what: &'static str) -> Result<&'a [u8], Malformed> {
        let len = self.u16(what)? as usize;
        self.bytes(len, what)
    }

    /// Fails unless every byte was consumed: trailing bytes mean the two sides disagree on
    /// the layout, which must not pass silently.
    pub fn finish(&self, what: &'static str) -> Result<(), Malformed> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(Malformed { what })
        }
    }
}

/// Appends fields to a byte vector.
pub trait Put {
    fn put_u8(&mut self, v: u8);
    fn put_u16(&mut self, v: u16);
    fn put_u32(&mut self, v: u32);
    fn put_u64(&mut self, v: u64);
    /// A `u16` length, then the bytes. Callers validated the length (names are ≤ 249 bytes).
    fn put_string(&mut self, s: &[u8]);
}

impl Put for Vec<u8> {
    fn put_u8(&mut self, v: u8) {
        self.push(v);
    }
    fn put_u16(&mut self, v: u16) {
        self.extend_from_slice(&v.to_be_bytes());
    }
    fn put_u32(&mut self, v: u32) {
        self.extend_from_slice(&v.to_be_bytes());
    }
    fn put_u64(&mut self, v: u64) {
        self.extend_from_slice(&v.to_be_bytes());
    }
    fn put_string(&mut self, s: &[u8]) {
        let len = u16::try_from(s.len()).expect("strings on the wire are under 64 KiB");
        self.put_u16(len);
        self.extend_from_slice(s);
    }
}
