//! Renders the cores' snapshots in the Prometheus text exposition format (0.0.4): every
//! family is declared (`# HELP`, `# TYPE`) even when it has no sample yet, so dashboards and
//! the documentation test see the same set of names on an idle broker as on a busy one.
//! Consumer lag is computed here, where every core's partitions and committed offsets meet.

use std::collections::HashMap;
use std::fmt::{self, Display, Write};

use crate::metrics::histogram::HistogramSnapshot;
use crate::metrics::snapshot::{CommittedOffset, CoreSnapshot, PartitionSnapshot};

/// The `Content-Type` of a rendered scrape.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[derive(Clone, Copy)]
enum Kind {
    Counter,
    Gauge,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        }
    }
}

/// Labels that tell one member counter of a family from another.
type MemberLabels = &'static [(&'static str, &'static str)];

/// How core counters (`metrics::counters::Metrics`, by field name) become one family.
struct CounterFamily {
    name: &'static str,
    kind: Kind,
    help: &'static str,
    members: &'static [(&'static str, MemberLabels)],
}

const fn family(
    name: &'static str,
    kind: Kind,
    help: &'static str,
    members: &'static [(&'static str, MemberLabels)],
) -> CounterFamily {
    CounterFamily {
        name,
        kind,
        help,
        members,
    }
}

const CORE_FAMILIES: &[CounterFamily] = &[
    family(
        "pagurus_connections_accepted_total",
        Kind::Counter,
        "Connections accepted (broker ports).",
        &[("connections_accepted", &[])],
    ),
    family(
        "pagurus_connections_refused_total",
        Kind::Counter,
        "Connections closed at once by the connection limit.",
        &[("connections_refused", &[])],
    ),
    family(
        "pagurus_connections_timed_out_total",
        Kind::Counter,
        "Connections closed by the handshake or idle timeout.",
        &[("connections_timed_out", &[])],
    ),
    family(
        "pagurus_connections_open",
        Kind::Gauge,
        "Connections open now.",
        &[("connections_open", &[])],
    ),
    family(
        "pagurus_connection_handoffs_total",
        Kind::Counter,
        "HermitMQ v1 connections moved to the core that owns their partition: handed off by this core, adopted by it, or declined (served where accepted).",
        &[
            ("connections_handed_off", &[("outcome", "handed_off")]),
            ("connections_adopted", &[("outcome", "adopted")]),
            ("handoffs_declined", &[("outcome", "declined")]),
        ],
    ),
    family(
        "pagurus_rejected_total",
        Kind::Counter,
        "Bad input refused, by reason.",
        &[
            ("frames_too_large", &[("reason", "frame_too_large")]),
            ("requests_malformed", &[("reason", "malformed_request")]),
            ("bad_batches", &[("reason", "bad_batch")]),
            ("bad_names", &[("reason", "bad_name")]),
            ("topic_limit_hits", &[("reason", "topic_limit")]),
            ("unknown_protocols", &[("reason", "unknown_protocol")]),
            ("metrics_bad_requests", &[("reason", "bad_metrics_request")]),
        ],
    ),
    family(
        "pagurus_batches_in_total",
        Kind::Counter,
        "Record batches appended to partitions this core owns.",
        &[("batches_in", &[])],
    ),
    family(
        "pagurus_records_in_total",
        Kind::Counter,
        "Records appended to partitions this core owns.",
        &[("records_in", &[])],
    ),
    family(
        "pagurus_bytes_in_total",
        Kind::Counter,
        "Bytes of batches (header, key, payload) appended to partitions this core owns.",
        &[("bytes_in", &[])],
    ),
    family(
        "pagurus_records_out_total",
        Kind::Counter,
        "Records sent to consumers from this core's connections.",
        &[("records_out", &[])],
    ),
    family(
        "pagurus_bytes_out_total",
        Kind::Counter,
        "Bytes of batches sent to consumers (sendfile) from this core's connections.",
        &[("bytes_out", &[])],
    ),
    family(
        "pagurus_mesh_messages_total",
        Kind::Counter,
        "Messages between cores, by direction and kind.",
        &[
            ("mesh_calls", &[("direction", "sent"), ("kind", "call")]),
            (
                "mesh_calls_received",
                &[("direction", "received"), ("kind", "call")],
            ),
            (
                "mesh_answers_sent",
                &[("direction", "sent"), ("kind", "answer")],
            ),
            (
                "mesh_answers_received",
                &[("direction", "received"), ("kind", "answer")],
            ),
        ],
    ),
    family(
        "pagurus_mesh_produces_total",
        Kind::Counter,
        "Produce calls sent to the owning core (batches that crossed cores).",
        &[("mesh_produces", &[])],
    ),
    family(
        "pagurus_retention_deleted_bytes_total",
        Kind::Counter,
        "Bytes of segments deleted by retention.",
        &[("retention_bytes_deleted", &[])],
    ),
    family(
        "pagurus_compactions_total",
        Kind::Counter,
        "Compaction passes, by outcome (a failed pass leaves the segments as they were).",
        &[
            ("compactions", &[("outcome", "done")]),
            ("compaction_failures", &[("outcome", "failed")]),
        ],
    ),
    family(
        "pagurus_compaction_bytes_total",
        Kind::Counter,
        "Sizes of the segments compaction rewrote, before and after.",
        &[
            ("compaction_bytes_before", &[("when", "before")]),
            ("compaction_bytes_after", &[("when", "after")]),
        ],
    ),
    family(
        "pagurus_compaction_batches_removed_total",
        Kind::Counter,
        "Batches compaction dropped because a newer batch had the same key.",
        &[("compaction_batches_removed", &[])],
    ),
    family(
        "pagurus_fetches_replanned_total",
        Kind::Counter,
        "Fetches answered empty because compaction replaced (or retention deleted) their segment after planning; the client fetches again.",
        &[("fetches_replanned", &[])],
    ),
    family(
        "pagurus_metrics_scrapes_total",
        Kind::Counter,
        "Scrapes of /metrics answered by this core.",
        &[("metrics_scrapes", &[])],
    ),
];

