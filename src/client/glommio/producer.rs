//! A batching producer on the glommio client.
//!
//! Records are packed into batches by the sans-IO [`Accumulator`] (closed by record count,
//! bytes, or linger time), partitioned by key hash (unkeyed records stick to a partition
//! until their batch closes), and sent to the core that owns their partition (shard-aware
//! routing from metadata), with up to `in_flight` batches outstanding per connection.
//! [`Producer::send`] waits only when every in-flight slot of the batch's connection is
//! taken: that is the back pressure. Acknowledgements are collected in the background;
//! [`Producer::flush`] sends what is open, waits for every acknowledgement and reports the
//! first failure.
//!
//! A batch refused with `ShuttingDown` (the broker is stopping; it stored nothing of it) is
//! sent again, for up to [`ProducerConfig::retry_for`]: once every batch in flight has its
//! answer, the refused ones go first, oldest first and one at a time, each on a new
//! connection (after pauses while the broker is down), so each partition keeps its order
//! and nothing is stored twice. Any other failure, a lost connection included (a batch in
//! flight then may or may not be stored), is reported, not retried.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use ::glommio::sync::Semaphore;

use crate::client::ClientError;
use crate::client::glommio::Client;
use crate::client::produce::{Accumulator, BatchLimits, ProduceFrame};
use crate::client::routing::Routes;
use crate::protocol::native::{ErrorCode, Request};
use crate::watch::Watch;

#[derive(Debug, Clone)]
pub struct ProducerConfig {
    pub batch: BatchLimits,
    /// Produce requests outstanding per connection.
    pub in_flight: usize,
    /// Send each partition's batches straight to the port of the core that owns it.
    pub shard_aware: bool,
    /// How long batches refused with `ShuttingDown` are sent again (a broker restart
    /// should fit), from the first refusal; zero reports the refusal instead.
    pub retry_for: Duration,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        ProducerConfig {
            batch: BatchLimits::default(),
            in_flight: 8,
            shard_aware: true,
            retry_for: Duration::from_secs(30),
        }
    }
}

/// First and longest pause before a refused batch is sent again.
const RETRY_PAUSE_MIN: Duration = Duration::from_millis(100);
const RETRY_PAUSE_MAX: Duration = Duration::from_secs(2);

/// What the broker acknowledged so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProducerStats {
    pub records_acked: u64,
    pub batches_acked: u64,
    /// Of those, batches acknowledged when sent again, after a stopping broker refused
    /// them (`ShuttingDown`).
    pub batches_retried: u64,
}

struct Connection {
    addr: SocketAddr,
    client: Client,
    slots: Rc<Semaphore>,
}

struct Inner {
    config: ProducerConfig,
    bootstrap: SocketAddr,
    routes: RefCell<Routes>,
    /// Topics metadata did not know: the first produce creates them with one partition.
    unknown_topics: RefCell<Vec<String>>,
    connections: RefCell<Vec<Connection>>,
    /// Connections given up after a refusal, open until their batches in flight settle.
    retired: RefCell<Vec<Connection>>,
    accumulator: RefCell<Accumulator>,
    /// One dispatcher at a time keeps each partition's batches in the order they closed.
    dispatching: Semaphore,
    in_flight: Cell<usize>,
    /// Notified at each acknowledgement.
    settled: Watch,
    /// Notified when a batch opens or the producer closes (the linger task waits on it).
    opened: Watch,
    error: RefCell<Option<ClientError>>,
    stats: Cell<ProducerStats>,
    closed: Cell<bool>,
    /// Dispatch order of the next batch sent.
    next_sequence: Cell<u64>,
    /// Batches refused with `ShuttingDown`, by dispatch order, to send again.
    refused: RefCell<BTreeMap<u64, ProduceFrame>>,
    /// When sending refused batches again stops (set at the first refusal of a series).
    retry_until: Cell<Option<Instant>>,
}

/// A producer; dropping it stops its linger task (call [`Producer::flush`] first to keep
/// what is still open).
pub struct Producer {
    inner: Rc<Inner>,
}

