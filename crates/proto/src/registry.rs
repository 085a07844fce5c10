//! Every message type the cluster sends, in one table: its frame type id and name. The ids are
//! defined beside their messages (`MSG_OSD_*`, `MSG_PEER_*` and `MSG_PING*` in the crate root,
//! `admin`, `mds`, `mon`); this table is where a new one is added too, and its test keeps the ids
//! unique and clear of those the messenger keeps for itself (its session's and handshake's,
//! `0xfff1..=0xffff`, and its benchmark's `0x0b00..=0x0bff`).

use crate::{admin, mds, mon};

/// Frame type ids the messenger itself uses: never a message's.
pub const RESERVED: [std::ops::RangeInclusive<u16>; 2] = [0x0b00..=0x0bff, 0xfff1..=0xffff];

/// Every message type: (frame type id, name).
pub const MESSAGES: [(u16, &str); 17] = [
    (mon::MSG_MON_REQUEST, "mon_request"),
    (mon::MSG_MON_REPLY, "mon_reply"),
    (mon::MSG_MON_MAP, "mon_map"),
    (crate::MSG_OSD_OP, "osd_op"),
    (crate::MSG_OSD_OP_REPLY, "osd_op_reply"),
    (crate::MSG_OSD_REPOP, "osd_repop"),
    (crate::MSG_OSD_REPOP_REPLY, "osd_repop_reply"),
    (crate::MSG_PEER_REQUEST, "peer_request"),
    (crate::MSG_PEER_REPLY, "peer_reply"),
    (crate::MSG_PING, "ping"),
    (crate::MSG_PING_REPLY, "ping_reply"),
    (admin::MSG_ADMIN, "admin"),
    (admin::MSG_ADMIN_REPLY, "admin_reply"),
    (mds::MSG_MDS_REQUEST, "mds_request"),
    (mds::MSG_MDS_REPLY, "mds_reply"),
    (mds::MSG_MDS_SAFE, "mds_safe"),
    (mds::MSG_MDS_RECALL, "mds_recall"),
];

/// The name of frame type `ty`, if it is a message of the cluster: daemons name a message
/// that reached the wrong one in their warnings.
pub fn name_of(ty: u16) -> Option<&'static str> {
    MESSAGES.iter().find(|(id, _)| *id == ty).map(|(_, n)| *n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_names_are_unique_and_clear_of_the_messengers_own() {
        assert_eq!(
            *RESERVED[1].start(),
            cairn_msgr::session::MAX_USER_MSG_TYPE + 1,
            "the messenger keeps everything above the highest user type"
        );
        let ids: std::collections::BTreeSet<u16> = MESSAGES.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids.len(), MESSAGES.len(), "a frame type id used twice");
        let names: std::collections::BTreeSet<&str> = MESSAGES.iter().map(|(_, n)| *n).collect();
        assert_eq!(names.len(), MESSAGES.len(), "a name used twice");
        for (id, name) in MESSAGES {
            assert!(
                RESERVED.iter().all(|r| !r.contains(&id)),
                "{name} ({id:#06x}) is in the messenger's range"
            );
        }
        let msgr_own = [
            cairn_msgr::session::MSG_HELLO,
            cairn_msgr::session::MSG_ACK,
            cairn_msgr::handshake::MSG_AUTH_REQUEST,
            cairn_msgr::handshake::MSG_AUTH_CHALLENGE,
            cairn_msgr::handshake::MSG_AUTH_PROOF,
            cairn_msgr::handshake::MSG_AUTH_REFUSED,
            cairn_msgr::bench::MSG_BENCH_REQUEST,
            cairn_msgr::bench::MSG_BENCH_REPLY,
        ];
        for id in msgr_own {
            assert!(
                RESERVED.iter().any(|r| r.contains(&id)),
                "{id:#06x} not reserved"
            );
        }
        assert_eq!(name_of(crate::MSG_PING), Some("ping"));
        assert_eq!(name_of(0x7777), None);
    }
}
