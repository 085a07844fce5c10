//! Integration tests of the client against in-process clusters (a monitor and OSDs on
//! loopback), one binary: each module is one group of tests, compiled and linked once.

mod after_activation;
mod churn;
mod cluster;
mod common;
mod conditional;
mod divergence;
mod down;
mod failstop;
mod fence;
mod flags;
mod ops;
mod pieces;
mod pipelined;
mod poolset;
mod quota;
mod remap;
mod repair;
mod resend;
mod sched_detail;
mod scrub;
mod stop;
mod strays;
mod toofull;
