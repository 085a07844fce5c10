//! The one scheduler interface every policy implements.
//!
//! Owns `Scheduler`, `Dequeued`, `Dispatch` and `Phase`. Never holds policy logic.

use crate::config::PolicyConfig;
use crate::error::QosError;
use crate::request::Request;

/// Why a request was dispatched: the mClock phase, or the equivalent for other policies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Served because its reservation tag was due (mClock), or a strict queue (immediate class,
    /// wpq above the cut-off).
    Reservation,
    /// Served by proportional share (weights, priorities, round robin, FIFO order).
    Weight,
    /// Served although over its limit (only when the policy is configured to break limits).
    LimitBreak,
}

impl Phase {
    /// Dense index for per-phase counters.
    pub fn index(self) -> usize {
        match self {
            Phase::Reservation => 0,
            Phase::Weight => 1,
            Phase::LimitBreak => 2,
        }
    }
}

/// A request leaving the scheduler, with the phase that released it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dispatch {
    /// The request.
    pub req: Request,
    /// Why it was released.
    pub phase: Phase,
}

/// Result of asking a scheduler for work at time `now`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dequeued {
    /// Serve this now.
    Request(Dispatch),
    /// Requests are queued but none may be served before this time (limits, token buckets).
    NothingBefore(u64),
    /// Nothing is queued.
    Empty,
}

/// A request a policy will not take (e.g. `orr` without an object id); it goes to FIFO.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refused(pub Request);

/// The interface of every policy and of the front queue. Time is always passed in.
pub trait Scheduler: Send {
    /// The policy's name (`fifo`, `wpq`, `mclock`, ...).
    fn name(&self) -> &'static str;
    /// Queues a request at `now_ns`, or hands it back if this policy does not handle it.
    fn enqueue(&mut self, req: Request, now_ns: u64) -> Result<(), Refused>;
    /// Picks the next request to serve at `now_ns`.
    fn dequeue(&mut self, now_ns: u64) -> Dequeued;
    /// Number of queued requests.
    fn len(&self) -> usize;
    /// True when nothing is queued.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Applies new parameters of the same policy at run time without losing queued requests.
    /// A config naming another policy is rejected (`QosQueue::set_policy` hot-swaps instead).
    fn reconfigure(&mut self, cfg: &PolicyConfig) -> Result<(), QosError>;
    /// Removes and returns every queued request in an order that keeps each client's order
    /// (used when the policy is swapped out and cannot be drained in place).
    fn drain_all(&mut self) -> Vec<Request>;
}
