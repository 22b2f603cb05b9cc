//! Wall-clock time as the broker stores it: nanoseconds since the Unix epoch.
//!
//! Batch timestamps, retention ages, offset commit times and the names of quarantine and
//! trash directories all use it, so it lives beside them all rather than in any one.

use std::time::{SystemTime, UNIX_EPOCH};

/// Nanoseconds since the epoch (0 if the clock is before it, `u64::MAX` past year 2554).
pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}
