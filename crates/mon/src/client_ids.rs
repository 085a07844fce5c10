//! Which entity holds each client id (Ceph's global ids): a client names the id it wants when
//! it asks for a ticket, and the id is bound to its entity until the newest ticket carrying
//! it expires, so no other entity can speak as that client to the OSDs meanwhile. The table
//! is bounded twice: in all, and per entity, so that one entity (a tenant with read access
//! to the monitor) cannot fill it and leave other entities without tickets. An entity past
//! its share loses its own oldest binding; expired bindings are dropped in expiry order, a
//! few at a time, never by a scan of the whole table.

use std::collections::{BTreeMap, BTreeSet};

use cairn_auth::EntityName;
use cairn_proto::mon::MonError;

/// Most client ids bound at once (explicit limit).
pub const MAX_CLIENT_IDS: usize = 1 << 20;
/// Most client ids one entity holds at once: past it, its oldest binding is let go of. Many
/// processes may share an entity (every `cairn` command of an administrator binds an id for
/// a ticket's lifetime), so the share is generous, yet 256 entities are needed to fill the
/// table.
pub const MAX_CLIENT_IDS_PER_ENTITY: usize = 4096;

/// A client id's holder and when its newest ticket expires.
#[derive(Clone, Debug)]
struct Binding {
    entity: EntityName,
    expires_unix_s: u64,
}

/// The bound client ids, by id, by expiry and by entity (the three always agree).
#[derive(Clone, Debug)]
pub struct ClientIds {
    by_id: BTreeMap<u64, Binding>,
    by_expiry: BTreeSet<(u64, u64)>,
    by_entity: BTreeMap<EntityName, BTreeSet<(u64, u64)>>,
    max_total: usize,
    max_per_entity: usize,
}

impl Default for ClientIds {
    fn default() -> Self {
        ClientIds::with_limits(MAX_CLIENT_IDS, MAX_CLIENT_IDS_PER_ENTITY)
    }
}

impl ClientIds {
    /// An empty table holding at most `max_total` ids, `max_per_entity` of them per entity.
    pub fn with_limits(max_total: usize, max_per_entity: usize) -> ClientIds {
        assert!(
            max_total > 0 && max_per_entity > 0,
            "limits of at least one id"
        );
        ClientIds {
            by_id: BTreeMap::new(),
            by_expiry: BTreeSet::new(),
            by_entity: BTreeMap::new(),
            max_total,
            max_per_entity,
        }
    }

    /// Ids bound now (expired ones not yet dropped included).
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether no id is bound.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// The entity holding `id`, if any.
    pub fn holder(&self, id: u64) -> Option<&EntityName> {
        self.by_id.get(&id).map(|b| &b.entity)
    }

    /// Binds `id` to `entity` until `expires_unix_s`, unless another entity holds it with a
    /// ticket not yet expired at `now_unix_s`. Drops expired bindings first; an entity at its
    /// share lets go of its oldest binding; a full table refuses.
    pub fn bind(
        &mut self,
        id: u64,
        entity: &EntityName,
        now_unix_s: u64,
        expires_unix_s: u64,
    ) -> Result<(), MonError> {
        if id == 0 {
            return Err(MonError::Invalid(
                "client id 0 stands for no id; ask for a ticket without one".into(),
            ));
        }
        if let Some(b) = self.by_id.get(&id) {
            if &b.entity != entity && b.expires_unix_s > now_unix_s {
                return Err(MonError::Refused(format!(
                    "client id {id} is held by {} until its ticket expires",
                    b.entity
                )));
            }
        }
        self.drop_expired(now_unix_s);
        self.unbind(id);
        let held = self.by_entity.get(entity).map_or(0, BTreeSet::len);
        if held >= self.max_per_entity {
            let oldest = self.by_entity.get(entity).and_then(|s| s.first().copied());
            if let Some((_, old)) = oldest {
                self.unbind(old);
            }
        }
        if self.by_id.len() >= self.max_total {
            return Err(MonError::Refused(format!(
                "{} client ids are bound; none expired",
                self.max_total
            )));
        }
        self.by_id.insert(
            id,
            Binding {
                entity: entity.clone(),
                expires_unix_s,
            },
        );
        self.by_expiry.insert((expires_unix_s, id));
        self.by_entity
            .entry(entity.clone())
            .or_default()
            .insert((expires_unix_s, id));
        debug_assert_eq!(self.by_id.len(), self.by_expiry.len());
        Ok(())
    }

    /// Drops the bindings expired at `now_unix_s`, oldest first.
    fn drop_expired(&mut self, now_unix_s: u64) {
        while let Some(&(expires, id)) = self.by_expiry.first() {
            if expires > now_unix_s {
                break;
            }
            self.unbind(id);
        }
    }

    /// Removes `id`'s binding from all three indexes, if it has one.
    fn unbind(&mut self, id: u64) {
        let Some(b) = self.by_id.remove(&id) else {
            return;
        };
        let key = (b.expires_unix_s, id);
        let indexed = self.by_expiry.remove(&key);
        assert!(indexed, "client id {id} bound but not indexed by expiry");
        if let Some(set) = self.by_entity.get_mut(&b.entity) {
            set.remove(&key);
            if set.is_empty() {
                self.by_entity.remove(&b.entity);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> EntityName {
        s.parse().unwrap()
    }

    #[test]
    fn an_id_is_its_holders_until_it_expires() {
        let mut t = ClientIds::default();
        let (a, b) = (name("client.a"), name("client.b"));
        t.bind(7, &a, 100, 200).unwrap();
        t.bind(7, &a, 150, 300).expect("its holder renews it");
        let refused = t.bind(7, &b, 250, 400).unwrap_err().to_string();
        assert!(refused.contains("held by client.a"), "{refused}");
        assert!(t.bind(0, &a, 100, 200).is_err(), "0 is no id");
        t.bind(7, &b, 300, 500)
            .expect("free once its ticket expired");
        assert_eq!(t.holder(7), Some(&b));
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn one_entity_past_its_share_lets_go_of_its_oldest_and_others_still_bind() {
        let mut t = ClientIds::with_limits(10, 4);
        let (greedy, other) = (name("client.greedy"), name("client.other"));
        for id in 1..=100u64 {
            t.bind(id, &greedy, 0, 1000 + id).unwrap();
        }
        assert_eq!(t.len(), 4, "the entity holds its share only");
        assert_eq!(t.holder(100), Some(&greedy));
        assert_eq!(t.holder(96), None, "its oldest let go of");
        for id in 1000..1006u64 {
            t.bind(id, &other, 0, 5000).expect("another entity binds");
        }
        assert_eq!(t.len(), 8);
    }

    #[test]
    fn a_full_table_refuses_until_bindings_expire() {
        let mut t = ClientIds::with_limits(3, 2);
        let names = [name("client.a"), name("client.b"), name("client.c")];
        for (i, n) in names.iter().enumerate() {
            t.bind(10 + i as u64, n, 0, 100).unwrap();
        }
        let full = t.bind(20, &name("client.d"), 50, 150).unwrap_err();
        assert!(full.to_string().contains("none expired"), "{full}");
        t.bind(20, &name("client.d"), 100, 200)
            .expect("expired bindings make room");
        assert_eq!(t.len(), 1);
        assert!(t.holder(10).is_none());
    }
}
