//! cairn studies: the seeds' experiments reproduced on emulated devices.
//!
//! Each module owns one study: its workload, its measurement in tokio's virtual time (so a
//! 600-second Vdbench run of an HDD takes seconds of CPU and gives the same figures on every
//! machine), its report table and plots. Studies must never touch real disks: they stack
//! timing-emulated devices ([`dilated::DilatedDevice`]) over memory. The one study that needs
//! a real cluster ([`recovery`], seed 000) keeps only its figures here: the `cairn` binary
//! runs the cluster and hands this crate the samples.
#![deny(clippy::cast_possible_truncation)]
#![warn(missing_docs)]

pub mod cache;
pub mod dilated;
pub mod nrs;
pub mod nrs_ior;
pub mod nrs_tbf;
pub mod plot;
pub mod recovery;
pub mod seed000;
