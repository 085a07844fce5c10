//! Integration tests of the scheduler library, one binary: each module is one former test file,
//! linked once instead of once per file.

mod common;
mod hot_swap;
mod layers;
mod mclock_qos;
mod nrs_policies;
mod policy_units;
mod random_ops;
mod replay_seed000;
mod scenarios;
mod shards;
