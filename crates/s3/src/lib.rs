//! cairn's S3 gateway: buckets, objects, listing, multipart uploads, SigV4 authentication
//! and per-user / per-bucket rate limits over a cairn cluster, on the `s3s` crate for the
//! protocol (routing, XML, signatures). The gateway is only a client of the cluster: every
//! byte and every index entry goes through `cairn-client` (see `backend`).
//!
//! Layout in the cluster (one pool, `s3` by default): a registry object listing buckets, per
//! bucket N index shard objects (omap: key -> entry), an uploads object per bucket, a parts
//! object per upload, a users object, and data stripes `d.{segment-id}.{n}`. See docs/design/s3.md.
#![deny(clippy::cast_possible_truncation)]
#![warn(missing_docs)]

pub mod access;
pub mod access_ops;
pub mod acl;
pub mod authz;
pub mod backend;
pub mod bound;
pub mod bucket_ops;
pub mod buckets;
pub mod checksum;
pub mod chunked;
pub mod config;
pub mod controls_ops;
mod convert;
pub mod cors;
pub mod cors_ops;
pub mod data;
pub mod entry;
pub mod gateway;
pub mod headers;
pub mod identity;
pub mod lifecycle;
pub mod lifecycle_ops;
pub mod lifecycle_pass;
pub mod list_ops;
pub mod listing;
pub mod lock_ops;
pub mod metrics;
pub mod multipart;
pub mod multipart_checksum;
pub mod object_acl;
pub mod object_lock;
pub mod object_ops;
pub mod ownership;
pub mod pager;
pub mod policy;
pub mod public_access;
pub mod ratelimit;
pub mod record;
pub mod server;
pub mod sigv2;
pub mod sigv4;
pub mod slots;
pub mod storage_class;
pub mod tag_ops;
pub mod tagging;
pub mod tls;
pub mod transition;
pub mod users;
pub mod version_ops;
pub mod versions;
pub mod vhost;

use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_client::mon::MonClient;
use cairn_client::{Client, ClientError};
use cairn_proto::mon::Request;
use thiserror::Error;

pub use config::GatewayConfig;
pub use gateway::Gateway;

