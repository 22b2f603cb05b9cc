//! The text format of a scrape, checked on hand-made snapshots.

use super::*;
use crate::metrics::io::IoSnapshot;
use crate::metrics::requests::{RequestCount, RequestKind};
use crate::protocol::native::{ApiKey, ErrorCode};

fn core(core: usize) -> CoreSnapshot {
    CoreSnapshot {
        core,
        counters: vec![("bytes_in", 10 * core as u64), ("brand_new", 7)],
        requests: vec![RequestCount {
            kind: RequestKind::Native(ApiKey::Produce),
            requests: 3,
            errors: vec![(ErrorCode::CrcMismatch, 1)],
        }],
        io: IoSnapshot {
            fsync_us: HistogramSnapshot {
                bounds: vec![100, 1000],
                counts: vec![1, 2, 0],
                sum: 1500,
            },
            ..Default::default()
        },
        partitions: vec![PartitionSnapshot {
            topic: format!("t{core}"),
            partition: 0,
            log_end_offset: 50,
            ..Default::default()
        }],
        committed: vec![CommittedOffset {
            group: "g\"1".into(),
            topic: "t1".into(),
            partition: 0,
            offset: 20,
        }],
    }
}

#[test]
fn renders_families_samples_and_lag() {
    let text = render(&[Some(core(0)), Some(core(1)), None]);
    for line in [
        "# TYPE pagurus_bytes_in_total counter",
        "pagurus_bytes_in_total{core=\"1\"} 10",
        "pagurus_core_up{core=\"2\"} 0",
        "pagurus_cores 3",
        "# TYPE pagurus_brand_new_total counter",
        "pagurus_brand_new_total{core=\"0\"} 7",
        "pagurus_requests_total{core=\"0\",protocol=\"native\",type=\"Produce\"} 3",
        "pagurus_request_errors_total{core=\"1\",protocol=\"native\",type=\"Produce\",code=\"CrcMismatch\"} 1",
        "pagurus_fsync_duration_seconds_bucket{core=\"0\",le=\"0.0001\"} 1",
        "pagurus_fsync_duration_seconds_bucket{core=\"0\",le=\"0.001\"} 3",
        "pagurus_fsync_duration_seconds_bucket{core=\"0\",le=\"+Inf\"} 3",
        "pagurus_fsync_duration_seconds_sum{core=\"0\"} 0.0015",
        "pagurus_log_end_offset{topic=\"t1\",partition=\"0\",core=\"1\"} 50",
        "pagurus_consumer_lag{group=\"g\\\"1\",topic=\"t1\",partition=\"0\"} 30",
        "# TYPE pagurus_group_commit_batches histogram",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing line {line:?} in:\n{text}"
        );
    }
    // Both cores hold a commit for t1/0; a family's samples are never split.
    let families: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    let mut unique = families.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), families.len(), "a family declared twice");
}
