//! Kafka's consumer protocol (the `consumer` protocol type of a group): the assignment a
//! group leader hands each member in SyncGroup. The broker keeps it as opaque bytes for
//! the members; it is decoded only to show who reads what (`groups describe`).

use bytes::{Buf, Bytes};
use kafka_protocol::messages::ConsumerProtocolAssignment;
use kafka_protocol::protocol::Decodable;

/// The protocol type of Kafka consumers' groups.
pub const CONSUMER_PROTOCOL_TYPE: &str = "consumer";

/// Newest assignment version this codec knows. A newer one keeps the older fields first
/// (Kafka's rule for this message), so it is read as this version.
const ASSIGNMENT_VERSION_MAX: i16 = 3;

/// The (topic, partition) pairs of a consumer-protocol assignment: an `i16` version, then
/// `ConsumerProtocolAssignment`. `None` for bytes that are not one (a client with its own
/// protocol under the `consumer` type); an empty assignment is `Some` of nothing.
pub fn assigned_partitions(assignment: &[u8]) -> Option<Vec<(String, u32)>> {
    if assignment.is_empty() {
        return Some(Vec::new());
    }
    let mut buf = Bytes::copy_from_slice(assignment);
    if buf.remaining() < 2 {
        return None;
    }
    let version = buf.get_i16();
    if version < 0 {
        return None;
    }
    let decoded =
        ConsumerProtocolAssignment::decode(&mut buf, version.min(ASSIGNMENT_VERSION_MAX)).ok()?;
    let mut partitions = Vec::new();
    for topic in decoded.assigned_partitions {
        for partition in topic.partitions {
            partitions.push((topic.topic.to_string(), u32::try_from(partition).ok()?));
        }
    }
    partitions.sort();
    Some(partitions)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BufMut;
    use kafka_protocol::messages::TopicName;
    use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition;
    use kafka_protocol::protocol::{Encodable, StrBytes};

    fn encoded(version: i16, topics: &[(&str, &[i32])]) -> Vec<u8> {
        let assignment = ConsumerProtocolAssignment::default().with_assigned_partitions(
            topics
                .iter()
                .map(|(t, ps)| {
                    TopicPartition::default()
                        .with_topic(TopicName(StrBytes::from_string(t.to_string())))
                        .with_partitions(ps.to_vec())
                })
                .collect(),
        );
        let mut out = bytes::BytesMut::new();
        out.put_i16(version);
        assignment.encode(&mut out, version.min(3)).unwrap();
        out.to_vec()
    }

    #[test]
    fn assignments_decode_to_topic_partitions() {
        for version in [0, 1, 3, 4] {
            let bytes = encoded(version, &[("b", &[2, 0]), ("a", &[1])]);
            assert_eq!(
                assigned_partitions(&bytes),
                Some(vec![
                    ("a".to_string(), 1),
                    ("b".to_string(), 0),
                    ("b".to_string(), 2)
                ]),
                "version {version}"
            );
        }
        assert_eq!(assigned_partitions(&[]), Some(Vec::new()));
        assert_eq!(assigned_partitions(&[0]), None);
        assert_eq!(assigned_partitions(&[0, 0, 0, 0, 0, 9]), None, "cut short");
        assert_eq!(assigned_partitions(&[0xff, 0xff, 0, 0, 0, 0]), None);
    }
}
