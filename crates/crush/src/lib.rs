//! CRUSH placement, bit-compatible with Ceph.
//!
//! This crate owns the CRUSH map model ([`model`]), the crushtool text format ([`text`]) and
//! crushtool's JSON dump ([`json`]), device-class shadow trees ([`classes`]), a map builder
//! equivalent to `crushtool --build` ([`build`]) and rule evaluation identical to Ceph's
//! `crush_do_rule` ([`mapper`]). It is pure: no I/O, no clock, no randomness of its own.
#![deny(clippy::cast_possible_truncation)]
#![warn(missing_docs)]

pub mod build;
pub mod classes;
mod convert;
pub mod edit;
pub mod error;
pub mod hash;
pub mod json;
pub mod ln;
mod ln_table;
pub mod mapper;
pub mod model;
pub mod text;

pub use error::CrushError;
pub use mapper::Workspace;
pub use model::{Bucket, BucketAlg, CrushMap, Device, Rule, RuleType, Step, Tunables, ITEM_NONE};
