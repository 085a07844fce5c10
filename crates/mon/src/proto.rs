//! Monitor protocol: the messages OSDs, clients and operators exchange with the monitor, as
//! JSON payloads of messenger frames (the frame carries type, sequence and checksums).

use serde::{Deserialize, Serialize};

use crate::error::MonError;
use crate::monitor::Request;

/// Frame type of a request to the monitor.
pub const MSG_MON_REQUEST: u16 = 0x0100;
/// Frame type of the monitor's reply to a request.
pub const MSG_MON_REPLY: u16 = 0x0101;
/// Frame type of a map update pushed to subscribers.
pub const MSG_MON_MAP: u16 = 0x0102;

/// A request, tagged with an id the reply echoes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MonRequest {
    /// Caller-chosen id, echoed in the reply.
    pub tid: u64,
    /// What is asked.
    pub body: RequestBody,
}

/// What a request asks: a monitor operation, or a subscription (handled by the daemon).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RequestBody {
    /// A request the monitor core serves.
    Op(Request),
    /// Subscribe to maps newer than `have_epoch` (0 = send the full map first).
    Subscribe {
        /// Newest epoch the subscriber already has.
        have_epoch: u64,
    },
    /// The maps from epoch `from` on (see [`MapRange`]), for an OSD rebuilding epochs it missed.
    History {
        /// Oldest epoch wanted.
        from: u64,
    },
}

/// Past maps: the full map at the oldest epoch asked for (or at the oldest the monitor keeps,
/// if that is newer) and every incremental after it up to the current epoch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MapRange {
    /// Encoded full map (see [`crate::ClusterMap::encode`]).
    pub full: Vec<u8>,
    /// Encoded incrementals in epoch order (see [`crate::Incremental::encode`]).
    pub incrementals: Vec<Vec<u8>>,
}

/// The reply to a request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MonReply {
    /// The request's id.
    pub tid: u64,
    /// Map epoch after the request.
    pub epoch: u64,
    /// Assigned OSD id for a boot.
    pub osd_id: Option<i32>,
    /// Error text, if the request failed.
    pub error: Option<String>,
    /// Past maps, in reply to [`RequestBody::History`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maps: Option<MapRange>,
}

/// A map update: a full map or the incrementals since the subscriber's epoch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MapUpdate {
    /// Encoded full map (see [`crate::ClusterMap::encode`]).
    Full(Vec<u8>),
    /// Encoded incrementals in epoch order (see [`crate::Incremental::encode`]).
    Incrementals(Vec<Vec<u8>>),
}

/// Serializes a protocol message.
pub fn to_payload<T: Serialize>(msg: &T) -> bytes::Bytes {
    bytes::Bytes::from(serde_json::to_vec(msg).unwrap_or_default())
}

/// Deserializes a protocol message.
pub fn from_payload<'a, T: Deserialize<'a>>(payload: &'a [u8]) -> Result<T, MonError> {
    serde_json::from_slice(payload).map_err(|e| MonError::Encoding(e.to_string()))
}
