//! Seed 000's published figures (Ceph's "QoS Study with mClock and WPQ Schedulers": 4 OSDs,
//! 4 MiB recovery objects, one client writing 4 KiB blocks), carried as data so the recovery
//! study can print them beside its own. They cannot be derived: they are that study's
//! measurements on its machine. A figure the seed's text does not state is `None` (its HDD
//! runs without a WAL/DB device are shown only as charts).

/// The seed's device sets, named as `cairn study recovery --devices` names them.
pub const DEVICE_SETS: [&str; 3] = ["nvme", "hdd-db", "hdd"];

/// The seed's figures for one scheduler on one device set during recovery.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct SeedFigures {
    /// Mean client IOPS during recovery.
    pub client_iops: Option<f64>,
    /// Mean client completion latency, ms.
    pub mean_ms: Option<f64>,
    /// Seconds the recovery took.
    pub recovery_s: Option<f64>,
    /// Objects recovered per second.
    pub objects_per_s: Option<f64>,
    /// Recovery bandwidth, MiB/s.
    pub mib_per_s: Option<f64>,
}

/// The client's IOPS on the healthy cluster (the seed's baseline) for a device set.
pub fn baseline_iops(devices: &str) -> Option<f64> {
    match devices {
        "nvme" => Some(21_500.0),
        "hdd-db" => Some(340.0),
        "hdd" => Some(315.0),
        _ => None,
    }
}

/// The share of the client's baseline IOPS an mClock profile reserves for it: the client
/// class's reservation in the seed's profile tables, which the seed reads against the baseline
/// ("for the NVMe (baseline 21500 IOPS) device, a minimum of 10750 IOPS is reserved for client
/// operations"). `None` for a scheduler without reservations. `scheduler` is the study's label;
/// settings after the profile's name do not change it.
pub fn client_reservation_share(scheduler: &str) -> Option<f64> {
    let mut words = scheduler.split_whitespace();
    match (words.next(), words.next()) {
        // A bare `mclock` runs the default profile, high_client_ops.
        (Some("mclock"), Some("high_client_ops") | None) => Some(0.5),
        (Some("mclock"), Some("balanced")) => Some(0.4),
        (Some("mclock"), Some("high_recovery_ops")) => Some(0.3),
        _ => None,
    }
}

/// The seed's figures for `scheduler` (the study's labels: `wpq`, `wpq bst`,
/// `mclock high_client_ops`, `mclock balanced`, `mclock high_recovery_ops`) on `devices`.
pub fn figures(devices: &str, scheduler: &str) -> Option<SeedFigures> {
    let f = |iops: f64, ms: Option<f64>, s: Option<f64>, ops: Option<f64>, mib: Option<f64>| {
        Some(SeedFigures {
            client_iops: Some(iops),
            mean_ms: ms,
            recovery_s: s,
            objects_per_s: ops,
            mib_per_s: mib,
        })
    };
    match (devices, scheduler) {
        ("nvme", "wpq") => f(18_000.0, Some(3.535), None, Some(97.0), Some(388.0)),
        ("nvme", "wpq bst") => f(2_544.0, Some(25.0), None, Some(350.0), Some(1_433.6)),
        ("nvme", "mclock high_client_ops") => {
            f(11_209.0, Some(5.688), Some(966.0), Some(80.0), Some(320.0))
        }
        // The seed gives 5.7-5.8 ms for balanced and high_recovery_ops alike.
        ("nvme", "mclock balanced") => {
            f(11_017.0, Some(5.75), Some(647.0), Some(120.0), Some(480.0))
        }
        ("nvme", "mclock high_recovery_ops") => {
            f(11_153.0, Some(5.75), Some(488.0), Some(159.0), Some(635.0))
        }
        ("hdd-db", "wpq") => f(308.0, Some(208.0), Some(647.0), Some(5.8), Some(23.0)),
        ("hdd-db", "wpq bst") => f(146.0, Some(433.0), None, None, None),
        ("hdd-db", "mclock high_client_ops") => {
            f(271.0, Some(235.0), Some(1_409.0), Some(3.0), Some(11.0))
        }
        ("hdd-db", "mclock balanced") => f(248.0, Some(258.0), Some(966.0), Some(4.0), Some(16.5)),
        ("hdd-db", "mclock high_recovery_ops") => {
            f(240.0, Some(265.0), Some(747.0), Some(5.0), Some(21.0))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seeds_hdd_with_db_keeps_80_percent_under_high_client_ops() {
        let kept = figures("hdd-db", "mclock high_client_ops")
            .and_then(|f| f.client_iops)
            .unwrap()
            / baseline_iops("hdd-db").unwrap();
        assert!((kept - 0.797).abs() < 0.01, "{kept}");
        assert!(figures("hdd", "wpq").is_none(), "shown only as charts");
        assert!(baseline_iops("hdd").is_some());
        for set in DEVICE_SETS {
            assert!(baseline_iops(set).is_some(), "{set}");
        }
    }

    #[test]
    fn reservations_are_the_profiles_client_shares_whatever_follows_the_name() {
        assert_eq!(
            client_reservation_share("mclock high_client_ops"),
            Some(0.5)
        );
        assert_eq!(
            client_reservation_share("mclock high_client_ops osd_recovery_max_active=1"),
            Some(0.5)
        );
        assert_eq!(client_reservation_share("mclock balanced"), Some(0.4));
        assert_eq!(
            client_reservation_share("mclock high_recovery_ops"),
            Some(0.3)
        );
        assert_eq!(
            client_reservation_share("mclock"),
            Some(0.5),
            "the default profile"
        );
        for none in ["wpq", "wpq bst", "fifo", "mclock custom", ""] {
            assert_eq!(client_reservation_share(none), None, "{none}");
        }
    }
}
