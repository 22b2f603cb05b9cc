//! The bench's output: a text table or one JSON object, `.hgrm` percentile files, an SVG
//! latency chart.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Instant;

use hdrhistogram::Histogram;
use serde_json::{Value, json};

use crate::bench::broker_share::AckBuckets;
use crate::bench::machine::MachineCpu;
use crate::bench::workers::WorkerResult;
use crate::bench::{BenchArgs, Shared, histogram};

/// Throughput of one side of the run.
pub struct Side {
    /// Messages measured: after the warm-up.
    pub messages: u64,
    /// Messages in all, the warm-up's included.
    pub messages_total: u64,
    pub payload_bytes: u64,
    pub seconds: f64,
    pub latency_ns: Histogram<u64>,
}

impl Side {
    fn merge(results: &[WorkerResult], messages_total: u64) -> Side {
        let mut latency_ns = histogram();
        let (mut messages, mut payload_bytes) = (0, 0);
        let mut window: Option<(Instant, Instant)> = None;
        for r in results {
            latency_ns.add(&r.latency_ns).expect("same bounds");
            messages += r.messages;
            payload_bytes += r.payload_bytes;
            if let Some((a, b)) = r.window {
                window = Some(match window {
                    None => (a, b),
                    Some((x, y)) => (x.min(a), y.max(b)),
                });
            }
        }
        let seconds = window.map_or(0.0, |(a, b)| b.duration_since(a).as_secs_f64());
        Side {
            messages,
            messages_total,
            payload_bytes,
            seconds,
            latency_ns,
        }
    }

    pub fn msgs_per_s(&self) -> f64 {
        if self.seconds > 0.0 {
            self.messages as f64 / self.seconds
        } else {
            0.0
        }
    }

    pub fn mb_per_s(&self) -> f64 {
        if self.seconds > 0.0 {
            self.payload_bytes as f64 / self.seconds / 1e6
        } else {
            0.0
        }
    }
}

pub struct Report {
    pub produce: Side,
    pub consume: Side,
    pub config: Value,
    /// The broker's own ack times over the measured window (`--broker-metrics`), or why
    /// they could not be read.
    pub broker_ack: Option<Result<AckBuckets, String>>,
    /// The machine's CPU time over the measured window, steal above all, or why it could
    /// not be read.
    pub machine_cpu: Option<Result<MachineCpu, String>>,
}

/// Steal above this share of the window's CPU time is called out beside the latencies: a
/// stolen vCPU stalls for a host's time slice, milliseconds (docs/LATENCY.md (n)).
const STEAL_SHARE_NOTED: f64 = 0.005;

const PERCENTILES: [(&str, f64); 5] = [
    ("p50", 50.0),
    ("p90", 90.0),
    ("p99", 99.0),
    ("p999", 99.9),
    ("p9999", 99.99),
];

/// The broker's share, with the client's percentiles but the extremes (its buckets cannot
/// tell them).
fn broker_percentiles_us(buckets: &AckBuckets) -> Value {
    let mut map = serde_json::Map::new();
    map.insert("count".into(), json!(buckets.count()));
    for (name, q) in &PERCENTILES[..4] {
        map.insert((*name).into(), json!(buckets.quantile_us(q / 100.0)));
    }
    Value::Object(map)
}

fn percentiles_us(h: &Histogram<u64>) -> Value {
    let mut map = serde_json::Map::new();
    for (name, q) in PERCENTILES {
        map.insert(name.into(), json!(h.value_at_percentile(q) as f64 / 1000.0));
    }
    map.insert("max".into(), json!(h.max() as f64 / 1000.0));
    Value::Object(map)
}

impl Report {
    pub fn build(
        shared: &Shared,
        producers: &[WorkerResult],
        consumers: &[WorkerResult],
    ) -> Report {
        let args = &shared.args;
        Report {
            produce: Side::merge(producers, shared.produced.load(Ordering::Relaxed)),
            consume: Side::merge(consumers, shared.consumed.load(Ordering::Relaxed)),
            config: json!({
                "broker": shared.broker.to_string(),
                "protocol": args.protocol.name(),
                "producers": args.producers,
                "consumers": args.consumers,
                "topics": args.topics,
                "partitions": args.partitions,
                "size": args.size,
                "batch": args.batch,
                "linger_ms": args.linger_ms,
                "in_flight": args.in_flight,
                "rate": args.rate,
                "count": args.count,
                "duration": args.duration,
                "warmup": args.warmup,
                "from": args.from,
                "shard_aware": args.shard_aware,
                "client": format!("{:?}", args.client).to_lowercase(),
                "threads": args.threads,
            }),
            broker_ack: None,
            machine_cpu: None,
        }
    }

