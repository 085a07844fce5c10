//! `cairn auth`: entities, keys and capabilities in the monitor's authentication database,
//! with Ceph's verbs: `get-or-create`, `add`, `get`, `print-key`, `caps`, `rotate`, `ls`,
//! `rm`. Capabilities
//! are given as SERVICE CAP pairs (`osd 'allow rw pool=data' mon 'allow r'`). Keyrings written
//! with `-o FILE` are created readable by their owner only.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context;
use cairn_auth::Keyring;
use cairn_client::mon::MonClient;
use cairn_proto::mon::{AuthAnswer, AuthRequest, RequestBody};
use clap::{Args, Subcommand};

use crate::mon_link::MonAddr;

/// Longest the monitor may take to answer.
const TIMEOUT_MS: u64 = 10_000;

/// `cairn auth ...`.
#[derive(Args)]
pub struct AuthArgs {
    #[command(flatten)]
    mon: MonAddr,
    #[command(subcommand)]
    command: AuthCommand,
}

#[derive(Subcommand)]
enum AuthCommand {
    /// Print the entity's keyring entry, creating it with these caps if it does not exist.
    GetOrCreate {
        /// `client.NAME` or `osd.N`.
        entity: String,
        /// SERVICE CAP pairs: `mon 'allow r' osd 'allow rw pool=data'`.
        caps: Vec<String>,
        /// Write the keyring entry to this file (mode 0600) instead of printing it.
        #[arg(short = 'o', long = "out")]
        out: Option<PathBuf>,
    },
    /// Add an entity with these caps and the key of `-i KEYRING` (or a new random one); an
    /// entity that exists must already have that key and those caps.
    Add {
        /// `client.NAME` or `osd.N`.
        entity: String,
        /// SERVICE CAP pairs.
        caps: Vec<String>,
        /// A keyring holding the entity's key.
        #[arg(short = 'i', long = "in")]
        input: Option<PathBuf>,
    },
    /// Give the entity a new random key (its old one is refused from its next connection)
    /// and print its keyring entry.
    Rotate {
        /// Entity name.
        entity: String,
        /// Write the new entry to this file (mode 0600) instead of printing it.
        #[arg(short = 'o', long = "out")]
        out: Option<PathBuf>,
    },
    /// Print one entity's keyring entry.
    Get {
        /// Entity name.
        entity: String,
        /// Write it to this file (mode 0600) instead of printing it.
        #[arg(short = 'o', long = "out")]
        out: Option<PathBuf>,
    },
    /// Print only the entity's key.
    PrintKey {
        /// Entity name.
        entity: String,
    },
    /// Replace the entity's capabilities.
    Caps {
        /// Entity name.
        entity: String,
        /// SERVICE CAP pairs.
        caps: Vec<String>,
    },
    /// Every entity with its key and capabilities.
    Ls,
    /// Remove an entity: its key is refused from then on.
    Rm {
        /// Entity name.
        entity: String,
    },
}

/// SERVICE CAP pairs as a map; an odd count is an error.
fn cap_pairs(words: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    anyhow::ensure!(
        words.len().is_multiple_of(2),
        "capabilities come in SERVICE CAP pairs, e.g. osd 'allow rw pool=data'"
    );
    Ok(words
        .chunks(2)
        .map(|p| (p[0].clone(), p[1].clone()))
        .collect())
}

/// The key `entity` has in the keyring at `path`, as base64.
fn key_in(path: &std::path::Path, entity: &str) -> anyhow::Result<String> {
    let ring = Keyring::load(path).with_context(|| format!("keyring {}", path.display()))?;
    let name: cairn_auth::EntityName = entity.parse()?;
    let entry = ring
        .get(&name)
        .with_context(|| format!("{} holds no key for {name}", path.display()))?;
    Ok(entry.key.to_base64())
}

/// Runs one `cairn auth` command.
pub fn run(args: AuthArgs) -> anyhow::Result<()> {
    crate::runtime::command()?.block_on(async {
        let (request, out, key_only) = match args.command {
            AuthCommand::GetOrCreate { entity, caps, out } => (
                AuthRequest::GetOrCreate {
                    entity,
                    caps: cap_pairs(&caps)?,
                },
                out,
                false,
            ),
            AuthCommand::Add {
                entity,
                caps,
                input,
            } => (
                AuthRequest::Add {
                    key: input.map(|path| key_in(&path, &entity)).transpose()?,
                    entity,
                    caps: cap_pairs(&caps)?,
                },
                None,
                false,
            ),
            AuthCommand::Rotate { entity, out } => (AuthRequest::Rotate { entity }, out, false),
            AuthCommand::Get { entity, out } => (AuthRequest::Get { entity }, out, false),
            AuthCommand::PrintKey { entity } => (AuthRequest::Get { entity }, None, true),
            AuthCommand::Caps { entity, caps } => (
                AuthRequest::Caps {
                    entity,
                    caps: cap_pairs(&caps)?,
                },
                None,
                false,
            ),
            AuthCommand::Ls => (AuthRequest::List, None, false),
            AuthCommand::Rm { entity } => (AuthRequest::Remove { entity }, None, false),
        };
        let client = MonClient::connect_as(
            args.mon.mon,
            cairn_client::random_client_id(),
            crate::credentials::client()?,
        )
        .await;
        let reply = client
            .request(RequestBody::Auth(request), TIMEOUT_MS)
            .await
            .with_context(|| format!("monitor at {}", args.mon.mon))?;
        match reply.auth {
            Some(AuthAnswer::Keyring { text }) => {
                let ring = Keyring::parse(&text, "the monitor's answer")?;
                if key_only {
                    for e in ring.entries.values() {
                        println!("{}", e.key.to_base64());
                    }
                } else if let Some(path) = out {
                    ring.save(&path)?;
                    eprintln!("wrote {} (mode 0600)", path.display());
                } else {
                    print!("{text}");
                }
            }
            Some(AuthAnswer::Done) => eprintln!("done"),
            other => anyhow::bail!("unexpected answer from the monitor: {other:?}"),
        }
        Ok(())
    })
}
