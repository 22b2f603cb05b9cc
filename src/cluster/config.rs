//! The cluster flags of `serve` (`--cluster-listen`, `--cluster-peers`, `--advertised-host`)
//! checked into a [`ClusterConfig`]. Every mistake is refused at start with the flag it is
//! in, before anything listens: a node that joined with a wrong peer list would only show it
//! later as a cluster that never elects a leader.

use std::net::SocketAddr;

use crate::cluster::NodeId;

/// Peers a cluster may list at most: the controller's voters and the transport's
/// connections (one out and one in per peer) grow with it.
pub const PEERS_MAX: usize = 128;
/// Longest host name (DNS's limit).
pub const HOST_BYTES_MAX: usize = 253;

/// Where a node is reached by its peers: a host (name or IP) and a port. The host is kept
/// as given and resolved when connecting, so a peer whose name moves to another address is
/// found again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerAddr {
    pub host: String,
    pub port: u16,
}

impl PeerAddr {
    /// `HOST:PORT` or `[IPV6]:PORT`, as in `--cluster-peers`; the reason when it is not.
    pub fn parse(s: &str) -> Result<PeerAddr, &'static str> {
        parse_host_port(s.trim())
    }

    /// `HOST:PORT`, an IPv6 host in brackets (`[::1]:9000`), as `ToSocketAddrs` takes it.
    pub fn to_host_port(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl std::fmt::Display for PeerAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_host_port())
    }
}

/// One entry of `--cluster-peers`: `ID=HOST:PORT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub node: NodeId,
    pub addr: PeerAddr,
}

/// This node's place in a cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// `--node-id`.
    pub node: NodeId,
    /// `--cluster-listen`: where peers connect to this node.
    pub listen: SocketAddr,
    /// `--cluster-peers`, this node included, sorted by id.
    pub peers: Vec<Peer>,
    /// `--advertised-host`: the host clients are told to reach this node at; `None` keeps
    /// the one of `--listen`.
    pub advertised_host: Option<String>,
    /// `--cluster-join`: the id of the running cluster this node joins (added with
    /// `pagurus cluster add-node`); `None` forms or restarts a cluster from the flags.
    pub join: Option<crate::cluster::ClusterId>,
}

impl ClusterConfig {
    /// Every member's id, this node's included.
    pub fn members(&self) -> Vec<NodeId> {
        self.peers.iter().map(|p| p.node).collect()
    }

    /// The other members, those this node connects to.
    pub fn others(&self) -> impl Iterator<Item = &Peer> {
        self.peers.iter().filter(move |p| p.node != self.node)
    }
}

