use super::*;
use crate::config::BrokerConfig;

fn flags(node_id: Option<u32>, listen: Option<&str>, peers: Option<&str>) -> ClusterFlags {
    ClusterFlags {
        node_id,
        listen: listen.map(|l| l.parse().unwrap()),
        peers: peers.map(|p| parse_peers(p).unwrap()),
        advertised_host: None,
        join: None,
    }
}

const THREE: &str = "1=10.0.0.1:9100,2=10.0.0.2:9100,3=node-3.example:9100";

#[test]
fn a_three_node_list_is_parsed_and_sorted() {
    let peers = parse_peers("3=c:1, 1=a:9100 ,2=[::1]:7").unwrap();
    assert_eq!(
        peers.iter().map(|p| p.addr.to_string()).collect::<Vec<_>>(),
        ["c:1", "a:9100", "[::1]:7"]
    );
    let config = ClusterConfig::from_flags(ClusterFlags {
        peers: Some(peers),
        ..flags(Some(2), Some("0.0.0.0:9100"), None)
    })
    .unwrap()
    .unwrap();
    assert_eq!(config.node, NodeId(2));
    assert_eq!(config.members(), [NodeId(1), NodeId(2), NodeId(3)]);
    assert_eq!(
        config.others().map(|p| p.node).collect::<Vec<_>>(),
        [NodeId(1), NodeId(3)]
    );
    assert_eq!(config.peers[1].addr.host, "::1");
}

#[test]
fn no_cluster_flag_is_no_cluster_even_with_a_node_id() {
    assert_eq!(ClusterConfig::from_flags(flags(None, None, None)), Ok(None));
    assert_eq!(
        ClusterConfig::from_flags(flags(Some(4), None, None)),
        Ok(None)
    );
}

#[test]
fn peer_syntax_mistakes_say_what_is_wrong() {
    for (input, what) in [
        ("1:a:1", "no '='"),
        ("x=a:1", "not a number"),
        ("1=a", "no ':PORT'"),
        ("1=a:0", "port is 0"),
        ("1=a:70000", "1..=65535"),
        ("1=:9100", "host is empty"),
        ("1=::1:9100", "must be in '[]'"),
        ("1=[::1:9100", "unclosed"),
        ("1=[nope]:9100", "not an IPv6"),
        ("1=a b:9100", "no host name has"),
    ] {
        let err = parse_peers(input).unwrap_err();
        assert!(
            matches!(err, ClusterConfigError::PeerSyntax { .. }),
            "{input}: {err}"
        );
        assert!(err.to_string().contains(what), "{input}: {err}");
    }
    assert_eq!(parse_peers(" , "), Err(ClusterConfigError::NoPeers));
}

#[test]
fn node_ids_outside_the_member_range_are_refused() {
    for id in [0u64, 0x8000, 70_000] {
        assert_eq!(
            parse_peers(&format!("{id}=a:1")),
            Err(ClusterConfigError::NodeIdOutOfRange { id })
        );
    }
    assert!(parse_peers("32767=a:1").is_ok());
    let err = ClusterConfig::from_flags(flags(Some(0x8000), Some("0.0.0.0:1"), Some("1=a:1")));
    assert_eq!(
        err,
        Err(ClusterConfigError::NodeIdOutOfRange { id: 0x8000 })
    );
}

#[test]
fn a_list_naming_a_node_twice_or_an_address_twice_is_refused() {
    let twice =
        ClusterConfig::from_flags(flags(Some(1), Some("0.0.0.0:1"), Some("1=a:1,2=b:1,1=c:1")));
    assert_eq!(twice, Err(ClusterConfigError::DuplicateNode { node: 1 }));
    let same =
        ClusterConfig::from_flags(flags(Some(1), Some("0.0.0.0:1"), Some("1=a:1,3=b:1,2=a:1")));
    assert_eq!(
        same,
        Err(ClusterConfigError::DuplicateAddress {
            addr: "a:1".into(),
            first: 1,
            second: 2
        })
    );
}

