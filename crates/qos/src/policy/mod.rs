//! The scheduling policies. Each submodule owns one policy and implements `Scheduler`; none of
//! them reads a clock, draws randomness or does I/O, and none may ever drop a request it accepted.

pub mod crrn;
pub mod fifo;
pub mod mclock;
pub mod orr;
pub mod tbf;
pub mod tbf_expr;
pub mod wpq;

use crate::request::Request;

/// Sorts drained requests by id so each client's order (ids increase per client) is kept.
pub(crate) fn sorted_by_id(mut v: Vec<Request>) -> Vec<Request> {
    v.sort_by_key(|r| r.id);
    v
}
