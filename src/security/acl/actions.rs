//! What each request of each protocol needs, as Kafka's broker decides it (KafkaApis): the
//! operation on the resources it names, and what a refusal does. The session checks these
//! once per request; this table is the one place that says which.
//!
//! Its own small enums of request kinds keep `security` free of `server`; conversions from
//! the protocol's API keys are exhaustive where the protocol is ours, so a new native API
//! does not compile until it is given its row here.

use kafka_protocol::messages::ApiKey as KafkaKey;

use super::{Operation, ResourceType};
use crate::protocol::native::ApiKey as NativeKey;

/// A request, by protocol and kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    Kafka(KafkaApi),
    Native(NativeApi),
    Hermit(HermitRole),
}

/// Declares the Kafka APIs this table knows, each named as kafka-protocol's `ApiKey`.
macro_rules! kafka_apis {
    ($($api:ident),+ $(,)?) => {
        /// The Kafka APIs pagurus serves or will (SASL, ACL and SCRAM administration).
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum KafkaApi { $($api),+ }

        impl KafkaApi {
            pub const ALL: &'static [KafkaApi] = &[$(KafkaApi::$api),+];

            /// The API of a Kafka key; `None` for one this table does not know (refused:
            /// nothing unknown is served to a principal by default).
            pub fn from_key(key: KafkaKey) -> Option<KafkaApi> {
                match key {
                    $(KafkaKey::$api => Some(KafkaApi::$api),)+
                    _ => None,
                }
            }
        }
    };
}

kafka_apis!(
    Produce,
    Fetch,
    ListOffsets,
    Metadata,
    OffsetCommit,
    OffsetFetch,
    FindCoordinator,
    JoinGroup,
    Heartbeat,
    LeaveGroup,
    SyncGroup,
    DescribeGroups,
    ListGroups,
    SaslHandshake,
    ApiVersions,
    CreateTopics,
    DeleteTopics,
    DeleteRecords,
    InitProducerId,
    DescribeAcls,
    CreateAcls,
    DeleteAcls,
    DescribeConfigs,
    AlterConfigs,
    DescribeLogDirs,
    SaslAuthenticate,
    CreatePartitions,
    DeleteGroups,
    ElectLeaders,
    IncrementalAlterConfigs,
    OffsetDelete,
    DescribeCluster,
    DescribeUserScramCredentials,
    AlterUserScramCredentials,
);

/// The native protocol's APIs (`protocol::native::ApiKey`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NativeApi {
    Produce,
    Fetch,
    ListOffsets,
    CreateTopic,
    DeleteTopic,
    Metadata,
    CommitOffset,
    FetchOffset,
    ListGroups,
    DescribeGroup,
    Compact,
    JoinGroup,
    Heartbeat,
    LeaveGroup,
    CommitGroupOffset,
    DeleteGroup,
    ClusterStatus,
    Authenticate,
    ListUsers,
    SetUser,
    DeleteUser,
    ListAcls,
    ChangeAcl,
    FindCoordinator,
    ChangeMember,
}

impl From<NativeKey> for NativeApi {
    fn from(key: NativeKey) -> NativeApi {
        match key {
            NativeKey::Produce => NativeApi::Produce,
            NativeKey::Fetch => NativeApi::Fetch,
            NativeKey::ListOffsets => NativeApi::ListOffsets,
            NativeKey::CreateTopic => NativeApi::CreateTopic,
            NativeKey::DeleteTopic => NativeApi::DeleteTopic,
            NativeKey::Metadata => NativeApi::Metadata,
            NativeKey::CommitOffset => NativeApi::CommitOffset,
            NativeKey::FetchOffset => NativeApi::FetchOffset,
            NativeKey::ListGroups => NativeApi::ListGroups,
            NativeKey::DescribeGroup => NativeApi::DescribeGroup,
            NativeKey::Compact => NativeApi::Compact,
            NativeKey::JoinGroup => NativeApi::JoinGroup,
            NativeKey::Heartbeat => NativeApi::Heartbeat,
            NativeKey::LeaveGroup => NativeApi::LeaveGroup,
            NativeKey::CommitGroupOffset => NativeApi::CommitGroupOffset,
            NativeKey::DeleteGroup => NativeApi::DeleteGroup,
            NativeKey::ClusterStatus => NativeApi::ClusterStatus,
            NativeKey::Authenticate => NativeApi::Authenticate,
            NativeKey::ListUsers => NativeApi::ListUsers,
            NativeKey::SetUser => NativeApi::SetUser,
            NativeKey::DeleteUser => NativeApi::DeleteUser,
            NativeKey::ListAcls => NativeApi::ListAcls,
            NativeKey::ChangeAcl => NativeApi::ChangeAcl,
            NativeKey::FindCoordinator => NativeApi::FindCoordinator,
            NativeKey::ChangeMember => NativeApi::ChangeMember,
        }
    }
}

