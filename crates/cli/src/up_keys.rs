//! The keys of a `cairn up --auth cephx` cluster, in its directory: `keyring` (the
//! administrator, `client.admin`), `mon.keyring` (what the monitor seeds its database from on
//! first start: the administrator and every OSD) and `osdN.keyring` (each OSD's own key). All
//! are created readable by their owner only. An OSD added to a running cluster gets its key
//! from the monitor (`auth get-or-create osd.N`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn_auth::{Caps, EntityName, Keyring, KeyringEntry};
use cairn_client::mon::MonClient;
use cairn_msgr::handshake::CredentialSource;
use cairn_proto::mon::{AuthAnswer, AuthRequest, RequestBody};

/// The administrator's keyring in a cluster directory.
pub(crate) fn admin_keyring(dir: &Path) -> PathBuf {
    dir.join("keyring")
}

/// The monitor's seed keyring in a cluster directory.
pub(crate) fn mon_keyring(dir: &Path) -> PathBuf {
    dir.join("mon.keyring")
}

/// The S3 gateway's entity name (`client.s3gw`): it reads and writes its own pool only (and
/// may create it), so the users' secrets stored there are readable by it and the
/// administrator alone.
pub(crate) const S3GW: &str = "s3gw";

/// The gateway's capabilities, for its pool `pool`.
fn s3gw_caps(pool: &str) -> Caps {
    let osd = format!("allow rw pool={pool}");
    Caps::from_pairs(&[("mon", "allow rw"), ("osd", &osd)]).expect("the gateway's caps parse")
}

/// The gateway's keyring in a cluster directory.
pub(crate) fn s3gw_keyring(dir: &Path) -> PathBuf {
    dir.join("s3gw.keyring")
}

/// OSD `i`'s keyring in a cluster directory.
pub(crate) fn osd_keyring(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("osd{i}.keyring"))
}

/// Creates the administrator's and the monitor's keyrings and those of OSDs `0..osds`, when
/// the monitor was never seeded; returns the OSDs whose keys the running monitor must still
/// create (added to an existing cluster).
pub(crate) fn prepare(dir: &Path, osds: usize) -> anyhow::Result<Vec<usize>> {
    if mon_keyring(dir).exists() {
        return Ok((0..osds)
            .filter(|&i| !osd_keyring(dir, i).exists())
            .collect());
    }
    let admin = KeyringEntry::generate(&Caps::everything());
    let mut seed = Keyring::single(EntityName::admin(), admin.clone());
    for i in 0..osds {
        let entity = EntityName::Osd(i32::try_from(i)?);
        let entry = KeyringEntry::generate(&Caps::osd_daemon());
        Keyring::single(entity.clone(), entry.clone()).save(&osd_keyring(dir, i))?;
        seed.entries.insert(entity, entry);
    }
    let gw = EntityName::Client(S3GW.into());
    let gw_entry = KeyringEntry::generate(&s3gw_caps(crate::defaults::DEFAULT_S3_POOL));
    Keyring::single(gw.clone(), gw_entry.clone()).save(&s3gw_keyring(dir))?;
    seed.entries.insert(gw, gw_entry);
    Keyring::single(EntityName::admin(), admin).save(&admin_keyring(dir))?;
    seed.save(&mon_keyring(dir))?;
    Ok(Vec::new())
}

/// The administrator, as a client of the whole cluster, from the cluster directory.
pub(crate) fn admin_auth(dir: &Path) -> anyhow::Result<cairn_client::tickets::ClientAuth> {
    let ring = Keyring::load(&admin_keyring(dir))?;
    let entry = ring
        .get(&EntityName::admin())
        .ok_or_else(|| anyhow::anyhow!("{} holds no client.admin", admin_keyring(dir).display()))?;
    Ok(cairn_client::tickets::ClientAuth {
        entity: EntityName::admin(),
        key: entry.key.clone(),
        mode: crate::credentials::mode(),
    })
}

/// The administrator's credentials for the monitor, from the cluster directory.
pub(crate) fn admin_credentials(dir: &Path) -> anyhow::Result<Arc<dyn CredentialSource>> {
    Ok(admin_auth(dir)?.mon_credentials())
}

/// Has the monitor create the keys of OSDs `new` (added to a running cluster) and writes
/// their keyrings.
pub(crate) async fn register_osds(
    mon: &MonClient,
    dir: &Path,
    new: &[usize],
) -> anyhow::Result<()> {
    for &i in new {
        let entity = EntityName::Osd(i32::try_from(i)?).to_string();
        let caps = Caps::osd_daemon().raw().clone();
        save_key(mon, &entity, caps, &osd_keyring(dir, i)).await?;
    }
    Ok(())
}

/// Has the monitor create `entity` with `caps` (or return it, if it exists) and saves its
/// keyring entry to `to`, mode 0600.
pub(crate) async fn save_key(
    mon: &MonClient,
    entity: &str,
    caps: std::collections::BTreeMap<String, String>,
    to: &Path,
) -> anyhow::Result<()> {
    let request = AuthRequest::GetOrCreate {
        entity: entity.to_string(),
        caps,
    };
    let reply = mon.request(RequestBody::Auth(request), 10_000).await?;
    let Some(AuthAnswer::Keyring { text }) = reply.auth else {
        anyhow::bail!("the monitor did not return {entity}'s key");
    };
    Keyring::parse(&text, "the monitor's answer")?.save(to)?;
    Ok(())
}
