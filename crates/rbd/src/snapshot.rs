//! Snapshots: taking one (a new id in the header; writes copy objects lazily from then on,
//! see [`crate::cow`]), listing them, rolling the image back to one, and removing one (its
//! clones handed down to the next older snapshot that needs them, or deleted).

use cairn_client::ClientError;
use futures_util::future::try_join_all;

use crate::error::RbdError;
use crate::header::{Snapshot, MAX_SNAPSHOTS};
use crate::image::{check_name, clone_object, data_object, Extent, Image};

/// Objects worked on at once by a rollback or a removal.
const BATCH: u64 = 16;

impl Image {
    /// The image's snapshots, oldest first (those being removed included, marked so).
    pub fn snapshots(&self) -> Vec<Snapshot> {
        self.header().snaps
    }

    /// Takes snapshot `name` of the image as it is now: every write answered before it is
    /// in it, none after. Returns its id.
    pub async fn snap_create(&self, name: &str) -> Result<u64, RbdError> {
        check_name(name)?;
        self.lock()?.check().await?;
        let _quiet = self.io_gate.write().await;
        let mut header = self.header();
        if header.snaps.iter().any(|s| s.name == name) {
            return Err(RbdError::Exists(format!("{}@{name}", self.name)));
        }
        if header.snaps.len() >= MAX_SNAPSHOTS {
            return Err(RbdError::Invalid(format!(
                "image {} has {MAX_SNAPSHOTS} snapshots, the most it may keep",
                self.name
            )));
        }
        let id = header.snap_seq + 1;
        header.snap_seq = id;
        header.snaps.push(Snapshot {
            id,
            name: name.to_string(),
            size: header.size,
            removing: false,
            parent_overlap: header.parent.as_ref().map(|p| p.overlap),
        });
        self.store_header(header).await?;
        self.forget_prepared();
        Ok(id)
    }

    /// Rolls the image back to snapshot `name`: its size and every object as the snapshot
    /// saw them (what later snapshots see is copied for them first). Writes wait meanwhile.
    pub async fn snap_rollback(&self, name: &str) -> Result<(), RbdError> {
        self.lock()?.check().await?;
        let _quiet = self.io_gate.write().await;
        let header = self.header();
        let Some(snap) = header.snap_named(name).cloned() else {
            return Err(RbdError::NotFound(format!("{}@{name}", self.name)));
        };
        let object_bytes = header.object_bytes();
        let objects = header.objects().max(snap.size.div_ceil(object_bytes));
        let mut index = 0;
        while index < objects {
            let batch = (index..objects.min(index + BATCH))
                .map(|i| self.roll_back_object(i, snap.id, snap.size));
            try_join_all(batch).await?;
            index += BATCH;
        }
        // Objects removed above are prepared anew by their next write (a clone's copies up).
        self.forget_prepared();
        let mut header = self.header();
        header.size = snap.size;
        if let Some(p) = &mut header.parent {
            // What read through to the parent then does again: the objects absent then were
            // removed above.
            p.overlap = snap.parent_overlap.unwrap_or(p.overlap).min(snap.size);
        }
        self.store_header(header).await
    }

    /// Rolls data object `index` back to snapshot `snap` (of `snap_size` bytes).
    async fn roll_back_object(
        &self,
        index: u64,
        snap: u64,
        snap_size: u64,
    ) -> Result<(), RbdError> {
        crate::cow::prepare(self, index).await?;
        let object_bytes = self.object_bytes();
        let start = index * object_bytes;
        let head = data_object(&self.name, index);
        let whole = Extent {
            index,
            object_offset: 0,
            len: object_bytes,
            buffer_offset: 0,
        };
        let then = if start < snap_size {
            crate::cow::read_at_snap(self, &whole, snap).await?
        } else {
            None
        };
        let outcome = match then {
            Some(data) => self
                .client
                .write_full(&self.pool, &head, &data)
                .await
                .map(|_| ()),
            // Absent then: removed now (in a clone, its parent shows through again).
            None => self.client.remove(&self.pool, &head).await,
        };
        match outcome {
            Ok(()) | Err(ClientError::NotFound(_)) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Removes snapshot `name`: marked removing, then each object's clone for it handed down
    /// to the next older snapshot that would read it (or deleted), then dropped from the
    /// header. Refused while clones of the snapshot exist. A removal cut short resumes when
    /// asked again.
    pub async fn snap_remove(&self, name: &str) -> Result<(), RbdError> {
        self.lock()?.check().await?;
        let _quiet = self.io_gate.write().await;
        let mut header = self.header();
        let Some(at) = header.snaps.iter().position(|s| s.name == name) else {
            return Err(RbdError::NotFound(format!("{}@{name}", self.name)));
        };
        let id = header.snaps[at].id;
        let children = crate::clone::children(&self.client, &self.pool, &self.name).await?;
        if let Some((child, _)) = children.iter().find(|(_, snap)| *snap == id) {
            return Err(RbdError::Busy(format!(
                "snapshot {}@{name} has clones ({child}): remove them first",
                self.name
            )));
        }
        if !header.snaps[at].removing {
            header.snaps[at].removing = true;
            self.store_header(header.clone()).await?;
        }
        let older = at.checked_sub(1).map(|i| header.snaps[i].id);
        let object_bytes = header.object_bytes();
        let objects = header
            .snaps
            .iter()
            .map(|s| s.size)
            .chain([header.size])
            .max()
            .unwrap_or(0)
            .div_ceil(object_bytes);
        let mut index = 0;
        while index < objects {
            let batch = (index..objects.min(index + BATCH)).map(|i| self.hand_down(i, id, older));
            try_join_all(batch).await?;
            index += BATCH;
        }
        let mut header = self.header();
        header.snaps.retain(|s| s.id != id);
        self.store_header(header).await
    }

    /// Object `index`'s clone for snapshot `id`: copied to the clone of `older` (the next
    /// older snapshot) when that one has none (it read this one), then deleted.
    async fn hand_down(&self, index: u64, id: u64, older: Option<u64>) -> Result<(), RbdError> {
        let clone = clone_object(&self.name, index, id);
        let attrs = match self.client.get_xattrs(&self.pool, &clone).await {
            Ok(a) => a,
            Err(ClientError::NotFound(_)) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        if let Some(older) = older {
            let target = clone_object(&self.name, index, older);
            let absent = attrs.iter().any(|(k, _)| k == crate::cow::ABSENT_ATTR);
            let made = if absent {
                self.client
                    .set_xattr_if(&self.pool, &target, crate::cow::ABSENT_ATTR, b"1", 0)
                    .await
            } else {
                let data = self.client.read_bytes(&self.pool, &clone).await?;
                self.client
                    .write_full_if(&self.pool, &target, &data, 0)
                    .await
            };
            match made {
                Ok(_) | Err(ClientError::VersionMismatch { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        match self.client.remove(&self.pool, &clone).await {
            Ok(()) | Err(ClientError::NotFound(_)) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}