impl Producer {
    /// Connects to `bootstrap` and reads the broker's metadata.
    pub async fn connect(
        bootstrap: SocketAddr,
        config: ProducerConfig,
    ) -> Result<Producer, ClientError> {
        assert!(config.in_flight >= 1, "at least one batch in flight");
        let client = Client::connect(bootstrap).await?;
        let metadata = client
            .call(&Request::Metadata { topics: Vec::new() })
            .await?
            .metadata()?;
        let inner = Rc::new(Inner {
            accumulator: RefCell::new(Accumulator::new(config.batch)),
            config,
            bootstrap,
            routes: RefCell::new(Routes::new(bootstrap, &metadata)),
            unknown_topics: RefCell::default(),
            connections: RefCell::new(vec![Connection {
                addr: bootstrap,
                client,
                slots: Rc::new(Semaphore::new(0)),
            }]),
            retired: RefCell::default(),
            dispatching: Semaphore::new(1),
            in_flight: Cell::new(0),
            settled: Watch::default(),
            opened: Watch::default(),
            error: RefCell::new(None),
            stats: Cell::default(),
            closed: Cell::new(false),
            next_sequence: Cell::new(0),
            refused: RefCell::default(),
            retry_until: Cell::new(None),
        });
        let slots = inner.config.in_flight as u64;
        inner.connections.borrow()[0].slots.signal(slots);
        ::glommio::spawn_local(linger(Rc::clone(&inner))).detach();
        Ok(Producer { inner })
    }

    /// Adds a record to `topic`, on the partition its key hashes to (any partition, for an
    /// empty key). If an earlier batch failed since the last report, fails with that error
    /// instead, without adding the record.
    pub async fn send(&self, topic: &str, key: &[u8], value: &[u8]) -> Result<(), ClientError> {
        let partitions = self.inner.partitions(topic).await?;
        let partition = self
            .inner
            .accumulator
            .borrow_mut()
            .partition_for(topic, key, partitions);
        self.send_to(topic, partition, key, value).await
    }

    /// Adds a record to `topic`'s `partition`.
    pub async fn send_to(
        &self,
        topic: &str,
        partition: u32,
        key: &[u8],
        value: &[u8],
    ) -> Result<(), ClientError> {
        if let Some(error) = self.inner.error.borrow_mut().take() {
            return Err(error);
        }
        let ready = {
            let mut accumulator = self.inner.accumulator.borrow_mut();
            let was_idle = accumulator.next_deadline().is_none();
            accumulator.push(topic, partition, key, value, Instant::now());
            if was_idle && accumulator.next_deadline().is_some() {
                self.inner.opened.notify_all();
            }
            accumulator.has_ready()
        };
        if ready {
            self.inner.dispatch().await?;
        }
        Ok(())
    }

    /// Sends every open batch and waits until all are acknowledged; returns what was
    /// acknowledged in all, or the first failure since the last report.
    pub async fn flush(&self) -> Result<ProducerStats, ClientError> {
        self.inner.accumulator.borrow_mut().close_all();
        loop {
            self.inner.dispatch().await?;
            self.inner.settle().await;
            // Refused while this flush waited: sent again by the next dispatch.
            if self.inner.refused.borrow().is_empty() {
                break;
            }
        }
        match self.inner.error.borrow_mut().take() {
            Some(error) => Err(error),
            None => Ok(self.inner.stats.get()),
        }
    }

    pub fn stats(&self) -> ProducerStats {
        self.inner.stats.get()
    }

    /// The routes learned from metadata.
    pub fn routes(&self) -> Routes {
        self.inner.routes.borrow().clone()
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        self.inner.closed.set(true);
        self.inner.opened.notify_all();
    }
}

