//! Seed 000's direction in miniature: mClock high_client_ops holds its 50% client reservation
//! during aggressive recovery and beats WPQ with aggressive recovery by >= 4x.

use cairn_qos::cost::DeviceCapacity;
use cairn_qos::sim::replay::{replay, table, Row};

fn row<'a>(rows: &'a [Row], label: &str) -> &'a Row {
    rows.iter().find(|r| r.label == label).unwrap()
}

fn check(cap: DeviceCapacity, duration_s: f64) {
    let rows = replay(cap, duration_s).unwrap();
    println!("{}", table(&rows));
    let hco = row(&rows, "mclock high_client_ops");
    let wpq_aggr = row(&rows, "wpq (aggressive, recovery prio 63)");
    let fifo = row(&rows, "fifo");
    assert!(
        hco.client_iops >= 0.5 * cap.random_4k_iops * 0.98,
        "{hco:?}"
    );
    assert!(
        hco.client_iops >= 4.0 * wpq_aggr.client_iops,
        "{hco:?} vs {wpq_aggr:?}"
    );
    assert!(hco.client_iops >= 4.0 * fifo.client_iops);
    // Recovery still progresses under every mClock profile, faster with high_recovery_ops.
    let hro = row(&rows, "mclock high_recovery_ops");
    assert!(hco.recovery_objects_per_s > 0.0);
    assert!(hro.recovery_objects_per_s > hco.recovery_objects_per_s);
    assert!(hco.client_lat_ms[3] < wpq_aggr.client_lat_ms[3]);
}

#[test]
fn nvme_high_client_ops_meets_reservation_and_beats_wpq_aggressive_4x() {
    check(DeviceCapacity::NVME_SEED000, 3.0);
}

#[test]
fn hdd_high_client_ops_meets_reservation_and_beats_wpq_aggressive_4x() {
    check(DeviceCapacity::HDD_SEED000, 30.0);
}
