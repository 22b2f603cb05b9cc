//! Sans-IO codecs: bytes in, typed values out, "incomplete" as a normal outcome.
//!
//! - [`record`]: the 29-byte record batch header shared by disk and every wire protocol.

pub mod record;
