//! Fault schedules the simulation once found breaking the cluster, written out so that they
//! keep running whatever the schedule generator draws from their seeds later. Each runs in a
//! child process of its own, as a batch runs a seed, so that it plays exactly as when found.

use std::time::Duration;

use cairn_sim::child::{run_seed_in_child, ChildRun, SEED_VAR};
use cairn_sim::{run_schedule, Fault, Options, Timed};

/// What a child prints when its schedule held every invariant.
const HELD: &str = "schedule held";

/// Runs `faults` with `seed`'s workload in a child process running test `test` (in the
/// child: here), failing with what broke.
fn check(test: &str, seed: u64, faults: Vec<Timed>) {
    if std::env::var_os(SEED_VAR).is_some() {
        match run_schedule(seed, &Options::wide(), faults) {
            Ok(_) => println!("{HELD}"),
            Err(f) => panic!("{f}"),
        }
        return;
    }
    if let ChildRun::Broke(why) = run_seed_in_child(test, seed, HELD) {
        panic!("{why}");
    }
}

fn at(at_s: f64, lasts_s: f64, fault: Fault) -> Timed {
    Timed {
        at: Duration::from_secs_f64(at_s),
        lasts: Duration::from_secs_f64(lasts_s),
        fault,
    }
}

fn host(name: &str) -> String {
    name.to_string()
}

/// osd.2, cut off from the monitor, skipped the epochs in which PG 1.4's acting set went to
/// [0, 2, 3] (osd.0 back) and back to [2, 3] (a temporary set): it stayed in its old interval
/// while osd.3, asked by the newer interval's peering, refused everything of the old one;
/// writes to the PG timed out for ever. An OSD now applies the maps of the epochs it skipped.
#[test]
fn an_osd_that_skipped_epochs_does_not_miss_an_interval() {
    let faults = vec![
        at(0.9, 13.9, Fault::Freeze(host("osd0"))),
        at(4.7, 12.8, Fault::Hold(host("osd2"), host("mon"))),
        at(7.4, 6.4, Fault::Hold(host("osd3"), host("osd0"))),
        at(9.6, 16.8, Fault::Freeze(host("osd1"))),
    ];
    check(
        "an_osd_that_skipped_epochs_does_not_miss_an_interval",
        10004,
        faults,
    );
}

/// PG 1.4's primary peered again within its interval (a replica held off for 10 s) while
/// filling osd.1, just marked in, from a temporary acting set; the fill stopped without
/// handing back, its claim stayed, and the activation that followed could not start it
/// again: the PG stayed `active+remapped` for good. A fill that stops early now gives up
/// its claim.
#[test]
fn a_fill_cut_short_by_peering_again_starts_again() {
    let faults = vec![
        at(
            11.0,
            17.6,
            Fault::Slow(host("osd0"), Duration::from_millis(92)),
        ),
        at(12.4, 14.3, Fault::Out(host("osd1"))),
        at(19.1, 13.4, Fault::Hold(host("osd0"), host("osd2"))),
        at(22.6, 4.9, Fault::Hold(host("osd0"), host("mon"))),
    ];
    check(
        "a_fill_cut_short_by_peering_again_starts_again",
        10070,
        faults,
    );
}

/// osd.1's connection to the monitor lost its state in a partition (its segments dropped),
/// then osd.1 was frozen long enough to be marked down. Back, its one boot went out on the
/// dead connection and timed out; no new epoch came to make it try again, and six PGs stayed
/// `active+degraded` without it. An OSD marked down now boots until a map shows it up.
#[test]
fn an_osd_back_from_a_partition_and_a_freeze_boots_again() {
    let faults = vec![
        at(2.8, 12.6, Fault::Out(host("osd2"))),
        at(7.6, 2.4, Fault::Partition(host("osd1"), host("mon"))),
        at(12.9, 7.1, Fault::Crash(host("osd0"))),
        at(15.4, 11.6, Fault::Freeze(host("osd1"))),
    ];
    check(
        "an_osd_back_from_a_partition_and_a_freeze_boots_again",
        10439,
        faults,
    );
}

/// osd.3, frozen long enough to be marked down and then cut off from the monitor, kept its
/// old interval of PG 1.7 as primary and peered it again there, while osd.1 had led the PG in a
/// newer interval and acknowledged writes in it. osd.1 and osd.2 answered the stale peering
/// and took its activation, rolling their logs back over those writes; the PG then retried a
/// recovery of a version no copy held, for good. A copy now refuses a peering of an interval
/// older than one it was already peered or activated in.
#[test]
fn a_copy_refuses_the_peering_of_an_older_interval() {
    let faults = vec![
        at(11.3, 4.3, Fault::Freeze(host("osd3"))),
        at(14.9, 11.9, Fault::Partition(host("osd3"), host("mon"))),
        at(17.0, 7.1, Fault::Partition(host("osd2"), host("mon"))),
        at(24.1, 11.7, Fault::Partition(host("osd1"), host("client"))),
    ];
    check(
        "a_copy_refuses_the_peering_of_an_older_interval",
        1007,
        faults,
    );
}

/// While the monitor was down, a write to o20 waited at osd.3 for PG 1.7 to activate, and the
/// client, past its deadline, gave up on it and wrote o20 again; the new write reached osd.3
/// too and waited as well. The activation released both at once and the older one took the
/// later version: o20 read back the write the client had given up on, over the acknowledged
/// one. Writes to one object now take their versions in the order the OSD received them.
#[test]
fn writes_released_together_keep_their_order() {
    let faults = vec![
        at(8.457, 4.482, Fault::Hold(host("osd0"), host("osd3"))),
        at(10.443, 17.304, Fault::Crash(host("mon"))),
        at(15.956, 2.8, Fault::Out(host("osd3"))),
        at(26.328, 10.589, Fault::Partition(host("osd1"), host("osd3"))),
    ];
    check("writes_released_together_keep_their_order", 30224, faults);
}
