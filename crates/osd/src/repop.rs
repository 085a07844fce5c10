//! One replica write sent to one copy and its answer awaited: what a primary sends its acting
//! copies (`primary`) and the copies a background fill makes current (`forward`).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cairn_proto::{decode, encode, OpResult, RepOpHeader, ReplyHeader, MSG_OSD_REPOP};

use crate::shared::Shared;

/// Sends the replica write `rep` (with `data`, under a fresh tid) to `osd` at `addr`: a future
/// giving the copy's answer, or why none came within `repop_timeout_ms`.
pub fn send_repop(
    s: &Arc<Shared>,
    osd: i32,
    addr: String,
    mut rep: RepOpHeader,
    data: Bytes,
) -> impl std::future::Future<Output = Result<OpResult, String>> + Send + 'static {
    let s = s.clone();
    rep.tid = s.peers.tid();
    let (payload, data_crc) = (encode(&rep, &[]), rep.data_crc);
    let timeout = Duration::from_millis(s.cfg.repop_timeout_ms);
    async move {
        let answer = s
            .peers
            .call_with_data(
                osd,
                &addr,
                MSG_OSD_REPOP,
                rep.tid,
                payload,
                data,
                data_crc,
                timeout,
            )
            .await
            .map_err(|e| e.to_string())?;
        let (reply, _) = decode::<ReplyHeader>(&answer).map_err(|e| e.to_string())?;
        Ok(reply.result)
    }
}
