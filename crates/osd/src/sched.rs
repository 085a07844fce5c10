//! Runs the OSD's work through its QoS scheduler (invariant 2): every client op and replica
//! write is enqueued with its class and cost, and starts only when the scheduler releases it;
//! at most `max_inflight` run at once (explicit limit).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cairn_qos::{CostModel, Dequeued, QosClass, QosQueue, Request};
use tokio::sync::{Notify, Semaphore};

use crate::error::OsdError;

type Job = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The scheduler front end of one OSD.
pub struct OpScheduler {
    queue: Mutex<QosQueue>,
    jobs: Mutex<HashMap<u64, Job>>,
    next_id: Mutex<u64>,
    notify: Notify,
    inflight: Arc<Semaphore>,
    cost: CostModel,
    started: Instant,
    dispatcher: Mutex<Option<tokio::task::AbortHandle>>,
}

impl OpScheduler {
    /// A scheduler with `queue`'s policy, the device cost model and an in-flight limit.
    pub fn new(queue: QosQueue, cost: CostModel, max_inflight: usize) -> Arc<Self> {
        let s = Arc::new(OpScheduler {
            queue: Mutex::new(queue),
            jobs: Mutex::new(HashMap::new()),
            next_id: Mutex::new(1),
            notify: Notify::new(),
            inflight: Arc::new(Semaphore::new(max_inflight.max(1))),
            cost,
            started: Instant::now(),
            dispatcher: Mutex::new(None),
        });
        let handle = tokio::spawn(dispatch_loop(s.clone())).abort_handle();
        *s.dispatcher.lock().unwrap_or_else(|p| p.into_inner()) = Some(handle);
        s
    }

    /// Stops dispatching and drops every queued job (the OSD is shutting down).
    pub fn stop(&self) {
        if let Some(h) = self
            .dispatcher
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            h.abort();
        }
        self.jobs.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    fn now_ns(&self) -> u64 {
        self.started.elapsed().as_nanos() as u64
    }

    /// Queues `job` as `class` work of `length_bytes` for `client_id`; it runs when released.
    pub fn submit(
        &self,
        class: QosClass,
        client_id: u64,
        length_bytes: u64,
        job: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), OsdError> {
        let id = {
            let mut n = self.next_id.lock().unwrap_or_else(|p| p.into_inner());
            *n += 1;
            *n
        };
        let req = Request {
            length_bytes,
            ..Request::new(id, class, client_id, self.cost.cost_ns(length_bytes))
        };
        self.jobs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, Box::pin(job));
        let queued = self
            .queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .enqueue(req, self.now_ns());
        if let Err(e) = queued {
            self.jobs
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&id);
            return Err(e.into());
        }
        self.notify.notify_one();
        Ok(())
    }

    /// The active policy's configuration.
    pub fn policy(&self) -> cairn_qos::PolicyConfig {
        self.queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .config()
            .clone()
    }

    /// Switches the policy live; queued requests drain through the old one (hot swap).
    pub fn set_policy(&self, cfg: cairn_qos::PolicyConfig) -> Result<(), OsdError> {
        let now = self.now_ns();
        self.queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .set_policy(cfg, now)?;
        self.notify.notify_one();
        Ok(())
    }

    /// Prometheus lines of the scheduler's per-class counters.
    pub fn render_metrics(&self, osd: i32) -> String {
        use std::fmt::Write;
        let q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = String::from("# HELP cairn_osd_sched_dispatched_total Requests released by the scheduler, by class.\n# TYPE cairn_osd_sched_dispatched_total counter\n");
        for class in QosClass::ALL {
            let c = q.counters().class(class);
            let _ = writeln!(
                out,
                "cairn_osd_sched_dispatched_total{{osd=\"{osd}\",class=\"{}\"}} {}",
                class.name(),
                c.dispatched_total()
            );
        }
        out.push_str("# HELP cairn_osd_sched_queued Requests waiting in the scheduler, by class.\n# TYPE cairn_osd_sched_queued gauge\n");
        for class in QosClass::ALL {
            let _ = writeln!(
                out,
                "cairn_osd_sched_queued{{osd=\"{osd}\",class=\"{}\"}} {}",
                class.name(),
                q.counters().class(class).queued
            );
        }
        let _ = writeln!(
            out,
            "# HELP cairn_osd_sched_refused_to_fifo_total Requests the policy refused (served by FIFO).\n# TYPE cairn_osd_sched_refused_to_fifo_total counter\ncairn_osd_sched_refused_to_fifo_total{{osd=\"{osd}\",policy=\"{}\"}} {}",
            q.policy_name(),
            q.counters().refused_to_fifo
        );
        out
    }

    /// Queues `work` like [`OpScheduler::submit`] and waits for its result.
    pub async fn run<T: Send + 'static>(
        &self,
        class: QosClass,
        client_id: u64,
        length_bytes: u64,
        work: impl Future<Output = T> + Send + 'static,
    ) -> Result<T, OsdError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.submit(class, client_id, length_bytes, async move {
            let _ = tx.send(work.await);
        })?;
        rx.await
            .map_err(|_| OsdError::Protocol("scheduler stopped before running the request".into()))
    }
}

async fn dispatch_loop(s: Arc<OpScheduler>) {
    loop {
        let Ok(permit) = s.inflight.clone().acquire_owned().await else {
            return;
        };
        let next = s
            .queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .dequeue(s.now_ns());
        match next {
            Dequeued::Request(d) => {
                let job = s
                    .jobs
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&d.req.id);
                if let Some(job) = job {
                    tokio::spawn(async move {
                        job.await;
                        drop(permit);
                    });
                }
            }
            Dequeued::NothingBefore(t) => {
                drop(permit);
                let wait = Duration::from_nanos(t.saturating_sub(s.now_ns()));
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = s.notify.notified() => {}
                }
            }
            Dequeued::Empty => {
                drop(permit);
                s.notify.notified().await;
            }
        }
    }
}
