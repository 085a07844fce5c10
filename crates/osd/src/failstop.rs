//! Fail-stop on storage faults, as Ceph's OSD aborts on a store error: once the store has
//! failed (a device error on a write or flush, or on metadata; the store then refuses all
//! work), the OSD stops serving, reports itself down to the monitor so its PGs re-peer without
//! it at once, and tells its owner why (`cairn osd run` then exits non-zero with the cause in
//! its log). A failed OSD is not restarted by anything here: an operator replaces the device
//! and starts it again.
//!
//! Also the fault injection that tests drive through `cairn tell osd.N inject ...` when the
//! OSD runs with `fault_injection` (its device wrapped in a [`FaultDevice`]).

use std::sync::{Arc, Weak};
use std::time::Duration;

use cairn_blockdev::{FaultDevice, FaultRule, IoKind, PowerLossMode};
use cairn_proto::mon::Request;
use tokio::sync::oneshot;

use crate::shared::Shared;

/// How often the watcher looks at the store's state.
const CHECK_EVERY: Duration = Duration::from_millis(100);

/// How long a failed OSD waits for the monitor to take its report before stopping anyway
/// (its peers' failure reports mark it down then).
const REPORT_TIMEOUT_MS: u64 = 3_000;

/// Watches `s`'s store until the OSD stops; when the store fails, stops the OSD, reports it
/// down and sends the cause on `failed`. Holds the OSD's state only weakly, so a stopped OSD
/// can close its store.
pub async fn watch(s: Weak<Shared>, failed: oneshot::Sender<String>) {
    loop {
        tokio::time::sleep(CHECK_EVERY).await;
        let Some(shared) = s.upgrade() else { return };
        if shared.is_stopping() {
            return;
        }
        let power_lost = shared.faults.as_ref().is_some_and(|d| d.switch().crashed());
        let why = shared
            .store
            .failure()
            .or_else(|| shared.fault())
            .or_else(|| power_lost.then(|| "the device lost power".to_string()));
        let Some(why) = why else {
            continue;
        };
        let (id, mon) = (shared.id, shared.mon.clone());
        tracing::error!(osd = id, cause = %why, "the store failed: this OSD stops (fail-stop); replace its device, then start it again");
        shared.sched.stop();
        shared.stop_tasks();
        drop(shared);
        match mon.op(Request::MarkDown { id }, REPORT_TIMEOUT_MS).await {
            Ok(r) => tracing::warn!(osd = id, epoch = r.epoch, "reported itself down"),
            Err(e) => tracing::warn!(osd = id, error = %e, "could not report itself down"),
        }
        let _ = failed.send(why);
        return;
    }
}

/// Runs `inject ARGS...` on the fault device, if the OSD has one: `eio read|write|flush`
/// (every later operation of that kind fails), `eio-once read|write|flush` (the next one),
/// `read-eio OBJECT` (reads of that object's data blocks fail, in every PG copy here),
/// `power-loss` (unflushed writes dropped, then every operation fails) and `clear`.
pub async fn inject(s: &Shared, args: &[&str]) -> Result<String, String> {
    let dev = s.faults.as_ref().ok_or_else(|| {
        "fault injection is off on this OSD (start it with fault_injection)".to_string()
    })?;
    let kind = |word: &str| match word {
        "read" => Ok(IoKind::Read),
        "write" => Ok(IoKind::Write),
        "flush" => Ok(IoKind::Flush),
        other => Err(format!(
            "unknown operation `{other}` (read, write or flush)"
        )),
    };
    match args {
        ["eio", op] => {
            dev.add_rule(FaultRule::Always { kind: kind(op)? }).await;
            Ok(format!("every {op} fails from now on\n"))
        }
        ["eio-once", op] => {
            let kind = kind(op)?;
            let nth = dev.count(kind).await;
            dev.add_rule(FaultRule::Nth { kind, nth }).await;
            Ok(format!("the next {op} fails\n"))
        }
        ["read-eio", object] => read_eio(s, dev, object).await,
        ["power-loss"] => power_loss(dev).await,
        ["clear"] => {
            dev.clear_rules().await;
            Ok("no faults injected\n".into())
        }
        _ => Err(
            "usage: inject eio|eio-once read|write|flush | inject read-eio OBJECT | inject power-loss | inject clear"
                .into(),
        ),
    }
}

/// Makes reads of `object`'s data blocks fail in every collection here that holds it.
async fn read_eio(s: &Shared, dev: &Arc<FaultDevice>, object: &str) -> Result<String, String> {
    let bs = s.store.block_bytes();
    let mut blocks = 0;
    for coll in s
        .store
        .list_collections()
        .await
        .map_err(|e| e.to_string())?
    {
        let Ok(extents) = s.store.extents(&coll, object).await else {
            continue;
        };
        for (_, pblock) in extents {
            dev.add_rule(FaultRule::Range {
                kind: IoKind::Read,
                offset_bytes: pblock * bs,
                len_bytes: bs,
            })
            .await;
            blocks += 1;
        }
    }
    match blocks {
        0 => Err(format!("no data block of {object} is stored here")),
        n => Ok(format!("reads of {n} data block(s) of {object} fail\n")),
    }
}

/// How long after answering `inject power-loss` the power goes out: the answer must leave
/// before the OSD fail-stops and closes its connections.
const POWER_CUT_DELAY: Duration = Duration::from_millis(300);

/// Cuts the device's power [`POWER_CUT_DELAY`] from now (after this answer is sent): what was
/// not flushed by then is gone from the file, and the store fails at its next I/O (so the OSD
/// fail-stops; started again, it mounts what survived).
async fn power_loss(dev: &Arc<FaultDevice>) -> Result<String, String> {
    let dev = Arc::clone(dev);
    tokio::spawn(async move {
        tokio::time::sleep(POWER_CUT_DELAY).await;
        if let Err(e) = dev.power_loss(PowerLossMode::DropUnflushed).await {
            tracing::error!(error = %e, "the injected power loss failed");
        }
    });
    Ok(format!(
        "power goes out in {} ms: unflushed writes are dropped then\n",
        POWER_CUT_DELAY.as_millis()
    ))
}
