//! Moving objects between a PG's copies for recovery: pull an object to this OSD, push one
//! from it, list a copy's objects, install a piece here. Every store step here is a request
//! through this OSD's scheduler and every message asks the other OSD to schedule its own step
//! (invariant 2), in the class the transfer's [`Urgency`] picks: client I/O that waits on a
//! step (a PG recovering before it activates, a read's repair) is not queued behind bulk
//! recovery.

use std::sync::Arc;

use bytes::Bytes;
use cairn_pg::Eversion;
use cairn_proto::image::ObjectImage;
use cairn_proto::peer::{PeerAnswer, PeerBody, Urgency};
use cairn_qos::OpKind as Io;
use cairn_store::Transaction;

use crate::ask::ask_as;
use crate::error::OsdError;
use crate::metrics::RecoveryKind;
use crate::objects::{list_all, piece_data_bytes, read_piece, stage_piece, Cursor, PiecePlace};
use crate::pgs::Pg;
use crate::shared::Shared;
use crate::work::{Purpose, Work};

/// Why a recovery step of `urgency` runs: in the background, or for a client that waits on
/// it (then at the client's class and priority).
pub fn purpose_of(urgency: Urgency) -> Purpose {
    match urgency {
        Urgency::Background => Purpose::Recovery,
        Urgency::Blocking => Purpose::BlockingRecovery,
    }
}

/// A PG's recovery as this OSD runs it: the PG, the epoch of the interval its requests are
/// sent in, and how urgent its steps are.
#[derive(Clone, Copy)]
pub(crate) struct Recovering<'a> {
    /// This OSD.
    pub s: &'a Arc<Shared>,
    /// The PG.
    pub pg: &'a Pg,
    /// Epoch of the interval the requests belong to.
    pub epoch: u64,
    /// Whether client I/O waits on the steps.
    pub urgency: Urgency,
    /// The background fill attempt the steps belong to (0: not a fill's).
    pub fill: u64,
}

impl Recovering<'_> {
    /// A step of this recovery that does `op` (of this OSD's own, at the recovery's purpose).
    pub fn work(&self, op: Io) -> Work {
        Work::new(purpose_of(self.urgency), u64::from(self.s.id as u32), op)
    }

    /// Runs `task` on this OSD's store as one request, described by `work`, through the
    /// scheduler shard of the PG.
    pub async fn run<T: Send + 'static>(
        &self,
        work: Work,
        task: impl std::future::Future<Output = Result<T, OsdError>> + Send + 'static,
    ) -> Result<T, OsdError> {
        as_own_work(self.s, self.pg, work, task).await
    }

    /// How this recovery's requests are asked for: its urgency and fill attempt.
    pub fn asking(&self) -> crate::ask::Asking {
        crate::ask::Asking {
            urgency: self.urgency,
            fill: self.fill,
        }
    }

    /// Sends one recovery request to `osd`, which schedules it in the recovery's class.
    async fn ask(
        &self,
        osd: i32,
        body: PeerBody,
        data: Bytes,
    ) -> Result<(PeerAnswer, Bytes), OsdError> {
        ask_as(self.s, self.pg, self.epoch, osd, body, data, self.asking()).await
    }
}

