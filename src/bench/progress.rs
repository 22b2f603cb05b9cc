//! The bench's live line on a terminal: elapsed time, a bar of the messages (`--count`) or
//! of the time (`--duration`), and the produce and consume rates over the last second.
//!
//! The line fits the terminal: its width comes from the terminal, else `$COLUMNS` (a
//! terminal that reports no size, as some ptys do, would otherwise be taken for 80 columns
//! and cut the consume rate off), else 80. The rates always show: their wording stays as
//! long as it can (the bar goes for it), then shortens, then loses the MB/s, until the line
//! fits; the bar shows whenever it fits beside them.

use std::cell::Cell;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle, TermLike};

use crate::bench::{BenchArgs, Shared};

pub struct Progress {
    bar: Option<ProgressBar>,
    /// Whether the bar is shown (it is dropped on a narrow terminal).
    with_bar: Cell<Option<bool>>,
    /// Counts at the last rate sample: when, produced, consumed.
    last: Cell<(Instant, u64, u64)>,
    /// Messages per second produced and consumed over the last sample.
    rates: Cell<(f64, f64)>,
}

/// How often the rates shown are recomputed.
const RATE_SAMPLE: Duration = Duration::from_secs(1);
/// Columns assumed when neither the terminal nor `$COLUMNS` tells.
const DEFAULT_COLUMNS: u16 = 80;
/// The bar's width, when it is shown.
const BAR_COLUMNS: usize = 20;

/// Columns of the terminal on stderr, else `$COLUMNS`, else 80.
pub fn terminal_columns() -> u16 {
    let term = console::Term::stderr();
    term.size_checked()
        .map(|(_, columns)| columns)
        .or_else(|| {
            std::env::var("COLUMNS")
                .ok()?
                .trim()
                .parse()
                .ok()
                .filter(|&c| c > 0)
        })
        .unwrap_or(DEFAULT_COLUMNS)
}

/// stderr as indicatif's terminal, with [`terminal_columns`] as its width (indicatif's own
/// falls back to 80 columns when the terminal reports none, and cuts the line there).
#[derive(Debug)]
struct Stderr(console::Term);

impl TermLike for Stderr {
    fn width(&self) -> u16 {
        terminal_columns()
    }
    fn height(&self) -> u16 {
        self.0.size_checked().map_or(24, |(rows, _)| rows)
    }
    fn move_cursor_up(&self, n: usize) -> std::io::Result<()> {
        self.0.move_cursor_up(n)
    }
    fn move_cursor_down(&self, n: usize) -> std::io::Result<()> {
        self.0.move_cursor_down(n)
    }
    fn move_cursor_right(&self, n: usize) -> std::io::Result<()> {
        self.0.move_cursor_right(n)
    }
    fn move_cursor_left(&self, n: usize) -> std::io::Result<()> {
        self.0.move_cursor_left(n)
    }
    fn write_line(&self, s: &str) -> std::io::Result<()> {
        self.0.write_line(s)
    }
    fn write_str(&self, s: &str) -> std::io::Result<()> {
        self.0.write_str(s)
    }
    fn clear_line(&self) -> std::io::Result<()> {
        self.0.clear_line()
    }
    fn flush(&self) -> std::io::Result<()> {
        self.0.flush()
    }
}

impl Progress {
    /// The live line on stderr, when it is a terminal (and not `TERM=dumb`) and neither
    /// `--quiet` nor `--json` is given. `--count` or `--duration` must be set.
    pub fn new(args: &BenchArgs) -> Progress {
        let shown = !args.quiet
            && !args.json
            && std::io::stderr().is_terminal()
            && std::env::var("TERM").map_or(true, |t| t != "dumb");
        let bar = shown.then(|| {
            let length = match (args.count, args.duration) {
                (Some(count), _) => count,
                // In tenths of a second.
                (None, seconds) => (seconds.unwrap_or(0.0) * 10.0).ceil() as u64,
            };
            let target = ProgressDrawTarget::term_like_with_hz(
                Box::new(Stderr(console::Term::stderr())),
                20,
            );
            ProgressBar::with_draw_target(Some(length), target)
        });
        Progress {
            bar,
            with_bar: Cell::new(None),
            last: Cell::new((Instant::now(), 0, 0)),
            rates: Cell::new((0.0, 0.0)),
        }
    }

