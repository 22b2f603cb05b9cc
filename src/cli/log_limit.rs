//! A limit on log lines per call site, so that a client repeating a bad request cannot fill
//! the disk with the broker's log (the disk that holds its data, as often as not).
//!
//! Each call site of a warning or an error (one `warn!` in the code, say "topic limit
//! reached") may write [`LINES_PER_WINDOW`] lines per [`WINDOW`]; the lines past that are
//! counted and dropped, and every [`SUMMARY_EVERY`] one line per call site reports how many
//! were dropped and where they come from. The refusals themselves are all still counted in
//! the metrics. Info lines and below are not limited: they tell what the broker did (a core
//! started or stopped, a topic was made), once per thing, and a line per core at start must
//! not be dropped on a machine with many cores.
//!
//! The summary cannot be logged from inside the filter (tracing drops events dispatched
//! while another is being dispatched), so a thread of its own writes it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracing::callsite::Identifier;
use tracing::{Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Filter};

/// Lines one call site may write per window.
pub const LINES_PER_WINDOW: u32 = 50;
/// The window those lines are counted over.
pub const WINDOW: Duration = Duration::from_secs(1);
/// How often the dropped lines are reported.
pub const SUMMARY_EVERY: Duration = Duration::from_secs(5);
/// Call sites tracked at most (the code has a few hundred; past this nothing is limited).
const CALL_SITES_MAX: usize = 4096;

struct CallSite {
    meta: &'static Metadata<'static>,
    window_started: Instant,
    in_window: u32,
    dropped: u64,
}

/// The per-call-site counts, shared by the filter and the summary thread.
#[derive(Clone, Default)]
pub struct LogLimit {
    sites: Arc<Mutex<HashMap<Identifier, CallSite>>>,
}

impl LogLimit {
    /// Whether a line from `meta` may be written now; counts it as dropped if not.
    fn admit(&self, meta: &'static Metadata<'static>, now: Instant) -> bool {
        let mut sites = self.sites.lock().unwrap_or_else(|e| e.into_inner());
        if sites.len() >= CALL_SITES_MAX && !sites.contains_key(&meta.callsite()) {
            return true;
        }
        let site = sites.entry(meta.callsite()).or_insert(CallSite {
            meta,
            window_started: now,
            in_window: 0,
            dropped: 0,
        });
        if now.duration_since(site.window_started) >= WINDOW {
            site.window_started = now;
            site.in_window = 0;
        }
        if site.in_window < LINES_PER_WINDOW {
            site.in_window += 1;
            true
        } else {
            site.dropped += 1;
            false
        }
    }

    /// Takes the dropped counts, each with the call site it is about.
    fn take_dropped(&self) -> Vec<(u64, &'static Metadata<'static>)> {
        let mut sites = self.sites.lock().unwrap_or_else(|e| e.into_inner());
        sites
            .values_mut()
            .filter(|site| site.dropped > 0)
            .map(|site| (std::mem::take(&mut site.dropped), site.meta))
            .collect()
    }

    /// Starts the thread that reports dropped lines every [`SUMMARY_EVERY`], for the life
    /// of the process.
    pub fn report_dropped(&self) {
        let limit = self.clone();
        let spawned = std::thread::Builder::new()
            .name(String::from("log-limit"))
            .spawn(move || {
                loop {
                    std::thread::sleep(SUMMARY_EVERY);
                    for (dropped, meta) in limit.take_dropped() {
                        tracing::warn!(
                            dropped,
                            level = %meta.level(),
                            target = meta.target(),
                            at = %format!("{}:{}", meta.file().unwrap_or("?"), meta.line().unwrap_or(0)),
                            "log lines dropped: more than {LINES_PER_WINDOW} warnings a second from one place in the code"
                        );
                    }
                }
            });
        if let Err(error) = spawned {
            tracing::warn!(%error, "cannot start the log-limit thread; dropped lines go unreported");
        }
    }
}

impl<S: Subscriber> Filter<S> for LogLimit {
    fn enabled(&self, _meta: &Metadata<'_>, _cx: &Context<'_, S>) -> bool {
        true
    }

    fn event_enabled(&self, event: &tracing::Event<'_>, _cx: &Context<'_, S>) -> bool {
        let meta = event.metadata();
        // More verbose levels compare greater.
        *meta.level() > tracing::Level::WARN || self.admit(meta, Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;

    use super::*;

    /// Counts the events that reach it.
    struct Count(Arc<AtomicUsize>);

    impl<S: Subscriber> Layer<S> for Count {
        fn on_event(&self, _event: &tracing::Event<'_>, _cx: Context<'_, S>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn a_call_site_writes_its_share_per_window_and_the_rest_is_counted() {
        let limit = LogLimit::default();
        let written = Arc::new(AtomicUsize::new(0));
        let subscriber = tracing_subscriber::registry()
            .with(Count(Arc::clone(&written)).with_filter(limit.clone()));
        tracing::subscriber::with_default(subscriber, || {
            for i in 0..100 {
                tracing::warn!(i, "the same bad request again");
            }
            tracing::warn!("another place in the code");
            for i in 0..100 {
                tracing::info!(i, "what the broker did, once per thing");
            }
        });
        // Unless the loop straddled a window, which would let a second share through.
        let written = written.load(Ordering::Relaxed);
        let warnings = written - 100;
        assert!(
            warnings == LINES_PER_WINDOW as usize + 1
                || warnings == 2 * LINES_PER_WINDOW as usize + 1,
            "{written} lines written"
        );
        let dropped = limit.take_dropped();
        assert_eq!(dropped.len(), 1, "one call site dropped lines");
        assert_eq!(dropped[0].0 as usize, 100 + 1 - warnings);
        assert!(
            dropped[0]
                .1
                .file()
                .is_some_and(|f| f.ends_with("log_limit.rs"))
        );
        assert!(limit.take_dropped().is_empty(), "taken once");
    }
}
