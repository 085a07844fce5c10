//! Capabilities: what an entity may do, in Ceph's grammar where it fits.
//!
//! Monitor caps: `allow r` (read maps and status, get tickets), `allow rw` (also change the
//! map: flags, pools, OSD marks), `allow *` (also administer: keys, pool deletion),
//! `profile osd` (what an OSD daemon sends: boot, beacons, failure reports, pg_temp) and
//! `profile mds` (a metadata server: read maps and hold the service secret, so that it can
//! check the tickets clients present to it).
//!
//! OSD caps: one or more comma-separated grants, each `allow PERM [pool=NAME]` with PERM one of
//! `r`, `w`, `x`, `rw`, `rx`, `wx`, `rwx` or `*`, or `profile osd`. `r` reads objects, `w`
//! writes them; `allow *` on every pool also allows administration (`tell`). `profile osd`
//! is what OSDs hold: replica writes, peering, recovery and scrub are accepted only from it.

use std::collections::BTreeMap;

use crate::error::AuthError;

/// Longest capability string accepted.
pub const MAX_CAP_BYTES: usize = 4096;
/// Most grants in one OSD capability.
pub const MAX_GRANTS: usize = 64;

/// What a request to the monitor needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MonAccess {
    /// Reading maps, status and history; asking for a ticket.
    Read,
    /// Changing the map.
    Write,
    /// Administering: keys, capabilities, pool deletion.
    Admin,
    /// What only an OSD daemon sends.
    Osd,
    /// The service secret, which only daemons that accept clients' tickets hold.
    ServiceSecret,
    /// Fencing client instances out of the OSDs (the blocklist): what a lease taker does to
    /// the holder it replaces.
    Blocklist,
}

/// What a request to an OSD needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OsdAccess {
    /// Reading objects of a pool.
    Read,
    /// Writing objects of a pool.
    Write,
}

/// A parsed monitor capability.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MonCap {
    read: bool,
    write: bool,
    admin: bool,
    osd_profile: bool,
    mds_profile: bool,
    rbd_profile: bool,
}

impl MonCap {
    /// Parses `allow r|rw|rwx|*`, `profile osd`, `profile mds` or `profile rbd` (a block
    /// image's client: reads maps and may fence the holder of an image lock it takes over);
    /// the empty string grants nothing.
    pub fn parse(text: &str) -> Result<MonCap, AuthError> {
        let mut cap = MonCap::default();
        for grant in split_grants(text)? {
            let words: Vec<&str> = grant.split_whitespace().collect();
            match words.as_slice() {
                ["profile", "osd"] => cap.osd_profile = true,
                ["profile", "mds"] => cap.mds_profile = true,
                ["profile", "rbd"] => cap.rbd_profile = true,
                ["allow", perm] => {
                    let p = Perm::parse(perm).map_err(|why| bad(text, why))?;
                    cap.read |= p.read;
                    cap.write |= p.write;
                    cap.admin |= p.all;
                }
                _ => {
                    return Err(bad(
                        text,
                        "a monitor grant is `allow PERM`, `profile osd`, `profile mds` or `profile rbd`",
                    ))
                }
            }
        }
        Ok(cap)
    }

    /// Whether a request needing `access` is allowed. Every profile reads maps too.
    pub fn allows(&self, access: MonAccess) -> bool {
        let profile = self.osd_profile || self.mds_profile || self.rbd_profile;
        match access {
            MonAccess::Read => self.read || self.admin || profile,
            MonAccess::Write => (self.read && self.write) || self.admin,
            MonAccess::Admin => self.admin,
            MonAccess::Osd => self.osd_profile,
            MonAccess::ServiceSecret => self.osd_profile || self.mds_profile,
            MonAccess::Blocklist => {
                (self.read && self.write) || self.admin || self.mds_profile || self.rbd_profile
            }
        }
    }

    /// Whether this is a metadata server's capability (`profile mds`).
    pub fn is_mds(&self) -> bool {
        self.mds_profile
    }
}

/// One `allow PERM [pool=NAME]` grant.
#[derive(Clone, Debug, PartialEq, Eq)]
struct OsdGrant {
    perm: Perm,
    pool: Option<String>,
}

/// A parsed OSD capability.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OsdCap {
    grants: Vec<OsdGrant>,
    osd_profile: bool,
}

