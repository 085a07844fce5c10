//! Inode numbers delegated to clients: each client that asks gets a slot of its own, a range
//! of [`SLOT_INOS`] numbers above [`FIRST_SLOT_INO`] that nobody else is ever handed, and
//! creates files with them by itself under its directory leases; the MDS takes a create's
//! pinned number when it lies in the asker's slot, no inode has it, and it is no further than
//! [`OUT_OF_ORDER`] below the highest number used in the slot (a client uses its numbers in
//! order, and at most that many reach the MDS out of order: a number further down was used
//! and its file deleted, and its data may still be being purged). After an MDS restart that
//! mark is rebuilt from the inodes that exist. Below [`FIRST_SLOT_INO`] the MDS numbers
//! inodes itself. Slots are never reused (a file's data objects are named by its number), so
//! a slot outlives its client.

use std::collections::HashMap;

/// The first number of the first slot; the MDS's own numbering stays below it.
pub const FIRST_SLOT_INO: u64 = 1 << 40;
/// Numbers in one slot.
pub const SLOT_INOS: u64 = 1 << 32;
/// Most slots ever delegated (each mount that creates under leases takes one).
pub const MAX_SLOTS: u64 = 1 << 24;
/// How far below the highest number used in its slot a pinned number is still taken: a mount
/// takes no number more than half this past its oldest create the MDS has not answered.
pub const OUT_OF_ORDER: u64 = 2048;

/// The slots delegated so far, by slot and by client.
#[derive(Clone, Debug, Default)]
pub struct Slots {
    owner: HashMap<u64, u64>,
    of_client: HashMap<u64, u64>,
    next: u64,
    /// The highest number used in each slot.
    high: HashMap<u64, u64>,
}

impl Slots {
    /// The slot number `ino` falls in, if it is above the MDS's own numbering.
    pub fn slot_of(ino: u64) -> Option<u64> {
        ino.checked_sub(FIRST_SLOT_INO)
            .map(|above| above / SLOT_INOS)
    }

    /// The first number of `slot`.
    pub fn first_of(slot: u64) -> u64 {
        assert!(slot < MAX_SLOTS, "slot {slot} past the last one");
        FIRST_SLOT_INO + slot * SLOT_INOS
    }

    /// Records `slot` as `client`'s (again: no change).
    pub fn apply(&mut self, slot: u64, client: u64) {
        assert!(slot < MAX_SLOTS, "slot {slot} past the last one");
        self.owner.insert(slot, client);
        self.of_client.insert(client, slot);
        self.next = self.next.max(slot + 1);
    }

    /// Notes that an inode has number `ino` (kept when it lies in a slot).
    pub fn used(&mut self, ino: u64) {
        if let Some(slot) = Self::slot_of(ino) {
            let high = self.high.entry(slot).or_insert(ino);
            *high = (*high).max(ino);
        }
    }

    /// Whether `ino`, in a slot, is not too far below the highest number used there to be
    /// taken (see [`OUT_OF_ORDER`]).
    pub fn fresh(&self, ino: u64) -> bool {
        Self::slot_of(ino)
            .and_then(|slot| self.high.get(&slot))
            .is_none_or(|high| ino.saturating_add(OUT_OF_ORDER) > *high)
    }

    /// `client`'s slot, if it has one.
    pub fn of(&self, client: u64) -> Option<u64> {
        self.of_client.get(&client).copied()
    }

    /// The next slot to delegate, or `None` when every slot has been.
    pub fn next_free(&self) -> Option<u64> {
        (self.next < MAX_SLOTS).then_some(self.next)
    }

    /// The client `ino`'s slot was delegated to, if it lies in one.
    pub fn owner_of(&self, ino: u64) -> Option<u64> {
        Self::slot_of(ino).and_then(|s| self.owner.get(&s).copied())
    }

    /// Every slot with its client (to check and store them).
    pub fn all(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.owner.iter().map(|(s, c)| (*s, *c))
    }

    /// Checks that the two maps agree and no slot is at or past the next.
    pub fn check(&self) -> Result<(), String> {
        for (slot, client) in &self.owner {
            if *slot >= self.next {
                return Err(format!("slot {slot} at or past the next, {}", self.next));
            }
            if self.of_client.get(client) != Some(slot) {
                return Err(format!("slot {slot}'s client {client} is not kept as its"));
            }
        }
        if self.of_client.len() != self.owner.len() {
            return Err("a client holds more than one slot".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_map_to_their_slots_and_below_the_first_to_none() {
        assert_eq!(Slots::slot_of(FIRST_SLOT_INO - 1), None);
        assert_eq!(Slots::slot_of(FIRST_SLOT_INO), Some(0));
        assert_eq!(Slots::slot_of(Slots::first_of(3) + SLOT_INOS - 1), Some(3));
        assert_eq!(Slots::slot_of(Slots::first_of(4)), Some(4));
        let mut s = Slots::default();
        assert_eq!(s.next_free(), Some(0));
        s.apply(0, 77);
        s.apply(0, 77);
        assert_eq!(s.of(77), Some(0));
        assert_eq!(s.owner_of(Slots::first_of(0) + 5), Some(77));
        assert_eq!(s.owner_of(Slots::first_of(1)), None);
        assert_eq!(s.next_free(), Some(1));
        assert_eq!(s.check(), Ok(()));
        let first = Slots::first_of(0);
        assert!(s.fresh(first));
        s.used(first + 10_000);
        s.used(first + 3);
        assert!(s.fresh(first + 10_000 - OUT_OF_ORDER + 1), "within reach");
        assert!(!s.fresh(first + 10_000 - OUT_OF_ORDER), "used long ago");
        assert!(s.fresh(Slots::first_of(1)), "another slot's mark");
        s.used(5);
        assert!(s.fresh(5), "numbers below the slots have no mark");
    }
}
