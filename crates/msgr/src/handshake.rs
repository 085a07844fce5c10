//! Mutual authentication at the start of a connection, before the session's HELLO.
//!
//! The dialer sends AUTH_REQUEST (its entity, a ticket, a fresh nonce, the wire mode it wants);
//! the acceptor's [`Authorizer`] finds the key both share, and the acceptor answers
//! AUTH_CHALLENGE (its nonce, the mode chosen, its proof of the key) or AUTH_REFUSED (why);
//! the dialer checks the proof and answers AUTH_PROOF. From then on every frame each way is
//! protected ([`crate::protect`]) with keys derived from the shared key and the transcript,
//! so no secret crosses the wire and nothing can be replayed from another connection. The
//! proofs and key derivation are [`cairn_auth::handshake`]'s.

// A narrowing cast in a byte format would silently write a wrong length: conversions here
// are checked (`try_from`).
#![deny(clippy::cast_possible_truncation)]

use std::sync::Arc;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use cairn_auth::handshake::{
    acceptor_proof, connection_keys, dialer_proof, proof_matches, transcript, NONCE_BYTES,
    PROOF_BYTES,
};
use cairn_auth::key::random_bytes;
use cairn_auth::ticket::MAX_TICKET_BYTES;
use cairn_auth::{Caps, EntityName, SecretKey};

use crate::conn::Conn;
use crate::error::MsgrError;
use crate::frame::Frame;
use crate::protect::{FrameKeys, WireMode};

/// Frame type of the dialer's authentication request.
pub const MSG_AUTH_REQUEST: u16 = 0xfffd;
/// Frame type of the acceptor's challenge (its nonce and proof).
pub const MSG_AUTH_CHALLENGE: u16 = 0xfffc;
/// Frame type of the dialer's proof.
pub const MSG_AUTH_PROOF: u16 = 0xfffb;
/// Frame type of a refusal, with its reason, before the connection closes.
pub const MSG_AUTH_REFUSED: u16 = 0xfffa;

/// Version of the handshake's encoding.
const AUTH_VERSION: u8 = 1;
/// Longest refusal reason sent.
const MAX_REASON_BYTES: usize = 512;

/// Who the peer of an authenticated session is and what it may do.
#[derive(Clone, Debug)]
pub struct AuthPeer {
    /// Its entity.
    pub entity: EntityName,
    /// Its capabilities.
    pub caps: Caps,
    /// How the connection's frames are protected.
    pub mode: WireMode,
    /// The client id its ticket binds (the id its ops must name), if any.
    pub client_id: Option<u64>,
}

/// What an accepting daemon knows about keys: the monitor looks the entity's key up; an OSD
/// opens the ticket with its service secret.
pub trait Authorizer: Send + Sync + 'static {
    /// The key shared with `entity` presenting `ticket` (empty when it has none) and its
    /// capabilities, or why it is refused.
    fn authorize(&self, entity: &EntityName, ticket: &[u8]) -> Result<(SecretKey, Caps), String>;
    /// As [`Authorizer::authorize`], with the client id `ticket` binds to `entity` (none by
    /// default: only a ticket can bind one).
    fn authorize_bound(
        &self,
        entity: &EntityName,
        ticket: &[u8],
    ) -> Result<(SecretKey, Caps, Option<u64>), String> {
        self.authorize(entity, ticket)
            .map(|(key, caps)| (key, caps, None))
    }
    /// The weakest wire mode accepted; a dialer asking for less gets this.
    fn min_mode(&self) -> WireMode;
}

/// What a dialer presents.
#[derive(Clone, Debug)]
pub struct DialCredentials {
    /// Who it is.
    pub entity: EntityName,
    /// Its ticket for the peer's service (empty for the monitor, which knows its key).
    pub ticket: Vec<u8>,
    /// The key its proof uses: its own key, or the ticket's session key.
    pub key: SecretKey,
    /// The wire mode it wants (the acceptor may choose a stronger one).
    pub mode: WireMode,
}

/// Where a dialer gets its credentials for each new connection (a ticket may need renewing).
#[async_trait::async_trait]
pub trait CredentialSource: Send + Sync + 'static {
    /// Credentials for the next connection, or why there are none.
    async fn credentials(&self) -> Result<DialCredentials, String>;
}

/// Credentials that never change: an entity's own key, for the monitor.
pub struct StaticCredentials(pub DialCredentials);

#[async_trait::async_trait]
impl CredentialSource for StaticCredentials {
    async fn credentials(&self) -> Result<DialCredentials, String> {
        Ok(self.0.clone())
    }
}

