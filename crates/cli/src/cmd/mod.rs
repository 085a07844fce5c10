//! One module per command group, each with its clap arguments and its handler. A command
//! module uses the modules beside `cmd` (how to reach the cluster, what OSDs report, the
//! cluster directory, credentials, runtimes) and its own sub-modules, never another command's.

pub mod auth;
pub mod cache;
pub mod crush;
pub mod data;
pub mod df;
pub mod down;
pub mod fs;
pub mod health;
pub mod mon;
pub mod msgr;
pub mod osd;
pub mod pg;
pub mod pool;
pub mod rbd;
pub mod s3;
pub mod sched;
pub mod status;
pub mod store;
pub mod study;
pub mod tell;
pub mod up;