/// Brings `obj` of this OSD's copy of the PG to `from`'s state, pulling its image piece by
/// piece and installing each as it arrives (a whole image at once when it fits one piece).
/// With `expected`, a copy of any other version (or none) is refused before anything of it
/// is installed.
pub(crate) async fn pull(
    r: &Recovering<'_>,
    from: i32,
    obj: &str,
    created: &mut bool,
    expected: Option<Eversion>,
) -> Result<(), OsdError> {
    let mut at = Cursor::default();
    loop {
        let body = PeerBody::Pull {
            object: obj.to_string(),
            data_offset: at.data_offset,
            omap_after: at.omap_after.clone(),
        };
        match r.ask(from, body, Bytes::new()).await? {
            (
                PeerAnswer::Object {
                    present: true,
                    more,
                    version,
                },
                data,
            ) => {
                if let Some(want) = expected.filter(|&want| want != version) {
                    return Err(OsdError::Peer {
                        osd: from,
                        reason: format!("its copy of {obj} is at {version}, not {want}"),
                    });
                }
                r.s.metrics
                    .record_recovery(RecoveryKind::Pull, r.urgency, data.len() as u64);
                r.s.metrics
                    .record_recovered(at.is_start(), data.len() as u64);
                let piece = ObjectImage::decode(&data)?;
                let next = at.after(&piece);
                if more && next == at {
                    return Err(OsdError::Peer {
                        osd: from,
                        reason: format!("an empty piece of {obj} with more to follow"),
                    });
                }
                let place = PiecePlace {
                    data_offset: at.data_offset,
                    first: at.is_start(),
                    last: !more,
                };
                install_local(r, created, obj, Some((piece, place))).await?;
                if !more {
                    tracing::debug!(osd = r.s.id, pg = %r.pg.id, from, object = obj, %version, "pulled");
                    return Ok(());
                }
                at = next;
            }
            (PeerAnswer::Object { present: false, .. }, _) if expected.is_some() => {
                return Err(OsdError::Peer {
                    osd: from,
                    reason: format!("it has no copy of {obj}"),
                })
            }
            (PeerAnswer::Object { present: false, .. }, _) if at.is_start() => {
                tracing::debug!(osd = r.s.id, pg = %r.pg.id, from, object = obj, "pulled a removal");
                return install_local(r, created, obj, None).await;
            }
            (PeerAnswer::Object { present: false, .. }, _) => {
                return Err(OsdError::Peer {
                    osd: from,
                    reason: format!("{obj} vanished in the middle of its transfer"),
                })
            }
            _ => {
                return Err(OsdError::Peer {
                    osd: from,
                    reason: "unexpected answer to a pull".into(),
                })
            }
        }
    }
}

/// Pulls `obj` at version `want` from the first of `sources` (each tried once, in order) whose
/// copy is at that version, and says which; otherwise every refusal, by OSD. A copy at another
/// version is never installed in place of the one asked for.
pub(crate) async fn pull_from_any(
    r: &Recovering<'_>,
    sources: &[i32],
    obj: &str,
    created: &mut bool,
    want: Eversion,
) -> Result<i32, Vec<(i32, OsdError)>> {
    let mut refused: Vec<(i32, OsdError)> = Vec::new();
    let mut tried = std::collections::BTreeSet::new();
    for &from in sources {
        if !tried.insert(from) {
            continue;
        }
        match pull(r, from, obj, created, Some(want)).await {
            Ok(()) => return Ok(from),
            Err(e) => refused.push((from, e)),
        }
    }
    Err(refused)
}

/// Brings this OSD's copy of `obj` to the version `want` a PG log names: pulled from the first
/// of `sources` holding that version, or removed (`None`). Err: the last refusal, or that no
/// source was given.
pub(crate) async fn recover_local(
    r: &Recovering<'_>,
    sources: &[i32],
    obj: &str,
    created: &mut bool,
    want: Option<Eversion>,
) -> Result<(), OsdError> {
    let Some(v) = want else {
        return install_local(r, created, obj, None).await;
    };
    match pull_from_any(r, sources, obj, created, v).await {
        Ok(_) => Ok(()),
        Err(mut refused) => Err(match refused.pop() {
            Some((_, e)) => e,
            None => OsdError::Peer {
                osd: r.s.id,
                reason: format!("no copy to pull {obj} at {v} from"),
            },
        }),
    }
}

/// Runs `task`, described by `work`, as one request through the scheduler shard of `pg`.
pub(crate) async fn as_own_work<T: Send + 'static>(
    s: &Arc<Shared>,
    pg: &Pg,
    work: Work,
    task: impl std::future::Future<Output = Result<T, OsdError>> + Send + 'static,
) -> Result<T, OsdError> {
    s.sched.run(pg.id, work, task).await?
}

/// Every object of the PG's collection on this OSD, listed as one scheduled request.
pub(crate) async fn list_scheduled(r: &Recovering<'_>) -> Result<Vec<String>, OsdError> {
    let (s2, coll) = (r.s.clone(), r.pg.coll.clone());
    r.run(r.work(Io::Other), async move {
        list_all(&s2.store, &coll).await
    })
    .await
}

