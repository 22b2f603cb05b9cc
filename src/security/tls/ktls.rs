//! Kernel TLS: after rustls finishes a handshake, the traffic keys and record sequence
//! numbers go to the kernel (`setsockopt(SOL_TLS, TLS_TX/TLS_RX)`), which then encrypts
//! and decrypts; sendfile from a segment file keeps working on the socket. This module
//! detects whether the kernel offers it and turns rustls's extracted secrets into the
//! kernel's `tls12_crypto_info_*` structures (linux/tls.h). Handing them to a socket is
//! `server::ktls`.

use rustls::{CipherSuite, ConnectionTrafficSecrets, ExtractedSecrets, ProtocolVersion};

use zeroize::{Zeroize, Zeroizing};

use crate::security::config::KtlsMode;

/// The file that lists the TCP upper-layer protocols the kernel has loaded.
pub const AVAILABLE_ULP: &str = "/proc/sys/net/ipv4/tcp_available_ulp";

/// Whether kernel TLS can be used here, and if not, why (for the start log line and the
/// metric).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KtlsSupport {
    Available,
    Unavailable {
        reason: String,
    },
    /// Turned off (`--ktls off`).
    Off,
}

impl KtlsSupport {
    /// What `mode` gives on this machine: [`detect`] unless turned off.
    pub fn for_mode(mode: KtlsMode) -> KtlsSupport {
        match mode {
            KtlsMode::Auto => detect(),
            KtlsMode::Off => KtlsSupport::Off,
        }
    }

    pub fn is_available(&self) -> bool {
        matches!(self, KtlsSupport::Available)
    }
}

/// Reads [`AVAILABLE_ULP`]: kTLS needs the `tls` ULP (`modprobe tls` loads it).
pub fn detect() -> KtlsSupport {
    match std::fs::read_to_string(AVAILABLE_ULP) {
        Ok(list) => support_from_list(&list),
        Err(e) => KtlsSupport::Unavailable {
            reason: format!("cannot read {AVAILABLE_ULP}: {e}"),
        },
    }
}

fn support_from_list(list: &str) -> KtlsSupport {
    if list.split_whitespace().any(|ulp| ulp == "tls") {
        KtlsSupport::Available
    } else {
        KtlsSupport::Unavailable {
            reason: format!(
                "the kernel offers no tls ULP ({AVAILABLE_ULP} lists {:?}; try modprobe tls)",
                list.trim()
            ),
        }
    }
}

// linux/tls.h
const TLS_1_2_VERSION: u16 = 0x0303;
const TLS_1_3_VERSION: u16 = 0x0304;
const TLS_CIPHER_AES_GCM_128: u16 = 51;
const TLS_CIPHER_AES_GCM_256: u16 = 52;
const TLS_CIPHER_CHACHA20_POLY1305: u16 = 54;

/// True when [`CryptoInfo::new`] takes the secrets of `suite` (AES-GCM and
/// ChaCha20-Poly1305, TLS 1.2 and 1.3): checked before the secrets are taken out of rustls,
/// which consumes the connection.
pub fn kernel_has_cipher(suite: CipherSuite) -> bool {
    matches!(
        suite,
        CipherSuite::TLS13_AES_128_GCM_SHA256
            | CipherSuite::TLS13_AES_256_GCM_SHA384
            | CipherSuite::TLS13_CHACHA20_POLY1305_SHA256
            | CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
            | CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384
            | CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
            | CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256
            | CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384
            | CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256
    )
}

/// One direction's `tls12_crypto_info_*`: what `setsockopt(SOL_TLS, TLS_TX or TLS_RX)`
/// takes. Its `Debug` shows no key.
#[derive(Clone, PartialEq, Eq)]
pub struct CryptoInfo {
    pub version: u16,
    pub cipher_type: u16,
    /// The explicit part of the nonce (AES-GCM: 8 bytes; ChaCha20-Poly1305: the whole 12).
    pub iv: Vec<u8>,
    pub key: Vec<u8>,
    /// The implicit part of the nonce (AES-GCM: 4 bytes; ChaCha20-Poly1305: none).
    pub salt: Vec<u8>,
    /// The next record's sequence number, big-endian.
    pub rec_seq: [u8; 8],
}

/// The key and nonce are wiped when the structure goes, as rustls wipes its own copies.
impl Drop for CryptoInfo {
    fn drop(&mut self) {
        self.key.zeroize();
        self.iv.zeroize();
        self.salt.zeroize();
    }
}

