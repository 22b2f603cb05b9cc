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

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Instant;

use ::glommio::sync::Semaphore;

use crate::client::ClientError;
use crate::client::glommio::Client;
use crate::client::produce::{Accumulator, BatchLimits};
use crate::client::routing::Routes;
use crate::protocol::native::Request;
use crate::watch::Watch;

#[derive(Debug, Clone)]
pub struct ProducerConfig {
    pub batch: BatchLimits,
    /// Produce requests outstanding per connection.
    pub in_flight: usize,
    /// Send each partition's batches straight to the port of the core that owns it.
    pub shard_aware: bool,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        ProducerConfig {
            batch: BatchLimits::default(),
            in_flight: 8,
            shard_aware: true,
        }
    }
}

/// What the broker acknowledged so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProducerStats {
    pub records_acked: u64,
    pub batches_acked: u64,
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
            dispatching: Semaphore::new(1),
            in_flight: Cell::new(0),
            settled: Watch::default(),
            opened: Watch::default(),
            error: RefCell::new(None),
            stats: Cell::default(),
            closed: Cell::new(false),
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
        self.inner.dispatch().await?;
        while self.inner.in_flight.get() > 0 {
            let settled = self.inner.settled.changed();
            if self.inner.in_flight.get() == 0 {
                break;
            }
            settled.await;
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

    async fn dispatch_ready(self: &Rc<Self>) -> Result<(), ClientError> {
        loop {
            let Some(mut frame) = self.accumulator.borrow_mut().pop_ready() else {
                return Ok(());
            };
            let addr = if self.config.shard_aware {
                let topic = std::str::from_utf8(frame.topic()).expect("topics are ASCII");
                self.routes.borrow().address(topic, frame.partition())
            } else {
                self.bootstrap
            };
            let (client, slots) = self.connection(addr).await?;
            slots
                .acquire(1)
                .await
                .map_err(|e| ClientError::Protocol(e.to_string()))?;
            let records = u64::from(frame.records());
            let reply = client.produce(&mut frame, 0);
            self.accumulator.borrow_mut().recycle(frame);
            self.in_flight.set(self.in_flight.get() + 1);
            let inner = Rc::clone(self);
            ::glommio::spawn_local(async move {
                match reply.await.and_then(|r| r.produced()) {
                    Ok(_) => {
                        let mut stats = inner.stats.get();
                        stats.records_acked += records;
                        stats.batches_acked += 1;
                        inner.stats.set(stats);
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