/// Brings `obj` of `to`'s copy of the PG to this OSD's state, piece by piece (one piece when
/// the image fits, else a temporary object there that replaces the object with the last).
pub(crate) async fn push(r: &Recovering<'_>, to: i32, obj: &str) -> Result<(), OsdError> {
    let (s, pg) = (r.s, r.pg);
    let mut at = Cursor::default();
    let started = std::time::Instant::now();
    let (mut read_time, mut pieces) = (std::time::Duration::ZERO, 0u32);
    loop {
        let (s2, coll, name, from) = (s.clone(), pg.coll.clone(), obj.to_string(), at.clone());
        let reading = std::time::Instant::now();
        let budget = s.recovery_chunk_bytes;
        let physical = s.store.physical_offset_hint(&pg.coll, obj, at.data_offset);
        let bytes = piece_data_bytes(&s.store, &pg.coll, obj, at.data_offset, budget).await;
        let work = r
            .work(Io::Read)
            .on(obj, at.data_offset, bytes)
            .at_physical(physical);
        let piece = r
            .run(work, async move {
                read_piece(&s2.store, &coll, &name, &from, budget).await
            })
            .await?;
        read_time += reading.elapsed();
        pieces += 1;
        let first = at.is_start();
        let (body, data, next) = match piece {
            Some(p) => {
                let next = at.after(&p.image);
                if p.more && next == at {
                    return Err(OsdError::Corrupt(format!(
                        "an empty piece of {obj} with more to follow"
                    )));
                }
                let body = PeerBody::Push {
                    object: obj.to_string(),
                    present: true,
                    data_offset: at.data_offset,
                    first,
                    last: !p.more,
                };
                (body, p.image.encode(), p.more.then_some(next))
            }
            None if first => {
                let body = PeerBody::Push {
                    object: obj.to_string(),
                    present: false,
                    data_offset: 0,
                    first: true,
                    last: true,
                };
                (body, Bytes::new(), None)
            }
            None => {
                return Err(OsdError::Corrupt(format!(
                    "{obj} vanished in the middle of its transfer"
                )))
            }
        };
        s.metrics
            .record_recovery(RecoveryKind::Push, r.urgency, data.len() as u64);
        s.metrics.record_recovered(first, data.len() as u64);
        if let (PeerAnswer::TooFull { why }, _) = r.ask(to, body, data).await? {
            return Err(OsdError::TooFull { osd: to, why });
        }
        match next {
            Some(next) => at = next,
            None => {
                tracing::debug!(
                    osd = s.id, pg = %pg.id, to, object = obj, pieces,
                    ms = cairn_convert::millis(started.elapsed()),
                    read_ms = cairn_convert::millis(read_time),
                    "pushed"
                );
                return Ok(());
            }
        }
    }
}

/// Every object name of `from`'s copy of the PG, page by page.
pub(crate) async fn list_remote(r: &Recovering<'_>, from: i32) -> Result<Vec<String>, OsdError> {
    let mut out = Vec::new();
    loop {
        let body = PeerBody::List {
            after: out.last().cloned().unwrap_or_default(),
            max: 1000,
        };
        match r.ask(from, body, Bytes::new()).await? {
            (PeerAnswer::Names { names, more }, _) => {
                let done = !more || names.is_empty();
                out.extend(names);
                if done {
                    return Ok(out);
                }
            }
            _ => {
                return Err(OsdError::Peer {
                    osd: from,
                    reason: "unexpected answer to a listing".into(),
                })
            }
        }
    }
}

/// Installs a piece of `obj`'s image (or removes the object, for `None`) in this OSD's copy of
/// the PG, as one recovery request through the scheduler.
pub(crate) async fn install_local(
    r: &Recovering<'_>,
    created: &mut bool,
    obj: &str,
    piece: Option<(ObjectImage, PiecePlace)>,
) -> Result<(), OsdError> {
    let was_created = *created;
    let (s2, coll, obj) = (r.s.clone(), r.pg.coll.clone(), obj.to_string());
    let work = match &piece {
        Some((image, place)) => {
            r.work(Io::Write)
                .on(&obj, place.data_offset, image.data.len() as u64)
        }
        None => r.work(Io::Other).on(&obj, 0, 0),
    };
    let installed = r
        .run(work, async move {
            let mut txn = Transaction::new();
            if !was_created {
                txn.create_collection(&coll);
            }
            let piece = piece.as_ref().map(|(i, place)| (i, *place));
            stage_piece(&s2.store, &mut txn, &coll, &obj, piece, was_created).await?;
            if txn.ops.is_empty() {
                // Removing an object that is not there: nothing to do.
                return Ok(false);
            }
            s2.store.queue_transaction_owned(txn).await?;
            Ok(true)
        })
        .await?;
    *created |= installed;
    Ok(())
}
