//! S3 users: access key -> (name, secret), stored in the cluster as the omap of one object.
//! A user has one or more access keys (records with the same name); keys are added and
//! revoked one by one, and removing a user revokes all of them. The gateway caches records
//! for verifying signatures and re-checks a cached key against the cluster on every request
//! ([`Users::recheck`]), so a revoked key is refused at once. Implements s3s's `S3Auth` so
//! SigV4 (headers, presigned URLs, aws-chunked) is verified against these secrets.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rand::Rng;
use s3s::auth::{S3Auth, SecretKey};
use s3s::{s3_error, S3Result};
use serde::{Deserialize, Serialize};

use thiserror::Error;

use crate::backend::{Backend, BackendError};
use crate::buckets::now_ms;
use crate::data::internal;
use crate::identity::Identity;
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

impl User {
    /// The creation day, `YYYY-MM-DD` (UTC).
    pub fn created_date(&self) -> String {
        time::OffsetDateTime::from_unix_timestamp(self.created_ms.div_euclid(1000))
            .map(|t| t.date().to_string())
            .unwrap_or_default()
    }
}

fn random_string(len: usize, alphabet: &[u8]) -> String {
    let mut rng = rand::rng();
    (0..len)
        .map(|_| alphabet[rng.random_range(0..alphabet.len())] as char)
        .collect()
}

