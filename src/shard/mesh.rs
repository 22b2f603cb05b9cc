//! Calls between cores over glommio's channel mesh: the transport under the typed calls
//! of [`crate::shard::calls`].
//!
//! Every message is an [`Envelope`]: a [`Call`] to the core that owns the data, or the
//! [`Answer`] coming back. A caller parks on a reply slot keyed by a per-core call id; the
//! core's mesh receiver tasks fill the slot and wake it. A caller that goes away (its
//! connection closed) removes its slot, and a late answer is dropped.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::poll_fn;
use std::marker::PhantomData;
use std::rc::Rc;
use std::task::{Poll, Waker};

use glommio::channels::channel_mesh::Senders;
use glommio::{GlommioError, ResourceType};

use crate::shard::ShardError;
pub use crate::shard::calls::{Answer, Call, MeshCall, SendPlan};

/// Capacity of each mesh channel; glommio stalls badly with small ones (issue 555).
pub const MESH_CHANNEL_CAPACITY: usize = 4096;

#[derive(Debug)]
pub enum Envelope {
    Call { from: usize, id: u64, call: Call },
    Answer { id: u64, answer: Answer },
}

#[derive(Default)]
struct Slot {
    answer: Option<Answer>,
    waker: Option<Waker>,
}

/// This core's end of the mesh.
pub struct Mesh {
    core: usize,
    senders: Option<Senders<Envelope>>,
    next_id: Cell<u64>,
    slots: Slots,
}

type Slots = Rc<RefCell<HashMap<u64, Slot>>>;

/// A call sent and not yet answered; [`Mesh::finish`] collects its typed reply. Dropping it
/// (the caller went away, or gave up) removes its reply slot: a late answer is dropped,
/// and no slot outlives its caller.
pub struct InFlight<C: MeshCall> {
    id: u64,
    slots: Slots,
    call: PhantomData<fn() -> C>,
}

impl<C: MeshCall> Drop for InFlight<C> {
    fn drop(&mut self) {
        self.slots.borrow_mut().remove(&self.id);
    }
}

impl Mesh {
    pub fn new(core: usize, senders: Option<Senders<Envelope>>) -> Mesh {
        Mesh {
            core,
            senders,
            next_id: Cell::new(0),
            slots: Rc::new(RefCell::new(HashMap::new())),
        }
    }

    /// Sends `call` to core `to` and waits for its reply.
    pub async fn call<C: MeshCall>(&self, to: usize, call: C) -> Result<C::Reply, ShardError> {
        let in_flight = self.start(to, call).await?;
        self.finish(in_flight).await
    }

    /// Sends `call` to core `to` now; the reply is collected with [`Mesh::finish`] (or
    /// dropped with [`Mesh::forget`]). Splitting the two lets a connection send calls in
    /// request order and collect answers later, keeping several in flight.
    pub async fn start<C: MeshCall>(&self, to: usize, call: C) -> Result<InFlight<C>, ShardError> {
        assert_ne!(to, self.core, "local calls are handled inline");
        let Some(senders) = &self.senders else {
            return Err(ShardError::internal("no mesh on a single core"));
        };
        // Made before the send's await: a caller dropped while the send waits for room in
        // the channel drops it, and with it the slot.
        let (in_flight, envelope) = self.reserve(call);
        if senders.send_to(to, envelope).await.is_err() {
            return Err(ShardError::shutting_down(format!("core {to} is gone")));
        }
        Ok(in_flight)
    }

    /// A reply slot for a new call, and the envelope that carries the call.
    fn reserve<C: MeshCall>(&self, call: C) -> (InFlight<C>, Envelope) {
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        self.slots.borrow_mut().insert(id, Slot::default());
        let in_flight = InFlight {
            id,
            slots: Rc::clone(&self.slots),
            call: PhantomData,
        };
        let envelope = Envelope::Call {
            from: self.core,
            id,
            call: call.into_call(),
        };
        (in_flight, envelope)
    }

    /// Sends `call` to core `to` if its channel has room now; otherwise gives the call back
    /// (the channel is full, or the peer is gone) with the reason, without waiting.
    pub fn try_start<C: MeshCall>(
        &self,
        to: usize,
        call: C,
    ) -> Result<InFlight<C>, (C, ShardError)> {
        assert_ne!(to, self.core, "local calls are handled inline");
        let Some(senders) = self.senders.as_ref().filter(|s| to < s.nr_consumers()) else {
            let failure = ShardError::internal(format!("no core {to} in the mesh"));
            return Err((call, failure));
        };
        let (in_flight, envelope) = self.reserve(call);
        // A peer in range, not this core: glommio's only errors are then a full channel and
        // a closed one, and both give the envelope back.
        let (envelope, failure) = match senders.try_send_to(to, envelope) {
            Ok(()) => return Ok(in_flight),
            Err(GlommioError::WouldBlock(ResourceType::Channel(envelope))) => {
                let failure = format!("the channel to core {to} is full");
                (envelope, ShardError::internal(failure))
            }
            Err(GlommioError::Closed(ResourceType::Channel(envelope))) => {
                let failure = format!("core {to} is gone");
                (envelope, ShardError::shutting_down(failure))
            }
            Err(other) => unreachable!("a send to core {to} failed without its envelope: {other}"),
        };
        let Envelope::Call { call, .. } = envelope else {
            unreachable!("the envelope holds the call just put in it")
        };
        match C::from_call(call) {
            Some(call) => Err((call, failure)),
            None => unreachable!("the envelope holds the call just put in it"),
        }
    }

