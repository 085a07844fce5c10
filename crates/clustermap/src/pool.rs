//! Pools and placement-group ids, with Ceph's hashing from object names to PG seeds.
//!
//! Owns `ceph_stable_mod`, the pg_num masks, the placement seed (`pps`) and the object-name
//! hash (rjenkins string hash over `namespace \x1f key`). Pure functions only.

use std::fmt;

use cairn_crush::hash::{hash32_2, str_hash};
use serde::{Deserialize, Serialize};

use crate::error::MapError;

/// A placement group: pool id and seed (`1.1a` in Ceph's notation, seed in hex).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PgId {
    /// Pool id.
    pub pool: i64,
    /// Placement seed, `< pg_num`.
    pub seed: u32,
}

impl fmt::Display for PgId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:x}", self.pool, self.seed)
    }
}

impl std::str::FromStr for PgId {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (pool, seed) = s
            .split_once('.')
            .ok_or_else(|| format!("`{s}` is not a PG id (POOL.SEED)"))?;
        Ok(PgId {
            pool: pool.parse().map_err(|_| format!("bad pool in `{s}`"))?,
            seed: u32::from_str_radix(seed, 16).map_err(|_| format!("bad seed in `{s}`"))?,
        })
    }
}

/// Ceph's `ceph_stable_mod`: maps `x` into `0..b` so that growing `b` moves few values.
pub fn stable_mod(x: u32, b: u32, bmask: u32) -> u32 {
    if x & bmask < b {
        x & bmask
    } else {
        x & (bmask >> 1)
    }
}

/// `(1 << bits(n - 1)) - 1`: the smallest all-ones mask covering `0..n`.
pub fn mask_for(n: u32) -> u32 {
    if n <= 1 {
        return 0;
    }
    u32::MAX >> (n - 1).leading_zeros()
}

/// A replicated pool.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pool {
    /// Pool id.
    pub id: i64,
    /// Name.
    pub name: String,
    /// Replicas per object.
    pub size: u32,
    /// Replicas needed to accept writes.
    pub min_size: u32,
    /// Number of PGs.
    pub pg_num: u32,
    /// Number of PGs used for placement (<= pg_num while splitting).
    pub pgp_num: u32,
    /// CRUSH rule id.
    pub crush_rule: i32,
    /// Mix the pool id into the placement seed (Ceph's default `hashpspool` flag).
    pub hashpspool: bool,
}

impl Pool {
    /// A replicated pool with Ceph's defaults (hashpspool, pgp_num = pg_num, min_size =
    /// size - size/2).
    pub fn replicated(
        id: i64,
        name: &str,
        size: u32,
        pg_num: u32,
        rule: i32,
    ) -> Result<Self, MapError> {
        let pool = Pool {
            id,
            name: name.to_string(),
            size,
            min_size: size - size / 2,
            pg_num,
            pgp_num: pg_num,
            crush_rule: rule,
            hashpspool: true,
        };
        pool.validate()?;
        Ok(pool)
    }

    /// Checks the invariants of the pool parameters.
    pub fn validate(&self) -> Result<(), MapError> {
        if self.size == 0 || self.size > 32 {
            return Err(MapError::InvalidPool(format!(
                "size {} not in 1..=32",
                self.size
            )));
        }
        if self.min_size == 0 || self.min_size > self.size {
            return Err(MapError::InvalidPool(format!(
                "min_size {} not in 1..=size",
                self.min_size
            )));
        }
        if self.pg_num == 0 || self.pgp_num == 0 || self.pgp_num > self.pg_num {
            return Err(MapError::InvalidPool(format!(
                "pg_num {} / pgp_num {} invalid",
                self.pg_num, self.pgp_num
            )));
        }
        if self.id < 0 {
            return Err(MapError::InvalidPool(format!(
                "pool id {} is negative",
                self.id
            )));
        }
        Ok(())
    }

    /// All PG ids of the pool.
    pub fn pgs(&self) -> impl Iterator<Item = PgId> + '_ {
        (0..self.pg_num).map(move |seed| PgId {
            pool: self.id,
            seed,
        })
    }

    /// The object-name hash (`pg_pool_t::hash_key`): namespace and key joined by 0x1f.
    pub fn hash_key(key: &str, namespace: &str) -> u32 {
        if namespace.is_empty() {
            return str_hash(key.as_bytes());
        }
        let mut buf = Vec::with_capacity(namespace.len() + 1 + key.len());
        buf.extend_from_slice(namespace.as_bytes());
        buf.push(0x1f);
        buf.extend_from_slice(key.as_bytes());
        str_hash(&buf)
    }

    /// The PG of an object (`locator` overrides the name for placement when non-empty).
    pub fn object_pg(&self, name: &str, namespace: &str, locator: &str) -> PgId {
        let key = if locator.is_empty() { name } else { locator };
        let raw = Self::hash_key(key, namespace);
        PgId {
            pool: self.id,
            seed: stable_mod(raw, self.pg_num, mask_for(self.pg_num)),
        }
    }

    /// The CRUSH input for a PG (`raw_pg_to_pps`).
    pub fn pps(&self, pg: PgId) -> u32 {
        let folded = stable_mod(pg.seed, self.pgp_num, mask_for(self.pgp_num));
        if self.hashpspool {
            hash32_2(folded, self.hash_id())
        } else {
            folded.wrapping_add(self.hash_id())
        }
    }

    /// The pool id as CRUSH's input takes it: its low 32 bits (Ceph passes the 64-bit id
    /// where the hash takes an unsigned 32-bit value).
    fn hash_id(&self) -> u32 {
        let b = self.id.to_le_bytes();
        u32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_mod_matches_definition() {
        assert_eq!(mask_for(240), 255);
        assert_eq!(mask_for(256), 255);
        assert_eq!(mask_for(257), 511);
        assert_eq!(stable_mod(250, 240, 255), 250 & 127);
        assert_eq!(stable_mod(100, 240, 255), 100);
    }

    #[test]
    fn pg_ids_print_and_parse_in_hex() {
        let pg = PgId {
            pool: 1,
            seed: 0xef,
        };
        assert_eq!(pg.to_string(), "1.ef");
        assert_eq!("1.ef".parse::<PgId>().unwrap(), pg);
        assert!("1".parse::<PgId>().is_err());
        assert!("x.1".parse::<PgId>().is_err());
    }

    #[test]
    fn invalid_pools_are_rejected() {
        assert!(Pool::replicated(1, "p", 0, 8, 0).is_err());
        assert!(Pool::replicated(1, "p", 3, 0, 0).is_err());
        assert!(Pool::replicated(-1, "p", 3, 8, 0).is_err());
        assert!(Pool::replicated(1, "p", 3, 8, 0).is_ok());
    }
}
