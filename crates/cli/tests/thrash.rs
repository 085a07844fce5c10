//! Thrashing, as Ceph's `thrashosds` does it: `cairn up` (4 OSDs, size 3, min_size 2, a 2 s
//! heartbeat grace), writers in this process that read back what they wrote, and for a while
//! (`CAIRN_THRASH_SECS`, default 40) one random fault after another without waiting for the
//! cluster to heal in between: `kill -9` of an OSD (restarted a few seconds later, often while
//! its PGs still recover), of two at once (their PGs drop below min_size and block), and an OSD
//! frozen with SIGSTOP past its grace (marked down while alive, then resumed), the monitor
//! killed or frozen (with an OSD killed meanwhile, at times), an OSD marked out and later in
//! again (its PGs backfill to the others and back, and the other faults land during that
//! backfill), and an OSD's device failing (power lost, dropping its unflushed writes, or every
//! write refused with EIO: the OSD must report itself down and exit, and it is started again
//! on what its device kept). The faults come
//! from a seeded generator (`CAIRN_THRASH_SEED`; printed, to replay a failure);
//! `CAIRN_THRASH_KINDS` (e.g. `5,8`) draws only those kinds, to hammer one path.
//!
//! Pass: every read-back after an acknowledged write returns that write's bytes (crc32c);
//! writes resume after every fault; once all OSDs are back every PG goes active+clean; every
//! object then reads back as its last acknowledged write (or as a later write that failed in
//! the client but reached the OSDs); a deep scrub of every PG finds no inconsistent object;
//! and after `cairn down` every store passes a deep fsck and every object has exactly three
//! copies (no stray left behind), identical.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Child;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

mod common;

use cairn_client::Client;
use common::{cairn, copies, free_port, signal, Cluster};

const OSDS: usize = 4;
const DEVICE_MIB: &str = "256";
const GRACE_S: &str = "2";
const PGS: usize = 16;

/// Object `i`'s bytes in writer round `round`: sizes from empty to several blocks.
fn payload(i: usize, round: usize) -> Vec<u8> {
    let size = [0, 1, 4096, 10_000, 65_536, 300_000, 1 << 20][i % 7];
    (0..size)
        .map(|b| {
            (b as u32)
                .wrapping_mul(2_654_435_761)
                .wrapping_add((i * 131 + round) as u32) as u8
        })
        .collect()
}

/// Per object name, the checksums it may hold: its last acknowledged write's, plus those of
/// writes after it that failed in the client (they may still have been applied).
type Expected = Arc<Mutex<BTreeMap<String, BTreeSet<u32>>>>;

/// What the writers saw.
#[derive(Default)]
struct Tally {
    acks: AtomicUsize,
    failures: AtomicUsize,
    read_backs: AtomicUsize,
    last_error: Mutex<String>,
}

