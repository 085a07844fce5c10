//! The gateway's settings: one TOML file (unknown keys rejected) or flags, with serde
//! defaults and a doc line on every field. Limits are explicit and checked at startup.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// A configuration that cannot be used.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// File.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// The TOML is malformed or has unknown keys.
    #[error("parsing {path}: {message}")]
    Parse {
        /// File.
        path: String,
        /// Parser message.
        message: String,
    },
    /// A value is out of range.
    #[error("invalid setting: {0}")]
    Invalid(String),
}

/// Per-user and per-bucket token-bucket rates; 0 means unlimited.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RateLimits {
    /// Requests per second per user (burst: one second's worth).
    pub user_requests_per_s: f64,
    /// Request and response body bytes per second per user.
    pub user_bytes_per_s: f64,
    /// Requests per second per bucket.
    pub bucket_requests_per_s: f64,
    /// Body bytes per second per bucket.
    pub bucket_bytes_per_s: f64,
}

/// Gateway settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GatewayConfig {
    /// Monitor address.
    pub mon: SocketAddr,
    /// Who the gateway is to the cluster (its entity and key, from the keyring it was given);
    /// None where the cluster does not authenticate.
    #[serde(skip)]
    pub cluster_auth: Option<cairn_client::tickets::ClientAuth>,
    /// The keyring the gateway authenticates to the cluster with (the command line's global
    /// `--keyring` when unset); read by the command that starts the gateway.
    pub keyring: Option<PathBuf>,
    /// The entity of `keyring` the gateway is (e.g. `client.s3gw`); unset: the keyring's only
    /// client entity.
    pub name: Option<String>,
    /// HTTP listen address.
    pub listen: SocketAddr,
    /// Address of the gateway's Prometheus page (`/metrics`, module `metrics`); none if not
    /// set. Port 0 picks a free one (logged).
    pub metrics: Option<SocketAddr>,
    /// Pool holding buckets, indexes, users and data (created if missing).
    pub pool: String,
    /// PGs of the pool when the gateway creates it.
    pub pool_pg_num: u32,
    /// Index shards of each new bucket.
    pub index_shards: u32,
    /// How long a bucket's record, once read, is trusted by requests that only read the bucket
    /// (GET, HEAD, listing), ms; 0: read it for every request. Writes always read it afresh.
    pub bucket_cache_ms: u64,
    /// Objects up to this size are stored inside their index entry.
    pub inline_max_bytes: u64,
    /// Stripe size of larger objects, bytes.
    pub stripe_bytes: u64,
    /// Largest single PUT or part, bytes (AWS: 5 GiB).
    pub max_put_bytes: u64,
    /// Largest user metadata (names plus values), bytes (AWS: 2 KB).
    pub max_meta_bytes: usize,
    /// Concurrent HTTP connections. One more takes the slot of the connection idle longest
    /// (between requests or still sending its request head); when every connection has a
    /// request in progress it waits up to a second, then is answered 503 SlowDown and closed.
    pub max_connections: usize,
    /// A request body that sends nothing for this long is cut short with RequestTimeout
    /// (400), and the budget it held is given back. Milliseconds.
    pub body_idle_timeout_ms: u64,
    /// A request body must deliver each stripe (or the whole body, if shorter) within this
    /// long, or it is cut short with RequestTimeout: a slow sender holds the body budget for
    /// a bounded time (4 MiB stripes and 120 s: at least 35 KiB/s). Milliseconds.
    pub body_stripe_timeout_ms: u64,
    /// A request body that waits this long for room in the body budget is refused with 503
    /// SlowDown (the client retries later). Milliseconds.
    pub body_admit_timeout_ms: u64,
    /// Request bodies being received and stored at once, bytes (each body counts its length,
    /// at most one stripe; a body being striped holds at most three stripes in memory). Bodies
    /// beyond wait, first come first served, before their first byte is read: under load every
    /// PUT then waits its turn instead of all of them sharing the machine and finishing in
    /// random order (PUT 4 MiB at 64 requests: p99 2.7 s -> 1.5 s at the same throughput).
    /// 0: no limit.
    pub max_inflight_body_bytes: u64,
    /// Region in bucket locations.
    pub region: String,
    /// PEM certificate chain (leaf first) to serve HTTPS with; with `tls_key`. Unset: plain
    /// HTTP.
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of `tls_cert`.
    pub tls_key: Option<PathBuf>,
    /// Rate limits.
    pub limits: RateLimits,
    /// Domain names of virtual-hosted-style requests (`BUCKET.DOMAIN`); path-style requests
    /// are served either way. Empty: path style only.
    pub domains: Vec<String>,
    /// Seconds in a lifecycle day (86,400; shorter only to test lifecycle rules, as radosgw's
    /// `rgw_lc_debug_interval`).
    pub lifecycle_day_secs: u64,
    /// Pause between two lifecycle passes, ms.
    pub lifecycle_interval_ms: u64,
    /// Storage classes besides STANDARD, each the pool its objects' data goes to (created if
    /// missing, as `pool`): `[storage_classes]` with `COLD = "s3-cold"`. Objects name one on
    /// PUT (`x-amz-storage-class`) or move to one by a lifecycle transition; indexes stay in
    /// `pool`.
    pub storage_classes: BTreeMap<String, String>,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            cluster_auth: None,
            keyring: None,
            name: None,
            mon: "127.0.0.1:6789".parse().expect("literal"),
            listen: "127.0.0.1:7480".parse().expect("literal"),
            metrics: None,
            pool: "s3".into(),
            pool_pg_num: 32,
            index_shards: 16,
            bucket_cache_ms: 1000,
            inline_max_bytes: 64 << 10,
            stripe_bytes: 4 << 20,
            max_put_bytes: 5 << 30,
            max_meta_bytes: 2048,
            max_connections: 256,
            body_idle_timeout_ms: 30_000,
            body_stripe_timeout_ms: 120_000,
            body_admit_timeout_ms: 30_000,
            max_inflight_body_bytes: 32 << 20,
            region: "us-east-1".into(),
            tls_cert: None,
            tls_key: None,
            limits: RateLimits::default(),
            domains: Vec::new(),
            lifecycle_day_secs: 86_400,
            lifecycle_interval_ms: 3_600_000,
            storage_classes: BTreeMap::new(),
        }
    }
}

