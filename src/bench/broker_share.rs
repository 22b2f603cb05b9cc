//! The broker's own share of a produce ack, from its metrics: the bench scrapes
//! `pagurus_produce_ack_duration_seconds` when the measured window opens and when it ends,
//! and estimates percentiles of the difference. Set against the ack latency the client
//! measures, it tells the broker's time from the client's and the network's.
//!
//! The estimates come from histogram buckets, as Prometheus' `histogram_quantile` does:
//! linear within the bucket that holds the quantile, so they are as fine as the buckets
//! (25 µs steps up to 200 µs, 50 µs to 350 µs, coarser past that).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use super::window::AtOpen;

/// The histogram the broker keeps (summed over its cores).
const FAMILY: &str = "pagurus_produce_ack_duration_seconds";
/// A scrape of every family of a broker with thousands of partitions stays well under this.
const SCRAPE_BYTES_MAX: u64 = 64 << 20;
/// How long one scrape may take, to connect and to read.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);

/// Cumulative counts per upper bound (seconds; the last is `+Inf`), summed over cores.
#[derive(Debug, Clone, PartialEq)]
pub struct AckBuckets {
    pub bounds_s: Vec<f64>,
    pub cumulative: Vec<u64>,
}

impl AckBuckets {
    /// What was counted between `earlier` and `self`.
    pub fn since(&self, earlier: &AckBuckets) -> Result<AckBuckets, String> {
        if self.bounds_s != earlier.bounds_s {
            return Err("the broker's buckets changed between scrapes (restarted?)".into());
        }
        let cumulative = self
            .cumulative
            .iter()
            .zip(&earlier.cumulative)
            .map(|(now, then)| now.checked_sub(*then))
            .collect::<Option<Vec<u64>>>()
            .ok_or("the broker's counts went down between scrapes (restarted?)")?;
        Ok(AckBuckets {
            bounds_s: self.bounds_s.clone(),
            cumulative,
        })
    }

    pub fn count(&self) -> u64 {
        self.cumulative.last().copied().unwrap_or(0)
    }

    /// The `q` quantile (0..=1) in microseconds, interpolated within its bucket; `None`
    /// when nothing was counted. A quantile in the `+Inf` bucket is reported as the
    /// largest finite bound.
    pub fn quantile_us(&self, q: f64) -> Option<f64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = q.clamp(0.0, 1.0) * total as f64;
        let mut lower_s = 0.0;
        let mut below = 0u64;
        for (&bound_s, &cumulative) in self.bounds_s.iter().zip(&self.cumulative) {
            if cumulative as f64 >= rank && cumulative > below {
                if bound_s.is_infinite() {
                    return Some(lower_s * 1e6);
                }
                let within = (rank - below as f64) / (cumulative - below) as f64;
                return Some((lower_s + (bound_s - lower_s) * within) * 1e6);
            }
            if bound_s.is_finite() {
                lower_s = bound_s;
            }
            below = cumulative;
        }
        Some(lower_s * 1e6)
    }
}

/// The broker's counts when the measured window opened.
pub struct Window {
    addr: String,
    start: AtOpen<Result<AckBuckets, String>>,
}

impl Window {
    pub fn open(addr: &str, opens: Instant) -> Window {
        let owned = addr.to_string();
        Window {
            addr: addr.to_string(),
            start: AtOpen::take(opens, move || scrape(&owned)),
        }
    }

    /// What the broker counted from the window's start until now.
    pub fn close(self) -> Result<AckBuckets, String> {
        let before = self.start.get()??;
        scrape(&self.addr)?.since(&before)
    }
}

/// Reads the ack histogram from a Prometheus text exposition, summed over its cores.
pub fn parse(text: &str) -> Result<AckBuckets, String> {
    let prefix = format!("{FAMILY}_bucket{{");
    let mut sums: Vec<(f64, u64)> = Vec::new();
    for line in text.lines().filter(|l| l.starts_with(&prefix)) {
        let bad = || format!("cannot read the metrics line {line:?}");
        let (labels, value) = line.rsplit_once(' ').ok_or_else(bad)?;
        let le = labels
            .split_once("le=\"")
            .and_then(|(_, rest)| rest.split_once('"'))
            .map(|(le, _)| le)
            .ok_or_else(bad)?;
        let bound_s = if le == "+Inf" {
            f64::INFINITY
        } else {
            le.parse::<f64>().map_err(|_| bad())?
        };
        let count = value.trim().parse::<u64>().map_err(|_| bad())?;
        match sums.iter_mut().find(|(b, _)| *b == bound_s) {
            Some((_, sum)) => *sum += count,
            None => sums.push((bound_s, count)),
        }
    }
    if sums.is_empty() {
        return Err(format!(
            "the broker's metrics have no {FAMILY} (an older broker?)"
        ));
    }
    sums.sort_by(|a, b| a.0.total_cmp(&b.0));
    Ok(AckBuckets {
        bounds_s: sums.iter().map(|(b, _)| *b).collect(),
        cumulative: sums.iter().map(|(_, c)| *c).collect(),
    })
}

