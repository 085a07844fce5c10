//! Sealing small values (tickets, session keys, service secrets) with a key: ChaCha20-Poly1305
//! under a key derived from it for one purpose, with a random nonce. A sealed value opens only
//! with the same key and purpose, and any change to it is detected.

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};

use crate::error::AuthError;
use crate::key::{random_bytes, SecretKey};

/// Bytes of the nonce in front of a sealed value.
const NONCE_BYTES: usize = 12;
/// Bytes of the tag behind it.
const TAG_BYTES: usize = 16;
/// Largest plaintext sealed or opened (tickets and keys are far smaller).
pub const MAX_SEALED_BYTES: usize = 64 << 10;

/// What a sealed value is for; each purpose seals under its own key derived from the secret,
/// so a value sealed for one purpose never opens as another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// A ticket, sealed with the service secret.
    Ticket,
    /// A ticket's session key, sealed with the key of the client it was issued to.
    SessionKey,
    /// The OSD service secret, sealed with the key of the OSD it is given to.
    ServiceSecret,
}

impl Purpose {
    fn context(self) -> &'static str {
        match self {
            Purpose::Ticket => "cairn 2026-12 auth: ticket sealing key",
            Purpose::SessionKey => "cairn 2026-12 auth: session key sealing key",
            Purpose::ServiceSecret => "cairn 2026-12 auth: service secret sealing key",
        }
    }
}

fn cipher(key: &SecretKey, purpose: Purpose) -> ChaCha20Poly1305 {
    let derived = blake3::derive_key(purpose.context(), key.as_bytes());
    ChaCha20Poly1305::new(Key::from_slice(&derived))
}

/// `plaintext` sealed with `key` for `purpose`, `aad` authenticated with it (not stored).
pub fn seal(key: &SecretKey, purpose: Purpose, aad: &[u8], plaintext: &[u8]) -> Vec<u8> {
    assert!(
        plaintext.len() <= MAX_SEALED_BYTES,
        "sealing {} bytes, more than the limit",
        plaintext.len()
    );
    let nonce: [u8; NONCE_BYTES] = random_bytes();
    let sealed = cipher(key, purpose)
        .encrypt(
            Nonce::from_slice(&nonce),
            Payload {
                msg: plaintext,
                aad,
            },
        )
        .expect("sealing a bounded plaintext cannot fail");
    let mut out = Vec::with_capacity(NONCE_BYTES + sealed.len());
    out.extend_from_slice(&nonce);
    out.extend_from_slice(&sealed);
    out
}

/// The plaintext of a value [`seal`]ed with `key`, `purpose` and `aad`.
pub fn open(
    key: &SecretKey,
    purpose: Purpose,
    aad: &[u8],
    sealed: &[u8],
) -> Result<Vec<u8>, AuthError> {
    if sealed.len() < NONCE_BYTES + TAG_BYTES
        || sealed.len() > NONCE_BYTES + TAG_BYTES + MAX_SEALED_BYTES
    {
        return Err(AuthError::Unseal);
    }
    let (nonce, body) = sealed.split_at(NONCE_BYTES);
    cipher(key, purpose)
        .decrypt(Nonce::from_slice(nonce), Payload { msg: body, aad })
        .map_err(|_| AuthError::Unseal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_values_open_only_with_their_key_purpose_and_aad_and_unaltered() {
        let k = SecretKey::generate();
        let s = seal(&k, Purpose::Ticket, b"osd", b"hello");
        assert_eq!(open(&k, Purpose::Ticket, b"osd", &s).unwrap(), b"hello");
        assert_ne!(
            seal(&k, Purpose::Ticket, b"osd", b"hello"),
            s,
            "nonces differ"
        );
        assert_eq!(
            open(&SecretKey::generate(), Purpose::Ticket, b"osd", &s),
            Err(AuthError::Unseal)
        );
        assert_eq!(
            open(&k, Purpose::SessionKey, b"osd", &s),
            Err(AuthError::Unseal)
        );
        assert_eq!(
            open(&k, Purpose::Ticket, b"mon", &s),
            Err(AuthError::Unseal)
        );
        for i in 0..s.len() {
            let mut t = s.clone();
            t[i] ^= 0x40;
            assert_eq!(
                open(&k, Purpose::Ticket, b"osd", &t),
                Err(AuthError::Unseal)
            );
        }
        assert_eq!(
            open(&k, Purpose::Ticket, b"osd", &s[..10]),
            Err(AuthError::Unseal)
        );
        assert_eq!(
            open(&k, Purpose::Ticket, b"osd", &[]),
            Err(AuthError::Unseal)
        );
    }
}
