//! Thrashing, as Ceph's `thrashosds` does it: `cairn up` (4 OSDs, size 3, min_size 2, a 2 s
//! heartbeat grace), writers in this process mutating objects at random (write_full, writes
//! at offsets, appends, truncates, setxattr, omap sets and removals, removes) against a model
//! of every object (`model`), and for a while (`CAIRN_THRASH_SECS`, default 60) one random fault after another without waiting for the
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
//! Pass: every whole-object read (data, xattrs, omap) finds a state the model allows (a
//! mutation that failed in the client may or may not have been applied; nothing else is
//! allowed); writes resume after every fault; once all OSDs are back every PG goes
//! active+clean and every object reads back as the model says; a deep scrub of every PG finds
//! no inconsistent object; and after `cairn down` every store passes a deep fsck, every object
//! has exactly three copies holding the model's data (no stray left behind), and a removed
//! object has none.

use std::collections::BTreeMap;
use std::process::Child;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

mod common;
mod model;

use cairn_client::{Client, ClientError};
use common::{copies, free_port, has_exited, signal, try_signal, Cluster};
use model::{after, describe, read_state, Mutation, ObjState, Possible, Verdict};

const OSDS: usize = 4;
const DEVICE_MIB: &str = "256";
const GRACE_S: &str = "2";
const PGS: usize = 16;

/// Per object name, every state it may be in (see `model`).
type Model = Arc<Mutex<BTreeMap<String, Possible>>>;

/// What the writers saw.
#[derive(Default)]
struct Tally {
    /// Mutations the OSDs answered (applied, or NotFound as the model expected).
    acks: AtomicUsize,
    failures: AtomicUsize,
    /// Whole-object reads compared with the model.
    read_backs: AtomicUsize,
    by_kind: Mutex<BTreeMap<&'static str, usize>>,
    last_error: Mutex<String>,
}

/// An object may be in more states than this (after failed mutations) only until it is read.
const MOST_POSSIBLE_STATES: usize = 4;

/// Mutates its 40 objects at random until `stop` (every kind of write the model knows), and
/// after one mutation in four, or once the object may be in too many states, reads the whole
/// object back and asserts it is a state the model allows.
async fn writer(
    client: Arc<Client>,
    id: usize,
    seed: u64,
    model: Model,
    tally: Arc<Tally>,
    stop: Arc<Mutex<bool>>,
) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed.wrapping_add(id as u64 + 1));
    let mut round = 0usize;
    while !*stop.lock().unwrap() {
        round += 1;
        let name = format!("t{id}-obj{}", rng.random_range(0..40));
        let possible = model
            .lock()
            .unwrap()
            .get(&name)
            .cloned()
            .unwrap_or_else(|| vec![None]);
        let m = Mutation::random(&mut rng, &possible);
        let result = m.send(&client, "data", &name).await;
        let next = match after(&possible, &m, &result) {
            Verdict::Now(next) => next,
            Verdict::Impossible(why) => panic!("{name}: {why}"),
        };
        match &result {
            Ok(()) | Err(ClientError::NotFound(_)) => {
                tally.acks.fetch_add(1, Ordering::Relaxed);
                *tally.by_kind.lock().unwrap().entry(m.name()).or_default() += 1;
            }
            Err(e) => {
                *tally.last_error.lock().unwrap() = format!("{name}: {} {e}", m.name());
                tally.failures.fetch_add(1, Ordering::Relaxed);
            }
        }
        let must_read = next.len() > MOST_POSSIBLE_STATES;
        model.lock().unwrap().insert(name.clone(), next);
        if must_read {
            while !check_object(&client, &name, &model, &tally).await {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        } else if round.is_multiple_of(4) {
            check_object(&client, &name, &model, &tally).await;
        }
    }
}

