//! Runs the OSD's work through its QoS scheduler (invariant 2): every client op and replica
//! write is enqueued with its class and cost, and starts only when the scheduler releases it;
//! at most `max_inflight` run at once (explicit limit). The policy alone chooses the order: a
//! dispatcher task releases requests, and a caller of [`OpScheduler::run`] that finds a free
//! slot asks the policy itself (running its own request inline when the policy picks it).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cairn_qos::{CostModel, Dequeued, QosClass, QosQueue, Request};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use crate::error::OsdError;

type Job = Pin<Box<dyn Future<Output = ()> + Send>>;

/// What the policy released into a held in-flight slot.
enum Released {
    /// A request: its id and its job, which drops the slot when it ends.
    Job(u64, Job),
    /// Nothing eligible before this time (ns on the scheduler's clock).
    NothingBefore(u64),
    /// Nothing queued.
    Empty,
}

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
        let id = self.enqueue(class, client_id, length_bytes, Box::pin(job))?;
        match self.dispatch_here(id) {
            Some(job) => drop(tokio::spawn(job)),
            None => self.notify.notify_one(),
        }
        Ok(())
    }

    /// Puts `job` in the policy's queue (without waking the dispatcher); returns its id.
    fn enqueue(
        &self,
        class: QosClass,
        client_id: u64,
        length_bytes: u64,
        job: Job,
    ) -> Result<u64, OsdError> {
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
            .insert(id, job);
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
        Ok(id)
    }

    /// Asks the policy for the next request, holding `permit` for it: the job comes back
    /// wrapped so that the slot is released when it ends. Both the dispatcher and
    /// [`OpScheduler::dispatch_here`] release requests only through here.
    fn release_next(&self, permit: OwnedSemaphorePermit) -> Released {
        let next = self
            .queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .dequeue(self.now_ns());
        match next {
            Dequeued::Request(d) => {
                let job = self
                    .jobs
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&d.req.id);
                match job {
                    Some(job) => Released::Job(
                        d.req.id,
                        Box::pin(async move {
                            job.await;
                            drop(permit);
                        }),
                    ),
                    // Dropped by `stop`: look again at once.
                    None => Released::NothingBefore(self.now_ns()),
                }
            }
            Dequeued::NothingBefore(t) => Released::NothingBefore(t),
            Dequeued::Empty => Released::Empty,
        }
    }

    /// Dispatches in the caller's task when an in-flight slot is free: the policy picks the
    /// next request exactly as the dispatcher would. The caller's own request (`mine`) comes
    /// back to be run by the caller, holding its slot (saving the dispatcher's wake-up); another
    /// request is spawned. `None`: the caller's request is still queued.
    fn dispatch_here(&self, mine: u64) -> Option<Job> {
        let permit = self.inflight.clone().try_acquire_owned().ok()?;
        match self.release_next(permit) {
            Released::Job(id, job) if id == mine => Some(job),
            Released::Job(_, job) => {
                tokio::spawn(job);
                None
            }
            Released::NothingBefore(_) | Released::Empty => None,
        }
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
        let job: Job = Box::pin(async move {
            let _ = tx.send(work.await);
        });
        let id = self.enqueue(class, client_id, length_bytes, job)?;
        match self.dispatch_here(id) {
            Some(job) => job.await,
            None => self.notify.notify_one(),
        }
        rx.await
            .map_err(|_| OsdError::Protocol("scheduler stopped before running the request".into()))
    }
}

async fn dispatch_loop(s: Arc<OpScheduler>) {
    loop {
        let Ok(permit) = s.inflight.clone().acquire_owned().await else {
            return;
        };
        match s.release_next(permit) {
            Released::Job(_, job) => drop(tokio::spawn(job)),
            Released::NothingBefore(t) => {
                let wait = Duration::from_nanos(t.saturating_sub(s.now_ns()));
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = s.notify.notified() => {}
                }
            }
            Released::Empty => s.notify.notified().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_qos::{DeviceCapacity, PolicyConfig};
    use std::sync::Mutex as StdMutex;

    fn scheduler(max_inflight: usize) -> Arc<OpScheduler> {
        let capacity = DeviceCapacity {
            random_4k_iops: 20_000.0,
            seq_bandwidth_bytes_per_s: 1e9,
        };
        OpScheduler::new(
            QosQueue::new(PolicyConfig::Fifo).unwrap(),
            CostModel::from_capacity(capacity).unwrap(),
            max_inflight,
        )
    }

    /// Occupies the only in-flight slot until the returned sender fires.
    async fn hold_the_slot(s: &OpScheduler) -> tokio::sync::oneshot::Sender<()> {
        let (release, wait) = tokio::sync::oneshot::channel::<()>();
        let (started_tx, started) = tokio::sync::oneshot::channel();
        s.submit(QosClass::Client, 9, 4096, async move {
            let _ = started_tx.send(());
            let _ = wait.await;
        })
        .unwrap();
        started.await.unwrap();
        release
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn run_returns_the_work_result_whether_dispatched_here_or_by_the_dispatcher() {
        let s = scheduler(4);
        for i in 0..100u64 {
            let got = s.run(QosClass::Client, i % 3, 4096, async move { i * 2 });
            assert_eq!(got.await.unwrap(), i * 2);
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_caller_never_runs_beyond_the_in_flight_limit_and_the_policy_keeps_its_order() {
        let s = scheduler(1);
        let release = hold_the_slot(&s).await;
        let order = Arc::new(StdMutex::new(Vec::new()));
        let mut waiters = Vec::new();
        for i in 0..5u64 {
            let (s2, order2) = (s.clone(), order.clone());
            waiters.push(tokio::spawn(async move {
                s2.run(QosClass::Client, i, 4096, async move {
                    order2.lock().unwrap().push(i);
                })
                .await
                .unwrap();
            }));
            // Each caller has queued before the next one starts (FIFO order = this order).
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            order.lock().unwrap().is_empty(),
            "ran while the only slot was held"
        );
        release.send(()).unwrap();
        for w in waiters {
            tokio::time::timeout(Duration::from_secs(5), w)
                .await
                .expect("queued request never ran")
                .unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_caller_with_a_free_slot_still_lets_the_policy_pick_an_older_request() {
        for _ in 0..20 {
            let s = scheduler(1);
            let release = hold_the_slot(&s).await;
            let order = Arc::new(StdMutex::new(Vec::new()));
            let (s2, order2) = (s.clone(), order.clone());
            let older = tokio::spawn(async move {
                s2.run(QosClass::Client, 1, 4096, async move {
                    order2.lock().unwrap().push("older");
                })
                .await
                .unwrap();
            });
            tokio::time::sleep(Duration::from_millis(5)).await;
            // The slot frees as this caller arrives: FIFO must still run the older one first.
            release.send(()).unwrap();
            let order3 = order.clone();
            s.run(QosClass::Client, 2, 4096, async move {
                order3.lock().unwrap().push("newer");
            })
            .await
            .unwrap();
            older.await.unwrap();
            assert_eq!(*order.lock().unwrap(), vec!["older", "newer"]);
        }
    }
}
