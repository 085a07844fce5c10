//! Integration tests of the monitor, one binary: each module is one former test file,
//! linked once instead of once per file.

mod daemon;
mod metrics;
mod monitor;
mod quota;

use cairn_proto::mon::Request;

/// The operator's `tell mon config set mon_allow_pool_delete true`.
fn allow_pool_delete() -> Request {
    Request::SetMonOption {
        key: "mon_allow_pool_delete".into(),
        value: "true".into(),
    }
}

/// The operator's confirmed `pool rm NAME NAME --yes-i-really-really-mean-it`.
fn remove_pool(name: &str) -> Request {
    Request::RemovePool {
        name: name.into(),
        repeated: name.into(),
        sure: true,
    }
}
