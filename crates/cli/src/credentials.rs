//! Who the CLI and the daemons it runs are: the global `--keyring PATH` and `--name ENTITY`
//! options (or `CAIRN_KEYRING` and `CAIRN_NAME`), as Ceph's `-k` and `--name`. A client
//! command authenticates as the named entity (`client.admin` by default) with the key the
//! keyring holds for it; `cairn mon` seeds its authentication database from the keyring on
//! first start; `cairn osd run` authenticates as the keyring's `osd.N`. A client command
//! given no keyring looks, as Ceph's tools look in `/etc/ceph`, for the administrator's
//! keyring `cairn up` writes (`cairn-cluster/keyring` under the working directory), then for
//! `/etc/cairn/keyring`. Without any keyring nothing authenticates (`auth none`), and a
//! monitor that requires authentication refuses.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use anyhow::Context;
use cairn_auth::{EntityName, Keyring};
use cairn_msgr::handshake::CredentialSource;
use cairn_msgr::protect::WireMode;

/// The global options, as parsed.
#[derive(Clone, Debug, Default)]
pub(crate) struct AuthOptions {
    /// The keyring file, if any.
    pub keyring: Option<PathBuf>,
    /// The entity to act as; None: the default of the command.
    pub name: Option<String>,
    /// The wire mode to ask for (`mac` or `secure`).
    pub mode: Option<WireMode>,
}

static OPTIONS: OnceLock<AuthOptions> = OnceLock::new();

/// Records the global options (once, at start).
pub(crate) fn init(options: AuthOptions) {
    let _ = OPTIONS.set(options);
}

/// The global options.
pub(crate) fn options() -> AuthOptions {
    OPTIONS.get().cloned().unwrap_or_default()
}

/// The keyring at `configured` (a daemon's TOML), else the one the options name, if any.
pub(crate) fn keyring(configured: Option<&std::path::Path>) -> anyhow::Result<Option<Keyring>> {
    match configured
        .map(std::path::Path::to_path_buf)
        .or(options().keyring)
    {
        Some(path) => Ok(Some(
            Keyring::load(&path).with_context(|| format!("keyring {}", path.display()))?,
        )),
        None => Ok(None),
    }
}

/// Where a client command looks for a keyring when none is named, in order: the
/// administrator's keyring in `cairn up`'s default directory, then the system-wide one.
pub(crate) const DEFAULT_KEYRINGS: [&str; 2] = ["cairn-cluster/keyring", "/etc/cairn/keyring"];

/// The keyring a client command uses: the one named by `--keyring` (or `CAIRN_KEYRING`), else
/// the first of [`DEFAULT_KEYRINGS`] that exists; with the path it came from.
fn client_keyring() -> anyhow::Result<Option<(PathBuf, Keyring)>> {
    let path = match options().keyring {
        Some(path) => path,
        None => match DEFAULT_KEYRINGS
            .iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
        {
            Some(found) => found,
            None => return Ok(None),
        },
    };
    let ring = Keyring::load(&path).with_context(|| format!("keyring {}", path.display()))?;
    Ok(Some((path, ring)))
}

/// The wire mode asked for (`mac` unless `--ms-mode secure`).
pub(crate) fn mode() -> WireMode {
    options().mode.unwrap_or(WireMode::Mac)
}

/// The entity to act as: `--name`, or `default`.
pub(crate) fn entity(default: EntityName) -> anyhow::Result<EntityName> {
    match options().name {
        Some(n) => Ok(n.parse()?),
        None => Ok(default),
    }
}

/// The credentials `entity` dials with, from the keyring; None without a keyring.
pub(crate) fn credentials_of(
    default: EntityName,
) -> anyhow::Result<Option<(EntityName, cairn_auth::SecretKey)>> {
    let Some((path, ring)) = client_keyring()? else {
        return Ok(None);
    };
    let entity = entity(default)?;
    let entry = ring
        .get(&entity)
        .with_context(|| format!("the keyring {} holds no key for {entity}", path.display()))?;
    Ok(Some((entity, entry.key.clone())))
}

/// What a client command dials the monitor with: the named entity's key (`client.admin` by
/// default), or nothing without a keyring.
pub(crate) fn client() -> anyhow::Result<Option<Arc<dyn CredentialSource>>> {
    Ok(client_auth()?.map(|a| a.mon_credentials()))
}

/// The identity `cairn osd run` authenticates with: `--name`, else `osd.ID` when the OSD's id
/// is given, else the keyring's only OSD entity; None without a keyring.
pub(crate) fn osd(
    configured: Option<&std::path::Path>,
    id: Option<i32>,
) -> anyhow::Result<Option<cairn_osd::daemon::OsdAuth>> {
    let Some(ring) = keyring(configured)? else {
        return Ok(None);
    };
    let entity = match (options().name, id) {
        (Some(n), _) => n.parse()?,
        (None, Some(id)) => EntityName::Osd(id),
        (None, None) => {
            let mut osds = ring.entries.keys().filter(|e| e.osd_id().is_some());
            match (osds.next(), osds.next()) {
                (Some(only), None) => only.clone(),
                _ => anyhow::bail!("the keyring holds no single osd.N key: name one with --name"),
            }
        }
    };
    let entry = ring
        .get(&entity)
        .with_context(|| format!("the keyring holds no key for {entity}"))?;
    Ok(Some(cairn_osd::daemon::OsdAuth {
        entity,
        key: entry.key.clone(),
        mode: mode(),
    }))
}

/// Who a client command is for the whole cluster (the monitor, and the OSDs through tickets):
/// the named entity (`client.admin` by default); None without a keyring.
pub(crate) fn client_auth() -> anyhow::Result<Option<cairn_client::tickets::ClientAuth>> {
    Ok(credentials_of(EntityName::admin())?.map(|(entity, key)| {
        cairn_client::tickets::ClientAuth {
            entity,
            key,
            mode: mode(),
        }
    }))
}

/// Who a daemon configured with a keyring file (a gateway's TOML) is to the cluster: `name`,
/// else the keyring's only client entity.
pub(crate) fn client_auth_in(
    path: &std::path::Path,
    name: Option<&str>,
) -> anyhow::Result<cairn_client::tickets::ClientAuth> {
    let ring = Keyring::load(path).with_context(|| format!("keyring {}", path.display()))?;
    let entity: EntityName = match name {
        Some(n) => n.parse()?,
        None => {
            let mut clients = ring
                .entries
                .keys()
                .filter(|e| matches!(e, EntityName::Client(_)));
            match (clients.next(), clients.next()) {
                (Some(only), None) => only.clone(),
                _ => anyhow::bail!("{} holds no single client entity: name one", path.display()),
            }
        }
    };
    let entry = ring
        .get(&entity)
        .with_context(|| format!("{} holds no key for {entity}", path.display()))?;
    Ok(cairn_client::tickets::ClientAuth {
        entity,
        key: entry.key.clone(),
        mode: mode(),
    })
}