/// Renders a scrape; `snapshots[core]` is `None` for a core that did not answer in time.
pub fn render(snapshots: &[Option<CoreSnapshot>]) -> String {
    let mut out = Out::default();
    let answered: Vec<&CoreSnapshot> = snapshots.iter().flatten().collect();

    out.family("pagurus_build_info", Kind::Gauge, "Version of the broker.");
    out.sample(
        "pagurus_build_info",
        &[("version", &env!("CARGO_PKG_VERSION"))],
        1,
    );
    out.family(
        "pagurus_cores",
        Kind::Gauge,
        "Cores (executors) the broker runs.",
    );
    out.sample("pagurus_cores", &[], snapshots.len());
    out.family(
        "pagurus_core_up",
        Kind::Gauge,
        "1 if the core answered this scrape in time, 0 if its metrics are missing from it.",
    );
    for (core, snapshot) in snapshots.iter().enumerate() {
        out.sample(
            "pagurus_core_up",
            &[("core", &core)],
            u8::from(snapshot.is_some()),
        );
    }

    render_core_counters(&mut out, &answered);
    render_requests(&mut out, &answered);
    io::render_io(&mut out, &answered);
    render_partitions(&mut out, &answered);
    render_groups(&mut out, &answered);
    out.text
}

fn render_core_counters(out: &mut Out, cores: &[&CoreSnapshot]) {
    for family in CORE_FAMILIES {
        out.family(family.name, family.kind, family.help);
        for snapshot in cores {
            for (counter, labels) in family.members {
                let Some(value) = counter_value(snapshot, counter) else {
                    continue;
                };
                let mut all: Vec<(&str, &dyn Display)> = vec![("core", &snapshot.core)];
                all.extend(labels.iter().map(|(k, v)| (*k, v as &dyn Display)));
                out.sample(family.name, &all, value);
            }
        }
    }
    // A counter added to `Metrics` without a family above is still exported, under its
    // own name, so nothing counted is ever invisible.
    let mut unmapped: Vec<&str> = cores
        .iter()
        .flat_map(|s| s.counters.iter().map(|(name, _)| *name))
        .filter(|name| {
            !CORE_FAMILIES
                .iter()
                .any(|f| f.members.iter().any(|(m, _)| m == name))
        })
        .collect();
    unmapped.sort_unstable();
    unmapped.dedup();
    for name in unmapped {
        let family = format!("pagurus_{name}_total");
        out.family(&family, Kind::Counter, &format!("Core counter {name}."));
        for snapshot in cores {
            if let Some(value) = counter_value(snapshot, name) {
                out.sample(&family, &[("core", &snapshot.core)], value);
            }
        }
    }
}