/// Largest stripe: one cluster message must carry it with room to spare.
pub const MAX_STRIPE_BYTES: u64 = 32 << 20;
/// Largest inline object: it lives in one omap value.
pub const MAX_INLINE_BYTES: u64 = 512 << 10;
/// Most index shards per bucket.
pub const MAX_INDEX_SHARDS: u32 = 1024;

impl GatewayConfig {
    /// Reads a TOML file; unknown keys are errors.
    pub fn load(path: &Path) -> Result<GatewayConfig, ConfigError> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: p.clone(),
            source,
        })?;
        let cfg: GatewayConfig = toml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: p,
            message: e.to_string(),
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks every limit.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(m));
        if self.stripe_bytes == 0 || self.stripe_bytes > MAX_STRIPE_BYTES {
            return bad(format!("stripe_bytes must be 1..={MAX_STRIPE_BYTES}"));
        }
        if self.inline_max_bytes > MAX_INLINE_BYTES.min(self.stripe_bytes) {
            return bad(format!(
                "inline_max_bytes must be <= {MAX_INLINE_BYTES} and <= stripe_bytes"
            ));
        }
        if self.index_shards == 0 || self.index_shards > MAX_INDEX_SHARDS {
            return bad(format!("index_shards must be 1..={MAX_INDEX_SHARDS}"));
        }
        if self.max_connections == 0 || self.pool.is_empty() || self.pool_pg_num == 0 {
            return bad("max_connections, pool and pool_pg_num must be set".into());
        }
        for (name, ms) in [
            ("body_idle_timeout_ms", self.body_idle_timeout_ms),
            ("body_stripe_timeout_ms", self.body_stripe_timeout_ms),
            ("body_admit_timeout_ms", self.body_admit_timeout_ms),
        ] {
            if ms == 0 {
                return bad(format!("{name} must be > 0"));
            }
        }
        if self.lifecycle_day_secs == 0 || self.lifecycle_interval_ms < 100 {
            return bad("lifecycle_day_secs must be > 0 and lifecycle_interval_ms >= 100".into());
        }
        if let Some(d) = self.domains.iter().find(|d| {
            d.is_empty()
                || d.starts_with('.')
                || d.contains(|c: char| c == '/' || c == ':' || c.is_whitespace())
        }) {
            return bad(format!("domains: `{d}` is not a domain name"));
        }
        crate::storage_class::check_classes(&self.storage_classes).map_err(ConfigError::Invalid)?;
        if self.tls_cert.is_some() != self.tls_key.is_some() {
            return bad("tls_cert and tls_key are set together".into());
        }
        let l = &self.limits;
        for (name, v) in [
            ("user_requests_per_s", l.user_requests_per_s),
            ("user_bytes_per_s", l.user_bytes_per_s),
            ("bucket_requests_per_s", l.bucket_requests_per_s),
            ("bucket_bytes_per_s", l.bucket_bytes_per_s),
        ] {
            if !v.is_finite() || v < 0.0 {
                return bad(format!("limits.{name} must be a finite number >= 0"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_unknown_keys_rejected() {
        GatewayConfig::default().validate().unwrap();
        let ok: GatewayConfig =
            toml::from_str("listen = \"127.0.0.1:9000\"\n[limits]\nuser_requests_per_s = 5.0\n")
                .unwrap();
        assert_eq!(ok.limits.user_requests_per_s, 5.0);
        assert!(toml::from_str::<GatewayConfig>("listne = \"x\"").is_err());
        assert!(toml::from_str::<GatewayConfig>("[limits]\nfoo = 1.0").is_err());
        let cfg = GatewayConfig {
            stripe_bytes: 0,
            ..Default::default()
        };
        assert!(cfg.validate().is_err());
        let half_tls = GatewayConfig {
            tls_cert: Some("cert.pem".into()),
            ..Default::default()
        };
        assert!(half_tls.validate().is_err());
        let tls: GatewayConfig =
            toml::from_str("tls_cert = \"/c.pem\"\ntls_key = \"/k.pem\"\n").unwrap();
        tls.validate().unwrap();
        let classes: GatewayConfig =
            toml::from_str("[storage_classes]\nCOLD = \"s3-cold\"\n").unwrap();
        classes.validate().unwrap();
        assert_eq!(classes.storage_classes["COLD"], "s3-cold");
        for bad in ["STANDARD = \"x\"", "cold = \"x\"", "COLD = \"\""] {
            let cfg: GatewayConfig =
                toml::from_str(&format!("[storage_classes]\n{bad}\n")).unwrap();
            assert!(cfg.validate().is_err(), "{bad}");
        }
    }
}
