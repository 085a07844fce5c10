//! Writes to one object take their versions in the order the OSD received them. An op waits
//! for its map, for its PG to activate and for its object's recovery before it is versioned,
//! and ops released together by one of those (an activation wakes every op waiting for it)
//! would otherwise race: a write a client gave up on (timed out, then wrote the object
//! again) could be versioned after the write that replaced it and undo it. Ceph's OSD keeps
//! this order with its per-PG op queue and the ordered lists it requeues waiting ops from.
//!
//! Each write takes a [`Turn`] when its message is read, before its task is spawned, and waits
//! for it before it takes the object's lock; the turn passes when the write ends.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use cairn_clustermap::PgId;
use tokio::sync::watch;

/// The writes of one object waiting for or holding their turn, in arrival order.
struct Line {
    queue: VecDeque<u64>,
    /// The ticket whose turn it is.
    front: watch::Sender<u64>,
}

/// Every object's line of writes on this OSD.
#[derive(Default)]
pub struct WriteTurns {
    lines: Mutex<HashMap<(PgId, String), Line>>,
    next_ticket: AtomicU64,
}

impl WriteTurns {
    fn lines(&self) -> MutexGuard<'_, HashMap<(PgId, String), Line>> {
        self.lines.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the next turn for writing `object` of `pg`, behind every write of it received
    /// before.
    pub fn take(self: &Arc<Self>, pg: PgId, object: &str) -> Turn {
        let ticket = self.next_ticket.fetch_add(1, Ordering::Relaxed);
        let key = (pg, object.to_string());
        let mut lines = self.lines();
        let line = lines.entry(key.clone()).or_insert_with(|| Line {
            queue: VecDeque::new(),
            front: watch::Sender::new(ticket),
        });
        line.queue.push_back(ticket);
        Turn {
            turns: self.clone(),
            key,
            ticket,
        }
    }

    /// Objects with writes in line.
    #[cfg(test)]
    fn objects_in_line(&self) -> usize {
        self.lines().len()
    }
}

/// One write's place in its object's line; passing it on when dropped.
pub struct Turn {
    turns: Arc<WriteTurns>,
    key: (PgId, String),
    ticket: u64,
}

impl Turn {
    /// Waits until every write of the object received before this one has ended.
    pub async fn wait(&self) {
        let mut front = {
            let lines = self.turns.lines();
            match lines.get(&self.key) {
                Some(line) => line.front.subscribe(),
                None => return,
            }
        };
        let me = self.ticket;
        // The sender lives while this turn is in its line: an error cannot happen here, and
        // would only mean there is no line left to wait in.
        let _ = front.wait_for(|f| *f == me).await;
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut lines = self.turns.lines();
        let Some(line) = lines.get_mut(&self.key) else {
            return;
        };
        let was_front = line.queue.front() == Some(&self.ticket);
        line.queue.retain(|t| *t != self.ticket);
        match line.queue.front().copied() {
            None => {
                lines.remove(&self.key);
            }
            Some(next) if was_front => {
                line.front.send_replace(next);
            }
            Some(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn pg() -> PgId {
        PgId { pool: 1, seed: 7 }
    }

    #[tokio::test]
    async fn writes_of_one_object_go_in_arrival_order_whatever_order_they_wait_in() {
        let turns = Arc::new(WriteTurns::default());
        let first = turns.take(pg(), "o");
        let second = turns.take(pg(), "o");
        let other = turns.take(pg(), "p");
        // Another object's write does not wait.
        tokio::time::timeout(Duration::from_secs(5), other.wait())
            .await
            .expect("another object's line is its own");
        // The second waits while the first holds its turn.
        let waiting = tokio::spawn(async move {
            second.wait().await;
            second
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(
            !waiting.is_finished(),
            "the second write went before the first ended"
        );
        first.wait().await;
        drop(first);
        let second = waiting.await.expect("the second write's task");
        drop((second, other));
        assert_eq!(turns.objects_in_line(), 0, "an empty line is forgotten");
    }

    #[tokio::test]
    async fn a_write_that_gives_up_while_waiting_leaves_the_line() {
        let turns = Arc::new(WriteTurns::default());
        let first = turns.take(pg(), "o");
        let quitter = turns.take(pg(), "o");
        let third = turns.take(pg(), "o");
        drop(quitter);
        drop(first);
        tokio::time::timeout(Duration::from_secs(5), third.wait())
            .await
            .expect("the third's turn came when the first ended and the second left");
        drop(third);
        assert_eq!(turns.objects_in_line(), 0);
    }
}