/// Why the cluster flags were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterConfigError {
    #[error("--cluster-peers entry {entry:?}: {reason} (expected ID=HOST:PORT)")]
    PeerSyntax { entry: String, reason: String },
    #[error("--cluster-peers: node id {id} is not in 1..={max}", max = NodeId::MAX.0)]
    NodeIdOutOfRange { id: u64 },
    #[error("--cluster-peers names node {node} twice")]
    DuplicateNode { node: u16 },
    #[error("--cluster-peers gives nodes {first} and {second} the same address {addr}")]
    DuplicateAddress {
        addr: String,
        first: u16,
        second: u16,
    },
    #[error("--cluster-peers lists {count} nodes, more than {max}")]
    TooManyPeers { count: usize, max: usize },
    #[error("--cluster-peers is empty")]
    NoPeers,
    #[error(
        "--cluster-peers does not name this node ({node}): list every member, this one included"
    )]
    SelfMissing { node: u16 },
    #[error("{flag} needs --node-id: a cluster member has an id")]
    NodeIdRequired { flag: &'static str },
    #[error("{given} needs {missing}")]
    FlagRequired {
        given: &'static str,
        missing: &'static str,
    },
    #[error("--advertised-host {host:?}: {reason}")]
    BadAdvertisedHost { host: String, reason: &'static str },
    #[error("--cluster-listen {addr}: port {port} is already {what}")]
    PortClash {
        addr: SocketAddr,
        port: u16,
        what: &'static str,
    },
}

/// `--cluster-peers`: comma-separated `ID=HOST:PORT`. Syntax and ranges only; the list as
/// a whole is checked by [`ClusterConfig::from_flags`].
pub fn parse_peers(s: &str) -> Result<Vec<Peer>, ClusterConfigError> {
    let entries: Vec<&str> = s
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .collect();
    if entries.is_empty() {
        return Err(ClusterConfigError::NoPeers);
    }
    if entries.len() > PEERS_MAX {
        return Err(ClusterConfigError::TooManyPeers {
            count: entries.len(),
            max: PEERS_MAX,
        });
    }
    entries.into_iter().map(parse_peer).collect()
}

fn parse_peer(entry: &str) -> Result<Peer, ClusterConfigError> {
    let syntax = |reason: &str| ClusterConfigError::PeerSyntax {
        entry: entry.to_string(),
        reason: reason.to_string(),
    };
    let (id, addr) = entry.split_once('=').ok_or_else(|| syntax("no '='"))?;
    let id: u64 = id
        .trim()
        .parse()
        .map_err(|_| syntax("the id is not a number"))?;
    let node = u16::try_from(id)
        .ok()
        .map(NodeId)
        .filter(|n| n.is_member())
        .ok_or(ClusterConfigError::NodeIdOutOfRange { id })?;
    let addr = parse_host_port(addr.trim()).map_err(syntax)?;
    Ok(Peer { node, addr })
}

/// `HOST:PORT` or `[IPV6]:PORT`; the port not 0 (a peer cannot be reached at "any port").
fn parse_host_port(s: &str) -> Result<PeerAddr, &'static str> {
    let (host, port) = s.rsplit_once(':').ok_or("no ':PORT'")?;
    let port: u16 = port.parse().map_err(|_| "the port is not in 1..=65535")?;
    if port == 0 {
        return Err("the port is 0");
    }
    let host = match host.strip_prefix('[') {
        Some(v6) => {
            let v6 = v6.strip_suffix(']').ok_or("an unclosed '['")?;
            v6.parse::<std::net::Ipv6Addr>()
                .map_err(|_| "not an IPv6 address in '[]'")?;
            v6
        }
        None if host.contains(':') => return Err("an IPv6 address must be in '[]'"),
        None => host,
    };
    check_host(host)?;
    Ok(PeerAddr {
        host: host.to_string(),
        port,
    })
}

/// A host name or IP: not empty, at most [`HOST_BYTES_MAX`] bytes, no spaces or control
/// characters, no `/`, `,` or `=` (which would only come from a mistyped list).
fn check_host(host: &str) -> Result<(), &'static str> {
    if host.is_empty() {
        return Err("the host is empty");
    }
    if host.len() > HOST_BYTES_MAX {
        return Err("the host is longer than 253 bytes");
    }
    if host
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || "/,=@".contains(c))
    {
        return Err("the host has a character no host name has");
    }
    Ok(())
}

/// `--advertised-host`: a host name or IP, without a port.
pub fn parse_advertised_host(s: &str) -> Result<String, ClusterConfigError> {
    let bad = |reason| ClusterConfigError::BadAdvertisedHost {
        host: s.to_string(),
        reason,
    };
    let host = s.trim();
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if bare.contains(':') && bare.parse::<std::net::Ipv6Addr>().is_err() {
        return Err(bad("a host without a port (the port is --listen's)"));
    }
    check_host(bare).map_err(bad)?;
    Ok(bare.to_string())
}

/// The cluster flags as given to `serve`, before they are checked together.
#[derive(Debug, Clone, Default)]
pub struct ClusterFlags {
    pub node_id: Option<u32>,
    pub listen: Option<SocketAddr>,
    pub peers: Option<Vec<Peer>>,
    pub advertised_host: Option<String>,
    pub join: Option<crate::cluster::ClusterId>,
}

