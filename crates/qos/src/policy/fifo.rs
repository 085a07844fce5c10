//! `fifo`: first come, first served. Owns one ring buffer. It never refuses a request, which is
//! what makes it the fallback for every other policy.

use crate::config::PolicyConfig;
use crate::error::{mismatch, QosError};
use crate::request::Request;
use crate::scheduler::{Dequeued, Dispatch, Phase, Refused, Scheduler};
use std::collections::VecDeque;

/// First-in first-out queue.
#[derive(Debug, Default)]
pub struct Fifo {
    q: VecDeque<Request>,
}

impl Fifo {
    /// An empty FIFO.
    pub fn new() -> Fifo {
        Fifo::default()
    }
}

impl Scheduler for Fifo {
    fn name(&self) -> &'static str {
        "fifo"
    }

    fn enqueue(&mut self, req: Request, _now_ns: u64) -> Result<(), Refused> {
        self.q.push_back(req);
        Ok(())
    }

    fn dequeue(&mut self, _now_ns: u64) -> Dequeued {
        match self.q.pop_front() {
            Some(req) => Dequeued::Request(Dispatch {
                req,
                phase: Phase::Weight,
            }),
            None => Dequeued::Empty,
        }
    }

    fn len(&self) -> usize {
        self.q.len()
    }

    fn reconfigure(&mut self, cfg: &PolicyConfig) -> Result<(), QosError> {
        match cfg {
            PolicyConfig::Fifo => Ok(()),
            other => Err(mismatch("fifo", other.name())),
        }
    }

    fn drain_all(&mut self) -> Vec<Request> {
        self.q.drain(..).collect()
    }
}
