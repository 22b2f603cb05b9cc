//! Per-core counters. Each core owns its own (plain `Cell`s: no atomics, no locks on the hot
//! path); they are read on that core, e.g. for a scrape or a shutdown report.

use std::cell::Cell;

macro_rules! counters {
    ($($(#[$doc:meta])* $name:ident),+ $(,)?) => {
        #[derive(Debug, Default)]
        pub struct Metrics {
            $($(#[$doc])* pub $name: Cell<u64>,)+
        }

        impl Metrics {
            /// `(name, value)` of every counter.
            pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($name), self.$name.get())),+]
            }
        }
    };
}

counters!(
    /// Connections accepted.
    connections_accepted,
    /// Connections refused by the connection limit.
    connections_refused,
    /// Connections closed for saying nothing within the handshake timeout, or idling.
    connections_timed_out,
    /// Native requests answered, any outcome.
    requests,
    /// Native requests answered with an error code.
    request_errors,
    /// Frames whose length was over the limit (skipped, answered with an error).
    frames_too_large,
    /// Requests that could not be decoded.
    requests_malformed,
    /// Batches refused (bad magic, sizes, CRC).
    bad_batches,
    /// Topic or group names refused.
    bad_names,
    /// Topic creations refused by the topic limit.
    topic_limit_hits,
    /// Connections closed because the first byte named no protocol pagurus speaks.
    unknown_protocols,
    /// Batches appended on this core.
    batches_in,
    /// Bytes of batches appended on this core.
    bytes_in,
    /// Bytes sent to consumers by sendfile.
    bytes_out,
    /// Calls sent to other cores.
    mesh_calls,
    /// Bytes of segments deleted by retention.
    retention_bytes_deleted,
    /// Connections closed because a request did not arrive whole within the idle timeout
    /// of its first bytes (a client dribbling bytes, slowloris-style).
    requests_too_slow,
    /// Connections closed because the client read nothing for the idle timeout while the
    /// broker had bytes to send (its socket buffer stayed full).
    writes_stalled,
);

impl Metrics {
    pub fn inc(counter: &Cell<u64>) {
        counter.set(counter.get() + 1);
    }

    pub fn add(counter: &Cell<u64>, n: u64) {
        counter.set(counter.get() + n);
    }
}
