//! A fault schedule drawn from a seed: which host or link fails, how, when, and for how long.
//! The same seed gives the same schedule, so a failing run is named by its seed alone.

use std::fmt;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Most faults one schedule holds.
pub const MAX_FAULTS: usize = 64;

/// One fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Every message between the two hosts is dropped, both ways, until the fault ends
    /// (connections between them stall until their idle timeout closes them).
    Partition(String, String),
    /// Messages between the two hosts are held back, both ways, and delivered when the fault
    /// ends (a congested link, or TCP retransmitting through a short outage).
    Hold(String, String),
    /// The host's process dies (its tasks dropped mid-flight, everything it wrote kept) and
    /// starts again when the fault ends.
    Crash(String),
    /// The host loses power: its process dies, and of what its disks had not flushed a seeded
    /// subset survives, the last survivor torn; it starts again when the fault ends.
    PowerLoss(String),
    /// Every write to the host's block device fails with EIO: the OSD fail-stops; when the
    /// fault ends the failing part is replaced and the OSD starts again on what it held.
    Eio(String),
    /// Every link of the host holds its messages until the fault ends (the process frozen, as
    /// by SIGSTOP, seen from the network; its own timers still run).
    Freeze(String),
    /// An operator marks the OSD out (its PGs move to the others, filled while temporary
    /// acting sets serve them) and back in when the fault ends.
    Out(String),
    /// Every link of the host carries messages this much later.
    Slow(String, Duration),
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Partition(a, b) => write!(f, "partition {a} | {b}"),
            Fault::Hold(a, b) => write!(f, "hold {a} ~ {b}"),
            Fault::Crash(h) => write!(f, "crash {h}"),
            Fault::PowerLoss(h) => write!(f, "power loss {h}"),
            Fault::Eio(h) => write!(f, "EIO {h}"),
            Fault::Freeze(h) => write!(f, "freeze {h}"),
            Fault::Out(h) => write!(f, "out {h}"),
            Fault::Slow(h, d) => write!(f, "slow {h} +{} ms", d.as_millis()),
        }
    }
}

/// A fault with its start and end, in simulated time since the cluster was ready.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timed {
    /// When it starts.
    pub at: Duration,
    /// How long it lasts.
    pub lasts: Duration,
    /// What it is.
    pub fault: Fault,
}

impl fmt::Display for Timed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} at {:.3} s for {:.3} s",
            self.fault,
            self.at.as_secs_f64(),
            self.lasts.as_secs_f64()
        )
    }
}

/// What a schedule may hold.
#[derive(Clone, Debug)]
pub struct Shape {
    /// The OSD hosts' names (faults pick among them).
    pub osds: Vec<String>,
    /// The monitor's and the client's hosts (links to them may fail).
    pub others: Vec<String>,
    /// The monitor's host, if it may crash and lose power too.
    pub monitor: Option<String>,
    /// Faults start within this window.
    pub window: Duration,
    /// How many faults (at most [`MAX_FAULTS`]).
    pub faults: usize,
    /// Longest a fault lasts.
    pub longest: Duration,
}

/// Draws the schedule of `seed`, ordered by start.
pub fn schedule(seed: u64, shape: &Shape) -> Vec<Timed> {
    assert!(!shape.osds.is_empty(), "a schedule needs an OSD host");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let hosts: Vec<&String> = shape.osds.iter().chain(&shape.others).collect();
    let window_ms = u64::try_from(shape.window.as_millis())
        .unwrap_or(u64::MAX)
        .max(1);
    let longest_ms = u64::try_from(shape.longest.as_millis())
        .unwrap_or(u64::MAX)
        .max(100);
    let mut out: Vec<Timed> = (0..shape.faults.min(MAX_FAULTS))
        .map(|_| {
            let at = Duration::from_millis(rng.random_range(0..window_ms));
            let lasts = Duration::from_millis(rng.random_range(100..=longest_ms));
            let osd = shape.osds[rng.random_range(0..shape.osds.len())].clone();
            let fault = match rng.random_range(0..9u8) {
                0 | 1 => {
                    let other = loop {
                        let h = hosts[rng.random_range(0..hosts.len())];
                        if *h != osd {
                            break h.clone();
                        }
                    };
                    match rng.random_bool(0.5) {
                        true => Fault::Partition(osd, other),
                        false => Fault::Hold(osd, other),
                    }
                }
                2 => Fault::Crash(osd),
                3 => Fault::PowerLoss(osd),
                4 => Fault::Eio(osd),
                5 => Fault::Freeze(osd),
                6 => Fault::Out(osd),
                7 => Fault::Slow(osd, Duration::from_millis(rng.random_range(5..200))),
                _ => match (&shape.monitor, rng.random_bool(0.5)) {
                    (Some(mon), true) => Fault::Crash(mon.clone()),
                    (Some(mon), false) => Fault::PowerLoss(mon.clone()),
                    (None, _) => Fault::Crash(osd),
                },
            };
            Timed { at, lasts, fault }
        })
        .collect();
    out.sort_by_key(|t| t.at);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> Shape {
        Shape {
            osds: vec!["osd0".into(), "osd1".into(), "osd2".into()],
            others: vec!["mon".into(), "client".into()],
            monitor: Some("mon".into()),
            window: Duration::from_secs(30),
            faults: 8,
            longest: Duration::from_secs(10),
        }
    }

    #[test]
    fn a_seed_names_one_schedule() {
        assert_eq!(schedule(7, &shape()), schedule(7, &shape()));
        assert_ne!(schedule(7, &shape()), schedule(8, &shape()));
    }

    #[test]
    fn faults_are_ordered_and_within_their_window() {
        for seed in 0..50 {
            let s = schedule(seed, &shape());
            assert_eq!(s.len(), 8);
            assert!(s.windows(2).all(|w| w[0].at <= w[1].at));
            for t in &s {
                assert!(t.at < Duration::from_secs(30));
                assert!(t.lasts >= Duration::from_millis(100));
                assert!(t.lasts <= Duration::from_secs(10));
                if let Fault::Partition(a, b) | Fault::Hold(a, b) = &t.fault {
                    assert_ne!(a, b, "a host cut from itself");
                }
            }
        }
    }
}
