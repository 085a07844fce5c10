//! How a command reaches the cluster: the monitor address flag, one request to the monitor
//! on a connection of its own, the current map, and a client of the whole cluster.

use std::net::SocketAddr;

use anyhow::Context;
use cairn_client::mon::MonClient;
use cairn_client::Client;
use cairn_clustermap::ClusterMap;
use cairn_proto::mon::Request;
use clap::Args;

use crate::defaults::DEFAULT_MON;

/// How long a command waits for the monitor's answer.
const TIMEOUT_MS: u64 = 10_000;

/// Where to find the monitor.
#[derive(Args, Clone)]
pub struct MonAddr {
    /// Monitor address.
    #[arg(long = "mon", default_value = DEFAULT_MON)]
    pub mon: SocketAddr,
}

/// Sends one operator request to the monitor at `mon` on a connection of its own.
pub(crate) async fn mon_op(
    mon: SocketAddr,
    request: Request,
) -> anyhow::Result<cairn_proto::mon::MonReply> {
    let client = MonClient::connect_as(
        mon,
        cairn_client::random_client_id(),
        crate::credentials::client()?,
    )
    .await;
    Ok(client.op(request, TIMEOUT_MS).await?)
}

/// The monitor's current map, on a connection of its own.
pub(crate) async fn current_map(mon: SocketAddr) -> anyhow::Result<ClusterMap> {
    let client = MonClient::connect_as(
        mon,
        cairn_client::random_client_id(),
        crate::credentials::client()?,
    )
    .await;
    client
        .subscribe(TIMEOUT_MS)
        .await
        .with_context(|| format!("monitor at {mon}"))?;
    Ok(client.wait_for_epoch(1, TIMEOUT_MS).await?)
}

/// A client of the cluster whose monitor is `mon`, holding its map.
pub(crate) async fn connect(mon: SocketAddr) -> anyhow::Result<Client> {
    Client::connect_as(
        mon,
        cairn_client::random_client_id(),
        crate::credentials::client_auth()?,
    )
    .await
    .with_context(|| format!("monitor at {mon}"))
}

/// Up OSD ids in the client's map.
pub(crate) fn up_osds(client: &Client) -> Vec<i32> {
    client
        .map()
        .map(|m| m.osds.values().filter(|o| o.up).map(|o| o.id).collect())
        .unwrap_or_default()
}
