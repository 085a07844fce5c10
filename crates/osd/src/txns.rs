//! Turns a resolved write operation into store operations — the same function on the primary
//! and on every replica, so all copies apply identical transactions. Never performs I/O.

use bytes::Bytes;
use cairn_proto::pairs::decode_pairs;
use cairn_proto::{OpKind, OpResult};
use cairn_store::{DataCrcs, Op, Transaction};

/// Object attribute holding the object's packed version.
pub const VERSION_ATTR: &str = "_v";

/// The detail of a store's out-of-space refusal, for `OpResult::NoSpace` (whose display
/// already says "out of space").
pub fn no_space_detail(needed_blocks: u64, free_blocks: u64) -> String {
    format!("the store needs {needed_blocks} blocks and has {free_blocks} free")
}

/// Why a client's object or attribute name is refused, if it is.
pub fn check_object_name(name: &str) -> Result<(), OpResult> {
    if name.is_empty() || name.len() > 1000 || name.contains('\0') {
        return Err(OpResult::Invalid(format!(
            "object name must be 1..=1000 bytes without NUL (got {} bytes)",
            name.len()
        )));
    }
    Ok(())
}

fn check_xattr_name(name: &str) -> Result<(), OpResult> {
    if name.is_empty() || name.starts_with('_') || name.len() > 255 {
        return Err(OpResult::Invalid(format!(
            "xattr name `{name}` must be 1..=255 bytes and not start with `_` (reserved)"
        )));
    }
    Ok(())
}

/// Refuses a write (resolved: never `Append`) that would make `obj` longer than
/// `max_object_bytes` (Ceph's `osd_max_object_size`). Checked by the primary and again by
/// every replica, so no copy grows past the limit whoever sent the write.
pub fn check_object_size(
    obj: &str,
    kind: &OpKind,
    data_bytes: usize,
    max_object_bytes: u64,
) -> Result<(), OpResult> {
    let data_bytes = data_bytes as u64;
    let end = match kind {
        OpKind::WriteFull => data_bytes,
        OpKind::Write { offset } => offset.saturating_add(data_bytes),
        OpKind::Truncate { size } => *size,
        _ => 0,
    };
    if end > max_object_bytes {
        return Err(OpResult::Invalid(format!(
            "object {obj} would be {end} bytes, past the limit of {max_object_bytes} (max_object_bytes)"
        )));
    }
    Ok(())
}

/// Adds to `txn` the store operations of `kind` on `obj` with `data`, then the new version.
/// `kind` must already be resolved (no `Append`). Written bytes are shared with `data`, not
/// copied; `crcs`, when known, are its block checksums (from the messenger), handed to the
/// store so it does not read the bytes again.
pub fn build_write(
    txn: &mut Transaction,
    coll: &str,
    obj: &str,
    kind: &OpKind,
    data: &Bytes,
    crcs: Option<&DataCrcs>,
    version: u64,
) -> Result<(), OpResult> {
    let write = |txn: &mut Transaction, offset: u64| {
        match crcs {
            Some(c) => txn.write_checksummed(coll, obj, offset, data.clone(), c.clone()),
            None => txn.write_bytes(coll, obj, offset, data.clone()),
        };
    };
    let touch = |txn: &mut Transaction| {
        txn.push(Op::Touch {
            coll: coll.into(),
            obj: obj.into(),
        });
    };
    match kind {
        OpKind::WriteFull => {
            touch(txn);
            txn.truncate(coll, obj, 0);
            if !data.is_empty() {
                write(txn, 0);
            }
        }
        OpKind::Write { offset } => {
            offset
                .checked_add(data.len() as u64)
                .ok_or_else(|| OpResult::Invalid("offset + length overflows".into()))?;
            touch(txn);
            if !data.is_empty() {
                write(txn, *offset);
            }
        }
        OpKind::Truncate { size } => {
            touch(txn);
            txn.truncate(coll, obj, *size);
        }
        OpKind::Remove => {
            txn.remove(coll, obj);
            return Ok(());
        }
        OpKind::SetXattr { name } => {
            check_xattr_name(name)?;
            txn.setattr(coll, obj, name, data);
        }
        OpKind::RemoveXattr { name } => {
            check_xattr_name(name)?;
            txn.push(Op::RmAttr {
                coll: coll.into(),
                obj: obj.into(),
                name: name.clone(),
            });
        }
        OpKind::OmapSet => {
            let entries = decode_pairs(data).map_err(|e| OpResult::Invalid(e.to_string()))?;
            touch(txn);
            txn.push(Op::OmapSet {
                coll: coll.into(),
                obj: obj.into(),
                entries,
            });
        }
        OpKind::OmapRemove => {
            let keys = decode_pairs(data)
                .map_err(|e| OpResult::Invalid(e.to_string()))?
                .into_iter()
                .map(|(k, _)| k)
                .collect();
            txn.push(Op::OmapRemove {
                coll: coll.into(),
                obj: obj.into(),
                keys,
            });
        }
        other => {
            return Err(OpResult::Invalid(format!(
                "{} is not a write",
                other.name()
            )))
        }
    }
    txn.setattr(coll, obj, VERSION_ATTR, &version.to_le_bytes());
    Ok(())
}
