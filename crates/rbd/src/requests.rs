//! Asking the holder of an image's lock to do what needs the lock: taking or removing a
//! snapshot of an image that is mapped (exported over NBD), as librbd asks the lock owner over
//! watch/notify. The asker writes a request into the omap of `rbd_requests.NAME` (never the
//! header object, whose version the lock's compare-and-swap follows); the holder's handle
//! ([`Image::serve_requests`]) reads them every [`POLL`], runs each once, and writes its
//! answer beside it; the asker waits for the answer and removes it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use cairn_client::{Client, ClientError};
use serde::{Deserialize, Serialize};

use crate::error::RbdError;
use crate::image::Image;

/// How often a holder looks for requests, and an asker for its answer.
pub const POLL: Duration = Duration::from_millis(250);
/// Requests one poll reads at most.
const PAGE: u32 = 64;
/// Largest request or answer read back.
const MAX_RECORD_BYTES: usize = 4096;

/// A request carried out by this holder, and whether its answer is stored.
struct Progress {
    answer: Answer,
    answered: bool,
}

/// What an asker wants the holder to do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// Take a snapshot of this name.
    SnapCreate(String),
    /// Remove the snapshot of this name.
    SnapRemove(String),
}

/// The holder's answer: what it did, or why it refused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum Answer {
    Done(String),
    Refused(String),
}

/// The object holding image `name`'s requests and answers.
pub fn requests_object(name: &str) -> String {
    format!("rbd_requests.{name}")
}

fn request_key(id: u64) -> Vec<u8> {
    format!("q.{id:016x}").into_bytes()
}

fn answer_key(id: u64) -> Vec<u8> {
    format!("a.{id:016x}").into_bytes()
}

/// Asks the holder of image `name`'s lock to carry out `request`, and waits up to `within`
/// for its answer: what it did, or its refusal as [`RbdError::Busy`] (also when it did not
/// answer in time; the request is then withdrawn).
pub async fn ask(
    client: &Client,
    pool: &str,
    name: &str,
    request: &Request,
    within: Duration,
) -> Result<String, RbdError> {
    let object = requests_object(name);
    let id = cairn_client::random_client_id();
    let body = rmp_serde::to_vec(request).map_err(|e| RbdError::Invalid(e.to_string()))?;
    client
        .omap_set(pool, &object, &[(request_key(id), body)])
        .await?;
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        tokio::time::sleep(POLL).await;
        let wanted = answer_key(id);
        let (page, _) = client.omap_list(pool, &object, &[], &wanted, 1).await?;
        let Some((_, value)) = page.into_iter().find(|(k, _)| *k == wanted) else {
            continue;
        };
        client.omap_remove(pool, &object, &[wanted]).await?;
        let answer: Answer = rmp_serde::from_slice(&value[..value.len().min(MAX_RECORD_BYTES)])
            .map_err(|e| RbdError::Invalid(format!("a malformed answer: {e}")))?;
        return match answer {
            Answer::Done(what) => Ok(what),
            Answer::Refused(why) => Err(RbdError::Busy(why)),
        };
    }
    let _ = client.omap_remove(pool, &object, &[request_key(id)]).await;
    Err(RbdError::Busy(format!(
        "the holder of image {name}'s lock did not answer within {within:?}"
    )))
}

impl Image {
    /// Serves the requests other clients make of this writer ([`ask`]) until the task is
    /// dropped or the lock is lost; each is run once and answered. A request that does not
    /// decode is answered with a refusal.
    pub async fn serve_requests(self: Arc<Image>) {
        let object = requests_object(&self.name);
        let mut carried: HashMap<Vec<u8>, Progress> = HashMap::new();
        loop {
            tokio::time::sleep(POLL).await;
            match self.lock() {
                Ok(lock) if !lock.is_lost() => {}
                _ => return,
            }
            let page = match self
                .client
                .omap_list(&self.pool, &object, &[], b"q.", PAGE)
                .await
            {
                Ok((page, _)) => page,
                Err(ClientError::NotFound(_)) => continue,
                Err(e) => {
                    tracing::warn!(image = %self.name, error = %e, "reading requests");
                    continue;
                }
            };
            // Requests carried out whose answer or removal failed: answered again, never run
            // again (a snapshot taken twice would be refused the second time).
            // (Pruned only when the page holds every request: one past it is still waiting.)
            if page.len() < PAGE as usize {
                carried.retain(|key, _| page.iter().any(|(k, _)| k == key));
            }
            for (key, value) in page {
                let mut progress = match carried.remove(&key) {
                    Some(progress) => progress,
                    None => Progress {
                        answer: match rmp_serde::from_slice::<Request>(
                            &value[..value.len().min(MAX_RECORD_BYTES)],
                        ) {
                            Ok(request) => self.carry_out(&request).await,
                            Err(e) => Answer::Refused(format!("a malformed request: {e}")),
                        },
                        answered: false,
                    },
                };
                if !progress.answered {
                    let mut answer_at = b"a.".to_vec();
                    answer_at.extend_from_slice(&key[2..]);
                    let encoded = rmp_serde::to_vec(&progress.answer).expect("an answer encodes");
                    match self
                        .client
                        .omap_set(&self.pool, &object, &[(answer_at, encoded)])
                        .await
                    {
                        Ok(_) => progress.answered = true,
                        Err(e) => {
                            tracing::warn!(image = %self.name, error = %e, "answering a request");
                        }
                    }
                }
                let removed = match progress.answered {
                    true => self
                        .client
                        .omap_remove(&self.pool, &object, std::slice::from_ref(&key))
                        .await
                        .map_err(|e| {
                            tracing::warn!(image = %self.name, error = %e, "removing a request");
                        })
                        .is_ok(),
                    false => false,
                };
                if !removed {
                    carried.insert(key, progress);
                }
            }
        }
    }

    async fn carry_out(&self, request: &Request) -> Answer {
        let done = match request {
            Request::SnapCreate(snap) => self
                .snap_create(snap)
                .await
                .map(|id| format!("created {}/{}@{snap} (id {id})", self.pool, self.name)),
            Request::SnapRemove(snap) => self
                .snap_remove(snap)
                .await
                .map(|()| format!("removed {}/{}@{snap}", self.pool, self.name)),
        };
        match done {
            Ok(what) => Answer::Done(what),
            Err(e) => Answer::Refused(e.to_string()),
        }
    }
}
