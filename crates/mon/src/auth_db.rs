//! The monitor's authentication database: every entity's key and capabilities and the OSD
//! service secret, as cephx's monitor keeps them. Seeded once from a keyring (what
//! `cairn up` writes), saved in the monitor's store with every change, and consulted by the
//! monitor's listener ([`MonAuthorizer`]) for each connection and by the daemon for each
//! request's capabilities.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use cairn_auth::ticket::{seal_service_secret, TICKET_TTL_S};
use cairn_auth::{Caps, EntityName, Keyring, KeyringEntry, MonAccess, SecretKey, Ticket};
use cairn_msgr::handshake::Authorizer;
use cairn_msgr::protect::WireMode;
use cairn_proto::mon::{AuthAnswer, AuthRequest, MonError};
use serde::{Deserialize, Serialize};

use crate::client_ids::ClientIds;

/// Most entities the database holds (explicit limit).
pub const MAX_ENTITIES: usize = 100_000;

/// Entities, keys and the service secret, and which entity holds each client id.
#[derive(Clone, Debug)]
pub struct AuthDb {
    entries: BTreeMap<EntityName, KeyringEntry>,
    service_secret: SecretKey,
    /// Client ids bound to entities by tickets, until the newest of those tickets expires
    /// (Ceph's global ids). Kept in memory: a restarted monitor forgets them, and tickets
    /// issued before then still carry theirs.
    client_ids: ClientIds,
}

/// The stored form.
#[derive(Serialize, Deserialize)]
struct Stored {
    version: u32,
    service_secret: String,
    keyring: String,
}

impl AuthDb {
    /// A database holding `keyring`'s entities and a new service secret.
    pub fn seeded(keyring: &Keyring) -> AuthDb {
        AuthDb {
            entries: keyring.entries.clone(),
            service_secret: SecretKey::generate(),
            client_ids: ClientIds::default(),
        }
    }

    /// A copy of the entities and the service secret, without the client ids bound (those
    /// live in memory only): a change is made on a copy, saved, and only then adopted
    /// ([`AuthDb::adopt_keys`]), so a change that cannot be saved never takes effect.
    pub fn keys_copy(&self) -> AuthDb {
        AuthDb {
            entries: self.entries.clone(),
            service_secret: self.service_secret.clone(),
            client_ids: ClientIds::default(),
        }
    }

    /// Takes the entities and the service secret of `changed` (a copy changed and saved),
    /// keeping the client ids bound here.
    pub fn adopt_keys(&mut self, changed: AuthDb) {
        self.entries = changed.entries;
        self.service_secret = changed.service_secret;
    }

    /// The stored bytes.
    pub fn encode(&self) -> Vec<u8> {
        let stored = Stored {
            version: 1,
            service_secret: self.service_secret.to_base64(),
            keyring: self.keyring().render(),
        };
        serde_json::to_vec(&stored).expect("the database serializes")
    }

    /// The database from its stored bytes; damage is an error, never an empty database.
    pub fn decode(bytes: &[u8]) -> Result<AuthDb, MonError> {
        let bad = |e: String| MonError::Encoding(format!("authentication database: {e}"));
        let stored: Stored = serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
        if stored.version != 1 {
            return Err(bad(format!("unknown version {}", stored.version)));
        }
        let ring = Keyring::parse(&stored.keyring, "stored").map_err(|e| bad(e.to_string()))?;
        Ok(AuthDb {
            entries: ring.entries,
            service_secret: SecretKey::from_base64(&stored.service_secret)
                .map_err(|e| bad(e.to_string()))?,
            client_ids: ClientIds::default(),
        })
    }

    /// Every entity as a keyring.
    pub fn keyring(&self) -> Keyring {
        Keyring {
            entries: self.entries.clone(),
        }
    }

    /// The key and parsed capabilities of `entity`.
    pub fn lookup(&self, entity: &EntityName) -> Option<(SecretKey, Caps)> {
        let e = self.entries.get(entity)?;
        let caps = Caps::parse(&e.caps).ok()?;
        Some((e.key.clone(), caps))
    }

