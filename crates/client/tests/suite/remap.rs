//! A new OSD is filled while its PGs serve: the PGs that CRUSH moves onto it are served by a
//! temporary acting set of their complete copies (pg_temp) while their primary pushes the data
//! to it in the background, then by their up set again. Writes go on throughout and are all
//! acknowledged; the primaries' requests for temporary acting sets are batched (fewer epochs
//! than PGs); at the end every PG is active+clean without a temporary acting set, every object
//! reads back as written, and every copy of the up sets is byte-identical. The same holds when
//! the primary of a temporary acting set dies in the middle of the fill (the next member takes
//! over) and comes back.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_client::mon::MonClient;
use cairn_client::Client;
use cairn_osd::OsdDaemon;
use cairn_proto::mon::Request;
use common::{mount_offline, osd_config};

const PG_NUM: u32 = 16;
const OBJECTS: usize = 400;

fn data_for(name: &str, generation: u32) -> Vec<u8> {
    let seed = crc_fast::crc32_iscsi(name.as_bytes()).wrapping_add(generation);
    let len = 1 + (seed as usize % 24_000);
    (0..len)
        .map(|b| (b as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) as u8)
        .collect()
}

/// Writes `names` 16 at a time; every write must be acknowledged.
async fn write_all(client: &Arc<Client>, names: &[(String, Vec<u8>)]) {
    for lane in names.chunks(16) {
        let tasks: Vec<_> = lane
            .iter()
            .cloned()
            .map(|(name, data)| {
                let c = client.clone();
                tokio::spawn(async move { c.write_full("data", &name, &data).await.unwrap() })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    }
}

/// The PGs of pool `data` that are not yet active on their up set (in one of `states`) in the
/// client's current map, as their primaries report them (`pg dump`: id, state, acting set, ...).
async fn not_active_on_up_set(client: &Client, osds: &[i32], states: &[&str]) -> Vec<String> {
    let map = client.map().unwrap();
    let mut lines = Vec::new();
    for &osd in osds {
        if let Ok(text) = client.tell(osd, &["pg".into(), "dump".into()]).await {
            lines.extend(text.lines().map(str::to_string));
        }
    }
    let pool = map
        .placement
        .pools
        .values()
        .find(|p| p.name == "data")
        .unwrap();
    let mut mapper = map.placement.mapper();
    (0..pool.pg_num)
        .filter_map(|seed| {
            let pg = cairn_clustermap::PgId {
                pool: pool.id,
                seed,
            };
            let up: Vec<String> = mapper
                .map_pg(pg)
                .unwrap()
                .up
                .iter()
                .map(i32::to_string)
                .collect();
            let found = states.iter().any(|state| {
                let want = format!("{pg} {state} [{}] ", up.join(","));
                lines.iter().any(|l| l.starts_with(&want))
            });
            (!found).then(|| pg.to_string())
        })
        .collect()
}

/// Waits (at most 180 s: fills to an emulated HDD on a loaded machine) until the client's
/// map shows `osd` up and no temporary acting set, and every PG is active on its up set in
/// one of `states`.
async fn wait_on_up_sets(client: &Client, osds: &[i32], osd: i32, states: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let map = client.map().unwrap();
        let behind = not_active_on_up_set(client, osds, states).await;
        let joined = map.osds.get(&osd).is_some_and(|o| o.up);
        if joined && map.placement.pg_temp.is_empty() && behind.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "never {states:?} on the up sets: {behind:?}, pg_temp {:?}",
            map.placement.pg_temp
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Short logs and a low remap threshold: a PG's ~25 objects make the new OSD's copy a
/// backfill (its empty log is behind the trimmed log's tail) or a log recovery of more
/// objects than the threshold; both are done in the background.
fn tweak(cfg: &mut cairn_osd::OsdConfig) {
    cfg.max_log_entries = 24;
    cfg.remap_min_objects = 8;
    cfg.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
}

/// The sum over `osds` of counter `name`.
fn counted(osds: &[OsdDaemon], name: &str) -> u64 {
    osds.iter()
        .map(|o| common::metric_sum(&common::metrics_page_of(o), name, ""))
        .sum()
}

/// Three OSDs whose pool `data` holds `OBJECTS` objects, written and acknowledged.
struct Setup {
    mon: cairn_mon::daemon::MonDaemon,
    osds: Vec<OsdDaemon>,
    client: Arc<Client>,
    admin: MonClient,
    dir: common::TempDir,
    written: BTreeMap<String, Vec<u8>>,
}

async fn cluster_with_objects(tag: &str) -> Setup {
    common::logs_from_env();
    let mut c = common::cluster_with_devices(tag, PG_NUM, [256 << 20; 3], tweak).await;
    c.client.op_timeout_ms = 60_000;
    let written: BTreeMap<String, Vec<u8>> = (0..OBJECTS)
        .map(|i| {
            let name = format!("pre-{i}");
            let data = data_for(&name, 0);
            (name, data)
        })
        .collect();
    let client = Arc::new(c.client);
    let initial: Vec<(String, Vec<u8>)> = written.clone().into_iter().collect();
    write_all(&client, &initial).await;
    Setup {
        admin: common::mon_client(c.mon.addr(), 97).await,
        mon: c.mon,
        osds: c.osds,
        client,
        dir: c.dir,
        written,
    }
}

/// Objects the writer creates at most (then it overwrites them): what it writes stays bounded
/// however long the steps it runs beside take on a slow machine.
const LIVE_OBJECTS: u32 = 256;

/// Writes new objects and overwrites of the first ones until `stop` (at least 64); what it
/// wrote, every write acknowledged.
fn writer(
    client: Arc<Client>,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<BTreeMap<String, Vec<u8>>> {
    tokio::spawn(async move {
        let mut done = BTreeMap::new();
        let mut i = 0u32;
        while !stop.load(Ordering::Relaxed) || i < 64 {
            let name = match i % 2 {
                0 => format!("live-{}", (i / 2) % LIVE_OBJECTS),
                _ => format!("pre-{}", (i as usize * 7) % OBJECTS),
            };
            let data = data_for(&name, 1 + i);
            client.write_full("data", &name, &data).await.unwrap();
            done.insert(name, data);
            i += 1;
        }
        done
    })
}

/// Every object reads back as written.
async fn read_back(client: &Client, written: &BTreeMap<String, Vec<u8>>) {
    for (name, data) in written {
        let got = client.read("data", name).await.unwrap();
        assert!(got == *data, "{name}: read back differs");
    }
}

/// Stops everything, then checks offline that every OSD of each object's up set in the
/// client's final map (`osds` OSDs, directories `osdN`) holds it, byte-identical; the up sets.
async fn copies_identical_offline(
    dir: &common::TempDir,
    client: Arc<Client>,
    rest: impl Sized,
    written: &BTreeMap<String, Vec<u8>>,
    osds: i32,
) -> BTreeMap<String, (String, Vec<i32>)> {
    let final_map = client.map().unwrap();
    let pool = final_map
        .placement
        .pools
        .values()
        .find(|p| p.name == "data")
        .unwrap()
        .clone();
    let mut mapper = final_map.placement.mapper();
    let up: BTreeMap<String, (String, Vec<i32>)> = written
        .keys()
        .map(|name| {
            let pg = pool.object_pg(name, "", "");
            let coll = cairn_osd::pgmeta::collection(pg);
            (name.clone(), (coll, mapper.map_pg(pg).unwrap().up))
        })
        .collect();
    drop((client, rest));
    tokio::time::sleep(Duration::from_millis(200)).await;
    for osd in 0..osds {
        let store = mount_offline(&dir.0.join(format!("osd{osd}"))).await;
        for (name, (coll, set)) in &up {
            if !set.contains(&osd) {
                continue;
            }
            let data = store.read(coll, name, 0, u64::MAX).await.unwrap();
            let want = crc_fast::crc32_iscsi(&written[name]);
            assert_eq!(crc_fast::crc32_iscsi(&data), want, "{name} on osd.{osd}");
        }
        store.umount().await.unwrap();
    }
    up
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_osd_is_filled_in_the_background_while_a_temporary_acting_set_serves() {
    let Setup {
        mon,
        mut osds,
        client,
        admin,
        dir,
        mut written,
    } = cluster_with_objects("remap").await;
    let before = client.map().unwrap().epoch;

    // A fourth OSD on a host of its own: CRUSH puts about three PGs in four on it.
    let mut cfg = osd_config("remap", 3, &mon, &dir, 256 << 20);
    tweak(&mut cfg);
    osds.push(OsdDaemon::start(cfg).await.unwrap());
    let new_osd = osds[3].id();

    // Slow pushes (WPQ honours the recovery sleep, one push at a time): writes go on while
    // each PG fills, and after its first pass.
    for o in &osds {
        slow_fills(&client, o.id()).await;
    }
    // Writes go on while it fills.
    let stop = Arc::new(AtomicBool::new(false));
    let writes = writer(client.clone(), stop.clone());
    let ids: Vec<i32> = osds.iter().map(|o| o.id()).collect();
    wait_on_up_sets(&client, &ids, new_osd, &["active+clean"]).await;
    stop.store(true, Ordering::Relaxed);
    written.extend(writes.await.unwrap());

    // The map's history: PGs moved onto the new OSD were served by their complete copies
    // (without it) while their up set had it, and none is left so.
    let maps = admin.maps_since(before, 10_000).await.unwrap();
    let mut remapped = BTreeSet::new();
    for m in &maps {
        for (pg, temp) in &m.placement.pg_temp {
            let placed = m.placement.mapper().map_pg(*pg).unwrap();
            assert!(!temp.contains(&new_osd), "epoch {}: {pg} {temp:?}", m.epoch);
            assert!(placed.up.contains(&new_osd), "epoch {}: {pg}", m.epoch);
            assert_eq!(placed.acting, *temp);
            remapped.insert(*pg);
        }
    }
    assert!(
        !remapped.is_empty(),
        "no PG was served by a temporary acting set"
    );
    let set_epochs = maps
        .windows(2)
        .filter(|w| {
            w[1].placement
                .pg_temp
                .keys()
                .any(|pg| !w[0].placement.pg_temp.contains_key(pg))
        })
        .count();
    // The primaries' wants are batched: fewer epochs than PGs.
    assert!(
        set_epochs < remapped.len(),
        "{} PGs remapped in {set_epochs} epochs",
        remapped.len()
    );
    assert!(maps.last().unwrap().placement.pg_temp.is_empty());

    // Objects written after a fill's first pass were pushed with only their own writes held,
    // and later writes to them (and to the objects that pass had copied) went to the filling
    // copy too: the hand-backs, which hold all of a PG's writes, had nothing left to push.
    let forwarded = counted(&osds, "cairn_osd_fill_writes_forwarded_total");
    let held = counted(&osds, "cairn_osd_fill_held_pushes_total");
    let handed_back = counted(&osds, "cairn_osd_fill_hand_back_pushes_total");
    eprintln!("fills: {forwarded} writes forwarded, {held} objects pushed with their writes held, {handed_back} with the PG's");
    assert!(
        forwarded + held > 0,
        "no write came after a fill's first pass"
    );
    assert_eq!(
        handed_back, 0,
        "a hand-back pushed objects with the writes held"
    );

    read_back(&client, &written).await;
    let up = copies_identical_offline(&dir, client, (admin, osds, mon), &written, 4).await;
    assert!(up.values().any(|(_, set)| set.contains(&new_osd)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_primary_of_a_temporary_acting_set_dies_mid_fill_and_the_next_member_finishes_it() {
    let Setup {
        mon,
        mut osds,
        client,
        admin,
        dir,
        mut written,
    } = cluster_with_objects("remap-kill").await;

    // The new OSD is an emulated 7200 rpm disk: its fill takes long enough to be cut. Fills
    // run unpaced: what is tested is who finishes them, on a machine whose other load the
    // pacer would take for recovery's.
    for o in &osds {
        unpaced(&client, o.id()).await;
    }
    let mut cfg = osd_config("remap-kill", 3, &mon, &dir, 256 << 20);
    tweak(&mut cfg);
    cfg.device_profile = Some("hdd-7200".into());
    osds.push(OsdDaemon::start(cfg).await.unwrap());
    let new_osd = osds[3].id();
    unpaced(&client, new_osd).await;
    let stop = Arc::new(AtomicBool::new(false));
    let writes = writer(client.clone(), stop.clone());

    // Kill the primary of a temporary acting set while it fills.
    let deadline = Instant::now() + Duration::from_secs(30);
    let victim = loop {
        let map = client.map().unwrap();
        if let Some(temp) = map.placement.pg_temp.values().next() {
            break temp[0];
        }
        assert!(Instant::now() < deadline, "no temporary acting set");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_ne!(victim, new_osd);
    let index = osds.iter().position(|o| o.id() == victim).unwrap();
    let victim_cfg = {
        let mut cfg = osd_config("remap-kill", victim as usize, &mon, &dir, 256 << 20);
        tweak(&mut cfg);
        cfg
    };
    drop(osds.remove(index));
    admin
        .op(Request::MarkDown { id: victim }, 10_000)
        .await
        .unwrap();

    // Its PGs go on from the other members: every PG active on its up set (degraded where
    // the victim's copy is missing), no temporary acting set left.
    let ids: Vec<i32> = osds.iter().map(|o| o.id()).collect();
    let serving = ["active+clean", "active+degraded"];
    wait_on_up_sets(&client, &ids, new_osd, &serving).await;

    // It comes back and catches up: every PG clean.
    osds.push(common::restart_osd(victim_cfg).await);
    unpaced(&client, victim).await;
    let ids: Vec<i32> = osds.iter().map(|o| o.id()).collect();
    wait_on_up_sets(&client, &ids, victim, &["active+clean"]).await;
    stop.store(true, Ordering::Relaxed);
    written.extend(writes.await.unwrap());
    read_back(&client, &written).await;
    copies_identical_offline(&dir, client, (admin, osds, mon), &written, 4).await;
}

/// `tell osd.N ARGS...`, which must succeed.
async fn tell(client: &Client, osd: i32, args: &[&str]) -> String {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    client.tell(osd, &args).await.unwrap()
}

/// Turns `osd`'s recovery pacing off (`osd_recovery_pacing_factor` 0).
async fn unpaced(client: &Client, osd: i32) {
    tell(
        client,
        osd,
        &["config", "set", "osd_recovery_pacing_factor", "0"],
    )
    .await;
}

/// Slows `osd`'s fills: WPQ (which honours the recovery sleep), one push at a time, 20 ms
/// after each.
async fn slow_fills(client: &Client, osd: i32) {
    tell(client, osd, &["config", "set", "osd_op_queue", "wpq"]).await;
    tell(
        client,
        osd,
        &["config", "set", "osd_recovery_max_active", "1"],
    )
    .await;
    tell(
        client,
        osd,
        &["config", "set", "osd_recovery_sleep_ssd", "0.02"],
    )
    .await;
}

/// `osd`'s `pg objects` summed: objects, copies wanted, degraded, misplaced.
async fn copy_counts(client: &Client, osd: i32) -> [u64; 4] {
    let mut sum = [0u64; 4];
    for line in tell(client, osd, &["pg", "objects"]).await.lines() {
        let n: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .map(|w| w.parse().unwrap())
            .collect();
        assert_eq!(n.len(), 4, "{line}");
        for (s, v) in sum.iter_mut().zip(n) {
            *s += v;
        }
    }
    sum
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fills_take_reservations_and_wait_for_them_as_osd_max_backfills_allows() {
    let Setup {
        mon,
        mut osds,
        client,
        admin,
        dir,
        written,
    } = cluster_with_objects("remap-throttle").await;
    // Slow pushes (WPQ honours the recovery sleep, one push at a time), so that fills
    // overlap in time if the reservations let them.
    for o in &osds {
        slow_fills(&client, o.id()).await;
    }
    let refused = client
        .tell(
            osds[0].id(),
            &[
                "config".into(),
                "set".into(),
                "osd_max_backfills".into(),
                "0".into(),
            ],
        )
        .await;
    assert!(refused.is_err_and(|e| e.to_string().contains("outside")));
    let got = tell(
        &client,
        osds[0].id(),
        &["config", "get", "osd_recovery_sleep_ssd"],
    )
    .await;
    assert_eq!(got.trim(), "0.02");

    let mut cfg = osd_config("remap-throttle", 3, &mon, &dir, 256 << 20);
    tweak(&mut cfg);
    osds.push(OsdDaemon::start(cfg).await.unwrap());
    let new_osd = osds[3].id();
    let ids: Vec<i32> = osds.iter().map(|o| o.id()).collect();

    // Every fill targets the new OSD, whose osd_max_backfills (1) admits one at a time: the
    // others wait, served meanwhile, as backfill_wait.
    let deadline = Instant::now() + Duration::from_secs(120);
    let (mut most_remote, mut most_local, mut waiting_seen, mut filling_seen) = (0, 0, 0, 0);
    let (mut most_misplaced, mut most_degraded) = (0, 0);
    loop {
        let map = client.map().unwrap();
        let reservations = tell(&client, new_osd, &["recovery", "reservations"]).await;
        let count = |line: &str| line.split_whitespace().count() - 1;
        let mut lines = reservations.lines();
        let (local, remote) = (lines.next().unwrap(), lines.next().unwrap());
        assert!(local.starts_with("local:") && remote.starts_with("remote:"));
        most_remote = most_remote.max(count(remote));
        for &o in &ids[..3] {
            let r = tell(&client, o, &["recovery", "reservations"]).await;
            most_local = most_local.max(count(r.lines().next().unwrap()));
        }
        for &o in &ids {
            let counts = copy_counts(&client, o).await;
            most_misplaced = most_misplaced.max(counts[3]);
            most_degraded = most_degraded.max(counts[2]);
            let dump = tell(&client, o, &["pg", "dump"]).await;
            waiting_seen += dump
                .lines()
                .filter(|l| l.contains("+backfill_wait"))
                .count();
            filling_seen += dump
                .lines()
                .filter(|l| l.contains("+backfilling") || l.contains("+recovering"))
                .count();
        }
        let joined = map.osds.get(&new_osd).is_some_and(|o| o.up);
        if joined
            && map.placement.pg_temp.is_empty()
            && not_active_on_up_set(&client, &ids, &["active+clean"])
                .await
                .is_empty()
        {
            break;
        }
        assert!(Instant::now() < deadline, "the fills never ended");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(most_remote, 1, "the new OSD took one fill at a time");
    assert!(most_local <= 1, "a primary filled one PG at a time");
    assert!(waiting_seen > 0, "no PG waited for its reservation");
    assert!(filling_seen > 0, "no PG was seen filling");
    let reservations = tell(&client, new_osd, &["recovery", "reservations"]).await;
    assert_eq!(
        reservations, "local: \nremote: \n",
        "every reservation released"
    );
    // Copies waiting for their fill were counted misplaced, none degraded (every PG kept
    // its pool's size of copies serving); at the end none is either.
    assert!(most_misplaced > 0, "no copy was ever counted misplaced");
    assert_eq!(most_degraded, 0, "a copy was counted degraded");
    let mut total = [0u64; 4];
    for &o in &ids {
        for (t, n) in total.iter_mut().zip(copy_counts(&client, o).await) {
            *t += n;
        }
    }
    assert_eq!(
        total[0],
        written.len() as u64,
        "objects of pg objects: {total:?}"
    );
    assert_eq!(total[2..], [0, 0], "degraded or misplaced left: {total:?}");

    read_back(&client, &written).await;
    copies_identical_offline(&dir, client, (admin, osds, mon), &written, 4).await;
}
