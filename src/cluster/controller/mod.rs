//! The controller: one Raft group (group 0) over the voters, whose log is the cluster's
//! metadata (nodes, topics, placement, leader hints), like Kafka's KRaft and Redpanda's
//! controller.
