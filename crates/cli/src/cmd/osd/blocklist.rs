//! `cairn osd blocklist add|rm|ls`: fencing client instances out of the OSDs (Ceph's `osd
//! blocklist`). A lease taker fences the holder it replaces by itself; an operator fences a
//! client known to misbehave, or lifts a fence early.

use std::net::SocketAddr;

use cairn_proto::mon::{Request, DEFAULT_BLOCKLIST_EXPIRE_S};
use clap::Subcommand;

use crate::mon_link::{current_map, mon_op};

/// `cairn osd blocklist ...`.
#[derive(Subcommand)]
pub enum BlocklistCommand {
    /// Fence a client instance (16 hex digits, as `ls`, lock listings and logs print it):
    /// every OSD refuses its ops from the epoch this makes on.
    Add {
        /// The client instance.
        instance: String,
        /// How long the fence lasts, in seconds (Ceph's default: an hour).
        #[arg(long, default_value_t = DEFAULT_BLOCKLIST_EXPIRE_S)]
        expire: u64,
    },
    /// Lift a client instance's fence before it expires.
    Rm {
        /// The client instance.
        instance: String,
    },
    /// The fenced instances and when each fence lapses.
    Ls,
}

/// Runs one blocklist command against the monitor at `mon`.
pub fn run(mon: SocketAddr, command: BlocklistCommand) -> anyhow::Result<()> {
    let request = match command {
        BlocklistCommand::Ls => return list(mon),
        BlocklistCommand::Add { instance, expire } => Request::Blocklist {
            instance: parse_instance(&instance)?,
            expire_s: Some(expire),
        },
        BlocklistCommand::Rm { instance } => Request::Blocklist {
            instance: parse_instance(&instance)?,
            expire_s: None,
        },
    };
    crate::runtime::command()?.block_on(async {
        let r = mon_op(mon, request).await?;
        println!("done (epoch {})", r.epoch);
        Ok(())
    })
}

/// A client instance as printed (hex, an optional `0x`), refused when it is not one.
fn parse_instance(text: &str) -> anyhow::Result<u64> {
    let digits = text.strip_prefix("0x").unwrap_or(text);
    let instance = u64::from_str_radix(digits, 16)
        .map_err(|e| anyhow::anyhow!("`{text}` is not a client instance (hex digits): {e}"))?;
    anyhow::ensure!(instance != 0, "client instance 0 names no client");
    Ok(instance)
}

fn list(mon: SocketAddr) -> anyhow::Result<()> {
    crate::runtime::command()?.block_on(async {
        let map = current_map(mon).await?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        for (instance, until) in &map.blocklist {
            println!(
                "{instance:016x} until {until} ({} s left)",
                until.saturating_sub(now)
            );
        }
        println!(
            "listed {} entries (epoch {})",
            map.blocklist.len(),
            map.epoch
        );
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instances_parse_as_printed_and_nonsense_is_refused() {
        assert_eq!(parse_instance("00000000000000ff").unwrap(), 0xff);
        assert_eq!(parse_instance("0xFF").unwrap(), 0xff);
        for bad in ["", "0", "xyz", "1ffffffffffffffff", "-1"] {
            assert!(parse_instance(bad).is_err(), "{bad:?} accepted");
        }
    }
}
