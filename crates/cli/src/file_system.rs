//! Making a file system (its two pools and its description) and the metadata server's key,
//! for `cairn fs new` and `cairn up`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use cairn_auth::{Caps, EntityName};
use cairn_client::mon::MonClient;
use cairn_client::{Client, ClientError};
use cairn_fs::backing::{data_pool, metadata_pool, FsInfo, INFO_OBJECT};
use cairn_proto::mon::Request;

/// The file system `cairn up` makes and mounts by default.
pub(crate) const DEFAULT_FS: &str = "cairnfs";
/// The address `cairn up` starts the metadata server on.
pub(crate) const DEFAULT_MDS: &str = "127.0.0.1:6800";

/// Creates file system `name` (pools `NAME.meta` and `NAME.data` of `pg_num` PGs and `size`
/// copies, and its description) unless it exists; says whether it made it.
pub(crate) async fn create(
    client: &Client,
    name: &str,
    pg_num: u32,
    size: u32,
) -> anyhow::Result<bool> {
    anyhow::ensure!(
        !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
        "a file system's name is 1-64 letters, digits, '-' or '_'"
    );
    let meta = metadata_pool(name);
    match client.read(&meta, INFO_OBJECT).await {
        Ok(_) => return Ok(false),
        Err(ClientError::NotFound(_) | ClientError::NoPool(_)) => {}
        Err(e) => return Err(e.into()),
    }
    let mut epoch = 0;
    for pool in [meta.clone(), data_pool(name)] {
        let exists = client
            .map()
            .is_some_and(|m| m.placement.pool_named(&pool).is_some());
        if !exists {
            let reply = client
                .mon()
                .op(
                    Request::CreatePool {
                        name: pool,
                        size,
                        pg_num,
                    },
                    10_000,
                )
                .await?;
            epoch = epoch.max(reply.epoch);
        }
    }
    client.mon().wait_for_epoch(epoch, 10_000).await?;
    let info = FsInfo {
        name: name.to_string(),
        metadata_pool: meta.clone(),
        data_pool: data_pool(name),
    };
    client
        .write_full(&meta, INFO_OBJECT, &serde_json::to_vec_pretty(&info)?)
        .await?;
    Ok(true)
}

/// The metadata server's entity for file system `fs` (`client.mds.FS`).
pub(crate) fn mds_entity(fs: &str) -> EntityName {
    EntityName::Client(format!("mds.{fs}"))
}

/// Its capabilities: the MDS profile (the service secret), and its file system's pools.
pub(crate) fn mds_caps(fs: &str) -> Caps {
    let osd = format!(
        "allow rw pool={}, allow rw pool={}",
        metadata_pool(fs),
        data_pool(fs)
    );
    Caps::from_pairs(&[("mon", "profile mds"), ("osd", &osd)]).expect("the MDS caps parse")
}

/// The metadata server's keyring in a cluster directory.
pub(crate) fn mds_keyring(dir: &Path, fs: &str) -> PathBuf {
    dir.join(format!("mds.{fs}.keyring"))
}

/// Has the monitor create (or return) the metadata server's key and writes its keyring.
pub(crate) async fn register_mds(mon: &MonClient, dir: &Path, fs: &str) -> anyhow::Result<()> {
    let entity = mds_entity(fs).to_string();
    crate::up_keys::save_key(
        mon,
        &entity,
        mds_caps(fs).raw().clone(),
        &mds_keyring(dir, fs),
    )
    .await
}

/// `cairn mds` arguments that start the metadata server of `fs` on `listen`.
pub(crate) fn mds_args(mon: SocketAddr, fs: &str, listen: SocketAddr) -> Vec<String> {
    vec![
        "mds".into(),
        "--mon".into(),
        mon.to_string(),
        "--fs".into(),
        fs.into(),
        "--listen".into(),
        listen.to_string(),
    ]
}