impl std::fmt::Debug for CryptoInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CryptoInfo")
            .field("version", &format_args!("{:#06x}", self.version))
            .field("cipher_type", &self.cipher_type)
            .field("rec_seq", &u64::from_be_bytes(self.rec_seq))
            .finish_non_exhaustive()
    }
}

/// Why a connection's secrets cannot go to the kernel.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KtlsError {
    #[error("kernel TLS takes TLS 1.2 or 1.3, not {0:?}")]
    Version(ProtocolVersion),
    #[error("the cipher suite has no kernel TLS equivalent")]
    Cipher,
    #[error("rustls gave no secrets: {0}")]
    Extract(String),
}

impl CryptoInfo {
    /// The kernel structure of one direction's secrets, `(sequence, secrets)` from
    /// [`rustls::ExtractedSecrets`].
    pub fn new(
        version: ProtocolVersion,
        (seq, secrets): &(u64, ConnectionTrafficSecrets),
    ) -> Result<CryptoInfo, KtlsError> {
        let version = match version {
            ProtocolVersion::TLSv1_2 => TLS_1_2_VERSION,
            ProtocolVersion::TLSv1_3 => TLS_1_3_VERSION,
            other => return Err(KtlsError::Version(other)),
        };
        // rustls gives the whole 12-byte nonce base for both versions (for TLS 1.2 GCM: the
        // 4-byte salt and the 8-byte explicit nonce); the kernel wants it split for GCM.
        let (cipher_type, key, iv, salt) = match secrets {
            ConnectionTrafficSecrets::Aes128Gcm { key, iv } => (
                TLS_CIPHER_AES_GCM_128,
                key.as_ref(),
                &iv.as_ref()[4..],
                &iv.as_ref()[..4],
            ),
            ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (
                TLS_CIPHER_AES_GCM_256,
                key.as_ref(),
                &iv.as_ref()[4..],
                &iv.as_ref()[..4],
            ),
            ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => (
                TLS_CIPHER_CHACHA20_POLY1305,
                key.as_ref(),
                iv.as_ref(),
                &[][..],
            ),
            _ => return Err(KtlsError::Cipher),
        };
        Ok(CryptoInfo {
            version,
            cipher_type,
            iv: iv.to_vec(),
            key: key.to_vec(),
            salt: salt.to_vec(),
            rec_seq: seq.to_be_bytes(),
        })
    }

    /// Both directions of a finished connection: `(tx, rx)`.
    pub fn pair(
        version: ProtocolVersion,
        secrets: &ExtractedSecrets,
    ) -> Result<(CryptoInfo, CryptoInfo), KtlsError> {
        Ok((
            CryptoInfo::new(version, &secrets.tx)?,
            CryptoInfo::new(version, &secrets.rx)?,
        ))
    }

    /// The structure's bytes as the kernel lays it out: `u16 version, u16 cipher_type` (host
    /// order), then `iv, key, salt, rec_seq`, no padding (every field after the header is a
    /// byte array). Wiped when dropped.
    pub fn to_bytes(&self) -> Zeroizing<Vec<u8>> {
        let mut out = Zeroizing::new(Vec::with_capacity(
            4 + self.iv.len() + self.key.len() + self.salt.len() + 8,
        ));
        out.extend_from_slice(&self.version.to_ne_bytes());
        out.extend_from_slice(&self.cipher_type.to_ne_bytes());
        out.extend_from_slice(&self.iv);
        out.extend_from_slice(&self.key);
        out.extend_from_slice(&self.salt);
        out.extend_from_slice(&self.rec_seq);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tls_ulp_is_found_in_the_list() {
        assert_eq!(support_from_list("mptcp tls\n"), KtlsSupport::Available);
        assert!(
            matches!(support_from_list("mptcp\n"), KtlsSupport::Unavailable { reason } if reason.contains("mptcp"))
        );
        assert!(matches!(
            support_from_list("tlsx\n"),
            KtlsSupport::Unavailable { .. }
        ));
        // Here, detection agrees with the file (CI's kernel lists only mptcp).
        let expected = std::fs::read_to_string(AVAILABLE_ULP).map(|list| support_from_list(&list));
        match expected {
            Ok(expected) => assert_eq!(detect(), expected),
            Err(_) => assert!(matches!(detect(), KtlsSupport::Unavailable { .. })),
        }
    }
}
