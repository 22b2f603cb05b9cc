//! Sans-IO codecs: bytes in, typed values out, "incomplete" as a normal outcome.
//!
//! - [`record`]: the 29-byte record batch header shared by disk and every wire protocol.
//! - [`hermit`]: HermitMQ v1 handshakes and acknowledgements, for existing HermitMQ clients.
//! - [`kafka`]: the Kafka protocol (`docs/KAFKA.md`): frames, headers, served APIs, RecordBatch v2.
//! - [`native`]: pagurus's own length-framed, pipelined protocol (`docs/PROTOCOL.md`).
//! - [`payload`]: the length-prefixed encoding of logical records inside a batch payload.
//! - [`wire`]: big-endian field readers and writers the codecs are built from.

pub mod hermit;
pub mod kafka;
pub mod native;
pub mod payload;
pub mod record;
pub mod routing;
pub mod wire;
