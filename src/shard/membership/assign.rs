//! Broker-side partition assignors for native clients (Kafka clients assign in their leader):
//! range (per topic, consecutive partitions to members in id order) and round robin (every
//! subscribed partition in turn to the next member subscribed to its topic).

use std::collections::BTreeMap;

/// A topic partition.
pub type TopicPartition = (String, i32);

/// Which assignor a broker-assigned group uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assignor {
    Range,
    RoundRobin,
}

impl Assignor {
    /// The protocol name native clients give for it.
    pub fn from_name(name: &str) -> Option<Assignor> {
        match name {
            "range" => Some(Assignor::Range),
            "roundrobin" => Some(Assignor::RoundRobin),
            _ => None,
        }
    }

    /// Assigns every partition of every subscribed topic to exactly one subscribed member.
    /// `subscriptions`: member id → topics; `partitions`: topic → partition count (topics
    /// missing there are skipped).
    pub fn assign(
        self,
        subscriptions: &BTreeMap<String, Vec<String>>,
        partitions: &BTreeMap<String, u32>,
    ) -> BTreeMap<String, Vec<TopicPartition>> {
        let mut out: BTreeMap<String, Vec<TopicPartition>> = subscriptions
            .keys()
            .map(|member| (member.clone(), Vec::new()))
            .collect();
        let mut by_topic: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (member, topics) in subscriptions {
            for topic in topics {
                let members = by_topic.entry(topic).or_default();
                if !members.contains(&member.as_str()) {
                    members.push(member);
                }
            }
        }
        match self {
            Assignor::Range => range(&by_topic, partitions, &mut out),
            Assignor::RoundRobin => round_robin(&by_topic, partitions, &mut out),
        }
        out
    }
}

fn range(
    by_topic: &BTreeMap<&str, Vec<&str>>,
    partitions: &BTreeMap<String, u32>,
    out: &mut BTreeMap<String, Vec<TopicPartition>>,
) {
    for (topic, members) in by_topic {
        let Some(&count) = partitions.get(*topic) else {
            continue;
        };
        let each = count as usize / members.len();
        let extra = count as usize % members.len();
        let mut next = 0usize;
        for (i, member) in members.iter().enumerate() {
            let take = each + usize::from(i < extra);
            let list = out.get_mut(*member).expect("every member has a list");
            list.extend((next..next + take).map(|p| (topic.to_string(), p as i32)));
            next += take;
        }
        debug_assert_eq!(next, count as usize);
    }
}

fn round_robin(
    by_topic: &BTreeMap<&str, Vec<&str>>,
    partitions: &BTreeMap<String, u32>,
    out: &mut BTreeMap<String, Vec<TopicPartition>>,
) {
    let members: Vec<String> = out.keys().cloned().collect();
    let mut turn = 0usize;
    for (topic, subscribed) in by_topic {
        let Some(&count) = partitions.get(*topic) else {
            continue;
        };
        for partition in 0..count {
            // The next member in the ring that subscribes to this topic.
            while !subscribed.contains(&members[turn % members.len()].as_str()) {
                turn += 1;
            }
            let member = &members[turn % members.len()];
            out.get_mut(member)
                .expect("member listed")
                .push((topic.to_string(), partition as i32));
            turn += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subs(list: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
        list.iter()
            .map(|(m, t)| (m.to_string(), t.iter().map(|t| t.to_string()).collect()))
            .collect()
    }

    #[test]
    fn range_gives_consecutive_partitions_extra_first() {
        let partitions = BTreeMap::from([("t".to_string(), 5)]);
        let got = Assignor::Range.assign(&subs(&[("a", &["t"]), ("b", &["t"])]), &partitions);
        let parts = |m: &str| got[m].iter().map(|(_, p)| *p).collect::<Vec<_>>();
        assert_eq!(parts("a"), vec![0, 1, 2]);
        assert_eq!(parts("b"), vec![3, 4]);
    }

    #[test]
    fn round_robin_skips_members_not_subscribed() {
        let partitions = BTreeMap::from([("t".to_string(), 3), ("u".to_string(), 2)]);
        let got = Assignor::RoundRobin.assign(
            &subs(&[("a", &["t", "u"]), ("b", &["t"]), ("c", &["zzz"])]),
            &partitions,
        );
        assert_eq!(got["c"], vec![]);
        let all: usize = got.values().map(Vec::len).sum();
        assert_eq!(all, 5);
        assert!(got["a"].iter().filter(|(t, _)| t == "u").count() == 2);
        assert_eq!(got["b"], vec![("t".to_string(), 1)]);
    }
}