impl Inner {
    /// Partitions of `topic`, from metadata (asked once per topic).
    async fn partitions(&self, topic: &str) -> Result<u32, ClientError> {
        if let Some(partitions) = self.routes.borrow().partitions(topic) {
            return Ok(partitions);
        }
        if self.unknown_topics.borrow().iter().any(|t| t == topic) {
            return Ok(1);
        }
        let (bootstrap, _) = self.connection(self.bootstrap).await?;
        let metadata = bootstrap
            .call(&Request::Metadata {
                topics: vec![topic.as_bytes()],
            })
            .await?
            .metadata()?;
        self.routes.borrow_mut().update(&metadata);
        match self.routes.borrow().partitions(topic) {
            Some(partitions) => Ok(partitions),
            None => {
                self.unknown_topics.borrow_mut().push(topic.to_string());
                Ok(1)
            }
        }
    }

    /// Sends the batches that are ready, oldest first.
    async fn dispatch(self: &Rc<Self>) -> Result<(), ClientError> {
        self.dispatching
            .acquire(1)
            .await
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        let result = self.dispatch_ready().await;
        self.dispatching.signal(1);
        result
    }

    /// Waits until every batch in flight has its answer.
    async fn settle(&self) {
        while self.in_flight.get() > 0 {
            let settled = self.settled.changed();
            if self.in_flight.get() == 0 {
                break;
            }
            settled.await;
        }
    }

    async fn dispatch_ready(self: &Rc<Self>) -> Result<(), ClientError> {
        loop {
            if !self.refused.borrow().is_empty() {
                // Batches behind a refused one on its partition were refused too (the
                // partition closed), so once all answers are in, sending the refused ones
                // first keeps every partition's order.
                self.settle().await;
                self.retired.borrow_mut().clear();
                self.retry_refused().await?;
            }
            let Some(mut frame) = self.accumulator.borrow_mut().pop_ready() else {
                return Ok(());
            };
            let addr = self.address_of(&frame);
            let (client, slots) = match self.connection(addr).await {
                Ok(connection) => connection,
                Err(_) if self.retrying() => {
                    // The broker is stopping or restarting: this batch, never sent, waits
                    // behind the refused ones.
                    let sequence = self.next_sequence.get();
                    self.next_sequence.set(sequence + 1);
                    self.refused.borrow_mut().insert(sequence, frame);
                    continue;
                }
                Err(e) => return Err(e),
            };
            slots
                .acquire(1)
                .await
                .map_err(|e| ClientError::Protocol(e.to_string()))?;
            let reply = client.produce(&mut frame, 0);
            let sequence = self.next_sequence.get();
            self.next_sequence.set(sequence + 1);
            self.in_flight.set(self.in_flight.get() + 1);
            let inner = Rc::clone(self);
            ::glommio::spawn_local(async move {
                match reply.await.and_then(|r| r.produced()) {
                    Ok(_) => inner.acknowledged(frame),
                    Err(e) if inner.may_retry(&e) => {
                        // Not stored: keep it to send again, on a new connection.
                        inner.forget_connection(addr);
                        inner.refused.borrow_mut().insert(sequence, frame);
                    }
                    Err(e) => {
                        inner.error.borrow_mut().get_or_insert(e);
                    }
                }
                slots.signal(1);
                inner.in_flight.set(inner.in_flight.get() - 1);
                inner.settled.notify_all();
            })
            .detach();
        }
    }

    fn acknowledged(&self, frame: ProduceFrame) {
        let mut stats = self.stats.get();
        stats.records_acked += u64::from(frame.records());
        stats.batches_acked += 1;
        self.stats.set(stats);
        self.accumulator.borrow_mut().recycle(frame);
    }

    /// Whether a failed batch is sent again: refused by a stopping broker, within the
    /// retry time (which starts at the first refusal of a series).
    fn may_retry(&self, e: &ClientError) -> bool {
        if e.code() != Some(ErrorCode::ShuttingDown) || self.config.retry_for.is_zero() {
            return false;
        }
        let now = Instant::now();
        let until = match self.retry_until.get() {
            Some(until) => until,
            None => {
                let until = now + self.config.retry_for;
                self.retry_until.set(Some(until));
                until
            }
        };
        now < until
    }

    /// Retires the connection to `addr`, so the next batch for it connects again. It is
    /// kept open until its batches in flight have their answers (closing it would fail
    /// them, stored or not).
    fn forget_connection(&self, addr: SocketAddr) {
        let mut connections = self.connections.borrow_mut();
        if let Some(at) = connections.iter().position(|c| c.addr == addr) {
            self.retired.borrow_mut().push(connections.swap_remove(at));
        }
    }

