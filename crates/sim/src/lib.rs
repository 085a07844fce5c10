//! The real cluster under deterministic simulation: the monitor, OSDs and client of cairn's
//! own crates run as hosts of a `turmoil` simulation — one thread, simulated time, an
//! in-memory network whose links a seeded schedule partitions, holds back and slows, and
//! whose OSD processes it crashes and restarts on their in-memory disks. After each schedule
//! the cluster's invariants are checked: no acknowledged write lost, every PG active+clean
//! once the faults stop, the client's map epochs monotonic. A failing seed names its run:
//! the same seed draws the same schedule, the same workload and, on the run's thread, the same
//! randomness and wall clock ([`entropy`]).
#![deny(clippy::cast_possible_truncation)]

pub mod child;
mod client;
pub mod disk;
mod driver;
pub mod entropy;
pub mod faults;
pub mod ledger;
pub mod world;

pub use faults::{Fault, Timed};
pub use world::{run, run_schedule, Failure, Options, Outcome, Violation};