    /// Waits for the reply to a call in flight.
    pub async fn finish<C: MeshCall>(
        &self,
        in_flight: InFlight<C>,
    ) -> Result<C::Reply, ShardError> {
        let id = in_flight.id;
        let answer = poll_fn(|cx| {
            let mut slots = self.slots.borrow_mut();
            let Some(slot) = slots.get_mut(&id) else {
                return Poll::Ready(None);
            };
            match slot.answer.take() {
                Some(answer) => Poll::Ready(Some(answer)),
                None => {
                    slot.waker = Some(cx.waker().clone());
                    Poll::Pending
                }
            }
        })
        .await;
        drop(in_flight);
        match answer {
            Some(answer) => C::reply(answer),
            None => Err(ShardError::internal("answer slot vanished")),
        }
    }

    /// True when the answer to a call in flight has arrived.
    pub fn is_answered<C: MeshCall>(&self, in_flight: &InFlight<C>) -> bool {
        self.slots
            .borrow()
            .get(&in_flight.id)
            .is_some_and(|slot| slot.answer.is_some())
    }

    /// Reply slots held now: one per call sent and not yet answered and collected (a
    /// gauge: it must not grow with callers that went away).
    pub fn calls_waiting(&self) -> usize {
        self.slots.borrow().len()
    }

    /// Gives up on a call in flight; a late answer is dropped.
    pub fn forget<C: MeshCall>(&self, in_flight: InFlight<C>) {
        drop(in_flight);
    }

    /// Sends an answer back to the core that called.
    pub async fn answer(&self, to: usize, id: u64, answer: Answer) {
        if let Some(senders) = &self.senders
            && senders
                .send_to(to, Envelope::Answer { id, answer })
                .await
                .is_err()
        {
            tracing::debug!(to, id, "answer dropped: the calling core is gone");
        }
    }

    /// Hands an arrived answer to its caller, if it still waits.
    pub fn deliver(&self, id: u64, answer: Answer) {
        if let Some(slot) = self.slots.borrow_mut().get_mut(&id) {
            slot.answer = Some(answer);
            if let Some(waker) = slot.waker.take() {
                waker.wake();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::pin::pin;
    use std::sync::mpsc;

    use futures_lite::future::poll_once;
    use glommio::channels::channel_mesh::MeshBuilder;
    use glommio::{LocalExecutorBuilder, Placement};

    use super::*;
    use crate::protocol::native::OffsetSpec;
    use crate::shard::calls::ListOffsets;

    fn call() -> ListOffsets {
        ListOffsets {
            topic: "t".to_string(),
            partition: 0,
            spec: OffsetSpec::Latest,
        }
    }

    /// Issue 13, bug 5: a caller dropped while its call waits for room in the channel (the
    /// v1 consumer's fetch raced against a hang-up, a scrape's gather given up), or while it
    /// waits for the answer, leaves no reply slot behind. Two real executors joined in a
    /// real mesh; the peer reads nothing until the end, so the channel fills.
    #[test]
    fn a_caller_dropped_while_its_call_is_in_flight_leaves_no_slot() {
        const CAPACITY: usize = 4;
        let mesh = MeshBuilder::<Envelope, _>::full(2, CAPACITY);
        let (done, wait_done) = mpsc::channel::<()>();
        let peer = LocalExecutorBuilder::new(Placement::Unbound)
            .spawn({
                let mesh = mesh.clone();
                move || async move {
                    let (_senders, receivers) = mesh.join().await.unwrap();
                    // Blocks this executor's thread: nothing is read from the channel.
                    let _ = wait_done.recv_timeout(std::time::Duration::from_secs(60));
                    drop(receivers);
                }
            })
            .unwrap();
        let caller = LocalExecutorBuilder::new(Placement::Unbound)
            .spawn(move || async move {
                let (senders, _receivers) = mesh.join().await.unwrap();
                let mesh = Mesh::new(senders.peer_id(), Some(senders));
                let to = 1 - mesh.core;
                let mut sent = Vec::new();
                for _ in 0..CAPACITY {
                    sent.push(mesh.start(to, call()).await.unwrap());
                }
                assert_eq!(mesh.calls_waiting(), CAPACITY);
                // The channel is full: each of these waits in the send, and is dropped there.
                for _ in 0..3 {
                    let sending = pin!(mesh.start(to, call()));
                    assert!(
                        poll_once(sending).await.is_none(),
                        "the send waits for room"
                    );
                }
                assert_eq!(
                    mesh.calls_waiting(),
                    CAPACITY,
                    "callers dropped in the send left their reply slots"
                );
                // A call that must not wait for room comes back whole, and takes no slot.
                let Err((back, why)) = mesh.try_start(to, call()) else {
                    panic!("the channel is full")
                };
                assert_eq!((back.topic.as_str(), back.partition), ("t", 0));
                assert!(why.to_string().contains("full"), "{why:?}");
                assert_eq!(mesh.calls_waiting(), CAPACITY);
                // Sent, not answered, given up: their slots go too, and a late answer to
                // one of them is dropped.
                for in_flight in sent.drain(..2) {
                    mesh.forget(in_flight);
                }
                assert_eq!(mesh.calls_waiting(), 2);
                {
                    let finishing = pin!(mesh.finish(sent.pop().unwrap()));
                    assert!(poll_once(finishing).await.is_none(), "no answer yet");
                    assert_eq!(mesh.calls_waiting(), 2);
                }
                // The caller waiting for the answer went away.
                assert_eq!(mesh.calls_waiting(), 1);
                mesh.deliver(0, Answer::ListOffsets(Ok(7)));
                assert_eq!(mesh.calls_waiting(), 1, "a late answer is dropped");
                drop(sent);
                assert_eq!(mesh.calls_waiting(), 0);
                done.send(()).unwrap();
            })
            .unwrap();
        caller.join().unwrap();
        peer.join().unwrap();
    }
}
