//! Fault schedules the simulation once found breaking the cluster, written out so that they
//! keep running whatever the schedule generator draws from their seeds later.

use std::time::Duration;

use cairn_sim::{run_schedule, Fault, Options, Timed};

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
    if let Err(f) = run_schedule(10004, &Options::default(), faults) {
        panic!("{f}");
    }
}
