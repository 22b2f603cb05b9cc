//! A single-threaded "something changed" signal for tasks on one executor.
//!
//! Waiters capture a generation number and sleep until it moves; `notify_all` bumps it and
//! wakes everyone, and each waiter re-checks its own condition.
//!
//! Every waiting [`Changed`] future owns one slot for its waker and gives it back when it
//! is dropped, also when it is dropped unfinished (a long-poll whose timer fired first, a
//! read that raced the shutdown signal). Without that, each abandoned wait would leave a
//! waker clone behind; glommio counts a task's wakers in an `i16`, and a connection that
//! raced shutdown 32,768 times would crash the executor. Slots are reused, so a wait
//! allocates nothing in steady state, which keeps group-commit waits off the allocator.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

#[derive(Default)]
pub struct Watch {
    generation: Cell<u64>,
    slots: RefCell<Slots>,
}

#[derive(Default)]
struct Slots {
    wakers: Vec<Option<Waker>>,
    /// Indexes of `wakers` no future owns.
    free: Vec<usize>,
}

impl Watch {
    /// A future that completes at the next `notify_all` after this call.
    pub fn changed(&self) -> Changed<'_> {
        Changed {
            watch: self,
            generation: self.generation.get(),
            slot: None,
        }
    }

    /// Wakes every waiter.
    pub fn notify_all(&self) {
        self.generation.set(self.generation.get().wrapping_add(1));
        let slots = self.slots.borrow().wakers.len();
        for i in 0..slots {
            // One at a time, without holding the borrow while waking.
            let waker = self
                .slots
                .borrow_mut()
                .wakers
                .get_mut(i)
                .and_then(Option::take);
            if let Some(waker) = waker {
                waker.wake();
            }
        }
    }

    /// Waiters registered right now.
    pub fn waiters(&self) -> usize {
        self.slots
            .borrow()
            .wakers
            .iter()
            .filter(|w| w.is_some())
            .count()
    }
}

pub struct Changed<'a> {
    watch: &'a Watch,
    generation: u64,
    slot: Option<usize>,
}

impl Future for Changed<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.watch.generation.get() != self.generation {
            return Poll::Ready(());
        }
        let mut slots = self.watch.slots.borrow_mut();
        let slot = match self.slot {
            Some(slot) => slot,
            None => {
                let slot = match slots.free.pop() {
                    Some(slot) => slot,
                    None => {
                        slots.wakers.push(None);
                        slots.wakers.len() - 1
                    }
                };
                drop(slots);
                self.slot = Some(slot);
                slots = self.watch.slots.borrow_mut();
                slot
            }
        };
        let entry = &mut slots.wakers[slot];
        if !entry.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            *entry = Some(cx.waker().clone());
        }
        Poll::Pending
    }
}

impl Drop for Changed<'_> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot {
            let mut slots = self.watch.slots.borrow_mut();
            slots.wakers[slot] = None;
            slots.free.push(slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::task::Wake;

    struct Count(std::sync::atomic::AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    #[test]
    fn abandoned_waits_leave_nothing_behind() {
        let watch = Watch::default();
        let count = Arc::new(Count(Default::default()));
        let waker = Waker::from(Arc::clone(&count));
        let mut cx = Context::from_waker(&waker);
        for _ in 0..100_000 {
            let mut changed = Box::pin(watch.changed());
            assert!(changed.as_mut().poll(&mut cx).is_pending());
            assert!(changed.as_mut().poll(&mut cx).is_pending());
            assert_eq!(watch.waiters(), 1);
        }
        assert_eq!(watch.waiters(), 0);
        assert_eq!(watch.slots.borrow().wakers.len(), 1, "one slot, reused");
        // Only live waiters are woken.
        let mut live = Box::pin(watch.changed());
        assert!(live.as_mut().poll(&mut cx).is_pending());
        watch.notify_all();
        assert_eq!(count.0.load(std::sync::atomic::Ordering::Relaxed), 1);
        assert!(live.as_mut().poll(&mut cx).is_ready());
    }
}
