//! Kafka framing: every request and response is a big-endian i32 size followed by that many
//! bytes. A size over the limit is refused from the four prefix bytes alone, so a client
//! cannot make the broker allocate what it merely announces.

/// Bytes of the size prefix.
pub const SIZE_LEN: usize = 4;

/// Why the frame at the front of a buffer cannot be taken yet, or at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Not an error of the frame: `needed` more bytes must arrive first.
    #[error("incomplete frame: {needed} more bytes needed")]
    Incomplete { needed: usize },
    /// The size prefix is negative; framing is lost and the connection must close.
    #[error("frame size {size} is negative")]
    NegativeSize { size: i32 },
    /// The announced body is over the limit. The caller may skip `size_bytes` body bytes and
    /// answer, or close; nothing was allocated.
    #[error("frame of {size_bytes} bytes exceeds the limit of {limit_bytes}")]
    TooLarge { size_bytes: u64, limit_bytes: u64 },
}

/// Checks the frame at the front of `buf` and returns its body length (the frame is
/// `buf[SIZE_LEN..SIZE_LEN + len]`). The size is checked against `max_body_bytes` as soon as
/// its four bytes are there, before any wait for the body.
pub fn check(buf: &[u8], max_body_bytes: u64) -> Result<usize, FrameError> {
    let len = body_len(buf, max_body_bytes)?;
    if buf.len() < SIZE_LEN + len {
        return Err(FrameError::Incomplete {
            needed: SIZE_LEN + len - buf.len(),
        });
    }
    Ok(len)
}

/// Decodes and checks only the size prefix: the announced body length.
pub fn body_len(buf: &[u8], max_body_bytes: u64) -> Result<usize, FrameError> {
    if buf.len() < SIZE_LEN {
        return Err(FrameError::Incomplete {
            needed: SIZE_LEN - buf.len(),
        });
    }
    let size = i32::from_be_bytes(buf[..SIZE_LEN].try_into().expect("4 bytes"));
    let size_bytes = u64::try_from(size).map_err(|_| FrameError::NegativeSize { size })?;
    if size_bytes > max_body_bytes {
        return Err(FrameError::TooLarge {
            size_bytes,
            limit_bytes: max_body_bytes,
        });
    }
    Ok(usize::try_from(size_bytes).expect("an i32 fits usize"))
}

/// Returns the body of a checked frame at the front of `buf`, and the frame's whole length.
pub fn parse(buf: &[u8], max_body_bytes: u64) -> Result<(&[u8], usize), FrameError> {
    let len = check(buf, max_body_bytes)?;
    Ok((&buf[SIZE_LEN..SIZE_LEN + len], SIZE_LEN + len))
}

/// Writes a frame: size prefix, then `body`.
pub fn write(out: &mut Vec<u8>, body: &[u8]) {
    let size = i32::try_from(body.len()).expect("a Kafka frame is under 2 GiB");
    out.extend_from_slice(&size.to_be_bytes());
    out.extend_from_slice(body);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incomplete_then_whole() {
        let mut framed = Vec::new();
        write(&mut framed, b"hello");
        assert_eq!(check(&[], 100), Err(FrameError::Incomplete { needed: 4 }));
        assert_eq!(
            check(&framed[..3], 100),
            Err(FrameError::Incomplete { needed: 1 })
        );
        assert_eq!(
            check(&framed[..6], 100),
            Err(FrameError::Incomplete { needed: 3 })
        );
        let (body, used) = parse(&framed, 100).unwrap();
        assert_eq!((body, used), (&b"hello"[..], 9));
        // Trailing bytes belong to the next frame.
        framed.extend_from_slice(&[0, 0]);
        assert_eq!(parse(&framed, 100).unwrap().1, 9);
    }

    #[test]
    fn size_refused_from_prefix_alone() {
        let prefix = 1_000_000i32.to_be_bytes();
        assert_eq!(
            check(&prefix, 999_999),
            Err(FrameError::TooLarge {
                size_bytes: 1_000_000,
                limit_bytes: 999_999
            })
        );
        assert_eq!(
            check(&(-1i32).to_be_bytes(), 100),
            Err(FrameError::NegativeSize { size: -1 })
        );
        assert_eq!(check(&0i32.to_be_bytes(), 0), Ok(0));
    }
}