    /// What `request` from `asker` needs of the asker's monitor capability.
    pub fn required(request: &AuthRequest) -> MonAccess {
        match request {
            AuthRequest::Ticket { .. } => MonAccess::Read,
            AuthRequest::ServiceSecret => MonAccess::ServiceSecret,
            _ => MonAccess::Admin,
        }
    }

    /// Adds an entity that does not exist yet (at most [`MAX_ENTITIES`]) and answers its
    /// keyring entry; the database changed.
    fn insert_new(
        &mut self,
        entity: EntityName,
        entry: KeyringEntry,
    ) -> Result<(AuthAnswer, bool), MonError> {
        if self.entries.len() >= MAX_ENTITIES {
            return Err(MonError::Invalid(format!(
                "more than {MAX_ENTITIES} entities"
            )));
        }
        let answer = AuthAnswer::Keyring {
            text: Keyring::single(entity.clone(), entry.clone()).render(),
        };
        self.entries.insert(entity, entry);
        Ok((answer, true))
    }

    /// Serves `request` from `asker` (already checked against [`AuthDb::required`]) at
    /// `now_unix_s`; returns the answer and whether the database changed (it must then be
    /// saved before the answer is sent).
    pub fn handle(
        &mut self,
        asker: &EntityName,
        request: AuthRequest,
        now_unix_s: u64,
    ) -> Result<(AuthAnswer, bool), MonError> {
        let parse = |name: &str| {
            name.parse::<EntityName>()
                .map_err(|e| MonError::Invalid(e.to_string()))
        };
        let check_caps = |caps: &BTreeMap<String, String>| {
            Caps::parse(caps).map_err(|e| MonError::Invalid(e.to_string()))
        };
        let one = |entity: &EntityName, entry: &KeyringEntry| AuthAnswer::Keyring {
            text: Keyring::single(entity.clone(), entry.clone()).render(),
        };
        match request {
            AuthRequest::Ticket { client_id } => {
                let entry = self
                    .entries
                    .get(asker)
                    .ok_or_else(|| MonError::NotFound(format!("{asker} was removed")))?
                    .clone();
                let mut ticket =
                    Ticket::issue(asker.clone(), entry.caps.clone(), now_unix_s, TICKET_TTL_S);
                if let Some(id) = client_id {
                    self.client_ids
                        .bind(id, asker, now_unix_s, ticket.expires_unix_s)?;
                    ticket.client_id = Some(id);
                }
                Ok((
                    AuthAnswer::Ticket {
                        ticket: ticket.seal(&self.service_secret),
                        session_key: ticket.seal_session_key(&entry.key),
                        expires_unix_s: ticket.expires_unix_s,
                    },
                    false,
                ))
            }
            AuthRequest::ServiceSecret => {
                let mds = self
                    .lookup(asker)
                    .is_some_and(|(_, caps)| caps.mon().is_mds());
                if asker.osd_id().is_none() && !mds {
                    return Err(MonError::Refused(format!(
                        "permission denied: only OSDs and metadata servers hold the service secret, not {asker}"
                    )));
                }
                let entry = self
                    .entries
                    .get(asker)
                    .ok_or_else(|| MonError::NotFound(format!("{asker} was removed")))?;
                Ok((
                    AuthAnswer::ServiceSecret {
                        sealed: seal_service_secret(&entry.key, asker, &self.service_secret),
                    },
                    false,
                ))
            }
            AuthRequest::GetOrCreate { entity, caps } => {
                let entity = parse(&entity)?;
                check_caps(&caps)?;
                if let Some(entry) = self.entries.get(&entity) {
                    if entry.caps != caps {
                        return Err(MonError::Invalid(format!(
                            "{entity} exists with other caps; change them with `cairn auth caps`"
                        )));
                    }
                    return Ok((one(&entity, entry), false));
                }
                let entry = KeyringEntry {
                    key: SecretKey::generate(),
                    caps,
                };
                self.insert_new(entity, entry)
            }
            AuthRequest::Add { entity, caps, key } => {
                let entity = parse(&entity)?;
                check_caps(&caps)?;
                let key = match key {
                    Some(text) => SecretKey::from_base64(&text)
                        .map_err(|e| MonError::Invalid(format!("{entity}'s key: {e}")))?,
                    None => SecretKey::generate(),
                };
                if let Some(entry) = self.entries.get(&entity) {
                    if entry.caps != caps || entry.key != key {
                        return Err(MonError::Invalid(format!(
                            "{entity} exists with another key or caps"
                        )));
                    }
                    return Ok((one(&entity, entry), false));
                }
                self.insert_new(entity, KeyringEntry { key, caps })
            }
            AuthRequest::Rotate { entity } => {
                let entity = parse(&entity)?;
                let entry = self
                    .entries
                    .get_mut(&entity)
                    .ok_or_else(|| MonError::NotFound(entity.to_string()))?;
                entry.key = SecretKey::generate();
                Ok((one(&entity, entry), true))
            }
            AuthRequest::Get { entity } => {
                let entity = parse(&entity)?;
                let entry = self
                    .entries
                    .get(&entity)
                    .ok_or_else(|| MonError::NotFound(format!("no entity {entity}")))?;
                Ok((one(&entity, entry), false))
            }
            AuthRequest::Caps { entity, caps } => {
                let entity = parse(&entity)?;
                check_caps(&caps)?;
                let entry = self
                    .entries
                    .get_mut(&entity)
                    .ok_or_else(|| MonError::NotFound(format!("no entity {entity}")))?;
                entry.caps = caps;
                Ok((AuthAnswer::Done, true))
            }
            AuthRequest::List => Ok((
                AuthAnswer::Keyring {
                    text: self.keyring().render(),
                },
                false,
            )),
            AuthRequest::Remove { entity } => {
                let entity = parse(&entity)?;
                if &entity == asker {
                    return Err(MonError::Invalid(format!(
                        "{entity} cannot remove itself (it would lock itself out)"
                    )));
                }
                if self.entries.remove(&entity).is_none() {
                    return Err(MonError::NotFound(format!("no entity {entity}")));
                }
                Ok((AuthAnswer::Done, true))
            }
        }
    }
}