/// Errors starting the gateway or managing users.
#[derive(Debug, Error)]
pub enum GatewayError {
    /// The settings are unusable.
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    /// The cluster client failed.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The monitor failed.
    #[error(transparent)]
    Mon(#[from] cairn_proto::mon::MonError),
    /// Object layer.
    #[error(transparent)]
    Backend(#[from] backend::BackendError),
    /// Managing users.
    #[error(transparent)]
    User(#[from] users::UserError),
    /// Reading the bucket registry.
    #[error("bucket registry: {0}")]
    Registry(String),
    /// TLS certificate or key.
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// Sockets.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The pool did not appear in the map in time.
    #[error("pool `{0}` did not appear in the cluster map within {1} ms")]
    PoolTimeout(String, u64),
}

/// How long to wait for the gateway's pool to appear.
pub const POOL_WAIT_MS: u64 = 30_000;

fn client_id() -> u64 {
    rand::random::<u64>() >> 1
}

/// Creates `pool` and every storage class's pool (replicas = up OSDs, at most 3) unless they
/// exist, and waits until a client sees them.
pub async fn ensure_pool(cfg: &GatewayConfig) -> Result<Arc<Client>, GatewayError> {
    let mon_creds = cfg.cluster_auth.as_ref().map(|a| a.mon_credentials());
    let mon = MonClient::connect_as(cfg.mon, client_id(), mon_creds).await;
    mon.subscribe(10_000).await?;
    mon.wait_for_epoch(1, 10_000).await?;
    let pools: Vec<&String> = std::iter::once(&cfg.pool)
        .chain(cfg.storage_classes.values())
        .collect();
    for pool in &pools {
        let map = mon.map();
        let exists = map
            .as_ref()
            .is_some_and(|m| m.placement.pool_named(pool).is_some());
        if exists {
            continue;
        }
        let up = map.map_or(0, |m| m.osds.values().filter(|o| o.up).count());
        let created = mon
            .op(
                Request::CreatePool {
                    name: pool.to_string(),
                    size: u32::try_from(up.clamp(1, 3)).expect("clamped to 1..=3"),
                    pg_num: cfg.pool_pg_num,
                },
                10_000,
            )
            .await;
        if let Err(e) = created {
            if !e.to_string().contains("exists") {
                return Err(e.into());
            }
        }
    }
    let client =
        Arc::new(Client::connect_as(cfg.mon, client_id(), cfg.cluster_auth.clone()).await?);
    let deadline = Instant::now() + Duration::from_millis(POOL_WAIT_MS);
    while let Some(missing) = pools.iter().find(|p| {
        client
            .map()
            .is_none_or(|m| m.placement.pool_named(p).is_none())
    }) {
        if Instant::now() > deadline {
            return Err(GatewayError::PoolTimeout(missing.to_string(), POOL_WAIT_MS));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(client)
}

/// Connects to the cluster (creating the pool if needed) and returns a gateway over it.
pub async fn connect(cfg: GatewayConfig) -> Result<Gateway, GatewayError> {
    cfg.validate()?;
    let client = ensure_pool(&cfg).await?;
    let backend: Arc<dyn backend::Backend> =
        Arc::new(backend::ClusterBackend::new(client.clone(), &cfg.pool));
    let classes = cfg
        .storage_classes
        .iter()
        .map(|(name, pool)| {
            let data: Arc<dyn backend::Backend> =
                Arc::new(backend::ClusterBackend::new(client.clone(), pool));
            (name.clone(), data)
        })
        .collect();
    Ok(Gateway::new(backend, cfg)
        .with_storage_classes(classes)
        .with_cluster(client))
}

/// The user of `access_key` stored in the cluster, if any (with its secret).
pub async fn find_user(
    cfg: &GatewayConfig,
    access_key: &str,
) -> Result<Option<users::User>, GatewayError> {
    let client = ensure_pool(cfg).await?;
    let backend = backend::ClusterBackend::new(client, &cfg.pool);
    Ok(users::find_user(&backend, access_key).await?)
}

/// The user store of the gateway's pool (connecting to the cluster, creating the pool if
/// needed).
async fn user_store(cfg: &GatewayConfig) -> Result<backend::ClusterBackend, GatewayError> {
    let client = ensure_pool(cfg).await?;
    Ok(backend::ClusterBackend::new(client, &cfg.pool))
}

/// Creates a user in the cluster and returns it (with its secret).
pub async fn create_user(cfg: &GatewayConfig, name: &str) -> Result<users::User, GatewayError> {
    Ok(users::create_user(&user_store(cfg).await?, name).await?)
}

/// Adds an access key to an existing user and returns it (with its secret).
pub async fn add_key(cfg: &GatewayConfig, name: &str) -> Result<users::User, GatewayError> {
    Ok(users::add_key(&user_store(cfg).await?, name).await?)
}

/// Revokes one access key of a user; running gateways refuse it from their next request.
pub async fn remove_key(cfg: &GatewayConfig, name: &str, key: &str) -> Result<(), GatewayError> {
    Ok(users::remove_key(&user_store(cfg).await?, name, key).await?)
}

/// Removes a user and every key of it (refused while it owns buckets); returns how many keys
/// were revoked.
pub async fn remove_user(cfg: &GatewayConfig, name: &str) -> Result<usize, GatewayError> {
    let store: Arc<dyn backend::Backend> = Arc::new(user_store(cfg).await?);
    let owned: Vec<String> = buckets::list_buckets(&store)
        .await
        .map_err(|e| GatewayError::Registry(e.to_string()))?
        .into_iter()
        .filter(|b| b.owner == name)
        .map(|b| b.name)
        .collect();
    Ok(users::remove_user(store.as_ref(), name, &owned).await?)
}

/// Every access key in the cluster with its user (secrets included: callers print only
/// names and keys).
pub async fn list_users(cfg: &GatewayConfig) -> Result<Vec<users::User>, GatewayError> {
    Ok(users::list_users(&user_store(cfg).await?).await?)
}