/// Errors managing users.
#[derive(Debug, Error)]
pub enum UserError {
    /// Names are 1..=64 printable characters.
    #[error("invalid user name `{0}` (1..=64 printable characters, no `/`)")]
    InvalidName(String),
    /// `create` of a name that has keys already.
    #[error("user `{0}` exists (add a key with `cairn s3 user key add`)")]
    Exists(String),
    /// No key belongs to this name.
    #[error("no user `{0}`")]
    NoSuchUser(String),
    /// The access key is not one of the user's.
    #[error("user `{user}` has no access key `{key}`")]
    NoSuchKey {
        /// User name.
        user: String,
        /// Access key asked for.
        key: String,
    },
    /// The user still owns buckets (they would be left without an owner).
    #[error("user `{user}` owns {count} bucket(s) ({first}...); delete them first")]
    OwnsBuckets {
        /// User name.
        user: String,
        /// How many.
        count: usize,
        /// One of them.
        first: String,
    },
    /// The user store could not be read or written.
    #[error(transparent)]
    Backend(#[from] BackendError),
}

fn check_name(name: &str) -> Result<(), UserError> {
    if name.is_empty()
        || name.len() > 64
        || name.contains('/')
        || name.chars().any(|c| c.is_control())
    {
        return Err(UserError::InvalidName(name.to_string()));
    }
    Ok(())
}

async fn store_new_key(backend: &dyn Backend, name: &str) -> Result<User, UserError> {
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

/// Every stored access key, in key order.
pub async fn list_users(backend: &dyn Backend) -> Result<Vec<User>, UserError> {
    let mut out = Vec::new();
    let mut after = Vec::new();
    loop {
        let (page, more) = backend.omap_list(USERS, &after, &[], 1000).await?;
        for (k, v) in &page {
            let user: User = unseal(v).map_err(|e| {
                BackendError::Cluster(format!(
                    "user record of {}: {e}",
                    String::from_utf8_lossy(k)
                ))
            })?;
            out.push(user);
            after.clone_from(k);
        }
        if !more || page.is_empty() {
            return Ok(out);
        }
    }
}

/// The access keys of user `name`.
pub async fn keys_of(backend: &dyn Backend, name: &str) -> Result<Vec<User>, UserError> {
    Ok(list_users(backend)
        .await?
        .into_iter()
        .filter(|u| u.name == name)
        .collect())
}

/// Creates a user with a fresh access key and stores it (Exists if the name has keys).
pub async fn create_user(backend: &dyn Backend, name: &str) -> Result<User, UserError> {
    check_name(name)?;
    if !keys_of(backend, name).await?.is_empty() {
        return Err(UserError::Exists(name.to_string()));
    }
    store_new_key(backend, name).await
}

/// Gives an existing user another access key (with its own secret).
pub async fn add_key(backend: &dyn Backend, name: &str) -> Result<User, UserError> {
    check_name(name)?;
    if keys_of(backend, name).await?.is_empty() {
        return Err(UserError::NoSuchUser(name.to_string()));
    }
    store_new_key(backend, name).await
}

/// Revokes one access key of user `name`.
pub async fn remove_key(backend: &dyn Backend, name: &str, key: &str) -> Result<(), UserError> {
    match find_user(backend, key).await? {
        Some(u) if u.name == name => {
            backend
                .omap_remove(USERS, &[key.as_bytes().to_vec()])
                .await?;
            Ok(())
        }
        _ => Err(UserError::NoSuchKey {
            user: name.to_string(),
            key: key.to_string(),
        }),
    }
}

/// Removes user `name` and every key of it; refused while it owns buckets (`owned`: the
/// names of the buckets it owns). Returns how many keys were revoked.
pub async fn remove_user(
    backend: &dyn Backend,
    name: &str,
    owned: &[String],
) -> Result<usize, UserError> {
    if let Some(first) = owned.first() {
        return Err(UserError::OwnsBuckets {
            user: name.to_string(),
            count: owned.len(),
            first: first.clone(),
        });
    }
    let keys = keys_of(backend, name).await?;
    if keys.is_empty() {
        return Err(UserError::NoSuchUser(name.to_string()));
    }
    let names: Vec<Vec<u8>> = keys
        .iter()
        .map(|u| u.access_key.as_bytes().to_vec())
        .collect();
    backend.omap_remove(USERS, &names).await?;
    Ok(keys.len())
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

    /// The user of an access key (InvalidAccessKeyId if none), and whether it was read from
    /// the cluster just now (otherwise it came from the cache, and [`Users::recheck`] must
    /// confirm it is still there before the request is served).
    pub async fn lookup(&self, access_key: &str) -> S3Result<(User, bool)> {
        if let Some(u) = self
            .cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(access_key)
        {
            return Ok((u.clone(), false));
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
        Ok((user, true))
    }

    /// Confirms that a key taken from the cache still belongs to the same user in the cluster
    /// (one omap read; a key's secret never changes), so a key revoked or a user removed
    /// through any gateway or the CLI is refused from the next request on. A key that is gone
    /// is dropped from the cache and the request is InvalidAccessKeyId.
    pub async fn recheck(&self, id: &Identity) -> S3Result<()> {
        if id.fresh {
            return Ok(());
        }
        let stored = find_user(self.backend.as_ref(), &id.access_key)
            .await
            .map_err(internal)?;
        if stored.is_some_and(|u| u.name == id.user) {
            return Ok(());
        }
        self.cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id.access_key);
        Err(s3_error!(
            InvalidAccessKeyId,
            "the access key was revoked or changed"
        ))
    }
}

/// `S3Auth` over [`Users`].
pub struct UsersAuth(pub Arc<Users>);

#[async_trait::async_trait]
impl S3Auth for UsersAuth {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        Ok(SecretKey::from(
            self.0.lookup(access_key).await?.0.secret_key,
        ))
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

    /// Keys are added to and revoked from existing users only; removing a user revokes every
    /// key of it, and is refused while it owns buckets; names are checked.
    #[tokio::test]
    async fn keys_are_added_revoked_and_removed_with_their_user() {
        let backend = MemBackend::default();
        let alice = create_user(&backend, "alice").await.unwrap();
        assert!(matches!(
            create_user(&backend, "alice").await,
            Err(UserError::Exists(_))
        ));
        for bad in ["", "a/b", "tab\t", &"x".repeat(65)] {
            assert!(matches!(
                create_user(&backend, bad).await,
                Err(UserError::InvalidName(_))
            ));
        }
        assert!(matches!(
            add_key(&backend, "nobody").await,
            Err(UserError::NoSuchUser(_))
        ));
        let second = add_key(&backend, "alice").await.unwrap();
        assert_eq!(second.name, "alice");
        assert_ne!(second.access_key, alice.access_key);
        let bob = create_user(&backend, "bob").await.unwrap();
        assert_eq!(keys_of(&backend, "alice").await.unwrap().len(), 2);
        assert_eq!(list_users(&backend).await.unwrap().len(), 3);
        // Bob's key is not Alice's to revoke.
        assert!(matches!(
            remove_key(&backend, "alice", &bob.access_key).await,
            Err(UserError::NoSuchKey { .. })
        ));
        remove_key(&backend, "alice", &alice.access_key)
            .await
            .unwrap();
        assert_eq!(find_user(&backend, &alice.access_key).await.unwrap(), None);
        assert!(find_user(&backend, &second.access_key)
            .await
            .unwrap()
            .is_some());
        assert!(matches!(
            remove_user(&backend, "bob", &["photos".into()]).await,
            Err(UserError::OwnsBuckets { count: 1, .. })
        ));
        assert_eq!(remove_user(&backend, "alice", &[]).await.unwrap(), 1);
        assert!(matches!(
            remove_user(&backend, "alice", &[]).await,
            Err(UserError::NoSuchUser(_))
        ));
        assert_eq!(list_users(&backend).await.unwrap(), vec![bob]);
    }

    /// A cached key is re-checked on every request: revoked, it is refused at once and
    /// dropped from the cache.
    #[tokio::test]
    async fn a_revoked_cached_key_is_refused_at_once() {
        let backend: Arc<dyn Backend> = Arc::new(MemBackend::default());
        let alice = create_user(backend.as_ref(), "alice").await.unwrap();
        let users = Users::new(backend.clone());
        let (u, fresh) = users.lookup(&alice.access_key).await.unwrap();
        assert!(fresh);
        assert_eq!(u, alice);
        let (_, fresh) = users.lookup(&alice.access_key).await.unwrap();
        assert!(!fresh, "second lookup is cached");
        let id = Identity {
            user: "alice".into(),
            access_key: alice.access_key.clone(),
            fresh: false,
        };
        users.recheck(&id).await.unwrap();
        remove_key(backend.as_ref(), "alice", &alice.access_key)
            .await
            .unwrap();
        let e = users.recheck(&id).await.unwrap_err();
        assert_eq!(e.code(), &s3s::S3ErrorCode::InvalidAccessKeyId);
        let e = users.lookup(&alice.access_key).await.unwrap_err();
        assert_eq!(
            e.code(),
            &s3s::S3ErrorCode::InvalidAccessKeyId,
            "gone from the cache"
        );
    }
}