/// Writes its objects in a loop until `stop`; after an acknowledged write, reads one object
/// in four back at once and asserts it holds exactly what was acknowledged.
async fn writer(
    client: Arc<Client>,
    id: usize,
    expected: Expected,
    tally: Arc<Tally>,
    stop: Arc<Mutex<bool>>,
) {
    let mut round = 0;
    while !*stop.lock().unwrap() {
        round += 1;
        let i = (round * 7 + id) % 40;
        let name = format!("t{id}-obj{i}");
        let data = payload(i, round);
        let crc = crc_fast::crc32_iscsi(&data);
        match client.write_full("data", &name, &data).await {
            Ok(_) => {
                expected
                    .lock()
                    .unwrap()
                    .insert(name.clone(), BTreeSet::from([crc]));
                tally.acks.fetch_add(1, Ordering::Relaxed);
                if round % 4 == 0 {
                    if let Ok(back) = client.read("data", &name).await {
                        assert_eq!(
                            crc_fast::crc32_iscsi(&back),
                            crc,
                            "{name}: a read right after its acknowledged write returned other bytes"
                        );
                        tally.read_backs.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            Err(e) => {
                *tally.last_error.lock().unwrap() = format!("{name}: {e}");
                expected
                    .lock()
                    .unwrap()
                    .entry(name)
                    .or_default()
                    .insert(crc);
                tally.failures.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// A daemon process: started by `cairn up` (known by pid) or restarted by this test.
enum Proc {
    Pid(u32),
    Child(Child),
    Stopped,
}

impl Proc {
    fn pid(&self) -> Option<u32> {
        match self {
            Proc::Pid(p) => Some(*p),
            Proc::Child(c) => Some(c.id()),
            Proc::Stopped => None,
        }
    }

    fn kill(&mut self) {
        match std::mem::replace(self, Proc::Stopped) {
            Proc::Pid(p) => signal("-9", p),
            Proc::Child(mut c) => {
                let _ = c.kill();
                let _ = c.wait();
            }
            Proc::Stopped => {}
        }
    }
}

/// Restarts osd.`i` from its directory (same identity), as an operator would.
fn restart(cluster: &Cluster, mon: &str, i: usize, restarts: &mut usize) -> Proc {
    *restarts += 1;
    let data = cluster.dir.join(format!("osd{i}")).display().to_string();
    let host = format!("host{i}");
    Proc::Child(cluster.start(
        &format!("osd{i}-restart{restarts}.log"),
        &[
            "osd",
            "run",
            "--mon",
            mon,
            "--data",
            &data,
            "--host",
            &host,
            "--device-mib",
            DEVICE_MIB,
            "--heartbeat-grace-s",
            GRACE_S,
            "--fault-injection",
        ],
    ))
}

/// Restarts the monitor from its directory.
fn restart_mon(cluster: &Cluster, mon: &str, restarts: &mut usize) -> Proc {
    *restarts += 1;
    let data = cluster.dir.join("mon").display().to_string();
    Proc::Child(cluster.start(
        &format!("mon-restart{restarts}.log"),
        &[
            "mon",
            "--listen",
            mon,
            "--data",
            &data,
            "--heartbeat-grace-s",
            GRACE_S,
        ],
    ))
}

/// Waits up to `secs` for `acks` to pass `from + n`: writes go on after a fault. Returns how
/// long that took; a stall fails with what the writers saw last.
fn wait_progress(tally: &Tally, n: usize, secs: u64, what: &str) -> Duration {
    let from = tally.acks.load(Ordering::Relaxed);
    let failed_before = tally.failures.load(Ordering::Relaxed);
    let started = Instant::now();
    while tally.acks.load(Ordering::Relaxed) < from + n {
        assert!(
            started.elapsed() < Duration::from_secs(secs),
            "writes stalled after {what}: {} acknowledged and {} failed in {secs} s; last error: {}",
            tally.acks.load(Ordering::Relaxed) - from,
            tally.failures.load(Ordering::Relaxed) - failed_before,
            tally.last_error.lock().unwrap(),
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    started.elapsed()
}

/// The time of day (UTC, to the millisecond), to find a fault in the daemons' logs.
fn wall_clock() -> String {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let day_ms = ms % 86_400_000;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        day_ms / 3_600_000,
        day_ms / 60_000 % 60,
        day_ms / 1000 % 60,
        day_ms % 1000
    )
}

/// Objects in all OSDs' stores together, client and internal (each one's `df`: `objects=N
/// internal=N ...`), `None` while one does not answer.
async fn objects_held(client: &Client) -> Option<usize> {
    let mut sum = 0;
    for osd in 0..OSDS as i32 {
        let df = client.tell(osd, &["df".into()]).await.ok()?;
        for key in ["objects=", "internal="] {
            let n = df.split_whitespace().find_map(|f| f.strip_prefix(key))?;
            sum += n.parse::<usize>().ok()?;
        }
    }
    Some(sum)
}

/// Waits up to `secs` for the client's map to show `osd` down.
async fn marked_down(client: &Client, osd: i32, secs: u64) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if client
            .map()
            .is_some_and(|m| m.osds.get(&osd).is_some_and(|o| !o.up))
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

async fn all_clean(client: &Client) -> bool {
    for osd in 0..OSDS as i32 {
        match client.tell(osd, &["pg".into(), "stats".into()]).await {
            Ok(text) if text.lines().all(|l| l.starts_with("active+clean")) => {}
            _ => return false,
        }
    }
    true
}

/// Deep-scrubs every PG of pool `data` on its primary (data and omap of every copy compared)
/// and returns the inconsistent objects found, in all.
async fn deep_scrub_all(client: &Client) -> u64 {
    let map = client.map().expect("a map");
    let pool = map
        .placement
        .pools
        .values()
        .find(|p| p.name == "data")
        .expect("pool data");
    let mut inconsistent = 0;
    for seed in 0..PGS as u32 {
        let pg = cairn_clustermap::PgId {
            pool: pool.id,
            seed,
        };
        let primary = map.placement.mapper().map_pg(pg).unwrap().acting[0];
        let report = client
            .tell(primary, &["pg".into(), "deep-scrub".into(), pg.to_string()])
            .await
            .unwrap_or_else(|e| panic!("deep scrub of {pg}: {e}"));
        let numbers: Vec<u64> = report
            .lines()
            .next()
            .unwrap_or_default()
            .split([' ', ','])
            .filter_map(|w| w.parse().ok())
            .collect();
        assert_eq!(numbers.len(), 3, "deep scrub of {pg}: {report}");
        inconsistent += numbers[1];
    }
    eprintln!("deep scrub of {PGS} PGs: {inconsistent} inconsistent objects");
    inconsistent
}

#[test]
fn thrash_osds_while_writing() {
    let secs: u64 = std::env::var("CAIRN_THRASH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40);
    let seed: u64 = std::env::var("CAIRN_THRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("thrash seed {seed} (CAIRN_THRASH_SEED={seed} replays it), {secs} s");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    // Only these fault kinds (the match arms' numbers below, e.g. "5,8"), to hammer one path.
    let kinds: Option<Vec<u32>> = std::env::var("CAIRN_THRASH_KINDS").ok().map(|k| {
        k.split(',')
            .map(|n| n.trim().parse().expect("CAIRN_THRASH_KINDS: numbers 0-13"))
            .collect()
    });

    let mon = format!("127.0.0.1:{}", free_port());
    let cluster = Cluster::new("thrash");
    let dir = cluster.dir.clone();
    let (ok, out) = cluster.up(
        &mon,
        &[
            "--device-mib",
            DEVICE_MIB,
            "--osds",
            "4",
            "--pg-num",
            &PGS.to_string(),
            "--heartbeat-grace-s",
            GRACE_S,
            "--osd-arg=--fault-injection",
        ],
    );
    assert!(ok, "{out}");
    let pids = cluster.pids();
    assert_eq!(pids.len(), 1 + OSDS, "mon + {OSDS} OSDs");
    let mut mon_proc = Proc::Pid(pids[0]);
    let mut osds: Vec<Proc> = pids[1..].iter().map(|&p| Proc::Pid(p)).collect();

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let expected: Expected = Arc::default();
    let tally = Arc::new(Tally::default());
    let stop = Arc::new(Mutex::new(false));
    let client = rt.block_on(async {
        let mut c = Client::connect(mon.parse().unwrap(), 4343).await.unwrap();
        c.op_timeout_ms = 30_000;
        Arc::new(c)
    });
    let writers: Vec<_> = (0..4)
        .map(|id| {
            rt.spawn(writer(
                client.clone(),
                id,
                expected.clone(),
                tally.clone(),
                stop.clone(),
            ))
        })
        .collect();
    wait_progress(&tally, 100, 60, "the start");

    let mut restarts = 0;
    let mut outed: Option<usize> = None;
    let mut faults = Vec::new();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(secs) {
        let pause = |rng: &mut ChaCha8Rng, lo: u64, hi: u64| {
            std::thread::sleep(Duration::from_millis(rng.random_range(lo..hi)))
        };
        let fault_at = wall_clock();
        let victim = rng.random_range(0..OSDS);
        let kind = match &kinds {
            Some(k) => k[rng.random_range(0..k.len())],
            None => rng.random_range(0..14),
        };
        match kind {
            // One OSD killed, back a few seconds later (often before it is marked down).
            0..=4 => {
                faults.push(format!("kill osd.{victim}"));
                osds[victim].kill();
                wait_progress(&tally, 20, 90, &format!("killing osd.{victim}"));
                pause(&mut rng, 500, 4000);
                osds[victim] = restart(&cluster, &mon, victim, &mut restarts);
            }
            // Two killed at once: their PGs lose min_size until one returns.
            5..=6 => {
                let other = (victim + rng.random_range(1..OSDS)) % OSDS;
                faults.push(format!("kill osd.{victim} and osd.{other}"));
                osds[victim].kill();
                osds[other].kill();
                pause(&mut rng, 500, 3000);
                osds[victim] = restart(&cluster, &mon, victim, &mut restarts);
                pause(&mut rng, 0, 2000);
                osds[other] = restart(&cluster, &mon, other, &mut restarts);
            }
            // The monitor killed, and an OSD with it half of the time: the OSD's death is
            // reported to the restarted monitor, which must still hold the map.
            7 => {
                let with_osd = rng.random_bool(0.5);
                faults.push(match with_osd {
                    true => format!("kill the monitor and osd.{victim}"),
                    false => "kill the monitor".to_string(),
                });
                mon_proc.kill();
                if with_osd {
                    osds[victim].kill();
                }
                pause(&mut rng, 300, 3000);
                mon_proc = restart_mon(&cluster, &mon, &mut restarts);
                if with_osd {
                    pause(&mut rng, 0, 3000);
                    osds[victim] = restart(&cluster, &mon, victim, &mut restarts);
                }
            }
            // The monitor frozen (no map changes, failure reports unanswered), an OSD killed
            // meanwhile half of the time; resumed, it must catch up with both.
            8 => {
                let with_osd = rng.random_bool(0.5);
                faults.push(match with_osd {
                    true => format!("freeze the monitor, kill osd.{victim}"),
                    false => "freeze the monitor".to_string(),
                });
                let pid = mon_proc.pid().expect("the monitor runs between faults");
                signal("-STOP", pid);
                if with_osd {
                    osds[victim].kill();
                }
                pause(&mut rng, 1000, 4000);
                signal("-CONT", pid);
                if with_osd {
                    pause(&mut rng, 0, 3000);
                    osds[victim] = restart(&cluster, &mon, victim, &mut restarts);
                }
            }
            // Marked out (its PGs move to the others), or the OSD out marked in again.
            9 => {
                let (verb, which) = match outed.take() {
                    Some(o) => ("in", o),
                    None => {
                        outed = Some(victim);
                        ("out", victim)
                    }
                };
                faults.push(format!("osd {verb} {which}"));
                let (ok, out) = cairn(&["osd", "--mon", &mon, verb, &which.to_string()]);
                assert!(ok, "{out}");
            }
            // The device fails: its power lost (unflushed writes dropped) or every write
            // refused with EIO. The OSD must fail-stop (report itself down and exit), and
            // started again on what its device kept, catch up.
            12..=13 => {
                // An OSD marked out holds no PG and may write nothing for a while: its device
                // loses power instead, which fails it whether or not it writes.
                let fault = match kind {
                    13 if outed != Some(victim) => vec!["inject", "eio", "write"],
                    _ => vec!["inject", "power-loss"],
                };
                faults.push(format!("{} on osd.{victim}", fault[1..].join(" ")));
                let args: Vec<String> = fault.iter().map(|w| w.to_string()).collect();
                let injected = rt.block_on(client.tell(victim as i32, &args));
                if injected.is_ok() {
                    let down = rt.block_on(marked_down(&client, victim as i32, 30));
                    assert!(
                        down,
                        "osd.{victim} never reported itself down after {fault:?}"
                    );
                }
                osds[victim].kill();
                wait_progress(&tally, 20, 90, &format!("{fault:?} on osd.{victim}"));
                pause(&mut rng, 500, 3000);
                osds[victim] = restart(&cluster, &mon, victim, &mut restarts);
            }
            // Frozen past the grace: marked down while alive, then resumed.
            _ => {
                faults.push(format!("freeze osd.{victim}"));
                let pid = osds[victim].pid().expect("every OSD runs between faults");
                signal("-STOP", pid);
                pause(&mut rng, 2500, 5000);
                signal("-CONT", pid);
            }
        }
        let resumed = wait_progress(&tally, 20, 120, faults.last().unwrap());
        eprintln!(
            "{:>6.1} s (from {fault_at})  {}: 20 writes in {:.1} s",
            started.elapsed().as_secs_f64(),
            faults.last().unwrap(),
            resumed.as_secs_f64()
        );
        pause(&mut rng, 200, 2500);
    }
    eprintln!("{} faults: {}", faults.len(), faults.join(", "));
    if let Some(o) = outed {
        let (ok, out) = cairn(&["osd", "--mon", &mon, "in", &o.to_string()]);
        assert!(ok, "{out}");
    }

    let healed = Instant::now();
    rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(180);
        while !all_clean(&client).await {
            assert!(Instant::now() < deadline, "the cluster never became clean");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    });
    eprintln!(
        "all PGs active+clean {:?} after the last fault",
        healed.elapsed()
    );
    *stop.lock().unwrap() = true;
    rt.block_on(async {
        for w in writers {
            w.await.expect("a writer's read-back failed");
        }
    });
    eprintln!(
        "{} acknowledged writes, {} failed, {} read back at once",
        tally.acks.load(Ordering::Relaxed),
        tally.failures.load(Ordering::Relaxed),
        tally.read_backs.load(Ordering::Relaxed)
    );
    assert!(tally.read_backs.load(Ordering::Relaxed) > 20);

    let expected = expected.lock().unwrap().clone();
    assert!(expected.len() >= 100, "{} objects written", expected.len());
    // Stray copies (left by the faults and the `osd out`s) are deleted once their PG is clean
    // elsewhere: then the stores hold three copies of each object and of each PG's metadata.
    let want = 3 * (expected.len() + PGS);
    rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let held = objects_held(&client).await;
            if held == Some(want) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "stray copies never deleted: the stores hold {held:?} objects, {want} expected"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    });
    let inconsistent = rt.block_on(deep_scrub_all(&client));
    assert_eq!(inconsistent, 0, "the deep scrub found inconsistent objects");
    rt.block_on(async {
        for (name, crcs) in &expected {
            let data = client.read("data", name).await.unwrap();
            let crc = crc_fast::crc32_iscsi(&data);
            assert!(
                crcs.contains(&crc),
                "{name}: holds {crc:08x}, expected one of {crcs:x?}"
            );
        }
    });
    drop(client);
    drop(rt);

    let (ok, out) = cairn(&["down", "--dir", &cluster.arg()]);
    assert!(ok, "{out}");
    for osd in osds.iter_mut().chain([&mut mon_proc]) {
        if let Proc::Child(c) = osd {
            let _ = c.wait();
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    let found = copies(&dir, OSDS);
    for (name, crcs) in &expected {
        let got = found
            .get(name)
            .unwrap_or_else(|| panic!("{name}: on no OSD"));
        assert_eq!(got.len(), 3, "{name}: {} copies", got.len());
        assert!(
            got.iter().all(|c| c == &got[0] && crcs.contains(c)),
            "{name}: copies {got:x?}, expected one of {crcs:x?}"
        );
    }
    drop(cluster);
}
