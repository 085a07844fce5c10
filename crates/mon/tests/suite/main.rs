//! Integration tests of the monitor, one binary: each module is one former test file,
//! linked once instead of once per file.

mod churn;
mod daemon;
mod metrics;
mod monitor;
mod quota;