impl ClusterConfig {
    /// Checks the flags together: `None` for a broker outside a cluster (no cluster flag;
    /// `--node-id` alone is allowed, it only names the data directory's node).
    pub fn from_flags(flags: ClusterFlags) -> Result<Option<ClusterConfig>, ClusterConfigError> {
        let ClusterFlags {
            node_id,
            listen,
            peers,
            advertised_host,
            join,
        } = flags;
        let (listen, peers) = match (listen, peers) {
            (None, None) => {
                let given = match (&advertised_host, &join) {
                    (Some(_), _) => "--advertised-host",
                    (None, Some(_)) => "--cluster-join",
                    (None, None) => return Ok(None),
                };
                return Err(ClusterConfigError::FlagRequired {
                    given,
                    missing: "--cluster-listen and --cluster-peers",
                });
            }
            (Some(_), None) => {
                return Err(ClusterConfigError::FlagRequired {
                    given: "--cluster-listen",
                    missing: "--cluster-peers",
                });
            }
            (None, Some(_)) => {
                return Err(ClusterConfigError::FlagRequired {
                    given: "--cluster-peers",
                    missing: "--cluster-listen",
                });
            }
            (Some(listen), Some(peers)) => (listen, peers),
        };
        let node = node_id
            .and_then(|id| u16::try_from(id).ok())
            .map(NodeId)
            .ok_or(ClusterConfigError::NodeIdRequired {
                flag: "--cluster-listen",
            })?;
        if !node.is_member() {
            return Err(ClusterConfigError::NodeIdOutOfRange {
                id: u64::from(node.0),
            });
        }
        let peers = check_peers(peers)?;
        if !peers.iter().any(|p| p.node == node) {
            return Err(ClusterConfigError::SelfMissing { node: node.0 });
        }
        Ok(Some(ClusterConfig {
            node,
            listen,
            peers,
            advertised_host,
            join,
        }))
    }

    /// Refuses a `--cluster-listen` on a port this broker already listens on (its client
    /// port, a core's shard port, the metrics port).
    pub fn check_ports(
        &self,
        broker: &crate::config::BrokerConfig,
    ) -> Result<(), ClusterConfigError> {
        let clash = |port, what| ClusterConfigError::PortClash {
            addr: self.listen,
            port,
            what,
        };
        if let Some(port) = broker.broker_port_at(self.listen) {
            return Err(clash(
                port,
                if port == broker.listen.port() {
                    "--listen's"
                } else {
                    "a core's shard port (--listen port + 1 + core)"
                },
            ));
        }
        let metrics = broker.metrics_listen.filter(|m| {
            m.port() == self.listen.port()
                && self.listen.port() != 0
                && (m.ip() == self.listen.ip()
                    || m.ip().is_unspecified()
                    || self.listen.ip().is_unspecified())
        });
        match metrics {
            Some(m) => Err(clash(m.port(), "--metrics-listen's")),
            None => Ok(()),
        }
    }
}

/// Sorted by id; no id twice, no address twice.
fn check_peers(mut peers: Vec<Peer>) -> Result<Vec<Peer>, ClusterConfigError> {
    if peers.is_empty() {
        return Err(ClusterConfigError::NoPeers);
    }
    if peers.len() > PEERS_MAX {
        return Err(ClusterConfigError::TooManyPeers {
            count: peers.len(),
            max: PEERS_MAX,
        });
    }
    peers.sort_by_key(|p| p.node);
    for pair in peers.windows(2) {
        if pair[0].node == pair[1].node {
            return Err(ClusterConfigError::DuplicateNode {
                node: pair[0].node.0,
            });
        }
    }
    for (i, a) in peers.iter().enumerate() {
        if let Some(b) = peers[i + 1..].iter().find(|b| b.addr == a.addr) {
            return Err(ClusterConfigError::DuplicateAddress {
                addr: a.addr.to_string(),
                first: a.node.0,
                second: b.node.0,
            });
        }
    }
    Ok(peers)
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