fn invalid(why: &str) -> MsgrError {
    MsgrError::Auth(why.to_string())
}

fn encode_request(c: &DialCredentials, nonce: &[u8; NONCE_BYTES]) -> Bytes {
    let entity = c.entity.to_string();
    let mut b = BytesMut::with_capacity(2 + NONCE_BYTES + 2 + entity.len() + 4 + c.ticket.len());
    b.put_u8(AUTH_VERSION);
    b.put_u8(c.mode.code());
    b.put_slice(nonce);
    // Entity names parse within MAX_ENTITY_NAME_BYTES and tickets come sealed by the monitor
    // within MAX_TICKET_BYTES, so both lengths fit their fields.
    let entity_len = u16::try_from(entity.len()).expect("an entity name within its limit");
    let ticket_len = u32::try_from(c.ticket.len()).expect("a ticket within its limit");
    b.put_u16_le(entity_len);
    b.put_slice(entity.as_bytes());
    b.put_u32_le(ticket_len);
    b.put_slice(&c.ticket);
    b.freeze()
}

/// A parsed AUTH_REQUEST.
struct Request {
    mode: WireMode,
    entity: EntityName,
    ticket: Bytes,
}

fn decode_request(payload: &Bytes) -> Result<Request, MsgrError> {
    let mut p = payload.clone();
    if p.remaining() < 2 + NONCE_BYTES + 2 {
        return Err(invalid("short authentication request"));
    }
    if p.get_u8() != AUTH_VERSION {
        return Err(invalid("unknown authentication version"));
    }
    let mode = WireMode::from_code(p.get_u8()).ok_or_else(|| invalid("unknown wire mode"))?;
    p.advance(NONCE_BYTES);
    let name_len = usize::from(p.get_u16_le());
    if name_len > cairn_auth::entity::MAX_ENTITY_NAME_BYTES || p.remaining() < name_len + 4 {
        return Err(invalid("bad entity name length"));
    }
    let name = std::str::from_utf8(&p[..name_len]).map_err(|_| invalid("entity name not UTF-8"))?;
    let entity: EntityName = name.parse().map_err(|e| MsgrError::Auth(format!("{e}")))?;
    p.advance(name_len);
    let ticket_len = p.get_u32_le() as usize;
    if ticket_len > MAX_TICKET_BYTES || p.remaining() != ticket_len {
        return Err(invalid("bad ticket length"));
    }
    Ok(Request {
        mode,
        entity,
        ticket: p,
    })
}

async fn next_frame(conn: &mut Conn) -> Result<Frame, MsgrError> {
    let timeout = crate::session::HANDSHAKE_TIMEOUT;
    tokio::time::timeout(timeout, conn.stream.next())
        .await
        .map_err(|_| MsgrError::timed_out(timeout))?
        .ok_or(MsgrError::Closed)?
}

/// A refusal's reason, from an AUTH_REFUSED frame.
fn refusal(frame: &Frame) -> MsgrError {
    let text = String::from_utf8_lossy(&frame.payload[..frame.payload.len().min(MAX_REASON_BYTES)]);
    MsgrError::Auth(format!("refused by the peer: {text}"))
}

/// Sends a refusal with its reason (best effort: the connection closes next).
pub(crate) fn refuse(conn: &Conn, reason: &str) {
    let mut text = reason.as_bytes();
    text = &text[..text.len().min(MAX_REASON_BYTES)];
    let _ = conn
        .writer
        .send(Frame::new(MSG_AUTH_REFUSED, Bytes::copy_from_slice(text)));
}

