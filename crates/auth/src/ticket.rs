//! Service tickets: how an OSD knows who a client is without knowing the client's key.
//!
//! The monitor, which knows every key, issues a client a ticket for the OSD service: the
//! client's name and capabilities, a fresh session key and an expiry, sealed with the service
//! secret that only OSDs (and the monitor) hold, plus the same session key sealed with the
//! client's own key. The client opens its copy of the session key and presents the ticket
//! when it connects to an OSD; the OSD opens the ticket, and both ends prove knowledge of the
//! session key in the handshake. Like cephx's, a ticket is good until it expires.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::caps::Caps;
use crate::entity::EntityName;
use crate::error::AuthError;
use crate::key::SecretKey;
use crate::seal::{open, seal, Purpose};

/// How long a ticket is good for (Ceph's `auth_service_ticket_ttl`: an hour).
pub const TICKET_TTL_S: u64 = 3600;
/// A holder asks for a new ticket when less than this much of its life is left.
pub const TICKET_RENEW_BEFORE_S: u64 = TICKET_TTL_S / 4;
/// Largest sealed ticket accepted.
pub const MAX_TICKET_BYTES: usize = 16 << 10;
/// Tickets whose start lies this far in the future are refused (clock skew allowed).
pub const MAX_CLOCK_SKEW_S: u64 = 300;

/// A ticket's contents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ticket {
    /// Who it was issued to.
    pub entity: EntityName,
    /// What that entity may do, as its capability strings.
    pub caps: BTreeMap<String, String>,
    /// The key both ends prove they know.
    pub session_key: SecretKey,
    /// When it was issued (seconds since the Unix epoch).
    pub issued_unix_s: u64,
    /// When it stops being accepted (seconds since the Unix epoch).
    pub expires_unix_s: u64,
    /// The client id the monitor bound to this entity for the holder (the id its ops name,
    /// which OSDs schedule them by); None when the holder asked for none.
    pub client_id: Option<u64>,
}

/// The serialized form of a ticket.
#[derive(Serialize, Deserialize)]
struct TicketWire {
    entity: String,
    caps: BTreeMap<String, String>,
    session_key: String,
    issued: u64,
    expires: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    client_id: Option<u64>,
}

/// What the seal authenticates besides the contents: which service the ticket is for.
const SERVICE_OSD: &[u8] = b"service osd";

impl Ticket {
    /// A new ticket for `entity` with `caps`, issued at `now_unix_s`, good for `ttl_s`.
    pub fn issue(
        entity: EntityName,
        caps: BTreeMap<String, String>,
        now_unix_s: u64,
        ttl_s: u64,
    ) -> Ticket {
        Ticket {
            entity,
            caps,
            session_key: SecretKey::generate(),
            issued_unix_s: now_unix_s,
            expires_unix_s: now_unix_s.saturating_add(ttl_s),
            client_id: None,
        }
    }

    /// The ticket sealed with the OSD service secret.
    pub fn seal(&self, service_secret: &SecretKey) -> Vec<u8> {
        let wire = TicketWire {
            entity: self.entity.to_string(),
            caps: self.caps.clone(),
            session_key: self.session_key.to_base64(),
            issued: self.issued_unix_s,
            expires: self.expires_unix_s,
            client_id: self.client_id,
        };
        let json = serde_json::to_vec(&wire).expect("a ticket serializes");
        seal(service_secret, Purpose::Ticket, SERVICE_OSD, &json)
    }

    /// Opens a sealed ticket with the service secret and checks it is valid at `now_unix_s`
    /// and its capabilities parse.
    pub fn open(
        service_secret: &SecretKey,
        sealed: &[u8],
        now_unix_s: u64,
    ) -> Result<(Ticket, Caps), AuthError> {
        if sealed.len() > MAX_TICKET_BYTES {
            return Err(AuthError::Ticket(format!(
                "{} bytes, more than {MAX_TICKET_BYTES}",
                sealed.len()
            )));
        }
        let json = open(service_secret, Purpose::Ticket, SERVICE_OSD, sealed)
            .map_err(|_| AuthError::Ticket("not sealed with this service's secret".into()))?;
        let wire: TicketWire = serde_json::from_slice(&json)
            .map_err(|e| AuthError::Ticket(format!("contents: {e}")))?;
        let ticket = Ticket {
            entity: wire.entity.parse()?,
            caps: wire.caps,
            session_key: SecretKey::from_base64(&wire.session_key)?,
            issued_unix_s: wire.issued,
            expires_unix_s: wire.expires,
            client_id: wire.client_id,
        };
        if now_unix_s >= ticket.expires_unix_s {
            return Err(AuthError::Ticket(format!(
                "{} expired {} s ago",
                ticket.entity,
                now_unix_s - ticket.expires_unix_s
            )));
        }
        if ticket.issued_unix_s > now_unix_s.saturating_add(MAX_CLOCK_SKEW_S) {
            return Err(AuthError::Ticket(format!(
                "{} issued in the future (clocks apart?)",
                ticket.entity
            )));
        }
        let caps = Caps::parse(&ticket.caps)?;
        Ok((ticket, caps))
    }

