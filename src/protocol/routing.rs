//! 32-bit FNV-1a, the hash of the wire contract: a keyed record's partition (clients), an
//! offsets key's shard, and on one node the core that owns a partition or coordinates a
//! group (`shard::placement`, the only place that turns a hash into a place).

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
}
