//! The monitor daemon: the authoritative cluster map and the rules that change it.
//!
//! The map itself, its incrementals, flags and quotas are the shared vocabulary in
//! `cairn-clustermap`; the requests, replies and refusals on the wire are in
//! `cairn_proto::mon`; clients talk to the monitor through `cairn_client::mon::MonClient`.
//! Here: [`monitor`] turns events (OSD boot, failure reports, beacons, operator commands, clock
//! ticks) into incrementals and keeps placement balanced after every change (sans-IO: time is
//! passed in); [`daemon`] serves it over messenger sessions (sockets only through
//! `cairn-msgr`); [`store`] keeps the map and its history durable; [`metrics`] is its
//! Prometheus page; [`auth_db`] holds the entities and keys, and [`client_ids`] which
//! entity holds each client id.

// Narrowing conversions are checked (`try_from`): a cast would silently write a wrong length
// or offset.
#![deny(clippy::cast_possible_truncation)]
#![warn(missing_docs)]

pub mod auth_db;
pub mod client_ids;
pub mod daemon;
pub mod metrics;
pub mod monitor;
pub mod prime;
pub mod store;

pub use monitor::{MonConfig, Monitor};
