//! The machine's CPU time over the measured window, from `/proc/stat`: above all *steal*,
//! the time a virtual CPU was ready to run while its hypervisor ran something else. A vCPU
//! stolen for 15-20 ms stalls every request its core holds, so a run with steal has tails
//! that no broker can avoid; the report gives it beside the latencies (docs/LATENCY.md (n)).
//! On bare metal steal stays 0.

use std::io::Read;
use std::time::Instant;

use super::window::AtOpen;

/// `/proc/stat` is a few KiB per CPU; this allows thousands of CPUs.
const PROC_STAT_BYTES_MAX: u64 = 4 << 20;

/// The aggregate `cpu` line of `/proc/stat`, in clock ticks, summed over all CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuTicks {
    /// user, nice, system, irq and softirq (guest time is inside user).
    pub busy: u64,
    pub idle: u64,
    pub iowait: u64,
    pub steal: u64,
}

impl CpuTicks {
    pub fn total(&self) -> u64 {
        self.busy + self.idle + self.iowait + self.steal
    }

    /// What was counted between `earlier` and `self`.
    pub fn since(&self, earlier: &CpuTicks) -> Result<CpuTicks, String> {
        let less = |now: u64, then: u64| {
            now.checked_sub(then)
                .ok_or("the machine's CPU counters went down between two reads")
        };
        Ok(CpuTicks {
            busy: less(self.busy, earlier.busy)?,
            idle: less(self.idle, earlier.idle)?,
            iowait: less(self.iowait, earlier.iowait)?,
            steal: less(self.steal, earlier.steal)?,
        })
    }
}

/// Reads the `cpu` line of a `/proc/stat` text: `cpu user nice system idle iowait irq
/// softirq steal ...` (kernels before 2.6.11 lack steal: it reads as 0).
pub fn parse(text: &str) -> Result<CpuTicks, String> {
    let line = text
        .lines()
        .find(|l| l.starts_with("cpu "))
        .ok_or("/proc/stat has no aggregate cpu line")?;
    let fields = line
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse::<u64>())
        .collect::<Result<Vec<u64>, _>>()
        .map_err(|_| format!("cannot read the /proc/stat line {line:?}"))?;
    if fields.len() < 7 {
        return Err(format!("the /proc/stat line {line:?} has too few fields"));
    }
    let field = |i: usize| fields.get(i).copied().unwrap_or(0);
    Ok(CpuTicks {
        busy: field(0) + field(1) + field(2) + field(5) + field(6),
        idle: field(3),
        iowait: field(4),
        steal: field(7),
    })
}

pub fn read() -> Result<CpuTicks, String> {
    let mut text = String::new();
    std::fs::File::open("/proc/stat")
        .and_then(|f| f.take(PROC_STAT_BYTES_MAX).read_to_string(&mut text))
        .map_err(|e| format!("cannot read /proc/stat: {e}"))?;
    parse(&text)
}

/// The machine's CPU time over a window, with what it takes to say it in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MachineCpu {
    pub ticks: CpuTicks,
    pub ticks_per_s: u64,
}

impl MachineCpu {
    fn ms(&self, ticks: u64) -> f64 {
        ticks as f64 * 1000.0 / self.ticks_per_s.max(1) as f64
    }

    pub fn steal_ms(&self) -> f64 {
        self.ms(self.ticks.steal)
    }

    pub fn iowait_ms(&self) -> f64 {
        self.ms(self.ticks.iowait)
    }

    pub fn busy_ms(&self) -> f64 {
        self.ms(self.ticks.busy)
    }

    /// Steal as a share of all the CPU time of the window (all CPUs), 0..=1.
    pub fn steal_share(&self) -> f64 {
        self.ticks.steal as f64 / self.ticks.total().max(1) as f64
    }

    pub fn busy_share(&self) -> f64 {
        self.ticks.busy as f64 / self.ticks.total().max(1) as f64
    }
}

/// The clock ticks per second of `/proc/stat` (`USER_HZ`; 100 on every Linux the broker
/// runs on, asked for all the same).
fn ticks_per_s() -> u64 {
    // SAFETY: sysconf reads a constant of the system and has no preconditions.
    let ticks = unsafe { nix::libc::sysconf(nix::libc::_SC_CLK_TCK) };
    u64::try_from(ticks).ok().filter(|&t| t > 0).unwrap_or(100)
}

/// The machine's counters when the measured window opened.
pub struct Window {
    start: AtOpen<Result<CpuTicks, String>>,
}

impl Window {
    pub fn open(opens: Instant) -> Window {
        Window {
            start: AtOpen::take(opens, read),
        }
    }

    /// The machine's CPU time from the window's start until now.
    pub fn close(self) -> Result<MachineCpu, String> {
        let before = self.start.get()??;
        Ok(MachineCpu {
            ticks: read()?.since(&before)?,
            ticks_per_s: ticks_per_s(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "\
cpu  1266164 0 151604 1098524 118689 0 19974 14216 0 0
cpu0 633082 0 75802 549262 59344 0 9987 7108 0 0
intr 123 0 0
";

    #[test]
    fn reads_the_aggregate_line_only() {
        let ticks = parse(STAT).unwrap();
        assert_eq!(ticks.busy, 1_266_164 + 151_604 + 19_974);
        assert_eq!(ticks.idle, 1_098_524);
        assert_eq!(ticks.iowait, 118_689);
        assert_eq!(ticks.steal, 14_216);
    }

    #[test]
    fn a_window_is_the_difference_and_says_it_in_ms() {
        let before = parse(STAT).unwrap();
        let after = parse("cpu  1266264 0 151604 1098624 118689 0 19974 14266 0 0\n").unwrap();
        let window = MachineCpu {
            ticks: after.since(&before).unwrap(),
            ticks_per_s: 100,
        };
        assert_eq!(window.ticks.total(), 250);
        assert_eq!(window.steal_ms(), 500.0);
        assert_eq!(window.busy_ms(), 1000.0);
        assert!((window.steal_share() - 0.2).abs() < 1e-9);
        assert!(
            before.since(&after).is_err(),
            "counters that go down are refused"
        );
    }

    #[test]
    fn bad_lines_are_clear_errors() {
        assert!(
            parse("intr 1 2\n")
                .unwrap_err()
                .contains("no aggregate cpu line")
        );
        assert!(
            parse("cpu  1 2 x 4 5 6 7\n")
                .unwrap_err()
                .contains("cannot read")
        );
        assert!(
            parse("cpu  1 2 3\n")
                .unwrap_err()
                .contains("too few fields")
        );
        // A kernel without the steal field reads it as none.
        assert_eq!(parse("cpu  1 2 3 4 5 6 7\n").unwrap().steal, 0);
    }

    #[test]
    fn this_machine_counts_time() {
        let before = read().unwrap();
        let spin_until = Instant::now() + std::time::Duration::from_millis(50);
        while Instant::now() < spin_until {}
        let after = read().unwrap();
        let window = after.since(&before).unwrap();
        assert!(window.total() > 0, "50 ms of spinning counted no tick");
        assert!(window.busy > 0, "50 ms of spinning counted no busy tick");
    }
}
