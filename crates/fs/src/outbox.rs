//! The metadata server's way to a client session: frames leave in the order they were given
//! to it, without holding up the namespace's task.
//!
//! A client whose session window is full (it has not acknowledged what it was sent) cannot
//! take a frame now; the frame waits in a backlog sent by a task of its own, and every later
//! frame joins the backlog behind it until the backlog is empty. A client relies on that
//! order: an answer to a read that ran after a change must not arrive before the change's
//! answer, a recall not before the grant it ends.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use cairn_msgr::session::SessionSender;

/// Most frames one session's backlog holds; past it (or [`MAX_BACKLOG_BYTES`]) the session is
/// given up and closed (a client that reads nothing for that long is treated as gone; if it
/// is not, it reconnects and sends its requests again).
pub const MAX_BACKLOG_FRAMES: usize = 65_536;
/// Most payload bytes one session's backlog holds.
pub const MAX_BACKLOG_BYTES: usize = 64 << 20;

/// Frames waiting for room in a session's window, and whether a task is sending them.
#[derive(Default)]
struct Backlog {
    frames: VecDeque<(u16, bytes::Bytes)>,
    bytes: usize,
    draining: bool,
    /// The backlog overflowed: nothing more is sent on this session.
    abandoned: bool,
}

/// An ordered sender to one client session; clones share its backlog.
#[derive(Clone)]
pub struct Outbox {
    sender: SessionSender,
    backlog: Arc<Mutex<Backlog>>,
    gave_up: Arc<tokio::sync::Notify>,
}

impl Outbox {
    /// The outbox of the session `sender` sends on (one per session: clones of it share the
    /// order, separate outboxes of one session would not).
    pub fn new(sender: SessionSender) -> Outbox {
        Outbox {
            sender,
            backlog: Arc::default(),
            gave_up: Arc::default(),
        }
    }

    /// Resolves once the session is given up (its backlog overflowed): its server closes it.
    pub async fn given_up(&self) {
        loop {
            let notified = self.gave_up.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.backlog().abandoned {
                return;
            }
            notified.await;
        }
    }

    fn backlog(&self) -> std::sync::MutexGuard<'_, Backlog> {
        self.backlog.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sends a frame after every frame given before it, now if the window has room, else
    /// from the backlog's task. A closed or abandoned session drops it.
    pub fn send(&self, msg_type: u16, payload: bytes::Bytes) {
        let mut b = self.backlog();
        if b.abandoned {
            return;
        }
        if !b.draining {
            debug_assert!(b.frames.is_empty(), "a backlog with nobody sending it");
            match self.sender.try_send(msg_type, payload.clone()) {
                Err(cairn_msgr::MsgrError::Busy { .. }) => {}
                _ => return,
            }
            b.draining = true;
            let outbox = self.clone();
            tokio::spawn(async move { outbox.drain().await });
        }
        if b.frames.len() >= MAX_BACKLOG_FRAMES || b.bytes + payload.len() > MAX_BACKLOG_BYTES {
            tracing::warn!("a client reads none of its answers; its session is closed");
            b.frames.clear();
            b.bytes = 0;
            b.abandoned = true;
            self.gave_up.notify_waiters();
            return;
        }
        b.bytes += payload.len();
        b.frames.push_back((msg_type, payload));
    }

    /// Sends the backlog in order, waiting for room, until it is empty.
    async fn drain(self) {
        loop {
            let next = {
                let mut b = self.backlog();
                match b.frames.pop_front() {
                    Some(f) => {
                        b.bytes -= f.1.len();
                        f
                    }
                    None => {
                        b.draining = false;
                        return;
                    }
                }
            };
            if self.sender.send(next.0, next.1).await.is_err() {
                let mut b = self.backlog();
                b.frames.clear();
                b.bytes = 0;
                b.draining = false;
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_msgr::frame::Limits;
    use cairn_msgr::session::{Listener, Session};

    #[tokio::test]
    async fn frames_arrive_in_the_order_given_when_the_window_is_full() {
        let limits = Limits {
            max_inflight_bytes: 8 << 10,
            ..Limits::default()
        };
        let mut listener = Listener::bind("127.0.0.1:0".parse().unwrap(), limits)
            .await
            .unwrap();
        let addr = listener.local_addr();
        let mut client = Session::connect(addr, 7, limits, 50).await;
        client.send(1, vec![0u8; 8]).await.unwrap();
        let server = listener.accept().await.unwrap();
        let outbox = Outbox::new(server.sender());
        let mut backlogged = 0;
        for i in 0u32..200 {
            let mut payload = vec![0u8; 3000];
            payload[..4].copy_from_slice(&i.to_le_bytes());
            outbox.send(9, payload.into());
            backlogged = backlogged.max(outbox.backlog().frames.len());
        }
        assert!(
            backlogged > 0,
            "the window never filled: the backlog went untried"
        );
        for i in 0u32..200 {
            let frame = client.recv().await.unwrap();
            assert_eq!(frame.header.msg_type, 9);
            assert_eq!(
                frame.payload[..4],
                i.to_le_bytes(),
                "frame {i} out of order"
            );
        }
    }
}