/// The dialer's half: authenticates with `creds` and protects the connection both ways.
/// Returns the mode the acceptor chose.
pub(crate) async fn dial(conn: &mut Conn, creds: &DialCredentials) -> Result<WireMode, MsgrError> {
    let nonce: [u8; NONCE_BYTES] = random_bytes();
    let request = encode_request(creds, &nonce);
    conn.writer
        .send(Frame::new(MSG_AUTH_REQUEST, request.clone()))?;
    let reply = next_frame(conn).await?;
    match reply.header.msg_type {
        MSG_AUTH_CHALLENGE => {}
        MSG_AUTH_REFUSED => return Err(refusal(&reply)),
        _ => {
            return Err(invalid(
                "the peer does not authenticate (it answered without a challenge)",
            ))
        }
    }
    let mut p = reply.payload.clone();
    if p.remaining() != 1 + NONCE_BYTES + PROOF_BYTES {
        return Err(invalid("malformed challenge"));
    }
    let mode = WireMode::from_code(p.get_u8()).ok_or_else(|| invalid("unknown wire mode"))?;
    if mode < creds.mode {
        return Err(invalid("the peer chose a weaker wire mode than asked"));
    }
    let mut acceptor_nonce = [0u8; NONCE_BYTES];
    p.copy_to_slice(&mut acceptor_nonce);
    let t = transcript(&request, &acceptor_nonce, mode.code());
    if !proof_matches(&acceptor_proof(&creds.key, &t), &p) {
        refuse(conn, "your proof does not match my key");
        return Err(MsgrError::Auth(format!(
            "keys do not match: the key of {} is wrong, or the peer is not the daemon it claims to be",
            creds.entity
        )));
    }
    conn.writer.send(Frame::new(
        MSG_AUTH_PROOF,
        Bytes::copy_from_slice(&dialer_proof(&creds.key, &t)),
    ))?;
    let keys = connection_keys(&creds.key, &t);
    conn.writer
        .protect(FrameKeys::new(mode, &keys.dialer_to_acceptor))?;
    conn.stream
        .protect(FrameKeys::new(mode, &keys.acceptor_to_dialer));
    Ok(mode)
}

/// The acceptor's half, given the connection's first frame: checks the dialer with `authz`,
/// and protects the connection both ways. Refuses (telling the dialer why) anything else.
pub(crate) async fn accept(
    conn: &mut Conn,
    first: Frame,
    authz: &Arc<dyn Authorizer>,
) -> Result<AuthPeer, MsgrError> {
    let refused = |conn: &Conn, why: String| {
        refuse(conn, &why);
        MsgrError::Auth(why)
    };
    if first.header.msg_type != MSG_AUTH_REQUEST {
        return Err(refused(conn, "this daemon requires authentication".into()));
    }
    let request = match decode_request(&first.payload) {
        Ok(r) => r,
        Err(e) => return Err(refused(conn, e.to_string())),
    };
    let (key, caps, client_id) = match authz.authorize_bound(&request.entity, &request.ticket) {
        Ok(k) => k,
        Err(why) => return Err(refused(conn, format!("{}: {why}", request.entity))),
    };
    let mode = request.mode.max(authz.min_mode());
    let nonce: [u8; NONCE_BYTES] = random_bytes();
    let t = transcript(&first.payload, &nonce, mode.code());
    let mut challenge = BytesMut::with_capacity(1 + NONCE_BYTES + PROOF_BYTES);
    challenge.put_u8(mode.code());
    challenge.put_slice(&nonce);
    challenge.put_slice(&acceptor_proof(&key, &t));
    conn.writer
        .send(Frame::new(MSG_AUTH_CHALLENGE, challenge.freeze()))?;
    let proof = next_frame(conn).await?;
    if proof.header.msg_type == MSG_AUTH_REFUSED {
        return Err(refusal(&proof));
    }
    if proof.header.msg_type != MSG_AUTH_PROOF
        || !proof_matches(&dialer_proof(&key, &t), &proof.payload)
    {
        return Err(refused(
            conn,
            format!("{}: wrong key (its proof does not match)", request.entity),
        ));
    }
    let keys = connection_keys(&key, &t);
    conn.writer
        .protect(FrameKeys::new(mode, &keys.acceptor_to_dialer))?;
    conn.stream
        .protect(FrameKeys::new(mode, &keys.dialer_to_acceptor));
    Ok(AuthPeer {
        entity: request.entity,
        caps,
        mode,
        client_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_and_malformed_ones_are_refused() {
        let creds = DialCredentials {
            entity: "client.bob".parse().unwrap(),
            ticket: vec![5; 100],
            key: SecretKey::generate(),
            mode: WireMode::Secure,
        };
        let wire = encode_request(&creds, &[1; NONCE_BYTES]);
        let r = decode_request(&wire).unwrap();
        assert_eq!(r.entity, creds.entity);
        assert_eq!(&r.ticket[..], &creds.ticket[..]);
        assert_eq!(r.mode, WireMode::Secure);
        for cut in 0..wire.len() {
            assert!(decode_request(&wire.slice(..cut)).is_err(), "cut at {cut}");
        }
        let mut longer = BytesMut::from(&wire[..]);
        longer.put_u8(0);
        assert!(decode_request(&longer.freeze()).is_err());
        let mut bad_mode = BytesMut::from(&wire[..]);
        bad_mode[1] = 9;
        assert!(decode_request(&bad_mode.freeze()).is_err());
        let mut bad_name = BytesMut::from(&wire[..]);
        bad_name[2 + NONCE_BYTES + 2] = b'X';
        assert!(decode_request(&bad_name.freeze()).is_err());
    }
}
