//! The pure half of the messenger's mutual authentication.
//!
//! The dialer sends a request naming its entity, a ticket (empty when the acceptor knows the
//! entity's key itself, as the monitor does), a fresh nonce and the wire mode it wants. The
//! acceptor finds the key K both ends share (the entity's key, or the ticket's session key),
//! answers with its own fresh nonce, the mode chosen and a proof that it knows K; the dialer
//! checks it and answers with its own proof. Each proof is a keyed hash, under a key derived
//! from K for its role, of the [`transcript`] of everything both ends said, so neither can
//! be replayed into another connection or role, and no secret crosses the wire. Both ends then
//! derive this connection's keys from K and the transcript: one MAC key and one cipher key per
//! direction.

use subtle::ConstantTimeEq;

use crate::key::SecretKey;

/// Bytes of each end's nonce.
pub const NONCE_BYTES: usize = 32;
/// Bytes of a proof.
pub const PROOF_BYTES: usize = 32;

/// The hash of the handshake's messages: the dialer's request as sent, the acceptor's nonce
/// and the mode it chose.
pub fn transcript(request: &[u8], acceptor_nonce: &[u8; NONCE_BYTES], mode: u8) -> [u8; 32] {
    let mut h = blake3::Hasher::new_derive_key("cairn 2026-12 msgr handshake transcript");
    h.update(&(request.len() as u64).to_le_bytes());
    h.update(request);
    h.update(acceptor_nonce);
    h.update(&[mode]);
    *h.finalize().as_bytes()
}

fn proof(key: &SecretKey, context: &str, transcript: &[u8; 32]) -> [u8; PROOF_BYTES] {
    let role_key = blake3::derive_key(context, key.as_bytes());
    *blake3::keyed_hash(&role_key, transcript).as_bytes()
}

/// The acceptor's proof that it knows `key`.
pub fn acceptor_proof(key: &SecretKey, transcript: &[u8; 32]) -> [u8; PROOF_BYTES] {
    proof(
        key,
        "cairn 2026-12 msgr handshake acceptor proof",
        transcript,
    )
}

/// The dialer's proof that it knows `key`.
pub fn dialer_proof(key: &SecretKey, transcript: &[u8; 32]) -> [u8; PROOF_BYTES] {
    proof(key, "cairn 2026-12 msgr handshake dialer proof", transcript)
}

/// Whether a received proof equals the expected one (in constant time).
pub fn proof_matches(expected: &[u8; PROOF_BYTES], received: &[u8]) -> bool {
    received.len() == PROOF_BYTES && bool::from(expected.ct_eq(received))
}

/// One direction's keys.
#[derive(Clone)]
pub struct DirectionKeys {
    /// Authenticates every frame.
    pub mac: [u8; 32],
    /// Encrypts frames in secure mode.
    pub cipher: [u8; 32],
}

/// A connection's keys, per direction.
#[derive(Clone)]
pub struct ConnectionKeys {
    /// For frames the dialer sends.
    pub dialer_to_acceptor: DirectionKeys,
    /// For frames the acceptor sends.
    pub acceptor_to_dialer: DirectionKeys,
}

/// The keys of the connection whose handshake had `transcript`, both ends sharing `key`.
pub fn connection_keys(key: &SecretKey, transcript: &[u8; 32]) -> ConnectionKeys {
    let mut material = [0u8; 64];
    material[..32].copy_from_slice(key.as_bytes());
    material[32..].copy_from_slice(transcript);
    let derive = |ctx: &str| blake3::derive_key(ctx, &material);
    ConnectionKeys {
        dialer_to_acceptor: DirectionKeys {
            mac: derive("cairn 2026-12 msgr dialer-to-acceptor mac key"),
            cipher: derive("cairn 2026-12 msgr dialer-to-acceptor cipher key"),
        },
        acceptor_to_dialer: DirectionKeys {
            mac: derive("cairn 2026-12 msgr acceptor-to-dialer mac key"),
            cipher: derive("cairn 2026-12 msgr acceptor-to-dialer cipher key"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proofs_bind_key_role_and_transcript_and_keys_differ_per_direction() {
        let k = SecretKey::generate();
        let t = transcript(b"request", &[1; 32], 1);
        assert_ne!(t, transcript(b"request", &[2; 32], 1));
        assert_ne!(t, transcript(b"request", &[1; 32], 2));
        assert_ne!(t, transcript(b"requesT", &[1; 32], 1));
        let a = acceptor_proof(&k, &t);
        assert!(proof_matches(&a, &acceptor_proof(&k, &t)));
        assert!(!proof_matches(&a, &dialer_proof(&k, &t)), "roles differ");
        assert!(!proof_matches(
            &a,
            &acceptor_proof(&SecretKey::generate(), &t)
        ));
        assert!(!proof_matches(&a, &a[..31]));
        let keys = connection_keys(&k, &t);
        assert_ne!(keys.dialer_to_acceptor.mac, keys.acceptor_to_dialer.mac);
        assert_ne!(keys.dialer_to_acceptor.cipher, keys.dialer_to_acceptor.mac);
        let other = connection_keys(&k, &transcript(b"request", &[3; 32], 1));
        assert_ne!(keys.dialer_to_acceptor.mac, other.dialer_to_acceptor.mac);
    }
}
