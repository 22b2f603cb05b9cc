//! The storage I/O families of one scrape: fsync rounds, group commit, WAL write routes, and
//! the produce ack time.

use super::{Kind, Out, Scale};
use crate::metrics::snapshot::CoreSnapshot;

pub(super) fn render_io(out: &mut Out, cores: &[&CoreSnapshot]) {
    out.family_histogram(
        "pagurus_fsync_duration_seconds",
        "Time of one data fsync round (a segment's .wal, or .wal and .idx together; offsets logs included).",
    );
    for snapshot in cores {
        out.histogram(
            "pagurus_fsync_duration_seconds",
            snapshot.core,
            &snapshot.io.fsync_us,
            Scale::MicrosToSeconds,
        );
    }
    out.family(
        "pagurus_fsync_errors_total",
        Kind::Counter,
        "Failed fsync rounds (each fences its partition until a restart).",
    );
    for snapshot in cores {
        out.sample(
            "pagurus_fsync_errors_total",
            &[("core", &snapshot.core)],
            snapshot.io.fsync_errors,
        );
    }
    out.family(
        "pagurus_wal_writes_total",
        Kind::Counter,
        "WAL writes, by where they ran: inline (on the core's thread) or ring (io_uring).",
    );
    for snapshot in cores {
        for (route, writes) in [
            ("inline", snapshot.io.wal_writes_inline),
            ("ring", snapshot.io.wal_writes_ring),
        ] {
            out.sample(
                "pagurus_wal_writes_total",
                &[("core", &snapshot.core), ("route", &route)],
                writes,
            );
        }
    }
    out.family(
        "pagurus_wal_inline_stalls_total",
        Kind::Counter,
        "Inline WAL writes slow enough to send the core's writes to io_uring for a while.",
    );
    for snapshot in cores {
        out.sample(
            "pagurus_wal_inline_stalls_total",
            &[("core", &snapshot.core)],
            snapshot.io.wal_inline_stalls,
        );
    }
    out.family(
        "pagurus_commit_rounds_total",
        Kind::Counter,
        "Commit rounds under fsync=always, by what one fdatasync made durable: wal (the index entries in the WAL's index journal) or wal_idx (both files).",
    );
    for snapshot in cores {
        for (files, rounds) in [
            ("wal", snapshot.io.commit_rounds_wal),
            ("wal_idx", snapshot.io.commit_rounds_wal_idx),
        ] {
            out.sample(
                "pagurus_commit_rounds_total",
                &[("core", &snapshot.core), ("files", &files)],
                rounds,
            );
        }
    }
    out.family_histogram(
        "pagurus_group_commit_batches",
        "Batches written per group-commit round (under fsync=always: made durable by one fsync).",
    );
    for snapshot in cores {
        out.histogram(
            "pagurus_group_commit_batches",
            snapshot.core,
            &snapshot.io.group_commit_batches,
            Scale::One,
        );
    }
    out.family_histogram(
        "pagurus_produce_ack_duration_seconds",
        "Time from a produce's batches handed to the shard (read, parsed, checked) to their acknowledgement, the hop to the owner core included; reading the request and sending the answer are not in it.",
    );
    for snapshot in cores {
        out.histogram(
            "pagurus_produce_ack_duration_seconds",
            snapshot.core,
            &snapshot.io.produce_ack_us,
            Scale::MicrosToSeconds,
        );
    }
}