/// The monitor's listener's view of the database: an entity connects with its own key (no
/// ticket), which must be the one the database holds.
pub struct MonAuthorizer {
    /// The database, shared with the daemon's core.
    pub db: Arc<RwLock<AuthDb>>,
    /// The weakest wire mode accepted.
    pub min_mode: WireMode,
}

impl Authorizer for MonAuthorizer {
    fn authorize(&self, entity: &EntityName, ticket: &[u8]) -> Result<(SecretKey, Caps), String> {
        if !ticket.is_empty() {
            return Err("the monitor takes an entity's own key, not a ticket".into());
        }
        let db = self.db.read().unwrap_or_else(|p| p.into_inner());
        db.lookup(entity)
            .ok_or_else(|| "unknown entity".to_string())
    }

    fn min_mode(&self) -> WireMode {
        self.min_mode
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db() -> AuthDb {
        let mut ring = Keyring::default();
        ring.entries.insert(
            EntityName::admin(),
            KeyringEntry::generate(&Caps::everything()),
        );
        ring.entries.insert(
            EntityName::Osd(0),
            KeyringEntry::generate(&Caps::osd_daemon()),
        );
        AuthDb::seeded(&ring)
    }

    #[test]
    fn the_database_round_trips_and_damage_is_an_error() {
        let d = db();
        let back = AuthDb::decode(&d.encode()).unwrap();
        assert_eq!(back.keyring(), d.keyring());
        assert_eq!(back.service_secret, d.service_secret);
        assert!(AuthDb::decode(b"{}").is_err());
        assert!(AuthDb::decode(&d.encode()[..20]).is_err());
    }

    #[test]
    fn add_takes_a_given_key_once_and_rotate_replaces_it() {
        let mut d = db();
        let admin = EntityName::admin();
        let carol: EntityName = "client.carol".parse().unwrap();
        let key = SecretKey::generate();
        let caps: BTreeMap<String, String> = [("mon".to_string(), "allow r".to_string())].into();
        let add = AuthRequest::Add {
            entity: carol.to_string(),
            caps: caps.clone(),
            key: Some(key.to_base64()),
        };
        assert!(d.handle(&admin, add.clone(), 0).unwrap().1);
        assert!(d.lookup(&carol).unwrap().0 == key);
        assert!(
            !d.handle(&admin, add, 0).unwrap().1,
            "the same again is a no-op"
        );
        let other_key = AuthRequest::Add {
            entity: carol.to_string(),
            caps: caps.clone(),
            key: None,
        };
        assert!(d.handle(&admin, other_key, 0).is_err());
        let garbage = AuthRequest::Add {
            entity: "client.dave".into(),
            caps,
            key: Some("not base64!".into()),
        };
        assert!(d.handle(&admin, garbage, 0).is_err());
        let rotate = AuthRequest::Rotate {
            entity: carol.to_string(),
        };
        assert!(d.handle(&admin, rotate, 0).unwrap().1);
        assert!(
            d.lookup(&carol).unwrap().0 != key,
            "a rotated key is a new one"
        );
        let unknown = AuthRequest::Rotate {
            entity: "client.nobody".into(),
        };
        assert!(d.handle(&admin, unknown, 0).is_err());
    }

    #[test]
    fn operator_commands_create_change_and_remove_entities() {
        let mut d = db();
        let admin = EntityName::admin();
        let caps: BTreeMap<String, String> =
            [("osd".to_string(), "allow rw pool=a".to_string())].into();
        let create = AuthRequest::GetOrCreate {
            entity: "client.bob".into(),
            caps: caps.clone(),
        };
        let (first, changed) = d.handle(&admin, create.clone(), 0).unwrap();
        assert!(changed);
        let (again, changed) = d.handle(&admin, create, 0).unwrap();
        assert_eq!(first, again, "get-or-create returns the same key");
        assert!(!changed);
        let other = AuthRequest::GetOrCreate {
            entity: "client.bob".into(),
            caps: BTreeMap::new(),
        };
        assert!(d.handle(&admin, other, 0).is_err());
        let bad = AuthRequest::Caps {
            entity: "client.bob".into(),
            caps: [("osd".to_string(), "allow bogus".to_string())].into(),
        };
        assert!(d.handle(&admin, bad, 0).is_err());
        let bob: EntityName = "client.bob".parse().unwrap();
        let (ticket, _) = d
            .handle(&bob, AuthRequest::Ticket { client_id: None }, 100)
            .unwrap();
        let AuthAnswer::Ticket {
            ticket,
            session_key,
            ..
        } = ticket
        else {
            panic!()
        };
        let (t, c) = Ticket::open(&d.service_secret, &ticket, 101).unwrap();
        assert_eq!(t.entity, bob);
        assert!(c.osd().allows("a", cairn_auth::OsdAccess::Write));
        let bob_key = d.lookup(&bob).unwrap().0;
        assert_eq!(
            Ticket::open_session_key(&bob_key, &bob, &session_key).unwrap(),
            t.session_key
        );
        let rm = AuthRequest::Remove {
            entity: "client.bob".into(),
        };
        assert!(d.handle(&admin, rm.clone(), 0).unwrap().1);
        assert!(d.handle(&admin, rm, 0).is_err());
        assert!(
            d.handle(&bob, AuthRequest::Ticket { client_id: None }, 0)
                .is_err(),
            "a removed entity gets no ticket"
        );
        assert!(
            d.handle(&admin, AuthRequest::ServiceSecret, 0).is_err(),
            "only an OSD or a metadata server gets the service secret"
        );
        assert!(d
            .handle(&EntityName::Osd(0), AuthRequest::ServiceSecret, 0)
            .is_ok());
        let mds_caps: BTreeMap<String, String> =
            [("mon".to_string(), "profile mds".to_string())].into();
        let mds: EntityName = "client.mds.a".parse().unwrap();
        let make_mds = AuthRequest::GetOrCreate {
            entity: mds.to_string(),
            caps: mds_caps,
        };
        d.handle(&admin, make_mds, 0).unwrap();
        assert!(d.handle(&mds, AuthRequest::ServiceSecret, 0).is_ok());
        let me = AuthRequest::Remove {
            entity: "client.admin".into(),
        };
        assert!(d.handle(&admin, me, 0).is_err());
        assert!(d
            .handle(
                &admin,
                AuthRequest::Get {
                    entity: "nobody".into()
                },
                0
            )
            .is_err());
    }

    fn ticket_for(d: &mut AuthDb, who: &EntityName, id: u64, now: u64) -> Result<Ticket, MonError> {
        let (answer, changed) = d.handle(
            who,
            AuthRequest::Ticket {
                client_id: Some(id),
            },
            now,
        )?;
        assert!(!changed, "a binding is not saved with the database");
        let AuthAnswer::Ticket { ticket, .. } = answer else {
            panic!("{answer:?}")
        };
        Ok(Ticket::open(&d.service_secret, &ticket, now).unwrap().0)
    }

    #[test]
    fn a_client_id_binds_to_one_entity_until_its_ticket_expires() {
        let mut d = db();
        let admin = EntityName::admin();
        let create = AuthRequest::GetOrCreate {
            entity: "client.bob".into(),
            caps: [("osd".to_string(), "allow rw".to_string())].into(),
        };
        d.handle(&admin, create, 0).unwrap();
        let bob: EntityName = "client.bob".parse().unwrap();
        let t = ticket_for(&mut d, &admin, 7, 100).unwrap();
        assert_eq!(t.client_id, Some(7), "the ticket carries the bound id");
        ticket_for(&mut d, &admin, 7, 200).expect("its holder renews it");
        let taken = ticket_for(&mut d, &bob, 7, 300).unwrap_err().to_string();
        assert!(taken.contains("held by client.admin"), "{taken}");
        assert!(ticket_for(&mut d, &bob, 0, 300).is_err(), "0 is no id");
        let later = 200 + TICKET_TTL_S;
        let t = ticket_for(&mut d, &bob, 7, later).expect("free once the holder's ticket expired");
        assert_eq!((t.entity, t.client_id), (bob, Some(7)));
        let (answer, _) = d
            .handle(&admin, AuthRequest::Ticket { client_id: None }, later)
            .unwrap();
        let AuthAnswer::Ticket { ticket, .. } = answer else {
            panic!()
        };
        let (t, _) = Ticket::open(&d.service_secret, &ticket, later).unwrap();
        assert_eq!(t.client_id, None, "no id asked, none bound");
        let copy = AuthDb::decode(&d.encode()).unwrap();
        assert!(copy.client_ids.is_empty(), "bindings live in memory only");
    }

    #[test]
    fn a_change_made_on_a_copy_takes_effect_only_once_adopted() {
        let mut d = db();
        let admin = EntityName::admin();
        ticket_for(&mut d, &admin, 9, 100).unwrap();
        let mut copy = d.keys_copy();
        let create = AuthRequest::GetOrCreate {
            entity: "client.eve".into(),
            caps: [("osd".to_string(), "allow r".to_string())].into(),
        };
        let (_, changed) = copy.handle(&admin, create, 100).unwrap();
        assert!(changed);
        let eve: EntityName = "client.eve".parse().unwrap();
        assert!(
            d.lookup(&eve).is_none(),
            "a copy not adopted changes nothing"
        );
        d.adopt_keys(copy);
        assert!(d.lookup(&eve).is_some(), "adopted");
        assert_eq!(d.client_ids.holder(9), Some(&admin), "the bindings stay");
    }
}
