//! Entity names: who is speaking.

use std::fmt;
use std::str::FromStr;

use crate::error::AuthError;

/// Longest entity name accepted, prefix included.
pub const MAX_ENTITY_NAME_BYTES: usize = 64;

/// One authenticated party, named as Ceph names them: the monitor (`mon.`), an OSD by id
/// (`osd.3`) or a client by name (`client.admin`, `client.s3gw`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EntityName {
    /// The monitor.
    Mon,
    /// An OSD, by id.
    Osd(i32),
    /// A client: an operator's CLI, a gateway, an application.
    Client(String),
}

impl EntityName {
    /// The administrator's entity, which `cairn up` creates with every capability.
    pub fn admin() -> EntityName {
        EntityName::Client("admin".into())
    }

    /// The OSD id when this is an OSD.
    pub fn osd_id(&self) -> Option<i32> {
        match self {
            EntityName::Osd(id) => Some(*id),
            _ => None,
        }
    }
}

impl fmt::Display for EntityName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EntityName::Mon => write!(f, "mon."),
            EntityName::Osd(id) => write!(f, "osd.{id}"),
            EntityName::Client(name) => write!(f, "client.{name}"),
        }
    }
}

impl FromStr for EntityName {
    type Err = AuthError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |why| AuthError::BadEntity {
            name: s.chars().take(MAX_ENTITY_NAME_BYTES + 8).collect(),
            why,
        };
        if s.len() > MAX_ENTITY_NAME_BYTES {
            return Err(bad("longer than 64 bytes"));
        }
        if s == "mon." || s == "mon" {
            return Ok(EntityName::Mon);
        }
        if let Some(id) = s.strip_prefix("osd.") {
            let digits_only = !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit());
            return match id.parse::<i32>() {
                Ok(n) if digits_only && n >= 0 => Ok(EntityName::Osd(n)),
                _ => Err(bad("an OSD is osd.N with N a non-negative integer")),
            };
        }
        if let Some(name) = s.strip_prefix("client.") {
            let allowed = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.');
            if name.is_empty() || !name.bytes().all(allowed) {
                return Err(bad(
                    "a client is client.NAME with NAME of letters, digits, '_', '-' or '.'",
                ));
            }
            return Ok(EntityName::Client(name.to_string()));
        }
        Err(bad("names start with mon., osd. or client."))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_bad_ones_are_refused_with_a_reason() {
        for s in [
            "mon.",
            "osd.0",
            "osd.17",
            "client.admin",
            "client.s3-gw_1.a",
        ] {
            let e: EntityName = s.parse().unwrap();
            assert_eq!(e.to_string(), s);
        }
        assert_eq!("mon".parse::<EntityName>().unwrap(), EntityName::Mon);
        for s in [
            "",
            "osd.",
            "osd.-1",
            "osd.+1",
            "osd.x",
            "osd.99999999999",
            "client.",
            "client.a b",
            "client.é",
            "mgr.x",
            "admin",
        ] {
            assert!(s.parse::<EntityName>().is_err(), "{s:?} accepted");
        }
        let long = format!("client.{}", "a".repeat(60));
        assert!(long.parse::<EntityName>().is_err());
        assert_eq!(EntityName::admin().to_string(), "client.admin");
        assert_eq!(EntityName::Osd(4).osd_id(), Some(4));
    }
}