    /// Sends the refused batches again, oldest first, each waiting for its answer; a batch
    /// refused again is retried after a pause, until the retry time is up.
    async fn retry_refused(self: &Rc<Self>) -> Result<(), ClientError> {
        let mut pause = RETRY_PAUSE_MIN;
        loop {
            let Some((sequence, mut frame)) = self.refused.borrow_mut().pop_first() else {
                break;
            };
            let addr = self.address_of(&frame);
            let sent = match self.connection(addr).await {
                Ok((client, _)) => client
                    .produce(&mut frame, 0)
                    .await
                    .and_then(|r| r.produced()),
                // Nothing was sent: the broker is still down, or not accepting yet.
                Err(_) if self.retrying() => {
                    self.refused.borrow_mut().insert(sequence, frame);
                    ::glommio::timer::sleep(pause).await;
                    pause = (pause * 2).min(RETRY_PAUSE_MAX);
                    continue;
                }
                Err(e) => Err(e),
            };
            match sent {
                Ok(_) => {
                    self.acknowledged(frame);
                    let mut stats = self.stats.get();
                    stats.batches_retried += 1;
                    self.stats.set(stats);
                    pause = RETRY_PAUSE_MIN;
                }
                Err(e) if self.may_retry(&e) => {
                    self.forget_connection(addr);
                    self.refused.borrow_mut().insert(sequence, frame);
                    ::glommio::timer::sleep(pause).await;
                    pause = (pause * 2).min(RETRY_PAUSE_MAX);
                }
                Err(e) => {
                    // The rest are dropped unsent: sent now, they would overtake this one.
                    self.refused.borrow_mut().clear();
                    self.retry_until.set(None);
                    return Err(e);
                }
            }
        }
        self.retry_until.set(None);
        Ok(())
    }

    /// Whether the retry time of the current series of refusals is still running.
    fn retrying(&self) -> bool {
        self.retry_until
            .get()
            .is_some_and(|until| Instant::now() < until)
    }

    /// Where a batch goes: its partition's owner core, or the bootstrap address.
    fn address_of(&self, frame: &ProduceFrame) -> SocketAddr {
        if self.config.shard_aware {
            let topic = std::str::from_utf8(frame.topic()).expect("topics are ASCII");
            self.routes.borrow().address(topic, frame.partition())
        } else {
            self.bootstrap
        }
    }

    /// The connection to `addr` and its in-flight slots, opened on first use and opened
    /// again after it broke.
    async fn connection(&self, addr: SocketAddr) -> Result<(Client, Rc<Semaphore>), ClientError> {
        {
            let mut connections = self.connections.borrow_mut();
            if let Some(at) = connections.iter().position(|c| c.addr == addr) {
                let c = &connections[at];
                if !c.client.is_broken() {
                    return Ok((c.client.clone(), Rc::clone(&c.slots)));
                }
                // Its batches in flight already failed (and were reported); connect again.
                connections.swap_remove(at);
            }
        }
        let client = Client::connect(addr).await?;
        let slots = Rc::new(Semaphore::new(self.config.in_flight as u64));
        self.connections.borrow_mut().push(Connection {
            addr,
            client: client.clone(),
            slots: Rc::clone(&slots),
        });
        Ok((client, slots))
    }
}

/// Sends batches whose linger time is up.
async fn linger(inner: Rc<Inner>) {
    loop {
        if inner.closed.get() {
            return;
        }
        let opened = inner.opened.changed();
        let deadline = inner.accumulator.borrow().next_deadline();
        match deadline {
            None => opened.await,
            Some(deadline) => {
                drop(opened);
                let now = Instant::now();
                if deadline > now {
                    ::glommio::timer::sleep(deadline - now).await;
                }
                inner.accumulator.borrow_mut().expire(Instant::now());
                if let Err(e) = inner.dispatch().await {
                    inner.error.borrow_mut().get_or_insert(e);
                }
            }
        }
    }
}
