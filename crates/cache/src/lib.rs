//! An Open-CAS-style cache device for cairn: a [`cairn_blockdev::BlockDevice`] made of a fast
//! cache device (NVMe) and a slow core device (HDD).
//!
//! Modes `wt`, `wb`, `wa`, `pt`, `wo` (and internal `wi`), switchable at run time; cache lines
//! of 4..64 KiB with valid and dirty bits per 4 KiB sector; sequential cut-off over several
//! concurrent streams; I/O classes from casadm's CSV format with per-class LRU and allocation
//! share; promotion `always`/`nhit`; cleaning `alru`/`acp`/`nop` plus a dirty-ratio target;
//! crash-safe metadata on the cache device (warm restart keeps clean and dirty lines);
//! `casadm -P`-like statistics; an offline [`fsck`].
//!
//! This crate never touches a disk itself (invariant 4): all I/O goes through the two
//! `BlockDevice`s it is given. Policy logic ([`cleaning`], [`cutoff`], [`promotion`],
//! [`ioclass`]) is pure and tested in virtual time.
#![deny(clippy::cast_possible_truncation)]
#![warn(missing_docs)]

pub mod cleaning;
pub mod config;
mod convert;
pub mod cutoff;
pub mod device;
pub mod error;
pub mod fsck;
pub mod ioclass;
pub mod layout;
pub mod lines;
pub mod promotion;
pub mod stats;

pub use config::{
    CacheConfig, CacheMode, CleaningPolicyKind, DirtyFullPolicy, PromotionPolicy, SeqCutoffPolicy,
};
pub use device::{CacheDevice, CleanReport, Clock, Problem, TokioClock};
pub use error::{CacheError, Result};
pub use fsck::{fsck, FsckReport};
pub use ioclass::{IoClassTable, IoHint};
pub use stats::CacheStats;