impl OsdCap {
    /// Parses comma-separated grants; the empty string grants nothing.
    pub fn parse(text: &str) -> Result<OsdCap, AuthError> {
        let mut cap = OsdCap::default();
        for grant in split_grants(text)? {
            let words: Vec<&str> = grant.split_whitespace().collect();
            let (perm, pool) = match words.as_slice() {
                ["profile", "osd"] => {
                    cap.osd_profile = true;
                    continue;
                }
                ["allow", perm] => (perm, None),
                ["allow", perm, pool] => {
                    let Some(name) = pool.strip_prefix("pool=") else {
                        return Err(bad(text, "a grant's restriction is `pool=NAME`"));
                    };
                    let name = name.trim_matches('"');
                    if name.is_empty() {
                        return Err(bad(text, "`pool=` needs a pool name"));
                    }
                    (perm, Some(name.to_string()))
                }
                _ => {
                    return Err(bad(
                        text,
                        "an OSD grant is `allow PERM [pool=NAME]` or `profile osd`",
                    ))
                }
            };
            let perm = Perm::parse(perm).map_err(|why| bad(text, why))?;
            cap.grants.push(OsdGrant { perm, pool });
        }
        Ok(cap)
    }

    /// Whether `access` to objects of `pool` is allowed.
    pub fn allows(&self, pool: &str, access: OsdAccess) -> bool {
        self.grants.iter().any(|g| {
            g.pool.as_deref().is_none_or(|p| p == pool)
                && match access {
                    OsdAccess::Read => g.perm.read,
                    OsdAccess::Write => g.perm.write,
                }
        })
    }

    /// Whether administration (`tell`) is allowed: `allow *` on every pool.
    pub fn allows_admin(&self) -> bool {
        self.grants.iter().any(|g| g.perm.all && g.pool.is_none())
    }

    /// Whether this is an OSD daemon's capability (`profile osd`).
    pub fn is_osd(&self) -> bool {
        self.osd_profile
    }
}

/// Read, write and execute bits of one grant; `*` is all of them and administration.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Perm {
    read: bool,
    write: bool,
    all: bool,
}

impl Perm {
    fn parse(word: &str) -> Result<Perm, &'static str> {
        if word == "*" {
            return Ok(Perm {
                read: true,
                write: true,
                all: true,
            });
        }
        let mut p = Perm::default();
        if word.is_empty() {
            return Err("a permission is r, w, x, a combination of them, or *");
        }
        for c in word.chars() {
            match c {
                'r' if !p.read => p.read = true,
                'w' if !p.write => p.write = true,
                'x' => {}
                _ => return Err("a permission is r, w, x, a combination of them, or *"),
            }
        }
        Ok(p)
    }
}

fn bad(text: &str, why: &str) -> AuthError {
    AuthError::BadCaps {
        cap: text.chars().take(200).collect(),
        why: why.to_string(),
    }
}

/// The comma-separated grants of a capability string, checked against the limits.
fn split_grants(text: &str) -> Result<Vec<&str>, AuthError> {
    if text.len() > MAX_CAP_BYTES {
        return Err(bad(text, "longer than 4096 bytes"));
    }
    let grants: Vec<&str> = text
        .split(',')
        .map(str::trim)
        .filter(|g| !g.is_empty())
        .collect();
    if grants.len() > MAX_GRANTS {
        return Err(bad(text, "more than 64 grants"));
    }
    Ok(grants)
}

/// An entity's capabilities: the raw strings by service (as keyrings and `auth ls` show
/// them) and their parsed monitor and OSD parts. Services other than `mon` and `osd` (a
/// Ceph keyring's `mgr`) are kept and shown but grant nothing here.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Caps {
    raw: BTreeMap<String, String>,
    mon: MonCap,
    osd: OsdCap,
}

impl Caps {
    /// Parses the capability strings of each service.
    pub fn parse(raw: &BTreeMap<String, String>) -> Result<Caps, AuthError> {
        if raw.len() > MAX_GRANTS {
            return Err(bad("", "more than 64 services"));
        }
        let get = |s: &str| raw.get(s).map(String::as_str).unwrap_or("");
        Ok(Caps {
            mon: MonCap::parse(get("mon"))?,
            osd: OsdCap::parse(get("osd"))?,
            raw: raw.clone(),
        })
    }

    /// Capabilities from `(service, capability)` pairs.
    pub fn from_pairs(pairs: &[(&str, &str)]) -> Result<Caps, AuthError> {
        let raw = pairs
            .iter()
            .map(|(s, c)| (s.to_string(), c.to_string()))
            .collect();
        Caps::parse(&raw)
    }

    /// What an OSD daemon holds: `mon 'profile osd'`, `osd 'profile osd'`.
    pub fn osd_daemon() -> Caps {
        Caps::from_pairs(&[("mon", "profile osd"), ("osd", "profile osd")])
            .expect("the OSD profile parses")
    }

    /// What the administrator holds: everything.
    pub fn everything() -> Caps {
        Caps::from_pairs(&[("mon", "allow *"), ("osd", "allow *")]).expect("`allow *` parses")
    }

