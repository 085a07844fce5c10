//! What the simulated client was told about its writes, and what each object may therefore
//! hold once the faults stop: the last acknowledged content, or the content of a write issued
//! after it whose outcome the client never learnt (it may or may not have applied).

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::time::Duration;

/// One object's writes as the client saw them.
#[derive(Clone, Debug, Default)]
struct Seen {
    /// Checksum of the last acknowledged content.
    acked: Option<u32>,
    /// Checksums of writes since then that failed or timed out.
    uncertain: Vec<u32>,
}

/// Why an object's content breaks the ledger.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// The object.
    pub object: String,
    /// The checksum read back; None: the object was not found.
    pub found: Option<u32>,
    /// The last acknowledged checksum.
    pub acked: Option<u32>,
    /// The checksums of unacknowledged writes since it.
    pub uncertain: Vec<u32>,
}

/// The client's writes, per object.
#[derive(Clone, Debug, Default)]
pub struct Ledger {
    objects: BTreeMap<String, Seen>,
    acked: usize,
    uncertain: usize,
    /// A hash of every outcome in the order the client learnt it, with the simulated time it
    /// did: two runs of one seed that went alike have the same.
    trace: u64,
}

impl Ledger {
    /// A write of content with checksum `crc` to `object` was acknowledged.
    pub fn acked(&mut self, object: &str, crc: u32) {
        self.note(true, object, crc);
        let seen = self.objects.entry(object.to_string()).or_default();
        seen.acked = Some(crc);
        seen.uncertain.clear();
        self.acked += 1;
    }

    /// A write of content with checksum `crc` to `object` failed or timed out: it may have
    /// been applied.
    pub fn uncertain(&mut self, object: &str, crc: u32) {
        self.note(false, object, crc);
        let seen = self.objects.entry(object.to_string()).or_default();
        seen.uncertain.push(crc);
        self.uncertain += 1;
    }

    /// Folds one outcome into the trace, with the simulated time (zero outside a simulation).
    fn note(&mut self, acked: bool, object: &str, crc: u32) {
        let at: Duration = turmoil::sim_elapsed().unwrap_or_default();
        // SipHash with fixed keys: the same in every process, unlike a HashMap's.
        let mut h = std::hash::DefaultHasher::new();
        (self.trace, acked, object, crc, at).hash(&mut h);
        self.trace = h.finish();
    }

    /// A hash of every outcome so far, in order, with when the client learnt it.
    pub fn trace(&self) -> u64 {
        self.trace
    }

    /// Writes acknowledged so far.
    pub fn acked_count(&self) -> usize {
        self.acked
    }

    /// Writes whose outcome the client did not learn.
    pub fn uncertain_count(&self) -> usize {
        self.uncertain
    }

    /// The objects written, acknowledged or not.
    pub fn objects(&self) -> impl Iterator<Item = &str> {
        self.objects.keys().map(String::as_str)
    }

    /// Checks what `object` holds now (`found`: the checksum read, None: not found).
    pub fn check(&self, object: &str, found: Option<u32>) -> Result<(), Mismatch> {
        let seen = self.objects.get(object).cloned().unwrap_or_default();
        let fits = match found {
            None => seen.acked.is_none(),
            Some(crc) => seen.acked == Some(crc) || seen.uncertain.contains(&crc),
        };
        match fits {
            true => Ok(()),
            false => Err(Mismatch {
                object: object.to_string(),
                found,
                acked: seen.acked,
                uncertain: seen.uncertain,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_acknowledged_content_stands() {
        let mut l = Ledger::default();
        l.acked("a", 1);
        l.acked("a", 2);
        assert!(l.check("a", Some(2)).is_ok());
        assert!(l.check("a", Some(1)).is_err(), "an older write came back");
        assert!(
            l.check("a", None).is_err(),
            "an acknowledged object vanished"
        );
    }

    #[test]
    fn an_unacknowledged_write_after_the_last_ack_may_have_applied() {
        let mut l = Ledger::default();
        l.acked("a", 1);
        l.uncertain("a", 2);
        assert!(l.check("a", Some(1)).is_ok());
        assert!(l.check("a", Some(2)).is_ok());
        l.acked("a", 3);
        assert!(l.check("a", Some(2)).is_err(), "overtaken by a later ack");
        assert_eq!((l.acked_count(), l.uncertain_count()), (2, 1));
    }

    #[test]
    fn a_never_acknowledged_object_may_be_absent() {
        let mut l = Ledger::default();
        l.uncertain("b", 9);
        assert!(l.check("b", None).is_ok());
        assert!(l.check("b", Some(9)).is_ok());
        assert!(l.check("b", Some(8)).is_err());
    }
}
