//! A sample taken when the measured window opens: at once when it is already open (no
//! warm-up), else on a thread of its own that sleeps until then, so the workers start on
//! time. The broker's counts ([`super::broker_share`]) and the machine's CPU times
//! ([`super::machine`]) are each the difference of such a sample and one at the end.

use std::thread::JoinHandle;
use std::time::Instant;

pub enum AtOpen<T> {
    Taken(T),
    Taking(JoinHandle<T>),
}

impl<T: Send + 'static> AtOpen<T> {
    pub fn take(opens: Instant, sample: impl FnOnce() -> T + Send + 'static) -> AtOpen<T> {
        let wait = opens.saturating_duration_since(Instant::now());
        if wait.is_zero() {
            AtOpen::Taken(sample())
        } else {
            AtOpen::Taking(std::thread::spawn(move || {
                std::thread::sleep(wait);
                sample()
            }))
        }
    }

    /// The sample; `Err` only when its thread panicked.
    pub fn get(self) -> Result<T, String> {
        match self {
            AtOpen::Taken(sample) => Ok(sample),
            AtOpen::Taking(thread) => thread
                .join()
                .map_err(|_| "the thread sampling at the window's start panicked".into()),
        }
    }
}
