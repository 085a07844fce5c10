//! Secret keys and fresh random values.

use std::fmt;

use base64_simd::STANDARD as BASE64;
use subtle::ConstantTimeEq;

use crate::error::AuthError;

/// Bytes of a secret key.
pub const KEY_BYTES: usize = 32;

/// A 256-bit secret: an entity's long-term key, a service secret or a ticket's session key.
/// Compared in constant time; never printed (its `Debug` hides it).
#[derive(Clone)]
pub struct SecretKey([u8; KEY_BYTES]);

impl SecretKey {
    /// A new key from the operating system's random source.
    pub fn generate() -> SecretKey {
        SecretKey(random_bytes())
    }

    /// The key made of these bytes.
    pub fn from_bytes(bytes: [u8; KEY_BYTES]) -> SecretKey {
        SecretKey(bytes)
    }

    /// The key's bytes (to derive other keys from, or to seal it).
    pub fn as_bytes(&self) -> &[u8; KEY_BYTES] {
        &self.0
    }

    /// The key in base64, as keyring files hold it.
    pub fn to_base64(&self) -> String {
        BASE64.encode_to_string(self.0)
    }

    /// A key from its base64 form.
    pub fn from_base64(text: &str) -> Result<SecretKey, AuthError> {
        let bytes = BASE64
            .decode_to_vec(text.trim())
            .map_err(|_| AuthError::BadKey("not base64".into()))?;
        let arr: [u8; KEY_BYTES] = bytes.try_into().map_err(|b: Vec<u8>| {
            AuthError::BadKey(format!("{} bytes, a key has {KEY_BYTES}", b.len()))
        })?;
        Ok(SecretKey(arr))
    }
}

impl PartialEq for SecretKey {
    fn eq(&self, other: &Self) -> bool {
        self.0.ct_eq(&other.0).into()
    }
}

impl Eq for SecretKey {}

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretKey(..)")
    }
}

/// `N` bytes from the operating system's random source (keys, nonces, session ids).
///
/// # Panics
/// When the operating system cannot supply randomness: nothing secure can be done then.
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut out = [0u8; N];
    getrandom::fill(&mut out).expect("the operating system's random source failed");
    out
}

/// A random 64-bit value nobody can predict (a session id, an incarnation).
pub fn random_u64() -> u64 {
    u64::from_le_bytes(random_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_in_base64_and_bad_text_is_refused() {
        let k = SecretKey::generate();
        assert_eq!(SecretKey::from_base64(&k.to_base64()).unwrap(), k);
        assert_ne!(SecretKey::generate(), k, "two generated keys differ");
        assert!(matches!(
            SecretKey::from_base64("not base64!"),
            Err(AuthError::BadKey(_))
        ));
        assert!(SecretKey::from_base64(&BASE64.encode_to_string([1u8; 16])).is_err());
        assert_eq!(format!("{k:?}"), "SecretKey(..)");
    }
}
