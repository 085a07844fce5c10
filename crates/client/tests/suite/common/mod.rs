//! The in-process cluster the client tests share: loopback sockets, file-backed stores.
#![allow(dead_code)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use std::net::SocketAddr;
use std::sync::OnceLock;

use cairn_auth::{Caps, EntityName, Keyring, KeyringEntry};
use cairn_client::mon::MonClient;
use cairn_client::tickets::ClientAuth;
use cairn_client::{Client, ClientError};
use cairn_clustermap::ClusterMap;
use cairn_mon::daemon::{MonAuthConfig, MonDaemon, MonServing};
use cairn_mon::{MonConfig, Monitor};
use cairn_msgr::protect::WireMode;
use cairn_osd::daemon::OsdAuth;
use cairn_osd::{OsdConfig, OsdDaemon};
use cairn_proto::mon::Request;

/// Prints the daemons' logs when `RUST_LOG` asks for them (e.g. `RUST_LOG=cairn_osd=info`):
/// the in-process OSDs and monitor log through `tracing`.
pub fn logs_from_env() {
    let filter = tracing_subscriber::EnvFilter::from_default_env();
    let _ = tracing_subscriber::fmt().with_env_filter(filter).try_init();
}

/// OSD ids the test keyring holds keys for (`osd.0` up to this, exclusive).
const KEYED_OSDS: i32 = 8;

/// The keys every test cluster is made with: `client.admin` with every capability and
/// `osd.0`.. `osd.7`, so that every test runs authenticated, as `cairn up` does.
pub fn keyring() -> &'static Keyring {
    static RING: OnceLock<Keyring> = OnceLock::new();
    RING.get_or_init(|| {
        let mut ring = Keyring::single(
            EntityName::admin(),
            KeyringEntry::generate(&Caps::everything()),
        );
        for id in 0..KEYED_OSDS {
            ring.entries.insert(
                EntityName::Osd(id),
                KeyringEntry::generate(&Caps::osd_daemon()),
            );
        }
        ring
    })
}

/// The administrator, as a client of a test cluster.
pub fn admin() -> ClientAuth {
    let entity = EntityName::admin();
    let key = keyring().get(&entity).expect("the admin key").key.clone();
    ClientAuth {
        entity,
        key,
        mode: WireMode::Mac,
    }
}

/// A client of the cluster at `mon`, authenticated as the administrator.
pub async fn connect(mon: SocketAddr, client_id: u64) -> Result<Client, ClientError> {
    Client::connect_as(mon, client_id, Some(admin())).await
}

/// A monitor client of the cluster at `mon`, authenticated as the administrator.
pub async fn mon_client(mon: SocketAddr, session_id: u64) -> MonClient {
    MonClient::connect_as(mon, session_id, Some(admin().mon_credentials())).await
}

/// A directory removed when dropped.
pub struct TempDir(pub PathBuf);
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A monitor, three OSDs on file-backed stores under `dir`, a pool `data` of size 3, and a
/// client that has written to it once.
pub struct Cluster {
    /// The monitor.
    pub mon: MonDaemon,
    /// The OSDs.
    pub osds: Vec<OsdDaemon>,
    /// A connected client.
    pub client: Client,
    /// Their directory (`osd0`, `osd1`, `osd2`).
    pub dir: TempDir,
}

/// Starts the cluster; `pg_num` PGs, `device_bytes` per OSD.
pub async fn cluster(tag: &str, pg_num: u32, device_bytes: u64) -> Cluster {
    cluster_with_devices(tag, pg_num, [device_bytes; 3], |_| {}).await
}

