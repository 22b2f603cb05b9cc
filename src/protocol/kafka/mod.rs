//! Kafka protocol codec, sans-IO: frames, request headers, the APIs pagurus serves, and the
//! RecordBatch v2 format (`docs/KAFKA.md`).
//!
//! - [`frame`]: the 4-byte size prefix; [`frame::check`] says how long the frame at the front
//!   of a buffer is, or how many bytes are missing ("incomplete" is normal), and refuses an
//!   oversized frame before anything is allocated for it.
//! - [`header`]: the request header (api key, version, correlation id, client id, tagged
//!   fields of flexible versions).
//! - [`apis`]: which APIs and versions are served, request decode and response encode. The
//!   message codecs are the `kafka-protocol` crate's, generated from Kafka's own schemas.
//! - [`batch`]: RecordBatch v2 validation and the base-offset rewrite done on produce.
//! - [`convert`]: a native pagurus batch as one uncompressed RecordBatch v2, for Kafka
//!   fetches of natively produced data.
//! - [`timestamps`]: the first record at or after a time inside an uncompressed batch.
//! - [`consumer`]: the consumer protocol's assignment, decoded for `groups describe`.

pub mod apis;
pub mod batch;
pub mod consumer;
pub mod convert;
pub mod frame;
pub mod header;
pub mod timestamps;

pub use apis::{ApiError, KafkaRequest, SERVED};
pub use frame::FrameError;
pub use header::{HeaderError, RequestHeader};
