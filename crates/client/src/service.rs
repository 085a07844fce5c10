//! The accepting side of tickets, shared by every daemon that serves clients (OSDs and the
//! metadata server): the service secret the monitor hands to such daemons
//! ([`fetch_service_secret`]) and the authorizer that opens a ticket with it
//! ([`TicketAuthorizer`]).

use std::sync::{Arc, RwLock};

use cairn_auth::ticket::open_service_secret;
use cairn_auth::{Caps, EntityName, SecretKey, Ticket};
use cairn_msgr::handshake::Authorizer;
use cairn_msgr::protect::WireMode;
use cairn_proto::mon::{AuthAnswer, AuthRequest, MonError, RequestBody};

use crate::mon::MonClient;
use crate::ClientError;

/// The service secret once the monitor gave it.
#[derive(Default)]
pub struct ServiceSecret(RwLock<Option<SecretKey>>);

impl ServiceSecret {
    /// The secret, if known yet.
    pub fn get(&self) -> Option<SecretKey> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Keeps `key` as the secret.
    pub fn set(&self, key: SecretKey) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = Some(key);
    }
}

/// Seconds since the Unix epoch by this host's clock (tickets carry their expiry in it).
pub fn now_unix_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Asks the monitor for the service secret (sealed with `key`, the key of `entity`, which
/// must be an OSD or hold `mon 'profile mds'`) and keeps it in `into`.
pub async fn fetch_service_secret(
    mon: &MonClient,
    entity: &EntityName,
    key: &SecretKey,
    into: &ServiceSecret,
) -> Result<(), ClientError> {
    let reply = mon
        .request(RequestBody::Auth(AuthRequest::ServiceSecret), 30_000)
        .await?;
    let Some(AuthAnswer::ServiceSecret { sealed }) = reply.auth else {
        return Err(ClientError::Mon(MonError::Invalid(
            "the monitor answered without the service secret".into(),
        )));
    };
    let secret = open_service_secret(key, entity, &sealed)
        .map_err(|e| ClientError::Invalid(format!("the service secret: {e}")))?;
    into.set(secret);
    Ok(())
}

/// Accepts an entity that presents a ticket sealed with the service secret and names it.
pub struct TicketAuthorizer {
    /// The service secret (connections are refused until it is known).
    pub secret: Arc<ServiceSecret>,
    /// The weakest wire mode accepted.
    pub min_mode: WireMode,
}

impl Authorizer for TicketAuthorizer {
    fn authorize(&self, entity: &EntityName, ticket: &[u8]) -> Result<(SecretKey, Caps), String> {
        self.authorize_bound(entity, ticket)
            .map(|(key, caps, _)| (key, caps))
    }

    fn authorize_bound(
        &self,
        entity: &EntityName,
        ticket: &[u8],
    ) -> Result<(SecretKey, Caps, Option<u64>), String> {
        if ticket.is_empty() {
            return Err("this daemon needs a ticket from the monitor".into());
        }
        let secret = self
            .secret
            .get()
            .ok_or("this daemon has no service secret yet (starting)")?;
        let (t, caps) = Ticket::open(&secret, ticket, now_unix_s()).map_err(|e| e.to_string())?;
        if &t.entity != entity {
            return Err(format!("the ticket is {}'s", t.entity));
        }
        Ok((t.session_key, caps, t.client_id))
    }

    fn min_mode(&self) -> WireMode {
        self.min_mode
    }
}