    pub fn to_json(&self) -> Value {
        json!({
            "produce": {
                "msgs_per_s": self.produce.msgs_per_s(),
                "mb_per_s": self.produce.mb_per_s(),
                "messages": self.produce.messages,
                "messages_total": self.produce.messages_total,
                "payload_bytes": self.produce.payload_bytes,
                "seconds": self.produce.seconds,
                "ack_latency_us": percentiles_us(&self.produce.latency_ns),
            },
            "consume": {
                "msgs_per_s": self.consume.msgs_per_s(),
                "mb_per_s": self.consume.mb_per_s(),
                "messages": self.consume.messages,
                "messages_total": self.consume.messages_total,
                "payload_bytes": self.consume.payload_bytes,
                "seconds": self.consume.seconds,
            },
            "end_to_end_latency_us": percentiles_us(&self.consume.latency_ns),
            "broker_ack_latency_us": match &self.broker_ack {
                None => Value::Null,
                Some(Ok(buckets)) => broker_percentiles_us(buckets),
                Some(Err(error)) => json!({ "error": error }),
            },
            "machine_cpu": match &self.machine_cpu {
                None => Value::Null,
                Some(Ok(cpu)) => json!({
                    "steal_ms": cpu.steal_ms(),
                    "steal_share": cpu.steal_share(),
                    "iowait_ms": cpu.iowait_ms(),
                    "busy_ms": cpu.busy_ms(),
                    "busy_share": cpu.busy_share(),
                }),
                Some(Err(error)) => json!({ "error": error }),
            },
            "config": self.config,
        })
    }

    pub fn print(&self, args: &BenchArgs) {
        if args.json {
            println!("{}", self.to_json());
            return;
        }
        let mut out = String::new();
        let line = |out: &mut String, name: &str, side: &Side| {
            let _ = writeln!(
                out,
                "{name:<9} {:>12.0} msgs/s {:>9.1} MB/s  ({} msgs measured in {:.2} s; {} in all)",
                side.msgs_per_s(),
                side.mb_per_s(),
                side.messages,
                side.seconds,
                side.messages_total
            );
        };
        let _ = writeln!(
            out,
            "protocol {} (client {})",
            args.protocol.name(),
            format!("{:?}", args.client).to_lowercase()
        );
        if args.warmup > 0.0 {
            let _ = writeln!(
                out,
                "(the first {} s are warm-up: their messages count in all, not in the rates and latencies)",
                args.warmup
            );
        }
        line(&mut out, "produce", &self.produce);
        line(&mut out, "consume", &self.consume);
        let _ = writeln!(
            out,
            "{:<22} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "latency (us)", "p50", "p90", "p99", "p99.9", "p99.99", "max"
        );
        for (name, h) in [
            ("produce ack", &self.produce.latency_ns),
            ("end to end", &self.consume.latency_ns),
        ] {
            if h.is_empty() {
                continue;
            }
            let _ = write!(out, "{name:<22}");
            for (_, q) in PERCENTILES {
                let _ = write!(out, " {:>9.1}", h.value_at_percentile(q) as f64 / 1000.0);
            }
            let _ = writeln!(out, " {:>9.1}", h.max() as f64 / 1000.0);
        }
        match &self.broker_ack {
            None => {}
            Some(Ok(buckets)) if buckets.count() > 0 => {
                let _ = write!(out, "{:<22}", "broker's share of ack");
                for (_, q) in &PERCENTILES[..4] {
                    let us = buckets.quantile_us(q / 100.0).unwrap_or(0.0);
                    let _ = write!(out, " {us:>9.1}");
                }
                let _ = writeln!(
                    out,
                    "  (its metrics, {} acks; bucket estimates)",
                    buckets.count()
                );
            }
            Some(Ok(_)) => {
                let _ = writeln!(out, "broker's share of ack: no acks counted in the window");
            }
            Some(Err(error)) => {
                let _ = writeln!(out, "broker's share of ack: unavailable: {error}");
            }
        }
        match &self.machine_cpu {
            None => {}
            Some(Ok(cpu)) => {
                let _ = writeln!(
                    out,
                    "machine CPU in the window: busy {:.0}%, iowait {:.0} ms, steal {:.0} ms ({:.1}%){}",
                    cpu.busy_share() * 100.0,
                    cpu.iowait_ms(),
                    cpu.steal_ms(),
                    cpu.steal_share() * 100.0,
                    if cpu.steal_share() >= STEAL_SHARE_NOTED {
                        ": the hypervisor held this VM's CPUs, and the tails include it"
                    } else {
                        ""
                    }
                );
            }
            Some(Err(error)) => {
                let _ = writeln!(out, "machine CPU in the window: unavailable: {error}");
            }
        }
        print!("{out}");
    }

