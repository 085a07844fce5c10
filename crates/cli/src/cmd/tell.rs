//! `cairn tell osd.N WORDS...` (an OSD's admin commands) and `cairn tell mon config set KEY
//! VALUE` (a monitor option while it runs).

use std::net::SocketAddr;

use anyhow::bail;
use clap::Args;

use crate::defaults::DEFAULT_MON;
use crate::mon_link::{connect, mon_op};

/// `cairn tell osd.N WORDS...` or `cairn tell mon config set KEY VALUE`.
#[derive(Args)]
pub struct TellArgs {
    /// Monitor address.
    #[arg(long, default_value = DEFAULT_MON)]
    mon: SocketAddr,
    /// Target daemon, `osd.N`, or `mon` (`config set mon_allow_pool_delete true|false`).
    target: String,
    /// The command, e.g. `config set osd_op_queue wpq`, `config show`, `pg dump`, `df`.
    #[arg(required = true, num_args = 1.., trailing_var_arg = true)]
    words: Vec<String>,
}

/// `cairn tell mon config set KEY VALUE`: changes a monitor option while it runs.
fn tell_mon(mon: SocketAddr, words: &[String]) -> anyhow::Result<()> {
    let [config, set, key, value] = words else {
        bail!(
            "the monitor takes `config set KEY VALUE` (got `{}`)",
            words.join(" ")
        );
    };
    if config != "config" || set != "set" {
        bail!(
            "the monitor takes `config set KEY VALUE` (got `{}`)",
            words.join(" ")
        );
    }
    crate::runtime::command()?.block_on(async {
        let request = cairn_proto::mon::Request::SetMonOption {
            key: key.clone(),
            value: value.clone(),
        };
        mon_op(mon, request).await?;
        println!("mon: {key} = {value}");
        Ok(())
    })
}

/// Sends an admin command to one OSD and prints its answer, or sets a monitor option.
pub fn run(args: TellArgs) -> anyhow::Result<()> {
    if args.target == "mon" || args.target == "mon.*" {
        return tell_mon(args.mon, &args.words);
    }
    let Some(id) = args
        .target
        .strip_prefix("osd.")
        .and_then(|n| n.parse::<i32>().ok())
    else {
        bail!("target must be osd.N (got `{}`)", args.target);
    };
    crate::runtime::command()?.block_on(async {
        let client = connect(args.mon).await?;
        let out = client.tell(id, &args.words).await?;
        // Some answers are one bare value (`config get`): end the line either way.
        if out.ends_with('\n') {
            print!("{out}");
        } else {
            println!("{out}");
        }
        Ok(())
    })
}