/// A HermitMQ v1 connection's role (each is authorized once, at its handshake).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HermitRole {
    Producer,
    Consumer,
    Commit,
}

/// What happens when a need is not met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denied {
    /// The whole request is refused with the resource type's error
    /// ([`ResourceType::kafka_error_code`]).
    Request,
    /// Each named resource the principal may not use gets that error; the rest is served.
    Item,
    /// Resources the principal may not see are left out of the answer (a listing of all);
    /// a resource named in the request gets the error, as with `Item`.
    Omitted,
}

/// One thing a request needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// `operation` on every resource of this type the request names (the cluster is one).
    On(ResourceType, Operation, Denied),
    /// `operation` on the cluster, or else on each named resource of this type (Kafka's
    /// CreateTopics: Create on the cluster, or on the topic; ListGroups: Describe on the
    /// cluster lists every group).
    ClusterOr(ResourceType, Operation, Denied),
    /// An idempotent producer's id: IdempotentWrite on the cluster, or Write on some topic
    /// (Kafka 2.8 on, KIP-679). Refused as a request (CLUSTER_AUTHORIZATION_FAILED).
    IdempotentProducer,
}

impl Need {
    /// The type of resource the need is checked on (an idempotent producer's: the cluster).
    pub fn resource_type(self) -> ResourceType {
        match self {
            Need::On(resource_type, _, _) | Need::ClusterOr(resource_type, _, _) => resource_type,
            Need::IdempotentProducer => ResourceType::Cluster,
        }
    }
}

impl ResourceType {
    /// Kafka's error code for a refusal on this type of resource.
    pub fn kafka_error_code(self) -> i16 {
        match self {
            ResourceType::Topic => 29,           // TOPIC_AUTHORIZATION_FAILED
            ResourceType::Group => 30,           // GROUP_AUTHORIZATION_FAILED
            ResourceType::Cluster => 31,         // CLUSTER_AUTHORIZATION_FAILED
            ResourceType::TransactionalId => 53, // TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        }
    }
}

use Denied::{Item, Omitted, Request};
use Operation::{Alter, AlterConfigs, Create, Delete, Describe, DescribeConfigs, Read, Write};
use ResourceType::{Cluster, Group, Topic};

const NOTHING: &[Need] = &[];
const WRITE_TOPIC: &[Need] = &[Need::On(Topic, Write, Item)];
const READ_TOPIC: &[Need] = &[Need::On(Topic, Read, Item)];
const DESCRIBE_TOPIC: &[Need] = &[Need::On(Topic, Describe, Item)];
const METADATA: &[Need] = &[Need::On(Topic, Describe, Omitted)];
const CREATE_TOPIC: &[Need] = &[Need::ClusterOr(Topic, Create, Item)];
const DELETE_TOPIC: &[Need] = &[Need::On(Topic, Delete, Item)];
const ALTER_TOPIC: &[Need] = &[Need::On(Topic, Alter, Item)];
const MEMBER: &[Need] = &[Need::On(Group, Read, Request)];
const COMMIT: &[Need] = &[Need::On(Group, Read, Request), Need::On(Topic, Read, Item)];
const FETCH_OFFSETS: &[Need] = &[
    Need::On(Group, Describe, Request),
    Need::On(Topic, Describe, Omitted),
];
const DESCRIBE_GROUP: &[Need] = &[Need::On(Group, Describe, Item)];
const LIST_GROUPS: &[Need] = &[Need::ClusterOr(Group, Describe, Omitted)];
const DELETE_GROUP: &[Need] = &[Need::On(Group, Delete, Item)];
const OFFSET_DELETE: &[Need] = &[
    Need::On(Group, Delete, Request),
    Need::On(Topic, Read, Item),
];
const DESCRIBE_CLUSTER: &[Need] = &[Need::On(Cluster, Describe, Request)];
const ALTER_CLUSTER: &[Need] = &[Need::On(Cluster, Alter, Request)];
const DESCRIBE_CONFIGS: &[Need] = &[
    Need::On(Topic, DescribeConfigs, Item),
    Need::On(Cluster, DescribeConfigs, Item),
];
const ALTER_CONFIGS: &[Need] = &[
    Need::On(Topic, AlterConfigs, Item),
    Need::On(Cluster, AlterConfigs, Item),
];
const IDEMPOTENT: &[Need] = &[Need::IdempotentProducer];
const HERMIT_PRODUCER: &[Need] = &[Need::On(Topic, Write, Request)];
const HERMIT_READER: &[Need] = &[
    Need::On(Topic, Read, Request),
    Need::On(Group, Read, Request),
];

/// What `kind` needs; empty for requests every connection may make (ApiVersions, the SASL
/// exchange itself).
pub fn actions(kind: RequestKind) -> &'static [Need] {
    match kind {
        RequestKind::Kafka(api) => kafka(api),
        RequestKind::Native(api) => native(api),
        RequestKind::Hermit(HermitRole::Producer) => HERMIT_PRODUCER,
        RequestKind::Hermit(HermitRole::Consumer | HermitRole::Commit) => HERMIT_READER,
    }
}