    /// The raw capability strings by service.
    pub fn raw(&self) -> &BTreeMap<String, String> {
        &self.raw
    }

    /// The monitor part.
    pub fn mon(&self) -> &MonCap {
        &self.mon
    }

    /// The OSD part.
    pub fn osd(&self) -> &OsdCap {
        &self.osd
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monitor_caps_grant_what_they_say() {
        let r = MonCap::parse("allow r").unwrap();
        assert!(r.allows(MonAccess::Read) && !r.allows(MonAccess::Write));
        let rw = MonCap::parse("allow rw").unwrap();
        assert!(rw.allows(MonAccess::Write) && !rw.allows(MonAccess::Admin));
        let all = MonCap::parse("allow *").unwrap();
        assert!(all.allows(MonAccess::Admin) && all.allows(MonAccess::Write));
        assert!(
            !all.allows(MonAccess::Osd),
            "only the OSD profile boots OSDs"
        );
        let osd = MonCap::parse("profile osd").unwrap();
        assert!(osd.allows(MonAccess::Osd) && osd.allows(MonAccess::Read));
        assert!(!osd.allows(MonAccess::Write));
        assert!(osd.allows(MonAccess::ServiceSecret) && !osd.is_mds());
        let mds = MonCap::parse("profile mds").unwrap();
        assert!(mds.is_mds() && mds.allows(MonAccess::ServiceSecret));
        assert!(mds.allows(MonAccess::Read) && !mds.allows(MonAccess::Osd));
        assert!(!mds.allows(MonAccess::Write));
        assert!(!all.allows(MonAccess::ServiceSecret));
        // Who may fence a client: writers, admins, and the MDS and block-image profiles;
        // neither readers nor OSDs.
        let rbd = MonCap::parse("profile rbd").unwrap();
        assert!(rbd.allows(MonAccess::Read) && rbd.allows(MonAccess::Blocklist));
        assert!(!rbd.allows(MonAccess::Write) && !rbd.allows(MonAccess::ServiceSecret));
        assert!(mds.allows(MonAccess::Blocklist) && rw.allows(MonAccess::Blocklist));
        assert!(all.allows(MonAccess::Blocklist));
        assert!(!r.allows(MonAccess::Blocklist) && !osd.allows(MonAccess::Blocklist));
        let none = MonCap::parse("").unwrap();
        assert!(!none.allows(MonAccess::Read));
        for badcap in [
            "allow",
            "allow q",
            "deny r",
            "allow rr",
            "profile rgw",
            "allow r pool=x",
        ] {
            assert!(MonCap::parse(badcap).is_err(), "{badcap:?} accepted");
        }
    }

    #[test]
    fn osd_caps_limit_pools_and_keep_peer_traffic_to_osds() {
        let c = OsdCap::parse("allow r pool=a, allow rw pool=b").unwrap();
        assert!(c.allows("a", OsdAccess::Read) && !c.allows("a", OsdAccess::Write));
        assert!(c.allows("b", OsdAccess::Write));
        assert!(!c.allows("c", OsdAccess::Read));
        assert!(!c.allows_admin() && !c.is_osd());
        let all = OsdCap::parse("allow *").unwrap();
        assert!(all.allows("any", OsdAccess::Write) && all.allows_admin() && !all.is_osd());
        let pool_star = OsdCap::parse("allow * pool=a").unwrap();
        assert!(!pool_star.allows_admin(), "administration needs every pool");
        let rwx = OsdCap::parse("allow rwx").unwrap();
        assert!(rwx.allows("z", OsdAccess::Write) && !rwx.allows_admin());
        assert!(OsdCap::parse("profile osd").unwrap().is_osd());
        for badcap in [
            "allow",
            "allow rw pool",
            "allow rw pool=",
            "allow rw namespace=x",
            "allow rw pool=a extra",
            "permit r",
        ] {
            assert!(OsdCap::parse(badcap).is_err(), "{badcap:?} accepted");
        }
        let many = vec!["allow r"; 65].join(", ");
        assert!(OsdCap::parse(&many).is_err());
        assert!(OsdCap::parse(&"r".repeat(5000)).is_err());
    }

    #[test]
    fn caps_keep_unknown_services_and_refuse_bad_known_ones() {
        let c = Caps::from_pairs(&[("mon", "allow r"), ("mgr", "allow *")]).unwrap();
        assert_eq!(c.raw().get("mgr").unwrap(), "allow *");
        assert!(!c.osd().allows("p", OsdAccess::Read));
        assert!(Caps::from_pairs(&[("osd", "allow bogus")]).is_err());
        assert!(Caps::osd_daemon().osd().is_osd());
        assert!(Caps::everything().mon().allows(MonAccess::Admin));
    }
}