/// As [`cluster`], with each OSD's own device size, and `tweak` applied to every OSD's
/// configuration.
pub async fn cluster_with_devices(
    tag: &str,
    pg_num: u32,
    device_bytes: [u64; 3],
    tweak: impl Fn(&mut OsdConfig),
) -> Cluster {
    let dir = TempDir(std::env::temp_dir().join(format!("cairn-{tag}-{}", std::process::id())));
    let monitor = Monitor::new(ClusterMap::new("test").unwrap(), MonConfig::default());
    let serving = MonServing {
        auth: Some(MonAuthConfig {
            seed: keyring().clone(),
            min_mode: WireMode::Mac,
        }),
        ..MonServing::default()
    };
    let mon = MonDaemon::serve(monitor, "127.0.0.1:0".parse().unwrap(), serving)
        .await
        .unwrap();
    let mut osds = Vec::new();
    for (i, bytes) in device_bytes.into_iter().enumerate() {
        let mut cfg = osd_config(tag, i, &mon, &dir, bytes);
        tweak(&mut cfg);
        osds.push(OsdDaemon::start(cfg).await.unwrap());
    }
    let admin = mon_client(mon.addr(), 91).await;
    admin
        .op(
            Request::CreatePool {
                name: "data".into(),
                size: 3,
                pg_num,
            },
            10_000,
        )
        .await
        .unwrap();
    let client = connect(mon.addr(), 2).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while client.write_full("data", "probe", b"x").await.is_err() {
        assert!(Instant::now() < deadline, "pool never became writable");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    client.remove("data", "probe").await.unwrap();
    Cluster {
        mon,
        osds,
        client,
        dir,
    }
}

/// The configuration of the cluster's OSD number `i` (before any tweak): the same again
/// restarts it on its store.
pub fn osd_config(tag: &str, i: usize, mon: &MonDaemon, dir: &TempDir, bytes: u64) -> OsdConfig {
    let mut cfg = OsdConfig::local(
        &format!("{tag}-osd-{i}"),
        &format!("host{i}"),
        mon.addr(),
        dir.0.join(format!("osd{i}")),
    );
    cfg.device_bytes = bytes;
    let entity = EntityName::Osd(i32::try_from(i).expect("a small OSD index"));
    let key = keyring()
        .get(&entity)
        .unwrap_or_else(|| panic!("the test keyring holds no {entity}"))
        .key
        .clone();
    cfg.auth = Some(OsdAuth {
        entity,
        key,
        mode: WireMode::Mac,
    });
    cfg
}

/// Where object `name` of pool `data` lives in the client's current map: its PG and up set
/// (primary first).
pub fn placement_of(c: &Cluster, name: &str) -> (cairn_clustermap::PgId, Vec<i32>) {
    placement_in(c, "data", name)
}

/// Where object `name` of pool `pool` lives in the client's current map: its PG and up set
/// (primary first).
pub fn placement_in(c: &Cluster, pool: &str, name: &str) -> (cairn_clustermap::PgId, Vec<i32>) {
    let map = c.client.map().unwrap();
    let pool = map
        .placement
        .pools
        .values()
        .find(|p| p.name == pool)
        .unwrap();
    let pg = pool.object_pg(name, "", "");
    let up = map.placement.mapper().map_pg(pg).unwrap().up;
    (pg, up)
}

/// Starts an OSD again on the store a stopped (dropped) one used, retrying while the stopped
/// one's tasks wind down and let go of it: they end at their next await, but the store is
/// closed only once the last of them has been dropped (at most 60 s).
pub async fn restart_osd(cfg: OsdConfig) -> OsdDaemon {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match OsdDaemon::start(cfg.clone()).await {
            Ok(osd) => return osd,
            Err(e) => assert!(Instant::now() < deadline, "restart: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Mounts, once, the store of an OSD that ran in `dir`.
pub async fn mount_once(
    dir: &std::path::Path,
) -> Result<cairn_store::Store, cairn_store::StoreError> {
    use cairn_blockdev::{BlockDevice, FileDevice, FileDeviceOptions};
    use cairn_store::{KvLocation, Store, StoreConfig};
    let dev: std::sync::Arc<dyn BlockDevice> = std::sync::Arc::new(
        FileDevice::open(&dir.join("block"), &FileDeviceOptions::default()).unwrap(),
    );
    Store::mount(
        dev,
        KvLocation::File(dir.join("kv.redb")),
        StoreConfig::default(),
    )
    .await
}

/// Mounts the store of a stopped (dropped) OSD that ran in `dir`, retrying while its tasks wind
/// down and let go of it (at most 60 s).
pub async fn mount_offline(dir: &std::path::Path) -> cairn_store::Store {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match mount_once(dir).await {
            Ok(store) => return store,
            Err(e) => assert!(Instant::now() < deadline, "{}: {e}", dir.display()),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Stops every daemon and the client (the directory stays) and returns the directory, whose
/// `osdN` subdirectories then hold stores to mount offline.
pub async fn stop(c: Cluster) -> TempDir {
    let Cluster {
        mon,
        osds,
        client,
        dir,
    } = c;
    drop(client);
    for osd in osds {
        let id = osd.id();
        osd.shutdown(Duration::from_secs(30))
            .await
            .unwrap_or_else(|e| panic!("osd.{id}: {e}"));
    }
    drop(mon);
    dir
}

/// Sends one message with `payload` and `data` (checksummed as `data_crc`) on `session` and
/// returns the payload of the first answer of type `reply_type`.
pub async fn exchange(
    session: &mut cairn_msgr::session::Session,
    msg_type: u16,
    payload: bytes::Bytes,
    data: &[u8],
    data_crc: u32,
    reply_type: u16,
) -> bytes::Bytes {
    session
        .send_data(
            msg_type,
            payload,
            bytes::Bytes::copy_from_slice(data),
            Some(data_crc),
        )
        .await
        .unwrap();
    loop {
        let frame = session.recv_timeout(10_000).await.unwrap();
        if frame.header.msg_type == reply_type {
            return frame.payload;
        }
    }
}

/// Where osd `osd` is in the cluster's list of running OSDs.
pub fn index_of(c: &Cluster, osd: i32) -> usize {
    c.osds.iter().position(|o| o.id() == osd).unwrap()
}

/// Creates pool `name` (`size` copies, `pg_num` PGs) through the operator's monitor client.
pub async fn create_pool(admin: &cairn_client::mon::MonClient, name: &str, size: u32, pg_num: u32) {
    admin
        .op(
            Request::CreatePool {
                name: name.into(),
                size,
                pg_num,
            },
            10_000,
        )
        .await
        .unwrap();
}

/// Stops osd `osd` and marks it down at the monitor.
pub async fn stop_osd(c: &mut Cluster, admin: &cairn_client::mon::MonClient, osd: i32) {
    drop(c.osds.remove(index_of(c, osd)));
    admin
        .op(Request::MarkDown { id: osd }, 10_000)
        .await
        .unwrap();
}

/// Starts osd `osd` again with `cfg` (its configuration before it stopped) and waits until
/// the client's map shows it up.
pub async fn restart_up(c: &mut Cluster, cfg: OsdConfig, osd: i32) {
    c.osds.push(restart_osd(cfg).await);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !c.client.map().unwrap().osds[&osd].up {
        assert!(Instant::now() < deadline, "osd.{osd} did not come back up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Flips the byte at `at` of the device file `block` of the stopped OSD whose directory is
/// `dir` (damage behind the store's back: its checksum of that block no longer matches).
pub fn flip_device_byte(dir: &std::path::Path, at: u64) {
    use std::io::{Read, Seek, SeekFrom, Write};
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(dir.join("block"))
        .unwrap();
    let mut byte = [0u8];
    f.seek(SeekFrom::Start(at)).unwrap();
    f.read_exact(&mut byte).unwrap();
    f.seek(SeekFrom::Start(at)).unwrap();
    f.write_all(&[!byte[0]]).unwrap();
    f.sync_all().unwrap();
}

/// The Prometheus page of the cluster's OSD `osd` (started with a `metrics_listen` address).
pub fn metrics_page(c: &Cluster, osd: i32) -> String {
    metrics_page_of(&c.osds[index_of(c, osd)])
}

/// The Prometheus page of `osd` (started with a `metrics_listen` address).
pub fn metrics_page_of(osd: &OsdDaemon) -> String {
    use std::io::{Read, Write};
    let addr = osd.metrics_addr().unwrap();
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut page = String::new();
    s.read_to_string(&mut page).unwrap();
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    page
}

/// The sum of metric `name`'s samples whose labels contain `label`, from a Prometheus page
/// (0 when it has none).
pub fn metric_sum(page: &str, name: &str, label: &str) -> u64 {
    page.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{'))
        })
        .filter(|l| l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.trim().parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// The states of the PGs the cluster's OSDs lead, counted (`pg stats` of every OSD).
pub async fn pg_states(c: &Cluster) -> std::collections::BTreeMap<String, usize> {
    let mut out = std::collections::BTreeMap::new();
    for osd in c.osds.iter().map(|o| o.id()) {
        let stats = c
            .client
            .tell(osd, &["pg".into(), "stats".into()])
            .await
            .unwrap_or_default();
        for line in stats.lines() {
            if let Some((state, n)) = line.rsplit_once(' ') {
                *out.entry(state.to_string()).or_default() += n.parse::<usize>().unwrap_or(0);
            }
        }
    }
    out
}

/// Whether the OSDs lead `pgs` PGs, every one active+clean.
pub async fn all_clean(c: &Cluster, pgs: usize) -> bool {
    let states = pg_states(c).await;
    states.keys().all(|k| k == "active+clean") && states.values().sum::<usize>() == pgs
}

/// Waits (at most 60 s) until the OSDs lead `pgs` PGs, every one active+clean.
pub async fn wait_all_clean(c: &Cluster, pgs: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let states = pg_states(c).await;
        if states.keys().all(|k| k == "active+clean") && states.values().sum::<usize>() == pgs {
            return;
        }
        assert!(Instant::now() < deadline, "PG states: {states:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The value of `key` (`objects`, `internal`, `pgs`, ...) in `osd`'s `df` admin reply.
pub async fn df_value(c: &Cluster, osd: i32, key: &str) -> u64 {
    let df = c.client.tell(osd, &["df".to_string()]).await.unwrap();
    let field = format!("{key}=");
    df.split_whitespace()
        .find_map(|f| f.strip_prefix(field.as_str()))
        .unwrap_or_else(|| panic!("no {key} in {df}"))
        .parse()
        .unwrap()
}

/// Objects in `osd`'s store, client and internal (PG meta and temporary objects) together:
/// its `df`'s `objects=N internal=N`.
pub async fn objects_on(c: &Cluster, osd: i32) -> u64 {
    df_value(c, osd, "objects").await + df_value(c, osd, "internal").await
}

/// Waits until `check` holds, or fails with `what` after 30 s.
pub async fn eventually<F: std::future::Future<Output = bool>>(what: &str, check: impl Fn() -> F) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !check().await {
        assert!(Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Reads objects `o0` .. `o{n-1}` of `pool` back through the cluster's client and checks each
/// against `expected(i)` by crc32c.
pub async fn reads_back(c: &Cluster, pool: &str, n: usize, expected: impl Fn(usize) -> Vec<u8>) {
    for i in 0..n {
        let got = c.client.read(pool, &format!("o{i}")).await.unwrap();
        assert_eq!(
            crc_fast::crc32_iscsi(&got),
            crc_fast::crc32_iscsi(&expected(i)),
            "o{i}"
        );
    }
}

/// The OSD entity tests speak as when they play a peer OSD (a key of the test keyring no
/// test OSD boots with).
pub const PLAYED_OSD: i32 = KEYED_OSDS - 1;

/// A session to the OSD at `osd` as a client of the cluster (a ticket for the
/// administrator), as a test that sends raw client ops needs.
pub async fn dial_as_client(c: &Cluster, osd: SocketAddr, id: u64) -> cairn_msgr::session::Session {
    let mon = std::sync::Arc::new(mon_client(c.mon.addr(), id ^ 0x00c1_0000).await);
    let tickets = cairn_client::tickets::TicketSource::new(mon, admin(), id);
    dial_with(osd, id, std::sync::Arc::new(tickets)).await
}

/// A lossless session to `osd` that authenticates with `creds`, retrying every 50 ms.
async fn dial_with(
    osd: SocketAddr,
    id: u64,
    creds: std::sync::Arc<dyn cairn_msgr::handshake::CredentialSource>,
) -> cairn_msgr::session::Session {
    cairn_msgr::session::Session::connect_as(
        osd,
        id,
        cairn_msgr::Limits::default(),
        50,
        cairn_msgr::session::Policy::Lossless,
        Some(creds),
    )
    .await
}

/// The played peer OSD's credentials (`osd.7`).
fn played_osd() -> OsdAuth {
    let entity = EntityName::Osd(PLAYED_OSD);
    OsdAuth {
        key: keyring()
            .get(&entity)
            .expect("the played OSD's key")
            .key
            .clone(),
        entity,
        mode: WireMode::Mac,
    }
}

/// A monitor client speaking as the played peer OSD (`osd.7`), for a test that boots an
/// OSD of its own making.
pub async fn mon_client_as_played_osd(mon: SocketAddr, session_id: u64) -> MonClient {
    let me = played_osd();
    let creds = cairn_msgr::handshake::DialCredentials {
        entity: me.entity,
        ticket: Vec::new(),
        key: me.key,
        mode: WireMode::Mac,
    };
    MonClient::connect_as(
        mon,
        session_id,
        Some(std::sync::Arc::new(
            cairn_msgr::handshake::StaticCredentials(creds),
        )),
    )
    .await
}

/// A session to the OSD at `osd` as a peer OSD (`osd.7`, with the service secret from the
/// monitor), as a test that plays a primary or a stray sending replica writes or peering
/// requests needs.
pub async fn dial_as_peer(c: &Cluster, osd: SocketAddr, id: u64) -> cairn_msgr::session::Session {
    let me = played_osd();
    let mon = mon_client_as_played_osd(c.mon.addr(), id ^ 0x05d0_0000).await;
    let secret = std::sync::Arc::new(cairn_osd::auth::ServiceSecret::default());
    cairn_osd::auth::fetch_service_secret(&mon, &me, &secret)
        .await
        .expect("the service secret");
    let creds = cairn_osd::auth::PeerCredentials {
        entity: me.entity,
        secret,
        mode: WireMode::Mac,
    };
    dial_with(osd, id, std::sync::Arc::new(creds)).await
}