fn counter_value(snapshot: &CoreSnapshot, name: &str) -> Option<u64> {
    snapshot
        .counters
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, v)| *v)
}

fn render_requests(out: &mut Out, cores: &[&CoreSnapshot]) {
    out.family(
        "pagurus_requests_total",
        Kind::Counter,
        "Requests received, by protocol and type, whatever their outcome.",
    );
    for snapshot in cores {
        for count in &snapshot.requests {
            let (protocol, kind) = count.kind.labels();
            out.sample(
                "pagurus_requests_total",
                &[
                    ("core", &snapshot.core),
                    ("protocol", &protocol),
                    ("type", &kind),
                ],
                count.requests,
            );
        }
    }
    out.family(
        "pagurus_request_errors_total",
        Kind::Counter,
        "Requests answered with an error (HermitMQ v1: refused), by protocol, type and error code.",
    );
    for snapshot in cores {
        for count in &snapshot.requests {
            let (protocol, kind) = count.kind.labels();
            for (code, errors) in &count.errors {
                out.sample(
                    "pagurus_request_errors_total",
                    &[
                        ("core", &snapshot.core),
                        ("protocol", &protocol),
                        ("type", &kind),
                        ("code", &code.name()),
                    ],
                    errors,
                );
            }
        }
    }
}

type PartitionField = fn(&PartitionSnapshot) -> u64;

const PARTITION_FAMILIES: &[(&str, Kind, &str, PartitionField)] = &[
    (
        "pagurus_log_start_offset",
        Kind::Gauge,
        "First offset still in the partition.",
        |p| p.log_start_offset,
    ),
    (
        "pagurus_log_end_offset",
        Kind::Gauge,
        "High watermark: the offset after the last record consumers can read.",
        |p| p.log_end_offset,
    ),
    (
        "pagurus_log_size_bytes",
        Kind::Gauge,
        "Bytes of the partition's segment files (.wal).",
        |p| p.size_bytes,
    ),
    (
        "pagurus_log_segments",
        Kind::Gauge,
        "Segments of the partition, the active one included.",
        |p| p.segments,
    ),
    (
        "pagurus_partition_batches_in_total",
        Kind::Counter,
        "Record batches appended to the partition since the broker started.",
        |p| p.batches_in,
    ),
    (
        "pagurus_partition_records_in_total",
        Kind::Counter,
        "Records appended to the partition since the broker started.",
        |p| p.records_in,
    ),
    (
        "pagurus_partition_bytes_in_total",
        Kind::Counter,
        "Bytes of batches appended to the partition since the broker started.",
        |p| p.bytes_in,
    ),
    (
        "pagurus_partition_records_out_total",
        Kind::Counter,
        "Records handed to consumers (fetch read plans) since the broker started.",
        |p| p.records_out,
    ),
    (
        "pagurus_partition_bytes_out_total",
        Kind::Counter,
        "Bytes handed to consumers (fetch read plans) since the broker started.",
        |p| p.bytes_out,
    ),
];

fn render_partitions(out: &mut Out, cores: &[&CoreSnapshot]) {
    let mut partitions: Vec<(usize, &PartitionSnapshot)> = cores
        .iter()
        .flat_map(|s| s.partitions.iter().map(move |p| (s.core, p)))
        .collect();
    partitions.sort_by(|a, b| (&a.1.topic, a.1.partition).cmp(&(&b.1.topic, b.1.partition)));
    for (name, kind, help, field) in PARTITION_FAMILIES {
        out.family(name, *kind, help);
        for (core, p) in &partitions {
            out.sample(
                name,
                &[
                    ("topic", &p.topic),
                    ("partition", &p.partition),
                    ("core", core),
                ],
                field(p),
            );
        }
    }
}