#[test]
fn this_node_must_be_in_the_list() {
    let err =
        ClusterConfig::from_flags(flags(Some(4), Some("0.0.0.0:9100"), Some(THREE))).unwrap_err();
    assert_eq!(err, ClusterConfigError::SelfMissing { node: 4 });
    assert!(err.to_string().contains("this one included"), "{err}");
}

#[test]
fn cluster_flags_need_each_other_and_a_node_id() {
    let err = |f| ClusterConfig::from_flags(f).unwrap_err();
    assert_eq!(
        err(flags(None, Some("0.0.0.0:9100"), Some(THREE))),
        ClusterConfigError::NodeIdRequired {
            flag: "--cluster-listen"
        }
    );
    assert!(matches!(
        err(flags(Some(1), Some("0.0.0.0:9100"), None)),
        ClusterConfigError::FlagRequired {
            given: "--cluster-listen",
            missing: "--cluster-peers"
        }
    ));
    assert!(matches!(
        err(flags(Some(1), None, Some(THREE))),
        ClusterConfigError::FlagRequired {
            given: "--cluster-peers",
            missing: "--cluster-listen"
        }
    ));
    let advertised = ClusterFlags {
        advertised_host: Some("broker-1".into()),
        ..flags(Some(1), None, None)
    };
    assert!(matches!(
        err(advertised),
        ClusterConfigError::FlagRequired {
            given: "--advertised-host",
            ..
        }
    ));
    let join = ClusterFlags {
        join: Some(crate::cluster::ClusterId([7; 16])),
        ..flags(Some(4), None, None)
    };
    assert!(matches!(
        err(join),
        ClusterConfigError::FlagRequired {
            given: "--cluster-join",
            ..
        }
    ));
}

#[test]
fn too_many_peers_are_refused() {
    let list: Vec<String> = (1..=PEERS_MAX as u32 + 1)
        .map(|i| format!("{i}=h{i}:1"))
        .collect();
    assert_eq!(
        parse_peers(&list.join(",")),
        Err(ClusterConfigError::TooManyPeers {
            count: PEERS_MAX + 1,
            max: PEERS_MAX
        })
    );
}

#[test]
fn the_advertised_host_is_a_host_without_a_port() {
    assert_eq!(
        parse_advertised_host("broker-1.example").unwrap(),
        "broker-1.example"
    );
    assert_eq!(
        parse_advertised_host("[2001:db8::1]").unwrap(),
        "2001:db8::1"
    );
    assert_eq!(parse_advertised_host("2001:db8::1").unwrap(), "2001:db8::1");
    for bad in ["broker-1:9092", "", "a b"] {
        assert!(
            matches!(
                parse_advertised_host(bad),
                Err(ClusterConfigError::BadAdvertisedHost { .. })
            ),
            "{bad:?}"
        );
    }
}

#[test]
fn the_cluster_port_must_not_be_a_broker_or_metrics_port() {
    let broker = BrokerConfig {
        listen: "0.0.0.0:9092".parse().unwrap(),
        cores: 2,
        metrics_listen: Some("127.0.0.1:9464".parse().unwrap()),
        ..BrokerConfig::default()
    };
    let config = |listen: &str| {
        ClusterConfig::from_flags(flags(Some(1), Some(listen), Some("1=a:1")))
            .unwrap()
            .unwrap()
    };
    let clash = |listen: &str| config(listen).check_ports(&broker).unwrap_err().to_string();
    assert!(clash("127.0.0.1:9092").contains("--listen's"));
    assert!(clash("10.0.0.1:9094").contains("shard port"));
    assert!(clash("0.0.0.0:9464").contains("--metrics-listen's"));
    assert_eq!(config("0.0.0.0:9100").check_ports(&broker), Ok(()));
    assert_eq!(config("10.0.0.1:9464").check_ports(&broker), Ok(()));
}