/// Scrapes `http://ADDR/metrics` and reads the ack histogram from it.
pub fn scrape(addr: &str) -> Result<AckBuckets, String> {
    let socket: SocketAddr = addr
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve --broker-metrics {addr}: {e}"))?
        .next()
        .ok_or_else(|| format!("--broker-metrics {addr} resolves to no address"))?;
    let failed = |e: std::io::Error| format!("cannot scrape http://{addr}/metrics: {e}");
    let mut stream = TcpStream::connect_timeout(&socket, SCRAPE_TIMEOUT).map_err(failed)?;
    stream
        .set_read_timeout(Some(SCRAPE_TIMEOUT))
        .map_err(failed)?;
    stream
        .set_write_timeout(Some(SCRAPE_TIMEOUT))
        .map_err(failed)?;
    write!(
        stream,
        "GET /metrics HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .map_err(failed)?;
    let mut response = Vec::new();
    stream
        .take(SCRAPE_BYTES_MAX)
        .read_to_end(&mut response)
        .map_err(failed)?;
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("http://{addr}/metrics answered no HTTP response"))?;
    let status = head.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(format!("http://{addr}/metrics answered {status:?}"));
    }
    parse(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO_CORES: &str = "\
# TYPE pagurus_produce_ack_duration_seconds histogram
pagurus_produce_ack_duration_seconds_bucket{core=\"0\",le=\"0.0001\"} 10
pagurus_produce_ack_duration_seconds_bucket{core=\"0\",le=\"0.0002\"} 50
pagurus_produce_ack_duration_seconds_bucket{core=\"0\",le=\"+Inf\"} 60
pagurus_produce_ack_duration_seconds_sum{core=\"0\"} 0.01
pagurus_produce_ack_duration_seconds_count{core=\"0\"} 60
pagurus_produce_ack_duration_seconds_bucket{core=\"1\",le=\"0.0001\"} 0
pagurus_produce_ack_duration_seconds_bucket{core=\"1\",le=\"0.0002\"} 30
pagurus_produce_ack_duration_seconds_bucket{core=\"1\",le=\"+Inf\"} 40
pagurus_fsync_duration_seconds_bucket{core=\"0\",le=\"0.0001\"} 7
";

    #[test]
    fn sums_cores_and_ignores_other_families() {
        let buckets = parse(TWO_CORES).unwrap();
        assert_eq!(buckets.bounds_s, vec![0.0001, 0.0002, f64::INFINITY]);
        assert_eq!(buckets.cumulative, vec![10, 80, 100]);
    }

    #[test]
    fn quantiles_interpolate_within_their_bucket() {
        let buckets = parse(TWO_CORES).unwrap();
        // 10 at or below 100 us, 70 more up to 200 us, 20 above.
        assert!((buckets.quantile_us(0.05).unwrap() - 50.0).abs() < 1e-6);
        assert!((buckets.quantile_us(0.45).unwrap() - 150.0).abs() < 1e-6);
        // In the +Inf bucket: the largest finite bound.
        assert!((buckets.quantile_us(0.99).unwrap() - 200.0).abs() < 1e-6);
    }

    #[test]
    fn the_window_is_the_difference_of_two_scrapes() {
        let before = parse(TWO_CORES).unwrap();
        let after = AckBuckets {
            bounds_s: before.bounds_s.clone(),
            cumulative: vec![110, 180, 200],
        };
        let window = after.since(&before).unwrap();
        assert_eq!(window.cumulative, vec![100, 100, 100]);
        assert!(window.quantile_us(0.5).unwrap() <= 100.0);
        assert!(
            before.since(&after).is_err(),
            "counts that go down are refused"
        );
        let empty = before.since(&before).unwrap();
        assert_eq!(empty.quantile_us(0.5), None);
    }

    #[test]
    fn a_broker_without_the_family_is_a_clear_error() {
        let error = parse("pagurus_cores 2\n").unwrap_err();
        assert!(error.contains(FAMILY), "{error}");
    }
}