    /// Writes `<label>-ack.hgrm`, `<label>-e2e.hgrm`, `<label>.svg` and `<label>.json`.
    pub fn write_files(&self, dir: &Path, label: &str) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        for (suffix, h) in [
            ("ack", &self.produce.latency_ns),
            ("e2e", &self.consume.latency_ns),
        ] {
            if !h.is_empty() {
                std::fs::write(dir.join(format!("{label}-{suffix}.hgrm")), hgrm(h))?;
            }
        }
        std::fs::write(
            dir.join(format!("{label}.json")),
            self.to_json().to_string(),
        )?;
        chart(
            &dir.join(format!("{label}.svg")),
            label,
            &[
                ("produce ack", &self.produce.latency_ns),
                ("end to end", &self.consume.latency_ns),
            ],
        )
        .map_err(std::io::Error::other)
    }
}

/// HdrHistogram's percentile-distribution text format (values in microseconds);
/// `TotalCount` is the running total of values at or below each line's value.
pub fn hgrm(h: &Histogram<u64>) -> String {
    let mut out = String::from("       Value     Percentile TotalCount 1/(1-Percentile)\n\n");
    let mut total = 0u64;
    for v in h.iter_quantiles(1) {
        total += v.count_since_last_iteration();
        let q = v.quantile_iterated_to();
        let inverse = if q < 1.0 {
            format!("{:.2}", 1.0 / (1.0 - q))
        } else {
            "inf".into()
        };
        let _ = writeln!(
            out,
            "{:12.3} {:14.12} {:10} {:>14}",
            v.value_iterated_to() as f64 / 1000.0,
            q,
            total,
            inverse
        );
    }
    let _ = writeln!(
        out,
        "#[Mean    = {:12.3}, StdDeviation   = {:12.3}]\n#[Max     = {:12.3}, Total count    = {:12}]",
        h.mean() / 1000.0,
        h.stdev() / 1000.0,
        h.max() as f64 / 1000.0,
        h.len()
    );
    out
}

/// Latency by percentile, on the usual log scale of 1/(1-percentile).
fn chart(path: &Path, title: &str, series: &[(&str, &Histogram<u64>)]) -> Result<(), String> {
    use plotters::prelude::*;
    let points: Vec<(&str, Vec<(f64, f64)>)> = series
        .iter()
        .filter(|(_, h)| !h.is_empty())
        .map(|(name, h)| {
            let pts = h
                .iter_quantiles(1)
                .filter(|v| v.quantile_iterated_to() < 0.999_999)
                .map(|v| {
                    (
                        1.0 / (1.0 - v.quantile_iterated_to()),
                        v.value_iterated_to() as f64 / 1000.0,
                    )
                })
                .collect();
            (*name, pts)
        })
        .collect();
    let y_max = points
        .iter()
        .flat_map(|(_, p)| p.iter().map(|q| q.1))
        .fold(1.0, f64::max)
        * 1.1;
    let root = SVGBackend::new(path, (900, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("{title}: latency by percentile"),
            ("sans-serif", 20),
        )
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((1.0f64..1_000_000.0).log_scale(), 0.0..y_max)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("percentile (1/(1-p): 10 = p90, 100 = p99, 1000 = p99.9)")
        .y_desc("latency (us)")
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, (name, pts)) in points.into_iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(pts, color.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values 1..=1000 us: each line's TotalCount is how many are at or below its value,
    /// so it grows and ends at the histogram's count.
    #[test]
    fn hgrm_total_count_is_the_running_total() {
        let mut h = histogram();
        for us in 1..=1000u64 {
            h.record(us * 1000).unwrap();
        }
        let text = hgrm(&h);
        let rows: Vec<(f64, u64)> = text
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.contains("Value"))
            .map(|l| {
                let cells: Vec<&str> = l.split_whitespace().collect();
                (cells[0].parse().unwrap(), cells[2].parse().unwrap())
            })
            .collect();
        assert!(rows.len() > 10, "{text}");
        assert!(rows.windows(2).all(|w| w[0].1 <= w[1].1), "{text}");
        assert_eq!(rows.last().unwrap().1, 1000, "{text}");
        // At the median line, about half the values are at or below it.
        let (value, count) = rows.iter().find(|(_, c)| *c >= 500).unwrap();
        assert!((*value - *count as f64).abs() <= 2.0, "{value} us: {count}");
        assert!(text.contains("Total count    =         1000"), "{text}");
    }
}