fn render_groups(out: &mut Out, cores: &[&CoreSnapshot]) {
    let ends: HashMap<(&str, u32), u64> = cores
        .iter()
        .flat_map(|s| &s.partitions)
        .map(|p| ((p.topic.as_str(), p.partition), p.log_end_offset))
        .collect();
    let mut committed: Vec<&CommittedOffset> = cores.iter().flat_map(|s| &s.committed).collect();
    committed
        .sort_by(|a, b| (&a.group, &a.topic, a.partition).cmp(&(&b.group, &b.topic, b.partition)));
    out.family(
        "pagurus_consumer_committed_offset",
        Kind::Gauge,
        "The group's committed offset: the next offset it will consume.",
    );
    for c in &committed {
        out.sample(
            "pagurus_consumer_committed_offset",
            &group_labels(c),
            c.offset,
        );
    }
    out.family(
        "pagurus_consumer_lag",
        Kind::Gauge,
        "Records between the group's committed offset and the log end offset (absent while the partition's owner does not answer, or the topic is gone).",
    );
    for c in &committed {
        if let Some(&end) = ends.get(&(c.topic.as_str(), c.partition)) {
            out.sample(
                "pagurus_consumer_lag",
                &group_labels(c),
                end.saturating_sub(c.offset),
            );
        }
    }
}

fn group_labels(c: &CommittedOffset) -> [(&'static str, &dyn Display); 3] {
    [
        ("group", &c.group),
        ("topic", &c.topic),
        ("partition", &c.partition),
    ]
}

#[derive(Clone, Copy)]
enum Scale {
    One,
    MicrosToSeconds,
}

impl Scale {
    fn apply(self, value: u64) -> f64 {
        match self {
            Scale::One => value as f64,
            Scale::MicrosToSeconds => value as f64 / 1e6,
        }
    }
}

#[derive(Default)]
struct Out {
    text: String,
}

impl Out {
    fn family(&mut self, name: &str, kind: Kind, help: &str) {
        self.family_typed(name, kind.name(), help);
    }

    fn family_histogram(&mut self, name: &str, help: &str) {
        self.family_typed(name, "histogram", help);
    }

    fn family_typed(&mut self, name: &str, kind: &str, help: &str) {
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        // Writing to a String cannot fail.
        let _ = writeln!(self.text, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &dyn Display)], value: impl Display) {
        self.text.push_str(name);
        if !labels.is_empty() {
            self.text.push('{');
            for (i, (key, value)) in labels.iter().enumerate() {
                if i > 0 {
                    self.text.push(',');
                }
                self.text.push_str(key);
                self.text.push_str("=\"");
                let _ = write!(EscapeLabel(&mut self.text), "{value}");
                self.text.push('"');
            }
            self.text.push('}');
        }
        let _ = writeln!(self.text, " {value}");
    }

    fn histogram(&mut self, name: &str, core: usize, h: &HistogramSnapshot, scale: Scale) {
        let bucket = format!("{name}_bucket");
        for (bound, cumulative) in h.cumulative() {
            let le = scale.apply(bound);
            self.sample(&bucket, &[("core", &core), ("le", &le)], cumulative);
        }
        self.sample(&bucket, &[("core", &core), ("le", &"+Inf")], h.count());
        self.sample(
            &format!("{name}_sum"),
            &[("core", &core)],
            scale.apply(h.sum),
        );
        self.sample(&format!("{name}_count"), &[("core", &core)], h.count());
    }
}

/// Escapes a label value as the text format requires (backslash, quote, newline).
struct EscapeLabel<'a>(&'a mut String);

impl fmt::Write for EscapeLabel<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for c in s.chars() {
            match c {
                '\\' => self.0.push_str("\\\\"),
                '"' => self.0.push_str("\\\""),
                '\n' => self.0.push_str("\\n"),
                c => self.0.push(c),
            }
        }
        Ok(())
    }
}

mod cluster;
mod io;

pub use cluster::render_cluster;
#[cfg(test)]
mod tests;
