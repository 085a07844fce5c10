//! The gateway's view of the cluster: named objects with data and an ordered omap. The
//! cluster implementation goes through `cairn-client` only (the gateway never reaches into
//! OSD code); the memory implementation backs unit and property tests. Nothing here knows
//! about S3.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use cairn_client::{Client, ClientError};
use thiserror::Error;

use crate::convert::sat_usize;

/// An omap page: entries in key order.
pub type OmapPage = Vec<(Vec<u8>, Vec<u8>)>;

/// Errors of the object layer.
#[derive(Debug, Error)]
pub enum BackendError {
    /// The object does not exist.
    #[error("no object `{0}`")]
    NotFound(String),
    /// The pool reached its quota: nothing more can be written to it (removals still work).
    #[error("quota exceeded: {0}")]
    QuotaExceeded(String),
    /// An OSD holding a copy is full (past its full ratio): writes are refused until space is
    /// freed or added (removals still work).
    #[error("out of space: {0}")]
    NoSpace(String),
    /// Anything else the cluster reported (timeout, checksum, invalid request).
    #[error("cluster: {0}")]
    Cluster(String),
}

impl From<ClientError> for BackendError {
    fn from(e: ClientError) -> Self {
        match e {
            ClientError::NotFound(name) => BackendError::NotFound(name),
            ClientError::QuotaExceeded(why) => BackendError::QuotaExceeded(why),
            ClientError::NoSpace(why) => BackendError::NoSpace(why),
            other => BackendError::Cluster(other.to_string()),
        }
    }
}

/// Objects with data and an omap, in one pool.
#[async_trait]
pub trait Backend: Send + Sync + 'static {
    /// Replaces an object's data.
    async fn put(&self, name: &str, data: &[u8]) -> Result<(), BackendError>;
    /// [`Backend::put`] of bytes the caller owns (no copy where the implementation can avoid
    /// one).
    async fn put_bytes(&self, name: &str, data: Bytes) -> Result<(), BackendError> {
        self.put(name, &data).await
    }
    /// Reads `len` bytes at `offset` (fewer at the end).
    async fn read_range(&self, name: &str, offset: u64, len: u64) -> Result<Bytes, BackendError>;
    /// Deletes an object; deleting a missing object succeeds.
    async fn remove(&self, name: &str) -> Result<(), BackendError>;
    /// Sets omap entries atomically (creates the object if needed).
    async fn omap_set(
        &self,
        name: &str,
        entries: &[(Vec<u8>, Vec<u8>)],
    ) -> Result<(), BackendError>;
    /// Removes omap keys atomically; a missing object succeeds.
    async fn omap_remove(&self, name: &str, keys: &[Vec<u8>]) -> Result<(), BackendError>;
    /// The object's version: it changes with every write to the object (data or omap); 0
    /// for an object that does not exist.
    async fn version(&self, name: &str) -> Result<u64, BackendError>;
    /// Sets omap entries atomically only while the object is still at `expected` (from
    /// [`Backend::version`]); false, and nothing written, when anything wrote to it since.
    async fn omap_set_if(
        &self,
        name: &str,
        entries: &[(Vec<u8>, Vec<u8>)],
        expected: u64,
    ) -> Result<bool, BackendError>;
    /// Up to `max` entries with `prefix` and key > `after` (empty: from the start), in key
    /// order, and whether more follow. A missing object lists as empty.
    async fn omap_list(
        &self,
        name: &str,
        after: &[u8],
        prefix: &[u8],
        max: u32,
    ) -> Result<(OmapPage, bool), BackendError>;
}

/// The cluster through `cairn-client`, in one pool.
pub struct ClusterBackend {
    client: Arc<Client>,
    pool: String,
}

impl ClusterBackend {
    /// Objects of `pool` through `client`.
    pub fn new(client: Arc<Client>, pool: &str) -> Self {
        ClusterBackend {
            client,
            pool: pool.to_string(),
        }
    }
}

#[async_trait]
impl Backend for ClusterBackend {
    async fn put(&self, name: &str, data: &[u8]) -> Result<(), BackendError> {
        self.client.write_full(&self.pool, name, data).await?;
        Ok(())
    }

    async fn put_bytes(&self, name: &str, data: Bytes) -> Result<(), BackendError> {
        self.client.write_full_bytes(&self.pool, name, data).await?;
        Ok(())
    }

    async fn read_range(&self, name: &str, offset: u64, len: u64) -> Result<Bytes, BackendError> {
        Ok(self
            .client
            .read_range_bytes(&self.pool, name, offset, len)
            .await?)
    }

