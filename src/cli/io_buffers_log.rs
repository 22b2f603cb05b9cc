//! glommio logs a warning, its error pretty-printed over several lines, on every core whose
//! io_uring buffer registration fails (the locked-memory limit is under what it registers):
//! on N cores, N multi-line warnings that do not say what to do. They are dropped here, and
//! one line says it once, with what to raise, unless `serve`'s start check
//! (`serve::check_memlock`) already did.

use std::sync::atomic::{AtomicBool, Ordering};

use tracing::subscriber::Interest;
use tracing::{Level, Metadata};
use tracing_subscriber::layer::{Context, Filter};

/// Whether the locked-memory line was written (by `serve`'s check or by this filter).
pub static WARNED: AtomicBool = AtomicBool::new(false);

/// Where glommio's warnings come from: its only ones are the buffer registration's.
const GLOMMIO_TARGET: &str = "glommio::sys::uring";

/// What to raise, in the start check's words.
pub const RAISE: &str = "raise it with `ulimit -l unlimited` in the shell or `LimitMEMLOCK=infinity` in the systemd unit";

/// Drops glommio's buffer registration warnings, and says it once in one line.
pub struct GlommioBuffers;

impl<S> Filter<S> for GlommioBuffers {
    fn enabled(&self, meta: &Metadata<'_>, _: &Context<'_, S>) -> bool {
        if meta.target() != GLOMMIO_TARGET || *meta.level() != Level::WARN {
            return true;
        }
        if !WARNED.swap(true, Ordering::AcqRel) {
            // An event logged from inside a filter is dropped: from a thread of its own.
            std::thread::spawn(|| {
                tracing::warn!(
                    "io_uring could not register its buffers (the locked-memory limit is under what they need), so I/O takes a slower path: {RAISE}"
                );
            });
        }
        false
    }

    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> Interest {
        // glommio logs through the `log` crate: its records share the bridge's call sites
        // (target "log"), so their real target is known only per event.
        if meta.target() == GLOMMIO_TARGET || meta.target() == "log" {
            Interest::sometimes()
        } else {
            Interest::always()
        }
    }
}