    pub fn tick(&self, shared: &Shared) {
        let Some(bar) = &self.bar else {
            return;
        };
        let args = &shared.args;
        let produced = shared.produced.load(std::sync::atomic::Ordering::Relaxed);
        let consumed = shared.consumed.load(std::sync::atomic::Ordering::Relaxed);
        let (at, produced_then, consumed_then) = self.last.get();
        let now = Instant::now();
        let since = now.duration_since(at);
        if since >= RATE_SAMPLE {
            let per_s = |n: u64| n as f64 / since.as_secs_f64();
            self.rates.set((
                per_s(produced.saturating_sub(produced_then)),
                per_s(consumed.saturating_sub(consumed_then)),
            ));
            self.last.set((now, produced, consumed));
        }
        let prefix = match (args.count, args.duration) {
            (Some(count), _) => {
                let done = if args.producers > 0 {
                    produced
                } else {
                    consumed
                };
                bar.set_position(done);
                format!("{done}/{count} msgs")
            }
            (None, seconds) => {
                let seconds = seconds.unwrap_or(0.0);
                let elapsed = shared.start.elapsed().as_secs_f64();
                bar.set_position((elapsed.min(seconds) * 10.0) as u64);
                format!("{:.0} s left", (seconds - elapsed).max(0.0).ceil())
            }
        };
        let (with_bar, message) = fit(
            usize::from(terminal_columns()),
            &prefix,
            &rate_texts(args, self.rates.get()),
        );
        if self.with_bar.replace(Some(with_bar)) != Some(with_bar) {
            let template = if with_bar {
                "{spinner} [{elapsed_precise}] {bar:20} {prefix}  {msg}"
            } else {
                "{spinner} [{elapsed_precise}] {prefix}  {msg}"
            };
            bar.set_style(ProgressStyle::with_template(template).expect("valid template"));
        }
        bar.set_prefix(prefix);
        bar.set_message(message);
    }

    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// The rates, from the longest wording to the shortest.
fn rate_texts(args: &BenchArgs, (produce, consume): (f64, f64)) -> [String; 3] {
    let mb = |rate: f64| rate * args.size as f64 / 1e6;
    let sides = |long: bool, bytes: bool| {
        let side = |name: &str, short: &str, rate: f64| match (long, bytes) {
            (true, _) => format!("{name} {} msg/s {:.1} MB/s", human(rate), mb(rate)),
            (false, true) => format!("{short} {}/s {:.1}MB/s", human(rate), mb(rate)),
            (false, false) => format!("{short} {}/s", human(rate)),
        };
        let mut parts = Vec::new();
        if args.producers > 0 {
            parts.push(side("produce", "prod", produce));
        }
        if args.consumers > 0 {
            parts.push(side("consume", "cons", consume));
        }
        parts.join(if long { " | " } else { " " })
    };
    [sides(true, true), sides(false, true), sides(false, false)]
}

/// Whether the bar is shown, and the rates' wording, so that the line fits `columns` (one
/// column is left free: a line that fills the last column wraps on some terminals). The
/// rates win over the bar.
fn fit(columns: usize, prefix: &str, rates: &[String; 3]) -> (bool, String) {
    // "⠁ [00:00:05] " + prefix + "  " + rates, and the bar with its space.
    let head = 2 + 11 + prefix.chars().count() + 2;
    let room = columns.saturating_sub(1);
    for text in rates {
        for with_bar in [true, false] {
            let bar = if with_bar { BAR_COLUMNS + 1 } else { 0 };
            if head + bar + text.chars().count() <= room {
                return (with_bar, text.clone());
            }
        }
    }
    (false, rates[2].clone())
}

/// A rate in few characters: 950, 12.3k, 1.25M.
fn human(rate: f64) -> String {
    if rate >= 1e6 {
        format!("{:.2}M", rate / 1e6)
    } else if rate >= 1e3 {
        format!("{:.1}k", rate / 1e3)
    } else {
        format!("{rate:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rates_win_over_the_bar_and_the_wording_shortens() {
        let rates = [
            "produce 1.25M msg/s 125.0 MB/s | consume 1.25M msg/s 125.0 MB/s".to_string(),
            "prod 1.25M/s 125.0MB/s cons 1.25M/s 125.0MB/s".to_string(),
            "prod 1.25M/s cons 1.25M/s".to_string(),
        ];
        let prefix = "10 s left";
        let line = |(bar, text): (bool, String)| {
            2 + 11 + prefix.len() + 2 + if bar { 21 } else { 0 } + text.len()
        };
        assert_eq!(fit(200, prefix, &rates), (true, rates[0].clone()));
        let at_80 = fit(80, prefix, &rates);
        assert_eq!(at_80, (false, rates[1].clone()));
        assert!(line(at_80) < 80);
        let at_60 = fit(60, prefix, &rates);
        assert_eq!(at_60, (false, rates[2].clone()));
        assert!(line(at_60) < 60);
        assert_eq!(fit(20, prefix, &rates), (false, rates[2].clone()));
    }
}
