//! `cairn health [detail]`: the cluster's health checks, as `ceph health [detail]`.

use std::net::SocketAddr;

use anyhow::Context;
use clap::Args;

use crate::mon_link::{connect, MonAddr};
use crate::osd_reports::{pg_rows, usage_of};

/// `cairn health [detail]`.
#[derive(Args)]
pub struct HealthArgs {
    #[command(flatten)]
    mon: MonAddr,
    /// `detail`: each check's OSDs and PGs, a line each.
    detail: Option<HealthDetail>,
}

/// The one word `cairn health` takes after it.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum HealthDetail {
    /// Each check's OSDs and PGs.
    Detail,
}

/// `cairn health [detail]`.
pub fn run(args: HealthArgs) -> anyhow::Result<()> {
    print_health(args.mon.mon, args.detail.is_some())
}

/// `cairn health [detail]`: the cluster's health checks, as `ceph health [detail]`.
fn print_health(mon: SocketAddr, detail: bool) -> anyhow::Result<()> {
    crate::runtime::command()?.block_on(async {
        let client = connect(mon).await?;
        let map = client.map().context("no map from the monitor")?;
        let rows = pg_rows(&client).await;
        let usage = usage_of(&client).await;
        let health = crate::health::assess(&map, &rows, &usage);
        match detail {
            true => print!("{}", health.detail()),
            false => println!("{}", health.line()),
        }
        Ok(())
    })
}
