//! Admin commands to one daemon (`cairn tell osd.N ...`): a list of words in, text out; and
//! the one reply both its writer and its readers parse, an OSD's `df` ([`OsdUsage`]).

use serde::{Deserialize, Serialize};

/// Operator -> daemon command.
pub const MSG_ADMIN: u16 = 0x0220;
/// Daemon -> operator answer.
pub const MSG_ADMIN_REPLY: u16 = 0x0221;

/// A command, e.g. `["config", "set", "osd_op_queue", "wpq"]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdminRequest {
    /// Request id, echoed.
    pub tid: u64,
    /// The words of the command.
    pub args: Vec<String>,
}

/// The answer: the command's output, or why it failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdminReply {
    /// The request's id.
    pub tid: u64,
    /// Output or error.
    pub result: Result<String, String>,
}

/// One OSD's usage as its `df` admin command reports it, as `key=value` pairs: written by the
/// OSD, read by `cairn df`, `status` and `health` and by the file system's `statfs`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OsdUsage {
    /// PG copies it holds, led or not (Ceph's PGS column).
    pub pgs: u64,
    /// PGs it leads.
    pub primary: u64,
    /// Client objects (PG meta and temporary objects left out).
    pub objects: u64,
    /// Logical bytes of its objects.
    pub stored: u64,
    /// Device bytes its objects use.
    pub allocated: u64,
    /// Usable bytes of its device.
    pub capacity: u64,
    /// Share of `capacity` past which it refuses writes (its `full_ratio`).
    pub full_ratio: f64,
}

impl OsdUsage {
    /// The reply's text; `internal` is the count of the OSD's own objects (PG meta, temporary;
    /// -1 when it could not count them), shown but not parsed back.
    pub fn render(&self, internal: i64) -> String {
        format!(
            "pgs={} primary={} objects={} internal={internal} stored={} allocated={} capacity={} full_ratio={}\n",
            self.pgs,
            self.primary,
            self.objects,
            self.stored,
            self.allocated,
            self.capacity,
            self.full_ratio
        )
    }

    /// Parses a `df` reply; `None` when a field is missing or not a number, or the full ratio
    /// is outside (0, 1].
    pub fn parse(text: &str) -> Option<OsdUsage> {
        let value = |key: &str| -> Option<&str> {
            text.split_whitespace()
                .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        };
        let field = |key: &str| -> Option<u64> { value(key)?.parse().ok() };
        let full_ratio = value("full_ratio")?
            .parse::<f64>()
            .ok()
            .filter(|r| *r > 0.0 && *r <= 1.0)?;
        Some(OsdUsage {
            pgs: field("pgs")?,
            primary: field("primary")?,
            objects: field("objects")?,
            stored: field("stored")?,
            allocated: field("allocated")?,
            capacity: field("capacity")?,
            full_ratio,
        })
    }

    /// Bytes it can still take before its full ratio.
    // The ratio is clamped to [0, 1], so the product fits in a u64 (a cast saturates anyway).
    #[allow(clippy::cast_possible_truncation)]
    pub fn room(&self) -> u64 {
        let limit = (self.capacity as f64 * self.full_ratio.clamp(0.0, 1.0)) as u64;
        limit.saturating_sub(self.allocated)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `df` reply is read by key, in any order; a missing or non-numeric field is refused;
    /// what the OSD renders parses back.
    #[test]
    fn usage_replies_parse_by_key_and_refuse_gaps() {
        let u = OsdUsage::parse(
            "primary=3 pgs=32 objects=7 internal=33 stored=10 allocated=4096 capacity=1048576 full_ratio=0.9\n",
        )
        .unwrap();
        assert_eq!(
            u,
            OsdUsage {
                pgs: 32,
                primary: 3,
                objects: 7,
                stored: 10,
                allocated: 4096,
                capacity: 1048576,
                full_ratio: 0.9,
            }
        );
        assert_eq!(OsdUsage::parse(&u.render(-1)), Some(u.clone()));
        assert_eq!(u.room(), 943_718 - 4096);
        for bad_ratio in ["0", "1.5", "x", "NaN"] {
            let text = format!(
                "pgs=1 primary=1 objects=1 stored=1 allocated=1 capacity=1 full_ratio={bad_ratio}"
            );
            assert_eq!(OsdUsage::parse(&text), None, "{text}");
        }
        assert_eq!(
            OsdUsage::parse("pgs=1 primary=1 objects=1 stored=1 allocated=1"),
            None
        );
        assert_eq!(
            OsdUsage::parse(
                "pgs=x primary=1 objects=1 stored=1 allocated=1 capacity=1 full_ratio=1"
            ),
            None
        );
        assert_eq!(OsdUsage::parse("32 31 97 0 0 2080374784"), None);
        let over = OsdUsage {
            capacity: 10,
            allocated: 20,
            full_ratio: 0.5,
            ..OsdUsage::default()
        };
        assert_eq!(over.room(), 0);
    }
}
