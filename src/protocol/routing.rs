//! Who owns what: partitions and offset shards map to cores by FNV-1a.

/// 32-bit FNV-1a, continued from `hash` over `bytes`.
pub fn fnv1a32_extend(mut hash: u32, bytes: &[u8]) -> u32 {
    for &b in bytes {
        hash ^= u32::from(b);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash
}

pub const FNV_OFFSET_BASIS: u32 = 0x811c_9dc5;

/// 32-bit FNV-1a of `bytes`.
pub fn fnv1a32(bytes: &[u8]) -> u32 {
    fnv1a32_extend(FNV_OFFSET_BASIS, bytes)
}

/// The core that owns `topic`'s `partition`: `fnv1a32("{topic}/{partition}") % cores`,
/// computed without building the string.
pub fn partition_owner(topic: &str, partition: u32, cores: usize) -> usize {
    let mut digits = [0u8; 10];
    let mut at = digits.len();
    let mut n = partition;
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let hash = fnv1a32_extend(
        fnv1a32_extend(fnv1a32(topic.as_bytes()), b"/"),
        &digits[at..],
    );
    (hash as usize) % cores.max(1)
}

/// The core that coordinates consumer group `group`: `fnv1a32(group) % cores`. Every
/// front-end names it (Kafka's FindCoordinator); the shard routes group calls to it.
pub fn group_coordinator(group: &str, cores: usize) -> usize {
    (fnv1a32(group.as_bytes()) as usize) % cores.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_known_values() {
        // Reference values of 32-bit FNV-1a.
        assert_eq!(fnv1a32(b""), 0x811c_9dc5);
        assert_eq!(fnv1a32(b"a"), 0xe40c_292c);
        assert_eq!(fnv1a32(b"foobar"), 0xbf9c_f968);
    }

    #[test]
    fn owner_matches_the_formatted_key() {
        for (topic, partition) in [
            ("t", 0),
            ("orders", 7),
            ("x", 1234567890),
            ("load_test", u32::MAX),
        ] {
            let key = format!("{topic}/{partition}");
            for cores in 1..5 {
                assert_eq!(
                    partition_owner(topic, partition, cores),
                    fnv1a32(key.as_bytes()) as usize % cores
                );
            }
        }
    }
}
