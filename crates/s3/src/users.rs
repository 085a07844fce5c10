//! S3 users: access key -> (name, secret), stored in the cluster as the omap of one object
//! and cached in the gateway after the first lookup. Implements s3s's `S3Auth` so SigV4
//! (headers, presigned URLs, aws-chunked) is verified against these secrets.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rand::Rng;
use s3s::auth::{S3Auth, SecretKey};
use s3s::{s3_error, S3Result};
use serde::{Deserialize, Serialize};

use crate::backend::{Backend, BackendError};
use crate::buckets::now_ms;
use crate::data::internal;
use crate::record::{seal, unseal};

/// Object holding the users.
pub const USERS: &str = "s3.users";
/// Most cached users.
pub const MAX_CACHED_USERS: usize = 10_000;

/// A user's record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    /// User name.
    pub name: String,
    /// Access key id (20 characters, `CA` then upper-case letters and digits).
    pub access_key: String,
    /// Secret key (40 characters).
    pub secret_key: String,
    /// Creation time, ms since the Unix epoch.
    pub created_ms: i64,
}

fn random_string(len: usize, alphabet: &[u8]) -> String {
    let mut rng = rand::rng();
    (0..len)
        .map(|_| alphabet[rng.random_range(0..alphabet.len())] as char)
        .collect()
}

/// Creates a user with fresh keys and stores it.
pub async fn create_user(backend: &dyn Backend, name: &str) -> Result<User, BackendError> {
    if name.is_empty() || name.len() > 64 || name.chars().any(|c| c.is_control()) {
        return Err(BackendError::Cluster(format!(
            "invalid user name `{name}` (1..=64 printable characters)"
        )));
    }
    let upper = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let secret = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let user = User {
        name: name.to_string(),
        access_key: format!("CA{}", random_string(18, upper)),
        secret_key: random_string(40, secret),
        created_ms: now_ms(),
    };
    backend
        .omap_set(USERS, &[(user.access_key.as_bytes().to_vec(), seal(&user))])
        .await?;
    Ok(user)
}

/// The stored user of `access_key`, if there is one (no cache; no user store yet lists as
/// none).
pub async fn find_user(
    backend: &dyn Backend,
    access_key: &str,
) -> Result<Option<User>, BackendError> {
    if access_key.is_empty() || access_key.len() > 128 {
        return Ok(None);
    }
    let (page, _) = backend
        .omap_list(USERS, &[], access_key.as_bytes(), 1)
        .await?;
    match page.first() {
        Some((k, v)) if k == access_key.as_bytes() => unseal(v)
            .map(Some)
            .map_err(|e| BackendError::Cluster(format!("user record of {access_key}: {e}"))),
        _ => Ok(None),
    }
}

/// Users known to the gateway (a cache in front of the cluster).
pub struct Users {
    backend: Arc<dyn Backend>,
    cache: Mutex<HashMap<String, User>>,
}

impl Users {
    /// Users stored through `backend`.
    pub fn new(backend: Arc<dyn Backend>) -> Self {
        Users {
            backend,
            cache: Mutex::default(),
        }
    }

    /// The user of an access key (InvalidAccessKeyId if none).
    pub async fn lookup(&self, access_key: &str) -> S3Result<User> {
        if let Some(u) = self
            .cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(access_key)
        {
            return Ok(u.clone());
        }
        let user = find_user(self.backend.as_ref(), access_key)
            .await
            .map_err(internal)?
            .ok_or_else(|| s3_error!(InvalidAccessKeyId))?;
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= MAX_CACHED_USERS {
            cache.clear();
        }
        cache.insert(access_key.to_string(), user.clone());
        Ok(user)
    }

    /// The user name of a cached access key (every authenticated request's key is cached).
    pub fn name_of(&self, access_key: &str) -> Option<String> {
        self.cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(access_key)
            .map(|u| u.name.clone())
    }
}

/// `S3Auth` over [`Users`].
pub struct UsersAuth(pub Arc<Users>);

#[async_trait::async_trait]
impl S3Auth for UsersAuth {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        Ok(SecretKey::from(self.0.lookup(access_key).await?.secret_key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::MemBackend;

    /// A created user is found by its access key, with its secret; an unknown, empty or
    /// oversized key finds none, also before any user exists.
    #[tokio::test]
    async fn users_are_found_by_access_key_only() {
        let backend = MemBackend::default();
        assert_eq!(find_user(&backend, "CAUNKNOWN").await.unwrap(), None);
        let admin = create_user(&backend, "admin").await.unwrap();
        let other = create_user(&backend, "other").await.unwrap();
        assert_ne!(admin.access_key, other.access_key);
        assert_eq!(
            find_user(&backend, &admin.access_key).await.unwrap(),
            Some(admin.clone())
        );
        assert_eq!(find_user(&backend, "CAUNKNOWN").await.unwrap(), None);
        assert_eq!(find_user(&backend, "").await.unwrap(), None);
        assert_eq!(find_user(&backend, &"C".repeat(129)).await.unwrap(), None);
        let prefix = &admin.access_key[..10];
        assert_eq!(
            find_user(&backend, prefix).await.unwrap(),
            None,
            "a key's prefix is not the key"
        );
    }
}