/// Reads object `name` whole and asserts the model allows what it holds; the model then
/// knows its state. False when the read failed (a fault), and nothing was checked.
async fn check_object(client: &Client, name: &str, model: &Model, tally: &Tally) -> bool {
    let Ok(seen) = read_state(client, "data", name).await else {
        return false;
    };
    let mut m = model.lock().unwrap();
    let possible = m.entry(name.to_string()).or_insert_with(|| vec![None]);
    assert!(
        possible.contains(&seen),
        "{name}: read back as {}, the model allows only [{}]",
        describe(&seen),
        possible.iter().map(describe).collect::<Vec<_>>().join("; ")
    );
    *possible = vec![seen];
    tally.read_backs.fetch_add(1, Ordering::Relaxed);
    true
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

    /// Waits up to `secs` for the process to exit by itself; true once it has.
    fn exits_within(&mut self, secs: u64) -> bool {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let gone = match self {
                Proc::Pid(p) => has_exited(*p),
                Proc::Child(c) => c.try_wait().ok().flatten().is_some(),
                Proc::Stopped => true,
            };
            if gone {
                *self = Proc::Stopped;
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn kill(&mut self) {
        match std::mem::replace(self, Proc::Stopped) {
            Proc::Pid(p) if has_exited(p) => {}
            Proc::Pid(p) => signal("-9", p),
            Proc::Child(mut c) => {
                let _ = c.kill();
                let _ = c.wait();
            }
            Proc::Stopped => {}
        }
    }
}

/// Resumes frozen process `pid` (`what`); false when it is gone. A stopped process runs no
/// code and cannot exit by itself: only a SIGKILL from outside the cluster (the kernel's OOM
/// killer, the machine's supervisor) ends it, so the caller starts it again and the run goes
/// on, with the event among its `faults`.
fn resumed(pid: u32, what: &str, faults: &mut Vec<String>) -> bool {
    match try_signal("-CONT", pid) {
        Ok(()) => true,
        Err(e) => {
            assert_eq!(e.raw_os_error(), Some(libc::ESRCH), "kill -CONT {pid}: {e}");
            eprintln!("frozen {what} (pid {pid}) was killed from outside; started again");
            faults.push(format!("frozen {what} killed from outside"));
            false
        }
    }
}

/// Restarts osd.`i` from its directory (same identity), as an operator would.
fn restart(cluster: &Cluster, mon: &str, i: usize, restarts: &mut usize) -> Proc {
    *restarts += 1;
    let data = cluster.dir.join(format!("osd{i}")).display().to_string();
    let host = format!("host{i}");
    let keyring = cluster.dir.join(format!("osd{i}.keyring"));
    Proc::Child(cluster.start(
        &format!("osd{i}-restart{restarts}.log"),
        &[
            "--keyring",
            &keyring.display().to_string(),
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
    let keyring = cluster.dir.join("mon.keyring");
    Proc::Child(cluster.start(
        &format!("mon-restart{restarts}.log"),
        &[
            "--keyring",
            &keyring.display().to_string(),
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
        .unwrap_or(60);
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

    let rt = common::runtime();
    let model: Model = Arc::default();
    let tally = Arc::new(Tally::default());
    let stop = Arc::new(Mutex::new(false));
    let client = rt.block_on(async {
        let mut c = Client::connect_as(mon.parse().unwrap(), 4343, Some(cluster.admin()))
            .await
            .unwrap();
        c.op_timeout_ms = 30_000;
        Arc::new(c)
    });
    let writers: Vec<_> = (0..4)
        .map(|id| {
            rt.spawn(writer(
                client.clone(),
                id,
                seed,
                model.clone(),
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
                assert!(!has_exited(pid), "the monitor exited before it was frozen");
                signal("-STOP", pid);
                if with_osd {
                    osds[victim].kill();
                }
                pause(&mut rng, 1000, 4000);
                if !resumed(pid, "the monitor", &mut faults) {
                    mon_proc.kill();
                    mon_proc = restart_mon(&cluster, &mon, &mut restarts);
                }
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
                let (ok, out) = cluster.cairn(&["osd", "--mon", &mon, verb, &which.to_string()]);
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
                    assert!(
                        osds[victim].exits_within(30),
                        "osd.{victim} did not exit after {fault:?}"
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
                assert!(!has_exited(pid), "osd.{victim} exited before it was frozen");
                signal("-STOP", pid);
                pause(&mut rng, 2500, 5000);
                if !resumed(pid, &format!("osd.{victim}"), &mut faults) {
                    osds[victim].kill();
                    osds[victim] = restart(&cluster, &mon, victim, &mut restarts);
                }
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
        let (ok, out) = cluster.cairn(&["osd", "--mon", &mon, "in", &o.to_string()]);
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
        "{} mutations answered ({:?}), {} failed, {} objects read back whole",
        tally.acks.load(Ordering::Relaxed),
        tally.by_kind.lock().unwrap(),
        tally.failures.load(Ordering::Relaxed),
        tally.read_backs.load(Ordering::Relaxed)
    );
    assert!(tally.read_backs.load(Ordering::Relaxed) > 20);

    // Every object read whole once more: the model then knows each one's state.
    let names: Vec<String> = model.lock().unwrap().keys().cloned().collect();
    assert!(names.len() >= 100, "{} objects written", names.len());
    rt.block_on(async {
        for name in &names {
            let deadline = Instant::now() + Duration::from_secs(60);
            while !check_object(&client, name, &model, &tally).await {
                assert!(Instant::now() < deadline, "{name} never read back");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    });
    let finals: BTreeMap<String, Option<ObjState>> = model
        .lock()
        .unwrap()
        .iter()
        .map(|(name, p)| (name.clone(), p[0].clone()))
        .collect();
    let present = finals.values().filter(|s| s.is_some()).count();
    // Stray copies (left by the faults and the `osd out`s) are deleted once their PG is clean
    // elsewhere: then the stores hold three copies of each object and of each PG's metadata.
    let want = 3 * (present + PGS);
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
    drop(client);
    drop(rt);

    let (ok, out) = cluster.cairn(&["down", "--dir", &cluster.arg()]);
    assert!(ok, "{out}");
    for osd in osds.iter_mut().chain([&mut mon_proc]) {
        if let Proc::Child(c) = osd {
            let _ = c.wait();
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    let found = copies(&dir, OSDS);
    for (name, state) in &finals {
        let got = found.get(name);
        let Some(state) = state else {
            assert!(
                got.is_none(),
                "{name}: removed, yet copies remain: {got:x?}"
            );
            continue;
        };
        let got = got.unwrap_or_else(|| panic!("{name}: on no OSD"));
        let crc = crc_fast::crc32_iscsi(&state.data);
        assert_eq!(got.len(), 3, "{name}: {} copies", got.len());
        assert!(
            got.iter().all(|c| *c == crc),
            "{name}: copies {got:x?}, the model's data {crc:08x}"
        );
    }
    drop(cluster);
}
