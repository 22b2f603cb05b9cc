//! Handing a client connection to the core that owns its partition, so none of its
//! batches crosses cores again (docs/LATENCY.md, "(e)").
//!
//! Shard never imports server: the connection travels as a typed mesh call ([`HandOff`]: a
//! descriptor, the bytes already read, the connection slot), and the owner serves it with
//! the [`Adopter`] its server registered at start. Every part of a `HandOff` closes or gives
//! itself back on drop, so a call lost anywhere (a core stopping with it in its channel)
//! leaks neither a descriptor nor a place under the connection limit.
//!
//! The sending core keeps its own descriptor until the owner answers: if the owner refuses
//! (it is stopping, or not serving yet) or the channel is full, the connection comes back
//! and is served where it is, through the mesh, as before.

use std::rc::Rc;
use std::time::Duration;

use futures_lite::FutureExt;
use tracing::debug;

use crate::metrics::counters::Metrics;
use crate::shard::calls::{Adoption, HandOff, Run};
use crate::shard::placement::Place;
use crate::shard::{Hop, Shard, ShardError};

/// What a core does with a connection handed to it: the server registers this when it
/// starts serving ([`Shard::adopt_connections_with`]).
pub type Adopter = Box<dyn Fn(&Rc<Shard>, HandOff)>;

/// Longest wait for the owner's answer. It answers at once (it only starts a task), so this
/// bounds a wait on a core that has stopped.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// How a hand-off ended, for the sending core.
#[derive(Debug)]
pub enum HandedOff {
    /// The owner serves the connection; the sender drops its own descriptor.
    Taken,
    /// Not handed off: the connection is back, to be served here.
    Kept { connection: HandOff, reason: String },
    /// The call went out and no answer came: the owner may or may not serve it. The sender
    /// closes its own descriptor, which is right either way (closing one descriptor of a
    /// socket ends nothing while another is open).
    Unknown,
}

impl Shard {
    /// Registers how this core serves connections handed to it. Until then, and once the
    /// broker is stopping, hand-offs to this core are refused.
    pub fn adopt_connections_with(&self, adopter: Adopter) {
        *self.adopter.borrow_mut() = Some(adopter);
    }

    /// Hands `connection` to the core of this node at `owner`, without waiting for room in
    /// the mesh. It stays here when `owner` is this core or another node's.
    pub async fn hand_off(self: &Rc<Self>, owner: Place, connection: HandOff) -> HandedOff {
        let core = match self.hop(owner) {
            Ok(Hop::Core(core)) => core,
            Ok(Hop::Here) => {
                return HandedOff::Kept {
                    connection,
                    reason: "this core owns the partition".to_string(),
                };
            }
            Err(not_here) => {
                return HandedOff::Kept {
                    connection,
                    reason: not_here.to_string(),
                };
            }
        };
        let in_flight = match self.mesh.try_start(core, connection) {
            Ok(in_flight) => {
                Metrics::inc(&self.metrics.mesh_calls);
                in_flight
            }
            Err((connection, failure)) => {
                return HandedOff::Kept {
                    connection,
                    reason: failure.to_string(),
                };
            }
        };
        let answer = async { Some(self.mesh.finish(in_flight).await) }
            .or(async {
                glommio::timer::sleep(ANSWER_TIMEOUT).await;
                None
            })
            .await;
        match answer {
            Some(Ok(Adoption::Adopted)) => HandedOff::Taken,
            Some(Ok(Adoption::Refused { connection, reason })) => HandedOff::Kept {
                connection,
                reason: reason.to_string(),
            },
            Some(Err(failure)) => {
                debug!(%owner, error = %failure, "hand-off answered with an error");
                HandedOff::Unknown
            }
            None => HandedOff::Unknown,
        }
    }
}

impl Run for HandOff {
    async fn run(self, shard: &Rc<Shard>) -> Result<Adoption, ShardError> {
        if shard.shutdown.is_requested() {
            return Ok(Adoption::Refused {
                connection: self,
                reason: "the owning core is stopping",
            });
        }
        let adopter = shard.adopter.borrow();
        let Some(adopt) = adopter.as_ref() else {
            return Ok(Adoption::Refused {
                connection: self,
                reason: "the owning core is not serving yet",
            });
        };
        Metrics::inc(&shard.metrics.connections_adopted);
        adopt(shard, self);
        Ok(Adoption::Adopted)
    }
}
