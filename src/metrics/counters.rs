//! Per-core counters. Each core owns its own (plain `Cell`s: no atomics, no locks on the hot
//! path); they are read on that core, for a scrape (`server::scrape`) or the shutdown
//! report. How each becomes a Prometheus family is `metrics::exposition`; a counter added
//! here without a family there is still exported, as `pagurus_<name>_total`.

use std::cell::Cell;

use crate::metrics::requests::RequestCounters;

macro_rules! counters {
    ($($(#[$doc:meta])* $name:ident),+ $(,)?) => {
        #[derive(Debug, Default)]
        pub struct Metrics {
            $($(#[$doc])* pub $name: Cell<u64>,)+
            /// Requests by type and error code.
            pub request_counts: RequestCounters,
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
    /// Connections open now (a gauge).
    connections_open,
    /// HermitMQ v1 connections this core handed to the core that owns their partition.
    connections_handed_off,
    /// Connections another core handed to this one, the owner of their partition.
    connections_adopted,
    /// Hand-offs not made (the mesh full, the owner stopping): served where accepted.
    handoffs_declined,
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
    /// Requests refused because their connection used a topic deleted since (`shard::used`).
    deleted_topic_refusals,
    /// Kafka requests received.
    kafka_requests,
    /// Kafka requests for an API or version pagurus does not serve (answered UNSUPPORTED_VERSION).
    kafka_unsupported,
    /// TLS handshakes that failed (a plaintext client on a TLS port, no or a bad client
    /// certificate, no common cipher), or did not finish within the handshake timeout.
    tls_handshakes_failed,
    /// TLS connections established and encrypted in user space (rustls): kernel TLS off or
    /// unavailable, or a fallback (`tls_kernel_fallbacks`).
    tls_connections_userspace,
    /// TLS connections established whose keys went to the kernel (kTLS): fetches on them
    /// use sendfile.
    tls_connections_kernel,
    /// TLS connections that tried kernel TLS and stayed in user space (the kernel refused
    /// the ULP, a cipher suite it lacks, ...); also counted in `tls_connections_userspace`.
    tls_kernel_fallbacks,
    /// TLS connections closed because the kernel refused their keys after rustls had
    /// given them up (neither side can carry on; `server::ktls`).
    tls_kernel_failed,
    /// SASL logins that succeeded (re-authentications included).
    auth_logins_succeeded,
    /// SASL logins that failed (unknown user and wrong password alike), and SASL requests
    /// out of order.
    auth_logins_failed,
    /// Connections closed for a request before their login, or after it expired.
    auth_unauthenticated_refused,
    /// Connections refused because their listener does not serve their protocol
    /// (HermitMQ v1 on a SASL listener).
    auth_protocol_refused,
    /// Requests (or parts of one) refused by the ACLs, on a topic.
    authz_denied_topic,
    /// ... on a group.
    authz_denied_group,
    /// ... on the cluster (or a transactional id).
    authz_denied_cluster,
    /// Kafka topic configs refused (unknown name, bad value, read-only), answered INVALID_CONFIG.
    kafka_configs_refused,
    /// Time seeks answered with a batch's first offset because its records could not be
    /// read (an I/O error, a damaged batch); compressed batches are not counted.
    time_seeks_by_batch,
    /// Native batches converted to RecordBatches for Kafka fetches.
    kafka_batches_converted,
    /// Batches appended on this core.
    batches_in,
    /// Records appended on this core.
    records_in,
    /// Bytes of batches appended on this core.
    bytes_in,
    /// Bytes sent to consumers by sendfile.
    bytes_out,
    /// Records sent to consumers.
    records_out,
    /// Calls sent to other cores.
    mesh_calls,
    /// Of those, produce calls: batches staged on another core than their connection's.
    mesh_produces,
    /// Calls received from other cores.
    mesh_calls_received,
    /// Answers sent back to calling cores.
    mesh_answers_sent,
    /// Answers received from called cores.
    mesh_answers_received,
    /// Bytes of segments deleted by retention.
    retention_bytes_deleted,
    /// Fetches answered empty because their segment was replaced or deleted after planning.
    fetches_replanned,
    /// Compaction passes completed.
    compactions,
    /// Compaction passes that failed (the segments stay as they were).
    compaction_failures,
    /// Sizes of the segments compaction rewrote, before and after.
    compaction_bytes_before,
    compaction_bytes_after,
    /// Batches compaction dropped because a newer batch had the same key.
    compaction_batches_removed,
    /// Scrapes of `/metrics` answered.
    metrics_scrapes,
    /// Requests to the metrics port refused (malformed, too large, timed out).
    metrics_bad_requests,
    /// Produce requests (native or HermitMQ) refused because the disk is full.
    produce_storage_full,
    /// Stored batches found not to match their index entry (CRC, framing), at recovery or
    /// when first read; each is counted once per process.
    corrupt_batches_detected,
    /// Fetches refused with `CorruptData` because they start at a damaged batch.
    corrupt_reads_refused,
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

    pub fn dec(gauge: &Cell<u64>) {
        gauge.set(gauge.get().saturating_sub(1));
    }

    /// `name=value` of every counter above zero, space-separated: one log field that
    /// reads well in text and in JSON logs ("none" when all are zero).
    pub fn nonzero_summary(&self) -> String {
        let text: Vec<String> = self
            .snapshot()
            .into_iter()
            .filter(|(_, value)| *value > 0)
            .map(|(name, value)| format!("{name}={value}"))
            .collect();
        if text.is_empty() {
            String::from("none")
        } else {
            text.join(" ")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_names_only_counters_above_zero() {
        let metrics = Metrics::default();
        assert_eq!(metrics.nonzero_summary(), "none");
        Metrics::add(&metrics.batches_in, 3);
        Metrics::inc(&metrics.bad_names);
        assert_eq!(metrics.nonzero_summary(), "bad_names=1 batches_in=3");
    }
}
