//! A core's mesh receivers: one task per peer core, reading that peer's envelopes in the
//! order it sent them.
//!
//! A call is handled in a task of its own, so a slow one (a long poll, a compaction) does
//! not hold up the peer's next. A produce is the exception, for order: its batches are
//! staged in the receiver itself, in arrival order, before the next envelope is read, and
//! only the wait for its commit runs in a task. Staging may wait (a segment roll); the
//! peer's later produces then wait behind it instead of overtaking it, so a connection's
//! pipelined produces to one partition get their offsets in request order.

use std::rc::Rc;

use glommio::channels::channel_mesh::Receivers;

use crate::metrics::counters::Metrics;
use crate::shard::Shard;
use crate::shard::calls::{Answer, Call, Produced, dispatch};
use crate::shard::mesh::Envelope;

impl Shard {
    /// Starts one receiver task per peer.
    pub fn start_receivers(self: &Rc<Self>, mut receivers: Receivers<Envelope>) {
        for (_peer, receiver) in receivers.streams() {
            let shard = Rc::clone(self);
            glommio::spawn_local(async move {
                while let Some(envelope) = receiver.recv().await {
                    shard.receive(envelope).await;
                }
            })
            .detach();
        }
    }

    async fn receive(self: &Rc<Self>, envelope: Envelope) {
        let (from, id, call) = match envelope {
            Envelope::Answer { id, answer } => {
                Metrics::inc(&self.metrics.mesh_answers_received);
                self.mesh.deliver(id, answer);
                return;
            }
            Envelope::Call { from, id, call } => (from, id, call),
        };
        Metrics::inc(&self.metrics.mesh_calls_received);
        let shard = Rc::clone(self);
        match call {
            Call::Produce(produce)
                if let Some(replica) = self.replicated(&produce.topic, produce.partition) =>
            {
                // Proposed here, in arrival order, like staging below.
                let proposed = self.propose_remote(replica, &produce).await;
                drop(produce);
                glommio::spawn_local(async move {
                    let reply = match proposed {
                        Ok(proposed) => proposed.acknowledged().await,
                        Err(failure) => Err(failure),
                    };
                    shard.mesh.answer(from, id, Answer::Produce(reply)).await;
                    Metrics::inc(&shard.metrics.mesh_answers_sent);
                })
                .detach();
            }
            Call::Produce(produce) => {
                let staged = self.stage_produce(&produce).await;
                drop(produce);
                glommio::spawn_local(async move {
                    let reply = match staged {
                        Ok((log, base_offset, last, settle)) => {
                            log.kick();
                            let committed = log.commit(last).await;
                            if let Some(settle) = settle {
                                settle.settle(&log);
                            }
                            committed.map_err(Into::into).map(|()| Produced {
                                base_offset,
                                next_offset: last.end_offset,
                            })
                        }
                        Err(failure) => Err(failure),
                    };
                    shard.mesh.answer(from, id, Answer::Produce(reply)).await;
                    Metrics::inc(&shard.metrics.mesh_answers_sent);
                })
                .detach();
            }
            call => {
                glommio::spawn_local(async move {
                    let answer = dispatch(&shard, call).await;
                    shard.mesh.answer(from, id, answer).await;
                    Metrics::inc(&shard.metrics.mesh_answers_sent);
                })
                .detach();
            }
        }
    }
}
