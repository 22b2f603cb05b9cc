//! A single-threaded "something changed" signal for tasks on one executor.
//!
//! Waiters capture a generation number and sleep until it moves; `notify_all` bumps it and
//! wakes everyone, and each waiter re-checks its own condition. It allocates nothing per
//! wait in steady state (the waker list keeps its capacity), which keeps group-commit waits
//! off the allocator on the ingest path.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

#[derive(Default)]
pub struct Watch {
    generation: Cell<u64>,
    wakers: RefCell<Vec<Waker>>,
}

impl Watch {
    /// A future that completes at the next `notify_all` after this call.
    pub fn changed(&self) -> Changed<'_> {
        Changed {
            watch: self,
            generation: self.generation.get(),
        }
    }

    /// Wakes every waiter.
    pub fn notify_all(&self) {
        self.generation.set(self.generation.get().wrapping_add(1));
        // Take the wakers out first: waking may re-enter `changed` on this executor.
        let mut wakers = std::mem::take(&mut *self.wakers.borrow_mut());
        for waker in wakers.drain(..) {
            waker.wake();
        }
        // Give the (now empty) allocation back unless a waiter registered meanwhile.
        let mut slot = self.wakers.borrow_mut();
        if slot.is_empty() {
            *slot = wakers;
        }
    }

    pub fn waiters(&self) -> usize {
        self.wakers.borrow().len()
    }
}

pub struct Changed<'a> {
    watch: &'a Watch,
    generation: u64,
}

impl Future for Changed<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.watch.generation.get() != self.generation {
            return Poll::Ready(());
        }
        // No de-duplication: a waiter is polled again only after a wake, so a repeat entry
        // costs one spurious wake-up at most, where scanning for it would cost O(waiters).
        self.watch.wakers.borrow_mut().push(cx.waker().clone());
        Poll::Pending
    }
}
