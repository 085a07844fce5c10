//! The OSD's side of authentication: its listener accepts an entity only with a ticket the
//! monitor sealed with the OSD service secret ([`OsdAuthorizer`]), its connections to other
//! OSDs present tickets it seals itself as `osd.N` ([`PeerCredentials`]), and each request is
//! checked against the sender's capabilities ([`refusal`]).

use std::sync::Arc;

use cairn_auth::ticket::TICKET_TTL_S;
use cairn_auth::{Caps, EntityName, OsdAccess, Ticket};
use cairn_client::mon::MonClient;
use cairn_client::service::now_unix_s;
pub use cairn_client::service::{ServiceSecret, TicketAuthorizer as OsdAuthorizer};
use cairn_msgr::handshake::{AuthPeer, CredentialSource, DialCredentials};
use cairn_msgr::protect::WireMode;

use crate::config::OsdAuth;
use crate::error::OsdError;

/// Asks the monitor for the service secret (sealed with this OSD's key) and keeps it.
pub async fn fetch_service_secret(
    mon: &MonClient,
    me: &OsdAuth,
    into: &ServiceSecret,
) -> Result<(), OsdError> {
    cairn_client::service::fetch_service_secret(mon, &me.entity, &me.key, into)
        .await
        .map_err(|e| OsdError::Protocol(e.to_string()))
}

/// What this OSD presents to another: a ticket it seals itself as `osd.N` with the OSD
/// profile (only an OSD holds the service secret), fresh for each connection.
pub struct PeerCredentials {
    /// This OSD's entity.
    pub entity: EntityName,
    /// The service secret.
    pub secret: Arc<ServiceSecret>,
    /// The wire mode asked for.
    pub mode: WireMode,
}

#[async_trait::async_trait]
impl CredentialSource for PeerCredentials {
    async fn credentials(&self) -> Result<DialCredentials, String> {
        let secret = self.secret.get().ok_or("no service secret yet")?;
        let ticket = Ticket::issue(
            self.entity.clone(),
            Caps::osd_daemon().raw().clone(),
            now_unix_s(),
            TICKET_TTL_S,
        );
        Ok(DialCredentials {
            entity: self.entity.clone(),
            ticket: ticket.seal(&secret),
            key: ticket.session_key,
            mode: self.mode,
        })
    }
}

/// What a message asks of its sender.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need<'a> {
    /// A client op on objects of pool `pool`.
    Pool(&'a str, OsdAccess),
    /// What only another OSD sends: replica writes, peering, recovery, scrub, heartbeats.
    OsdPeer,
    /// An admin command (`tell`).
    Admin,
    /// A write past the full ratio ([`cairn_proto::OpHeader::full_force`]): only a metadata
    /// server (`mon 'profile mds'`) or an admin sends one.
    FullForce,
}

/// Why `peer` may not send what needs `need`, if it may not (None: allowed).
pub fn refusal(peer: &AuthPeer, need: Need<'_>) -> Option<String> {
    let osd = peer.caps.osd();
    let allowed = match need {
        Need::Pool(pool, access) => osd.allows(pool, access),
        Need::OsdPeer => osd.is_osd() && peer.entity.osd_id().is_some(),
        Need::Admin => osd.allows_admin(),
        Need::FullForce => {
            let mon = peer.caps.mon();
            mon.is_mds() || mon.allows(cairn_auth::MonAccess::Admin)
        }
    };
    (!allowed).then(|| {
        format!(
            "permission denied: {} lacks osd caps for {need:?}",
            peer.entity
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_auth::SecretKey;
    use cairn_msgr::handshake::Authorizer;

    fn peer(entity: &str, caps: Caps) -> AuthPeer {
        AuthPeer {
            entity: entity.parse().unwrap(),
            caps,
            mode: WireMode::Mac,
            client_id: None,
        }
    }

    #[test]
    fn tickets_open_for_their_entity_only_and_caps_decide_each_request() {
        let secret = Arc::new(ServiceSecret::default());
        let authz = OsdAuthorizer {
            secret: secret.clone(),
            min_mode: WireMode::Mac,
        };
        let bob: EntityName = "client.bob".parse().unwrap();
        let caps = [("osd".to_string(), "allow rw pool=a".to_string())].into();
        let t = Ticket::issue(bob.clone(), caps, now_unix_s(), 60);
        assert!(authz.authorize(&bob, &[]).is_err(), "no ticket");
        let key = SecretKey::generate();
        assert!(authz
            .authorize(&bob, &t.seal(&key))
            .unwrap_err()
            .contains("starting"));
        secret.set(key.clone());
        let (k, c) = authz.authorize(&bob, &t.seal(&key)).unwrap();
        assert_eq!(k, t.session_key);
        let eve: EntityName = "client.eve".parse().unwrap();
        assert!(authz
            .authorize(&eve, &t.seal(&key))
            .unwrap_err()
            .contains("bob"));
        assert!(authz
            .authorize(&bob, &t.seal(&SecretKey::generate()))
            .is_err());

        let p = peer("client.bob", c);
        assert_eq!(refusal(&p, Need::Pool("a", OsdAccess::Write)), None);
        assert!(refusal(&p, Need::Pool("b", OsdAccess::Read)).is_some());
        assert!(refusal(&p, Need::OsdPeer).is_some());
        assert!(refusal(&p, Need::Admin).is_some());
        let admin = peer("client.admin", Caps::everything());
        assert_eq!(refusal(&admin, Need::Admin), None);
        assert!(
            refusal(&admin, Need::OsdPeer).is_some(),
            "replica writes come from OSDs only"
        );
        let osd = peer("osd.3", Caps::osd_daemon());
        assert_eq!(refusal(&osd, Need::OsdPeer), None);
        assert!(refusal(&osd, Need::Pool("a", OsdAccess::Read)).is_some());
        let forged = peer("client.x", Caps::osd_daemon());
        assert!(
            refusal(&forged, Need::OsdPeer).is_some(),
            "the profile on a client is not an OSD"
        );
    }
}
