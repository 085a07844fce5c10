//! A client's credentials for OSDs: tickets from the monitor, renewed before they expire.
//!
//! The monitor authenticates a client by its own key; an OSD does not know that key, so the
//! client asks the monitor for a ticket for the OSD service (see `cairn_auth::ticket`) and
//! presents it, proving it knows the ticket's session key, when it connects to an OSD.

use std::sync::Arc;

use cairn_auth::ticket::TICKET_RENEW_BEFORE_S;
use cairn_auth::{EntityName, SecretKey, Ticket};
use cairn_msgr::handshake::{CredentialSource, DialCredentials};
use cairn_msgr::protect::WireMode;
use cairn_proto::mon::{AuthAnswer, AuthRequest, RequestBody};

use crate::mon::MonClient;

/// Who a client is: its entity, its key and the wire mode it asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientAuth {
    /// Its entity (`client.NAME`).
    pub entity: EntityName,
    /// Its key.
    pub key: SecretKey,
    /// The wire mode it asks for.
    pub mode: WireMode,
}

impl ClientAuth {
    /// What it dials the monitor with: its own key.
    pub fn mon_credentials(&self) -> Arc<dyn CredentialSource> {
        Arc::new(cairn_msgr::handshake::StaticCredentials(DialCredentials {
            entity: self.entity.clone(),
            ticket: Vec::new(),
            key: self.key.clone(),
            mode: self.mode,
        }))
    }
}

/// Longest a ticket request to the monitor may take.
const TICKET_TIMEOUT_MS: u64 = 10_000;

/// Tickets for the OSD service from `mon`, one kept until it nears its expiry, each binding
/// the client's id.
pub struct TicketSource {
    mon: Arc<MonClient>,
    auth: ClientAuth,
    client_id: u64,
    held: tokio::sync::Mutex<Option<(DialCredentials, u64)>>,
}

impl TicketSource {
    /// Tickets for `auth`'s entity from `mon`, binding `client_id` (the id its ops name; 0:
    /// none).
    pub fn new(mon: Arc<MonClient>, auth: ClientAuth, client_id: u64) -> TicketSource {
        TicketSource {
            mon,
            auth,
            client_id,
            held: tokio::sync::Mutex::new(None),
        }
    }
}

fn now_unix_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[async_trait::async_trait]
impl CredentialSource for TicketSource {
    async fn credentials(&self) -> Result<DialCredentials, String> {
        let mut held = self.held.lock().await;
        if let Some((creds, expires)) = held.as_ref() {
            if now_unix_s() + TICKET_RENEW_BEFORE_S < *expires {
                return Ok(creds.clone());
            }
        }
        let reply = self
            .mon
            .request(
                RequestBody::Auth(AuthRequest::Ticket {
                    client_id: (self.client_id != 0).then_some(self.client_id),
                }),
                TICKET_TIMEOUT_MS,
            )
            .await
            .map_err(|e| format!("no ticket from the monitor: {e}"))?;
        let Some(AuthAnswer::Ticket {
            ticket,
            session_key,
            expires_unix_s,
        }) = reply.auth
        else {
            return Err("the monitor answered without a ticket".into());
        };
        let key = Ticket::open_session_key(&self.auth.key, &self.auth.entity, &session_key)
            .map_err(|e| format!("the ticket's session key: {e}"))?;
        let creds = DialCredentials {
            entity: self.auth.entity.clone(),
            ticket,
            key,
            mode: self.auth.mode,
        };
        *held = Some((creds.clone(), expires_unix_s));
        Ok(creds)
    }
}