fn kafka(api: KafkaApi) -> &'static [Need] {
    use KafkaApi::*;
    match api {
        ApiVersions | SaslHandshake | SaslAuthenticate => NOTHING,
        Produce => WRITE_TOPIC,
        Fetch => READ_TOPIC,
        ListOffsets => DESCRIBE_TOPIC,
        Metadata => METADATA,
        CreateTopics => CREATE_TOPIC,
        DeleteTopics | DeleteRecords => DELETE_TOPIC,
        CreatePartitions => ALTER_TOPIC,
        FindCoordinator => &[Need::On(Group, Describe, Request)],
        JoinGroup | SyncGroup | Heartbeat | LeaveGroup => MEMBER,
        OffsetCommit => COMMIT,
        OffsetFetch => FETCH_OFFSETS,
        DescribeGroups => DESCRIBE_GROUP,
        ListGroups => LIST_GROUPS,
        DeleteGroups => DELETE_GROUP,
        OffsetDelete => OFFSET_DELETE,
        InitProducerId => IDEMPOTENT,
        DescribeConfigs => DESCRIBE_CONFIGS,
        AlterConfigs | IncrementalAlterConfigs => ALTER_CONFIGS,
        // As Kafka's broker: the brokers are Metadata's, shown to everyone (the cluster's
        // authorized operations, when asked, need Describe on it: `describe_cluster.rs`).
        DescribeCluster => NOTHING,
        DescribeLogDirs | DescribeAcls | DescribeUserScramCredentials => DESCRIBE_CLUSTER,
        CreateAcls | DeleteAcls | AlterUserScramCredentials | ElectLeaders => ALTER_CLUSTER,
    }
}

fn native(api: NativeApi) -> &'static [Need] {
    use NativeApi::*;
    match api {
        Produce => WRITE_TOPIC,
        Fetch => READ_TOPIC,
        ListOffsets => DESCRIBE_TOPIC,
        Metadata => METADATA,
        CreateTopic => CREATE_TOPIC,
        DeleteTopic => DELETE_TOPIC,
        // A compaction pass now changes how a topic is kept, as a config change would.
        Compact => ALTER_TOPIC,
        JoinGroup | Heartbeat | LeaveGroup => MEMBER,
        CommitOffset | CommitGroupOffset => COMMIT,
        FetchOffset => &[
            Need::On(Group, Describe, Request),
            Need::On(Topic, Describe, Item),
        ],
        // As Kafka's FindCoordinator.
        DescribeGroup | FindCoordinator => &[Need::On(Group, Describe, Request)],
        ListGroups => LIST_GROUPS,
        DeleteGroup => &[Need::On(Group, Delete, Request)],
        // The cluster's state (nodes, liveness, raft leader and term): as Kafka's
        // DescribeLogDirs, more than the brokers Metadata shows everyone.
        ClusterStatus => DESCRIBE_CLUSTER,
        // As Kafka's SaslAuthenticate: the login itself needs nothing.
        Authenticate => NOTHING,
        // As Kafka's DescribeUserScramCredentials and DescribeAcls ...
        ListUsers | ListAcls => DESCRIBE_CLUSTER,
        // ... and AlterUserScramCredentials, CreateAcls and DeleteAcls.
        SetUser | DeleteUser | ChangeAcl => ALTER_CLUSTER,
        // As Kafka's AddRaftVoter and RemoveRaftVoter.
        ChangeMember => ALTER_CLUSTER,
    }
}