    async fn remove(&self, name: &str) -> Result<(), BackendError> {
        match self.client.remove(&self.pool, name).await {
            Ok(()) | Err(ClientError::NotFound(_)) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    async fn omap_set(
        &self,
        name: &str,
        entries: &[(Vec<u8>, Vec<u8>)],
    ) -> Result<(), BackendError> {
        self.client.omap_set(&self.pool, name, entries).await?;
        Ok(())
    }

    async fn omap_remove(&self, name: &str, keys: &[Vec<u8>]) -> Result<(), BackendError> {
        match self.client.omap_remove(&self.pool, name, keys).await {
            Ok(_) | Err(ClientError::NotFound(_)) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    async fn version(&self, name: &str) -> Result<u64, BackendError> {
        match self.client.stat(&self.pool, name).await {
            Ok((_, version)) => Ok(version),
            Err(ClientError::NotFound(_)) => Ok(0),
            Err(e) => Err(e.into()),
        }
    }

    async fn omap_set_if(
        &self,
        name: &str,
        entries: &[(Vec<u8>, Vec<u8>)],
        expected: u64,
    ) -> Result<bool, BackendError> {
        match self
            .client
            .omap_set_if(&self.pool, name, entries, expected)
            .await
        {
            Ok(_) => Ok(true),
            Err(ClientError::VersionMismatch { .. }) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    async fn omap_list(
        &self,
        name: &str,
        after: &[u8],
        prefix: &[u8],
        max: u32,
    ) -> Result<(OmapPage, bool), BackendError> {
        match self
            .client
            .omap_list(&self.pool, name, after, prefix, max)
            .await
        {
            Ok(page) => Ok(page),
            Err(ClientError::NotFound(_)) => Ok((Vec::new(), false)),
            Err(e) => Err(e.into()),
        }
    }
}

#[derive(Default)]
struct MemObject {
    data: Option<Vec<u8>>,
    omap: BTreeMap<Vec<u8>, Vec<u8>>,
    version: u64,
}

impl MemObject {
    /// Sets omap entries: one write, one new version.
    fn set_omap(&mut self, entries: &[(Vec<u8>, Vec<u8>)]) {
        for (k, v) in entries {
            self.omap.insert(k.clone(), v.clone());
        }
        self.version += 1;
    }
}

/// The version of object `name` among `objects` (0: it does not exist).
fn version_of(objects: &HashMap<String, MemObject>, name: &str) -> u64 {
    objects.get(name).map_or(0, |obj| obj.version)
}

/// Objects in memory, with the cluster's semantics; for tests.
#[derive(Default)]
pub struct MemBackend {
    objects: Mutex<HashMap<String, MemObject>>,
}

impl MemBackend {
    /// Names of the objects that exist (data or omap), sorted.
    pub fn names(&self) -> Vec<String> {
        let objects = self.objects.lock().unwrap_or_else(|p| p.into_inner());
        let mut names: Vec<String> = objects.keys().cloned().collect();
        names.sort();
        names
    }

    fn with<R>(&self, f: impl FnOnce(&mut HashMap<String, MemObject>) -> R) -> R {
        f(&mut self.objects.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

#[async_trait]
impl Backend for MemBackend {
    async fn put(&self, name: &str, data: &[u8]) -> Result<(), BackendError> {
        self.with(|o| {
            let obj = o.entry(name.to_string()).or_default();
            obj.data = Some(data.to_vec());
            obj.version += 1;
        });
        Ok(())
    }

    async fn read_range(&self, name: &str, offset: u64, len: u64) -> Result<Bytes, BackendError> {
        self.with(|o| {
            let data = o
                .get(name)
                .and_then(|obj| obj.data.as_ref())
                .ok_or_else(|| BackendError::NotFound(name.to_string()))?;
            let start = sat_usize(offset).min(data.len());
            let end = start.saturating_add(sat_usize(len)).min(data.len());
            Ok(Bytes::copy_from_slice(&data[start..end]))
        })
    }

    async fn remove(&self, name: &str) -> Result<(), BackendError> {
        self.with(|o| o.remove(name));
        Ok(())
    }

    async fn omap_set(
        &self,
        name: &str,
        entries: &[(Vec<u8>, Vec<u8>)],
    ) -> Result<(), BackendError> {
        self.with(|o| o.entry(name.to_string()).or_default().set_omap(entries));
        Ok(())
    }

    async fn version(&self, name: &str) -> Result<u64, BackendError> {
        Ok(self.with(|o| version_of(o, name)))
    }

    async fn omap_set_if(
        &self,
        name: &str,
        entries: &[(Vec<u8>, Vec<u8>)],
        expected: u64,
    ) -> Result<bool, BackendError> {
        Ok(self.with(|o| {
            if version_of(o, name) != expected {
                return false;
            }
            o.entry(name.to_string()).or_default().set_omap(entries);
            true
        }))
    }

    async fn omap_remove(&self, name: &str, keys: &[Vec<u8>]) -> Result<(), BackendError> {
        self.with(|o| {
            if let Some(obj) = o.get_mut(name) {
                for k in keys {
                    obj.omap.remove(k);
                }
                obj.version += 1;
            }
        });
        Ok(())
    }

    async fn omap_list(
        &self,
        name: &str,
        after: &[u8],
        prefix: &[u8],
        max: u32,
    ) -> Result<(OmapPage, bool), BackendError> {
        self.with(|o| {
            let Some(obj) = o.get(name) else {
                return Ok((Vec::new(), false));
            };
            let max = max.max(1) as usize;
            let mut page: OmapPage = obj
                .omap
                .iter()
                .filter(|(k, _)| {
                    (after.is_empty() || k.as_slice() > after) && k.starts_with(prefix)
                })
                .take(max + 1)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let more = page.len() > max;
            page.truncate(max);
            Ok((page, more))
        })
    }
}