    /// The session key sealed for the client it was issued to (with the client's key).
    pub fn seal_session_key(&self, client_key: &SecretKey) -> Vec<u8> {
        seal(
            client_key,
            Purpose::SessionKey,
            self.entity.to_string().as_bytes(),
            self.session_key.as_bytes(),
        )
    }

    /// The session key from [`Ticket::seal_session_key`]'s output, opened by the client
    /// `entity` with its key.
    pub fn open_session_key(
        client_key: &SecretKey,
        entity: &EntityName,
        sealed: &[u8],
    ) -> Result<SecretKey, AuthError> {
        let bytes = open(
            client_key,
            Purpose::SessionKey,
            entity.to_string().as_bytes(),
            sealed,
        )?;
        let arr: [u8; crate::key::KEY_BYTES] = bytes.try_into().map_err(|_| AuthError::Unseal)?;
        Ok(SecretKey::from_bytes(arr))
    }
}

/// The OSD service secret sealed for OSD `osd` with its key.
pub fn seal_service_secret(osd_key: &SecretKey, osd: &EntityName, secret: &SecretKey) -> Vec<u8> {
    seal(
        osd_key,
        Purpose::ServiceSecret,
        osd.to_string().as_bytes(),
        secret.as_bytes(),
    )
}

/// The OSD service secret from [`seal_service_secret`]'s output.
pub fn open_service_secret(
    osd_key: &SecretKey,
    osd: &EntityName,
    sealed: &[u8],
) -> Result<SecretKey, AuthError> {
    let bytes = open(
        osd_key,
        Purpose::ServiceSecret,
        osd.to_string().as_bytes(),
        sealed,
    )?;
    let arr: [u8; crate::key::KEY_BYTES] = bytes.try_into().map_err(|_| AuthError::Unseal)?;
    Ok(SecretKey::from_bytes(arr))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps() -> BTreeMap<String, String> {
        [("osd".to_string(), "allow rw pool=a".to_string())].into()
    }

    #[test]
    fn a_ticket_opens_with_the_service_secret_until_it_expires() {
        let secret = SecretKey::generate();
        let t = Ticket::issue("client.bob".parse().unwrap(), caps(), 1000, 60);
        let sealed = t.seal(&secret);
        let (back, parsed) = Ticket::open(&secret, &sealed, 1059).unwrap();
        assert_eq!(back, t);
        assert!(parsed.osd().allows("a", crate::OsdAccess::Write));
        assert!(
            matches!(Ticket::open(&secret, &sealed, 1060), Err(AuthError::Ticket(m)) if m.contains("expired"))
        );
        assert!(Ticket::open(&SecretKey::generate(), &sealed, 1001).is_err());
        assert!(Ticket::open(&secret, &sealed, 1000 - MAX_CLOCK_SKEW_S - 1).is_err());
        let mut tampered = sealed.clone();
        tampered[20] ^= 1;
        assert!(Ticket::open(&secret, &tampered, 1001).is_err());
        assert!(Ticket::open(&secret, &vec![0u8; MAX_TICKET_BYTES + 1], 1001).is_err());
    }

    #[test]
    fn session_keys_and_service_secrets_open_only_for_their_holder() {
        let bob: EntityName = "client.bob".parse().unwrap();
        let key = SecretKey::generate();
        let t = Ticket::issue(bob.clone(), caps(), 1, 60);
        let sealed = t.seal_session_key(&key);
        assert_eq!(
            Ticket::open_session_key(&key, &bob, &sealed).unwrap(),
            t.session_key
        );
        let eve: EntityName = "client.eve".parse().unwrap();
        assert!(Ticket::open_session_key(&key, &eve, &sealed).is_err());
        assert!(Ticket::open_session_key(&SecretKey::generate(), &bob, &sealed).is_err());

        let osd = EntityName::Osd(2);
        let service = SecretKey::generate();
        let s = seal_service_secret(&key, &osd, &service);
        assert_eq!(open_service_secret(&key, &osd, &s).unwrap(), service);
        assert!(open_service_secret(&key, &EntityName::Osd(3), &s).is_err());
        assert!(
            Ticket::open_session_key(&key, &osd, &s).is_err(),
            "purposes differ"
        );
    }
}
