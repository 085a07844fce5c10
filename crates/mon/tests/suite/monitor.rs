//! The monitor core: registration, failure detection, down -> out, pools, epochs that every
//! subscriber reproduces from incrementals, encodings that reject corruption, and placement kept
//! balanced across changes.

use crate::{allow_pool_delete, remove_pool};
use cairn_clustermap::analysis::analyze;
use cairn_clustermap::balance::up_sets;
use cairn_clustermap::shape::Topology;
use cairn_clustermap::{ClusterMap, Incremental, MapFlag};
use cairn_mon::{MonConfig, Monitor};
use cairn_proto::mon::{Reply, Request};

fn boot(mon: &mut Monitor, now: u64, n: usize, hosts: usize) -> Vec<i32> {
    (0..n)
        .map(|i| {
            match mon
                .handle(
                    now,
                    Request::Boot {
                        uuid: format!("uuid-{i}"),
                        host: format!("host{}", i % hosts),
                        addr: format!("127.0.0.1:{}", 7000 + i),
                        crush_weight: 0x10000,
                        want_id: None,
                    },
                )
                .unwrap()
            {
                Reply::Booted { id, .. } => id,
                other => panic!("{other:?}"),
            }
        })
        .collect()
}

fn max_deviation(map: &ClusterMap, pool: i64) -> f64 {
    let topo = Topology::for_pool(&map.placement, &map.placement.pools[&pool]).unwrap();
    analyze(&up_sets(&map.placement, pool).unwrap(), &topo)
        .osds
        .max_deviation
}

#[test]
fn osds_register_and_pools_stay_balanced() {
    let mut mon = Monitor::new(ClusterMap::new("fsid-1").unwrap(), MonConfig::default());
    let ids = boot(&mut mon, 0, 12, 4);
    assert_eq!(ids, (0..12).collect::<Vec<_>>());
    mon.handle(
        0,
        Request::CreatePool {
            name: "rbd".into(),
            size: 3,
            pg_num: 256,
        },
    )
    .unwrap();
    assert!(max_deviation(mon.map(), 1) < 1.0);
    // A known uuid gets its id back.
    match mon
        .handle(
            1,
            Request::Boot {
                uuid: "uuid-3".into(),
                host: "host3".into(),
                addr: "x".into(),
                crush_weight: 0x10000,
                want_id: None,
            },
        )
        .unwrap()
    {
        Reply::Booted { id, .. } => assert_eq!(id, 3),
        other => panic!("{other:?}"),
    }
    assert!(mon
        .handle(
            0,
            Request::CreatePool {
                name: "rbd".into(),
                size: 3,
                pg_num: 8
            }
        )
        .is_err());
    assert!(mon
        .handle(
            0,
            Request::Boot {
                uuid: String::new(),
                host: "h".into(),
                addr: "a".into(),
                crush_weight: 1,
                want_id: None,
            }
        )
        .is_err());
}

#[test]
fn failure_reports_mark_down_then_the_timer_marks_out_and_boot_brings_back_in() {
    let config = MonConfig {
        down_out_interval_ms: 600_000,
        ..MonConfig::default()
    };
    let mut mon = Monitor::new(ClusterMap::new("f").unwrap(), config);
    boot(&mut mon, 0, 8, 4);
    mon.handle(
        0,
        Request::CreatePool {
            name: "p".into(),
            size: 3,
            pg_num: 128,
        },
    )
    .unwrap();
    for id in 0..8 {
        mon.handle(
            1_000,
            Request::Beacon {
                id,
                full: false,
                nearfull: false,
            },
        )
        .unwrap();
    }
    // One reporter is not enough; a report younger than the grace does not count.
    mon.handle(
        30_000,
        Request::FailureReport {
            reporter: 1,
            target: 5,
            failed_for_ms: 25_000,
            addr: String::new(),
            up_from: 0,
        },
    )
    .unwrap();
    assert!(mon.map().osds[&5].up);
    mon.handle(
        30_000,
        Request::FailureReport {
            reporter: 2,
            target: 5,
            failed_for_ms: 5_000,
            addr: String::new(),
            up_from: 0,
        },
    )
    .unwrap();
    assert!(mon.map().osds[&5].up);
    mon.handle(
        31_000,
        Request::FailureReport {
            reporter: 2,
            target: 5,
            failed_for_ms: 26_000,
            addr: String::new(),
            up_from: 0,
        },
    )
    .unwrap();
    assert!(
        !mon.map().osds[&5].up,
        "two reporters past the grace mark it down"
    );
    assert_eq!(mon.map().osds[&5].reweight, 0x10000, "down is not out yet");
    assert_eq!(mon.tick(300_000).unwrap(), None);
    assert!(mon.tick(631_000).unwrap().is_some());
    assert_eq!(
        mon.map().osds[&5].reweight,
        0,
        "out after the down-out interval"
    );
    let sets = up_sets(&mon.map().placement, 1).unwrap();
    assert!(
        sets.iter().flatten().all(|&o| o != 5),
        "no PG maps to an out OSD"
    );
    assert!(max_deviation(mon.map(), 1) < 1.0);
    match mon
        .handle(
            700_000,
            Request::Boot {
                uuid: "uuid-5".into(),
                host: "host1".into(),
                addr: "y".into(),
                crush_weight: 0x10000,
                want_id: None,
            },
        )
        .unwrap()
    {
        Reply::Booted { id, .. } => assert_eq!(id, 5),
        other => panic!("{other:?}"),
    }
    assert!(mon.map().osds[&5].up);
    assert_eq!(
        mon.map().osds[&5].reweight,
        0x10000,
        "an auto-out OSD comes back in on boot"
    );
}

#[test]
fn missing_beacons_mark_down() {
    let config = MonConfig {
        beacon_timeout_ms: 10_000,
        ..MonConfig::default()
    };
    let mut mon = Monitor::new(ClusterMap::new("f").unwrap(), config);
    boot(&mut mon, 0, 3, 3);
    mon.handle(
        5_000,
        Request::Beacon {
            id: 0,
            full: false,
            nearfull: false,
        },
    )
    .unwrap();
    mon.handle(
        5_000,
        Request::Beacon {
            id: 1,
            full: false,
            nearfull: false,
        },
    )
    .unwrap();
    mon.tick(12_000).unwrap();
    assert!(mon.map().osds[&0].up && mon.map().osds[&1].up);
    assert!(!mon.map().osds[&2].up);
    assert!(mon
        .handle(
            1,
            Request::Beacon {
                id: 99,
                full: false,
                nearfull: false,
            }
        )
        .is_err());
}

#[test]
fn subscribers_reproduce_every_epoch_from_incrementals_and_encodings() {
    let mut mon = Monitor::new(ClusterMap::new("f").unwrap(), MonConfig::default());
    let mut replica = ClusterMap::decode(&mon.map().encode()).unwrap();
    boot(&mut mon, 0, 6, 3);
    mon.handle(
        0,
        Request::CreatePool {
            name: "p".into(),
            size: 2,
            pg_num: 64,
        },
    )
    .unwrap();
    mon.handle(0, Request::MarkOut { id: 2 }).unwrap();
    mon.handle(0, Request::MarkDown { id: 4 }).unwrap();
    mon.handle(
        0,
        Request::Beacon {
            id: 3,
            full: true,
            nearfull: true,
        },
    )
    .unwrap();
    let incs = mon.incrementals_since(replica.epoch).unwrap();
    assert!(!incs.is_empty());
    for inc in incs {
        let inc = Incremental::decode(&inc.encode()).unwrap();
        replica.apply(&inc).unwrap();
    }
    assert_eq!(replica.epoch, mon.map().epoch);
    assert_eq!(
        replica.encode(),
        mon.map().encode(),
        "replica equals the authority"
    );
    let decoded = ClusterMap::decode(&mon.map().encode()).unwrap();
    assert_eq!(decoded.encode(), mon.map().encode());
    assert_eq!(
        up_sets(&decoded.placement, 1).unwrap(),
        up_sets(&mon.map().placement, 1).unwrap()
    );
    // An incremental that skips an epoch is refused.
    let mut stale = ClusterMap::new("f").unwrap();
    let last = mon.incrementals_since(mon.map().epoch - 1).unwrap();
    assert!(stale.apply(&last[0]).is_err());
}

#[test]
fn a_beacon_past_the_full_ratio_flags_the_osd_full_in_a_new_epoch_until_it_is_under_again() {
    let mut mon = Monitor::new(ClusterMap::new("f").unwrap(), MonConfig::default());
    boot(&mut mon, 0, 3, 3);
    let e0 = mon.map().epoch;
    mon.handle(
        1_000,
        Request::Beacon {
            id: 1,
            full: true,
            nearfull: true,
        },
    )
    .unwrap();
    assert!(mon.map().osds[&1].full);
    assert!(!mon.map().osds[&0].full && !mon.map().osds[&2].full);
    assert_eq!(mon.map().epoch, e0 + 1, "a new epoch carries the flag");
    mon.handle(
        2_000,
        Request::Beacon {
            id: 1,
            full: true,
            nearfull: true,
        },
    )
    .unwrap();
    assert_eq!(mon.map().epoch, e0 + 1, "an unchanged state makes no epoch");
    let persisted = ClusterMap::decode(&mon.map().encode()).unwrap();
    assert!(persisted.osds[&1].full, "the flag survives encoding");
    mon.handle(
        3_000,
        Request::Beacon {
            id: 1,
            full: false,
            nearfull: false,
        },
    )
    .unwrap();
    assert!(!mon.map().osds[&1].full);
    assert_eq!(mon.map().epoch, e0 + 2);
}

#[test]
fn a_beacon_past_the_nearfull_ratio_flags_the_osd_nearfull_and_full_comes_in_the_same_epoch() {
    let mut mon = Monitor::new(ClusterMap::new("f").unwrap(), MonConfig::default());
    boot(&mut mon, 0, 3, 3);
    let e0 = mon.map().epoch;
    let beacon = |full, nearfull| Request::Beacon {
        id: 2,
        full,
        nearfull,
    };
    mon.handle(1_000, beacon(false, true)).unwrap();
    assert!(mon.map().osds[&2].nearfull && !mon.map().osds[&2].full);
    assert_eq!(mon.map().epoch, e0 + 1);
    mon.handle(2_000, beacon(false, true)).unwrap();
    assert_eq!(mon.map().epoch, e0 + 1, "an unchanged state makes no epoch");
    let persisted = ClusterMap::decode(&mon.map().encode()).unwrap();
    assert!(persisted.osds[&2].nearfull, "the flag survives encoding");
    mon.handle(3_000, beacon(true, true)).unwrap();
    assert!(mon.map().osds[&2].full && mon.map().osds[&2].nearfull);
    assert_eq!(mon.map().epoch, e0 + 2);
    mon.handle(4_000, beacon(false, false)).unwrap();
    assert!(!mon.map().osds[&2].full && !mon.map().osds[&2].nearfull);
    assert_eq!(mon.map().epoch, e0 + 3, "both flags clear in one epoch");
}

#[test]
fn corrupted_encodings_are_rejected() {
    let mut mon = Monitor::new(ClusterMap::new("f").unwrap(), MonConfig::default());
    boot(&mut mon, 0, 3, 3);
    let bytes = mon.map().encode();
    for i in [0, 5, 12, bytes.len() / 2, bytes.len() - 1] {
        let mut bad = bytes.clone();
        bad[i] ^= 0x20;
        assert!(ClusterMap::decode(&bad).is_err(), "flip at {i} accepted");
    }
    assert!(ClusterMap::decode(&bytes[..bytes.len() - 1]).is_err());
    assert!(ClusterMap::decode(b"").is_err());
}

#[test]
fn adding_osds_to_a_balanced_cluster_moves_little_more_than_their_share() {
    let mut mon = Monitor::new(ClusterMap::new("f").unwrap(), MonConfig::default());
    boot(&mut mon, 0, 15, 5);
    mon.handle(
        0,
        Request::CreatePool {
            name: "p".into(),
            size: 3,
            pg_num: 512,
        },
    )
    .unwrap();
    let before = cairn_clustermap::balance::placement_of(&mon.map().placement, 1).unwrap();
    mon.handle(
        1,
        Request::Boot {
            uuid: "new".into(),
            host: "host0".into(),
            addr: "z".into(),
            crush_weight: 0x10000,
            want_id: None,
        },
    )
    .unwrap();
    let after = cairn_clustermap::balance::placement_of(&mon.map().placement, 1).unwrap();
    let topo = Topology::for_pool(&mon.map().placement, &mon.map().placement.pools[&1]).unwrap();
    let m = cairn_clustermap::diff::movement(&before, &after, &topo);
    assert!(
        m.ratio_to_minimum <= 1.1,
        "moved {} vs minimum {}",
        m.moved_replicas,
        m.minimum_replicas
    );
    assert!(max_deviation(mon.map(), 1) < 1.0);
}

/// Removing a pool deletes its objects: the monitor refuses unless pool deletion is allowed,
/// the name comes twice and the sender is sure; a refusal makes no epoch.
#[test]
fn a_pool_is_removed_only_when_allowed_named_twice_and_confirmed() {
    let mut mon = Monitor::new(ClusterMap::new("fsid-rm").unwrap(), MonConfig::default());
    boot(&mut mon, 0, 3, 3);
    let create = Request::CreatePool {
        name: "data".into(),
        size: 3,
        pg_num: 8,
    };
    mon.handle(0, create).unwrap();
    let epoch = mon.map().epoch;
    let refused = |mon: &mut Monitor, request: Request, why: &str| {
        let err = mon.handle(0, request).unwrap_err().to_string();
        assert!(err.contains(why), "{err}");
        assert_eq!(mon.map().epoch, epoch, "a refusal makes no epoch");
        assert!(mon.map().placement.pool_named("data").is_some());
    };
    refused(&mut mon, remove_pool("data"), "pool deletion is disabled");
    mon.handle(0, allow_pool_delete()).unwrap();
    let typo = Request::RemovePool {
        name: "data".into(),
        repeated: "dta".into(),
        sure: true,
    };
    refused(&mut mon, typo, "name twice");
    let unsure = Request::RemovePool {
        name: "data".into(),
        repeated: "data".into(),
        sure: false,
    };
    refused(&mut mon, unsure, "name twice");
    for (key, value, why) in [
        ("mon_allow_pool_delete", "maybe", "not true or false"),
        ("mon_bogus", "true", "unknown monitor option"),
    ] {
        let set = Request::SetMonOption {
            key: key.into(),
            value: value.into(),
        };
        refused(&mut mon, set, why);
    }
    let disallow = Request::SetMonOption {
        key: "mon_allow_pool_delete".into(),
        value: "false".into(),
    };
    mon.handle(0, disallow).unwrap();
    refused(&mut mon, remove_pool("data"), "pool deletion is disabled");
    mon.handle(0, allow_pool_delete()).unwrap();
    mon.handle(0, remove_pool("data")).unwrap();
    assert!(mon.map().placement.pool_named("data").is_none());
    assert_eq!(mon.map().epoch, epoch + 1);
}

/// The down -> out timer counts wall-clock time: a monitor restarted (its own clock starting
/// again at 0) marks an OSD out when the interval since it went down has passed, not that
/// interval after the restart, and not the previous run's uptime later.
#[test]
fn a_restarted_monitor_marks_a_down_osd_out_on_time() {
    let config = MonConfig {
        down_out_interval_ms: 600_000,
        ..MonConfig::default()
    };
    let day_ms = 86_400_000;
    let mut mon = Monitor::new(ClusterMap::new("f").unwrap(), config.clone());
    mon.set_unix_origin_ms(1_000 * day_ms);
    boot(&mut mon, 0, 4, 4);
    // Up for 30 days, then osd.2 goes down.
    let went_down = 30 * day_ms;
    mon.handle(went_down, Request::MarkDown { id: 2 }).unwrap();
    assert_eq!(
        mon.map().osds[&2].down_since_ms,
        Some(1_030 * day_ms),
        "stamped with the wall clock"
    );
    // The monitor restarts 100 s later: its clock starts at 0 again.
    let restarted = ClusterMap::decode(&mon.map().encode()).unwrap();
    let mut mon = Monitor::new(restarted, config);
    mon.set_unix_origin_ms(1_030 * day_ms + 100_000);
    mon.tick(499_000).unwrap();
    assert!(mon.map().osds[&2].reweight > 0, "not yet: 599 s down");
    mon.tick(500_000).unwrap();
    assert_eq!(
        mon.map().osds[&2].reweight,
        0,
        "out 600 s after it went down"
    );
    assert!(mon.map().osds[&2].auto_out);
}

#[test]
fn pool_ids_are_never_reused_even_across_a_monitor_restart() {
    let mut mon = Monitor::new(ClusterMap::new("fsid-ids").unwrap(), MonConfig::default());
    boot(&mut mon, 0, 3, 3);
    let create = |mon: &mut Monitor, name: &str| {
        mon.handle(
            0,
            Request::CreatePool {
                name: name.into(),
                size: 3,
                pg_num: 8,
            },
        )
        .unwrap();
        mon.map()
            .placement
            .pools
            .values()
            .find(|p| p.name == name)
            .unwrap()
            .id
    };
    assert_eq!(create(&mut mon, "a"), 1);
    assert_eq!(create(&mut mon, "b"), 2);
    mon.handle(0, allow_pool_delete()).unwrap();
    mon.handle(0, remove_pool("b")).unwrap();
    // Copies of pool 2's PGs may still sit on OSDs: a new pool must not take its id.
    assert_eq!(create(&mut mon, "c"), 3);
    mon.handle(0, remove_pool("c")).unwrap();
    let restarted = ClusterMap::decode(&mon.map().encode()).unwrap();
    assert_eq!(restarted.pool_max, 3);
    let mut mon = Monitor::new(restarted, MonConfig::default());
    assert_eq!(create(&mut mon, "d"), 4);
}

#[test]
fn a_down_osd_is_removed_from_map_crush_and_placement_and_its_id_is_given_again() {
    let mut mon = Monitor::new(ClusterMap::new("f-rm").unwrap(), MonConfig::default());
    boot(&mut mon, 0, 4, 4);
    mon.handle(
        0,
        Request::CreatePool {
            name: "rbd".into(),
            size: 3,
            pg_num: 64,
        },
    )
    .unwrap();
    let mut subscriber = mon.map().clone();
    let since = subscriber.epoch;
    let up_err = mon.handle(1, Request::RemoveOsd { id: 2 }).unwrap_err();
    assert!(up_err.to_string().contains("is up"), "{up_err}");
    assert!(mon.handle(1, Request::RemoveOsd { id: 9 }).is_err());
    mon.handle(1, Request::MarkDown { id: 2 }).unwrap();
    mon.handle(2, Request::RemoveOsd { id: 2 }).unwrap();
    let map = mon.map();
    assert!(!map.osds.contains_key(&2));
    assert!(!map.placement.osds.contains_key(&2));
    assert!(map.placement.crush.item_id("osd.2").is_none());
    for up in up_sets(&map.placement, 1).unwrap() {
        assert_eq!(up.len(), 3, "every PG keeps three copies");
        assert!(!up.contains(&2), "osd.2 still places {up:?}");
    }
    assert!(max_deviation(map, 1) < 1.0, "the rest stay balanced");
    // Subscribers and a restarted monitor see the same map.
    for inc in mon.incrementals_since(since).unwrap() {
        subscriber.apply(&inc).unwrap();
    }
    assert_eq!(subscriber.encode(), mon.map().encode());
    let decoded = ClusterMap::decode(&mon.map().encode()).unwrap();
    assert!(!decoded.osds.contains_key(&2));
    // A new OSD gets the free id; the removed one, booting again, is a new OSD too.
    match mon
        .handle(
            3,
            Request::Boot {
                uuid: "uuid-new".into(),
                host: "host2".into(),
                addr: "127.0.0.1:7100".into(),
                crush_weight: 0x10000,
                want_id: None,
            },
        )
        .unwrap()
    {
        Reply::Booted { id, .. } => assert_eq!(id, 2),
        other => panic!("{other:?}"),
    }
    match mon
        .handle(
            4,
            Request::Boot {
                uuid: "uuid-2".into(),
                host: "host2".into(),
                addr: "127.0.0.1:7101".into(),
                crush_weight: 0x10000,
                want_id: None,
            },
        )
        .unwrap()
    {
        Reply::Booted { id, .. } => assert_eq!(id, 4),
        other => panic!("{other:?}"),
    }
}

/// A primary's up_thru request records the interval start in a new epoch, once: asking again
/// for it or an older one changes nothing; a request past the map's epoch is refused, and a
/// down OSD's (a stale request) is ignored. The value survives encoding and subscribers
/// reproduce it from the incremental. A map written before up_thru was kept reads as `None`.
#[test]
fn up_thru_is_recorded_once_per_interval_start_and_only_for_up_osds() {
    let mut mon = Monitor::new(ClusterMap::new("u").unwrap(), MonConfig::default());
    boot(&mut mon, 0, 3, 3);
    assert_eq!(mon.map().osds[&1].up_thru, Some(0), "a new OSD starts at 0");
    let before = mon.map().clone();
    let e0 = before.epoch;
    let alive = |want| Request::Alive { id: 1, want };
    assert_eq!(
        mon.handle(1, alive(e0)).unwrap(),
        Reply::Done { epoch: e0 + 1 }
    );
    assert_eq!(mon.map().osds[&1].up_thru, Some(e0));
    assert_eq!(mon.map().osds[&0].up_thru, Some(0));
    for again in [e0, e0 - 1] {
        mon.handle(2, alive(again)).unwrap();
        assert_eq!(mon.map().epoch, e0 + 1, "already recorded: no epoch");
    }
    assert!(
        mon.handle(3, alive(e0 + 5)).is_err(),
        "past the map's epoch"
    );
    let mut follower = before;
    for inc in mon.incrementals_since(e0).unwrap() {
        follower.apply(&inc).unwrap();
    }
    assert_eq!(follower.osds[&1].up_thru, Some(e0));
    let decoded = ClusterMap::decode(&mon.map().encode()).unwrap();
    assert_eq!(decoded.osds[&1].up_thru, Some(e0));
    mon.handle(4, Request::MarkDown { id: 2 }).unwrap();
    let e = mon.map().epoch;
    mon.handle(5, Request::Alive { id: 2, want: e }).unwrap();
    assert_eq!(mon.map().epoch, e, "a down OSD's request is stale");
    assert_eq!(mon.map().osds[&2].up_thru, Some(0));
    let old: cairn_clustermap::cluster_map::OsdEntry = serde_json::from_str(
        r#"{"id":4,"uuid":"u","host":"h","addr":"a","up":true,"reweight":65536,"down_since_ms":null,"auto_out":false}"#,
    )
    .unwrap();
    assert_eq!(old.up_thru, None, "an entry from before up_thru");
}

/// `osd lost` needs the OSD down, records the epoch of the declaration in the map (subscribers
/// reproduce it) and keeps the OSD; a boot brings it up again with the declaration kept.
#[test]
fn an_osd_is_declared_lost_only_while_down_and_stays_in_the_map() {
    let mut mon = Monitor::new(ClusterMap::new("l").unwrap(), MonConfig::default());
    boot(&mut mon, 0, 3, 3);
    assert!(mon.handle(1, Request::MarkLost { id: 2 }).is_err());
    mon.handle(2, Request::MarkDown { id: 2 }).unwrap();
    let before = mon.map().clone();
    let Reply::Done { epoch } = mon.handle(3, Request::MarkLost { id: 2 }).unwrap() else {
        panic!("not done");
    };
    assert_eq!(epoch, before.epoch + 1);
    assert_eq!(mon.map().osds[&2].lost_at, Some(epoch));
    let mut follower = before;
    for inc in mon.incrementals_since(follower.epoch).unwrap() {
        follower.apply(&inc).unwrap();
    }
    assert_eq!(follower.osds[&2].lost_at, Some(epoch));
    boot(&mut mon, 4, 3, 3);
    let o = &mon.map().osds[&2];
    assert!(o.up && o.lost_at == Some(epoch), "{o:?}");
}

#[test]
fn one_refused_connection_marks_down_only_the_incarnation_it_was_about() {
    let mut mon = Monitor::new(ClusterMap::new("r").unwrap(), MonConfig::default());
    boot(&mut mon, 0, 4, 4);
    let booted_at = mon.map().osds[&3]
        .up_from
        .expect("a booted OSD has up_from");
    assert_eq!(booted_at, mon.map().epoch, "osd.3 booted last");
    let report = |reporter, target, addr: &str, up_from| Request::RefusedReport {
        reporter,
        target,
        addr: addr.into(),
        up_from,
    };
    // About another address, or an incarnation the map no longer has: nothing changes.
    let epoch = mon.map().epoch;
    mon.handle(10, report(0, 3, "127.0.0.1:9999", booted_at))
        .unwrap();
    mon.handle(10, report(0, 3, "127.0.0.1:7003", booted_at - 1))
        .unwrap();
    // Nor from the target about itself, or from a reporter that is down.
    mon.handle(10, report(3, 3, "127.0.0.1:7003", booted_at))
        .unwrap();
    mon.handle(10, Request::MarkDown { id: 1 }).unwrap();
    let epoch_after_mark = mon.map().epoch;
    assert_eq!(epoch_after_mark, epoch + 1);
    mon.handle(10, report(1, 3, "127.0.0.1:7003", booted_at))
        .unwrap();
    assert!(mon.map().osds[&3].up);
    assert_eq!(
        mon.map().epoch,
        epoch_after_mark,
        "ignored reports make no epoch"
    );

    // One report about the current incarnation is enough: no grace, no second reporter.
    mon.handle(20, report(0, 3, "127.0.0.1:7003", booted_at))
        .unwrap();
    assert!(!mon.map().osds[&3].up);
    assert_eq!(mon.map().osds[&3].down_since_ms, Some(20));

    // It boots again at the same address: a report still naming the old incarnation (sent
    // before the reporter saw the boot) does not mark the new one down.
    match mon
        .handle(
            30,
            Request::Boot {
                uuid: "uuid-3".into(),
                host: "host3".into(),
                addr: "127.0.0.1:7003".into(),
                crush_weight: 0x10000,
                want_id: None,
            },
        )
        .unwrap()
    {
        Reply::Booted { id, epoch } => {
            assert_eq!(id, 3);
            assert_eq!(mon.map().osds[&3].up_from, Some(epoch));
        }
        other => panic!("{other:?}"),
    }
    mon.handle(40, report(0, 3, "127.0.0.1:7003", booted_at))
        .unwrap();
    assert!(
        mon.map().osds[&3].up,
        "a stale report took the new incarnation down"
    );
    let new_incarnation = mon.map().osds[&3].up_from.unwrap();
    mon.handle(50, report(2, 3, "127.0.0.1:7003", new_incarnation))
        .unwrap();
    assert!(!mon.map().osds[&3].up);
}

/// A new OSD gets the id it asks for when it is free (so `cairn up`'s directory `osdN` is
/// osd.N whatever order the OSDs boot in), else the lowest free one; a known uuid keeps its id.
#[test]
fn a_new_osd_gets_the_id_it_wants_when_free() {
    let mut mon = Monitor::new(ClusterMap::new("w").unwrap(), MonConfig::default());
    let mut boot_as = |uuid: &str, want_id: Option<i32>| match mon
        .handle(
            0,
            Request::Boot {
                uuid: uuid.into(),
                host: "h".into(),
                addr: format!("127.0.0.1:1{}", uuid.len()),
                crush_weight: 0x10000,
                want_id,
            },
        )
        .unwrap()
    {
        Reply::Booted { id, .. } => id,
        other => panic!("{other:?}"),
    };
    assert_eq!(boot_as("c", Some(2)), 2, "booted first, still osd.2");
    assert_eq!(boot_as("a", Some(0)), 0);
    assert_eq!(boot_as("x", Some(2)), 1, "osd.2 is taken: the lowest free");
    assert_eq!(boot_as("y", Some(-4)), 3, "a negative id is not given");
    assert_eq!(boot_as("c", Some(7)), 2, "a known uuid keeps its id");
    // An authenticated osd.N must be the OSD the map knows as N, or a new one for a free N.
    assert_eq!(mon.boot_conflict("c", 2), None);
    assert_eq!(mon.boot_conflict("new", 9), None);
    let taken = mon.boot_conflict("new", 2).unwrap();
    assert!(taken.contains("belongs to another OSD"), "{taken}");
    let moved = mon.boot_conflict("c", 9).unwrap();
    assert!(moved.contains("is osd.2, not osd.9"), "{moved}");
}

/// Failure reports name the incarnation they are about: reports about a process that has
/// restarted since (sent before the reporter saw the boot, or held while the monitor was
/// frozen) neither mark the new one down nor count towards it, and a boot forgets what was
/// reported about the previous incarnation.
#[test]
fn failure_reports_about_a_previous_incarnation_do_not_mark_the_new_one_down() {
    let mut mon = Monitor::new(ClusterMap::new("i").unwrap(), MonConfig::default());
    boot(&mut mon, 0, 4, 4);
    let old = mon.map().osds[&3].up_from.unwrap();
    let report = |reporter, addr: &str, up_from, at| {
        (
            at,
            Request::FailureReport {
                reporter,
                target: 3,
                failed_for_ms: 30_000,
                addr: addr.into(),
                up_from,
            },
        )
    };
    // One reporter about the old incarnation, then it restarts at another address.
    let (at, r) = report(0, "127.0.0.1:7003", old, 1_000);
    mon.handle(at, r).unwrap();
    assert!(mon.map().osds[&3].up, "one reporter is not enough");
    mon.handle(
        2_000,
        Request::Boot {
            uuid: "uuid-3".into(),
            host: "host3".into(),
            addr: "127.0.0.1:8003".into(),
            crush_weight: 0x10000,
            want_id: None,
        },
    )
    .unwrap();
    let new = mon.map().osds[&3].up_from.unwrap();
    assert!(new > old);
    let epoch = mon.map().epoch;
    // Late reports about the old one (its address, or its up_from): ignored.
    for (at, r) in [
        report(1, "127.0.0.1:7003", old, 2_100),
        report(2, "127.0.0.1:8003", old, 2_200),
    ] {
        mon.handle(at, r).unwrap();
    }
    assert!(
        mon.map().osds[&3].up,
        "a stale report took the new incarnation down"
    );
    assert_eq!(mon.map().epoch, epoch, "ignored reports make no epoch");
    // The first report before the boot does not count either: one new report is not enough.
    let (at, r) = report(1, "127.0.0.1:8003", new, 3_000);
    mon.handle(at, r).unwrap();
    assert!(
        mon.map().osds[&3].up,
        "a report from before the boot was counted"
    );
    // Two reporters about the current incarnation mark it down.
    let (at, r) = report(2, "127.0.0.1:8003", new, 3_100);
    mon.handle(at, r).unwrap();
    assert!(!mon.map().osds[&3].up);
}

/// A primary's pg_temp request gives the PG a temporary acting set in a new epoch (the up set
/// stays), once; subscribers and encodings reproduce it; malformed requests (unknown pool, PG
/// or OSD, an OSD twice, more OSDs than the pool's size) are refused; an empty request removes
/// it, and so does removing an OSD it names or its pool.
#[test]
fn a_pg_temp_sets_the_acting_set_until_it_is_removed() {
    let mut mon = Monitor::new(ClusterMap::new("t").unwrap(), MonConfig::default());
    boot(&mut mon, 0, 4, 4);
    let create = Request::CreatePool {
        name: "p".into(),
        size: 2,
        pg_num: 8,
    };
    mon.handle(1, create).unwrap();
    let pool = *mon.map().placement.pools.keys().next().unwrap();
    let pg = cairn_clustermap::PgId { pool, seed: 3 };
    let plain = mon.map().placement.mapper().map_pg(pg).unwrap();
    let temp: Vec<i32> = (0..4).filter(|o| !plain.up.contains(o)).collect();
    let before = mon.map().clone();
    let set = |acting: Vec<i32>| Request::PgTemp {
        temps: vec![(pg, acting)],
    };
    let Reply::Done { epoch } = mon.handle(2, set(temp.clone())).unwrap() else {
        panic!("not done");
    };
    assert_eq!(epoch, before.epoch + 1);
    mon.handle(3, set(temp.clone())).unwrap();
    assert_eq!(mon.map().epoch, epoch, "already set: no epoch");
    let m = mon.map().placement.mapper().map_pg(pg).unwrap();
    assert_eq!((m.up, m.acting.clone()), (plain.up.clone(), temp.clone()));
    let mut follower = before;
    for inc in mon.incrementals_since(follower.epoch).unwrap() {
        follower.apply(&inc).unwrap();
    }
    assert_eq!(follower.placement.pg_temp.get(&pg), Some(&temp));
    let decoded = ClusterMap::decode(&mon.map().encode()).unwrap();
    assert_eq!(decoded.placement.pg_temp.get(&pg), Some(&temp));
    let bad = [
        Request::PgTemp {
            temps: vec![(cairn_clustermap::PgId { pool: 99, seed: 0 }, vec![0])],
        },
        Request::PgTemp {
            temps: vec![(cairn_clustermap::PgId { pool, seed: 8 }, vec![0])],
        },
        // One malformed entry refuses the whole request.
        Request::PgTemp {
            temps: vec![
                (cairn_clustermap::PgId { pool, seed: 1 }, vec![0, 1]),
                (pg, vec![0, 1, 2]),
            ],
        },
        set(vec![0, 9]),
        set(vec![1, 1]),
        set(vec![0, 1, 2]),
    ];
    for req in bad {
        assert!(mon.handle(4, req.clone()).is_err(), "{req:?} accepted");
    }
    assert_eq!(mon.map().epoch, epoch, "a refused request makes no epoch");
    mon.handle(5, set(Vec::new())).unwrap();
    let m = mon.map().placement.mapper().map_pg(pg).unwrap();
    assert_eq!(m.acting, m.up, "removed");
    mon.handle(6, set(temp.clone())).unwrap();
    mon.handle(7, Request::MarkDown { id: temp[0] }).unwrap();
    let m = mon.map().placement.mapper().map_pg(pg).unwrap();
    assert_eq!(m.acting, temp[1..].to_vec(), "a down member does not serve");
    mon.handle(8, Request::RemoveOsd { id: temp[0] }).unwrap();
    assert_eq!(
        mon.map().placement.pg_temp.get(&pg),
        Some(&temp[1..].to_vec())
    );
    // Several PGs in one request make one epoch.
    let e = mon.map().epoch;
    let many = (0..8)
        .map(|seed| (cairn_clustermap::PgId { pool, seed }, temp[1..].to_vec()))
        .collect();
    mon.handle(9, Request::PgTemp { temps: many }).unwrap();
    assert_eq!(mon.map().epoch, e + 1);
    assert_eq!(mon.map().placement.pg_temp.len(), 8);
    mon.handle(10, allow_pool_delete()).unwrap();
    mon.handle(10, remove_pool("p")).unwrap();
    assert!(mon.map().placement.pg_temp.is_empty());
}

/// The acting set of every PG of `pool` in `map`, by seed.
fn acting_sets(map: &ClusterMap, pool: i64) -> Vec<Vec<i32>> {
    let mut mapper = map.placement.mapper();
    (0..map.placement.pools[&pool].pg_num)
        .map(|seed| {
            let pg = cairn_clustermap::PgId { pool, seed };
            mapper.map_pg(pg).unwrap().acting
        })
        .collect()
}

/// Marking an up OSD out or in moves PGs to OSDs already up: in the same epoch each moved PG
/// keeps its acting set with a pg_temp entry (it peers once, with the copies that hold its
/// data), a primary's removal of one is never primed again, an OSD coming back up primes
/// nothing (its copies recover in place), and with priming off nothing is primed.
#[test]
fn moved_pgs_keep_their_acting_sets_in_the_epoch_that_moves_them() {
    let mut mon = Monitor::new(ClusterMap::new("prime").unwrap(), MonConfig::default());
    boot(&mut mon, 0, 5, 5);
    let create = Request::CreatePool {
        name: "p".into(),
        size: 3,
        pg_num: 32,
    };
    mon.handle(1, create).unwrap();
    let pool = *mon.map().placement.pools.keys().next().unwrap();
    let before = acting_sets(mon.map(), pool);
    let held = before.iter().filter(|a| a.contains(&4)).count();
    assert!(held > 0, "osd.4 holds some PGs");
    let epoch = mon.map().epoch;
    mon.handle(2, Request::MarkOut { id: 4 }).unwrap();
    assert_eq!(mon.map().epoch, epoch + 1, "one epoch");
    let sorted = |mut v: Vec<i32>| {
        v.sort_unstable();
        v
    };
    for (now, was) in acting_sets(mon.map(), pool).into_iter().zip(&before) {
        // A PG whose members stay (its primary may change) moves no data.
        assert_eq!(sorted(now), sorted(was.clone()), "every acting set kept");
    }
    let temps = mon.map().placement.pg_temp.clone();
    assert!(
        temps.len() >= held,
        "{} primed, {held} held by osd.4",
        temps.len()
    );
    let ups = up_sets(&mon.map().placement, pool).unwrap();
    for (pg, acting) in &temps {
        assert!(
            !ups[pg.seed as usize].contains(&4),
            "osd.4 left {pg}'s up set"
        );
        assert_eq!(acting, &before[pg.seed as usize]);
    }
    // A primary hands one PG to its up set: not primed back.
    let (&pg, _) = temps.iter().next().unwrap();
    let remove = Request::PgTemp {
        temps: vec![(pg, Vec::new())],
    };
    mon.handle(3, remove).unwrap();
    assert!(!mon.map().placement.pg_temp.contains_key(&pg));
    let up = mon.map().placement.mapper().map_pg(pg).unwrap().up;
    assert_eq!(acting_sets(mon.map(), pool)[pg.seed as usize], up);
    // Every fill done; marked in, then down and back up: nothing primed for the returning OSD.
    let filled = |mon: &Monitor| Request::PgTemp {
        temps: mon
            .map()
            .placement
            .pg_temp
            .keys()
            .map(|pg| (*pg, Vec::new()))
            .collect(),
    };
    mon.handle(4, filled(&mon)).unwrap();
    mon.handle(5, Request::MarkIn { id: 4 }).unwrap();
    let primed_in = mon.map().placement.pg_temp.len();
    assert!(primed_in > 0, "marking in primes the PGs moving to osd.4");
    mon.handle(6, filled(&mon)).unwrap();
    mon.handle(7, Request::MarkDown { id: 4 }).unwrap();
    let e = mon.map().epoch;
    let reboot = Request::Boot {
        uuid: "uuid-4".into(),
        host: "host4".into(),
        addr: "127.0.0.1:7004".into(),
        crush_weight: 0x10000,
        want_id: Some(4),
    };
    mon.handle(8, reboot).unwrap();
    assert!(mon.map().epoch > e);
    assert!(
        mon.map().placement.pg_temp.is_empty(),
        "an OSD coming up recovers its copies in place"
    );
    // Priming off: the moved PGs go to their up sets at once.
    let off = Request::SetMonOption {
        key: "mon_osd_prime_pg_temp".into(),
        value: "false".into(),
    };
    mon.handle(9, off).unwrap();
    mon.handle(10, Request::MarkOut { id: 4 }).unwrap();
    assert!(mon.map().placement.pg_temp.is_empty());
    let ups = up_sets(&mon.map().placement, pool).unwrap();
    assert_eq!(acting_sets(mon.map(), pool), ups);
}

/// `pool set`: a new size places that many copies of every PG (still balanced) and resets
/// min_size to size - size/2; a min_size is taken in 1..=size; bad values and unknown pools
/// are refused without a new epoch; subscribers and a restarted monitor see the same pool.
#[test]
fn a_pool_set_changes_replication_and_refuses_bad_values() {
    let mut mon = Monitor::new(ClusterMap::new("fsid-set").unwrap(), MonConfig::default());
    boot(&mut mon, 0, 6, 6);
    mon.handle(
        0,
        Request::CreatePool {
            name: "rbd".into(),
            size: 2,
            pg_num: 64,
        },
    )
    .unwrap();
    let mut subscriber = mon.map().clone();
    let since = subscriber.epoch;
    let set = |mon: &mut Monitor, size: Option<u32>, min_size: Option<u32>| {
        mon.handle(
            0,
            Request::SetPool {
                name: "rbd".into(),
                size,
                min_size,
            },
        )
    };
    let params = |mon: &Monitor| {
        let p = &mon.map().placement.pools[&1];
        (p.size, p.min_size, p.pg_num)
    };
    set(&mut mon, Some(3), None).unwrap();
    assert_eq!(params(&mon), (3, 2, 64));
    let up = up_sets(&mon.map().placement, 1).unwrap();
    assert!(up.iter().all(|s| s.len() == 3), "{up:?}");
    assert!(max_deviation(mon.map(), 1) < 1.0);
    set(&mut mon, None, Some(3)).unwrap();
    assert_eq!(params(&mon), (3, 3, 64));
    set(&mut mon, Some(5), None).unwrap();
    assert_eq!(params(&mon), (5, 3, 64));
    let epoch = mon.map().epoch;
    for (size, min_size, why) in [
        (None, Some(6), "min_size must be in 1..=size (5), not 6"),
        (None, Some(0), "not 0"),
        (Some(0), None, "pool size must be in 1..=10, not 0"),
        (Some(11), None, "not 11"),
        (None, None, "nothing to set"),
    ] {
        let e = set(&mut mon, size, min_size).unwrap_err();
        assert!(e.to_string().contains(why), "{e}");
    }
    let e = mon
        .handle(
            0,
            Request::SetPool {
                name: "nope".into(),
                size: Some(3),
                min_size: None,
            },
        )
        .unwrap_err();
    assert!(e.to_string().contains("pool `nope`"), "{e}");
    assert_eq!(mon.map().epoch, epoch, "a refused change makes no epoch");
    assert_eq!(params(&mon), (5, 3, 64));
    set(&mut mon, Some(1), None).unwrap();
    assert_eq!(params(&mon), (1, 1, 64));
    let up = up_sets(&mon.map().placement, 1).unwrap();
    assert!(up.iter().all(|s| s.len() == 1), "{up:?}");
    for inc in mon.incrementals_since(since).unwrap() {
        subscriber.apply(&inc).unwrap();
    }
    assert_eq!(subscriber.encode(), mon.map().encode());
    let decoded = ClusterMap::decode(&mon.map().encode()).unwrap();
    assert_eq!(decoded.placement.pools[&1].size, 1);
}

/// `osd reweight` and `osd crush reweight`: a reweight of 0.5 halves the OSD's share, a CRUSH
/// weight of 2 doubles it (its host's weight follows), both balanced to the new targets; out
/// of range values and unknown OSDs are refused without a new epoch; setting the same value
/// again makes no epoch; subscribers replay the same map.
#[test]
fn reweights_move_an_osds_share_and_refuse_bad_values() {
    let mut mon = Monitor::new(ClusterMap::new("fsid-rw").unwrap(), MonConfig::default());
    boot(&mut mon, 0, 6, 6);
    mon.handle(
        0,
        Request::CreatePool {
            name: "rbd".into(),
            size: 3,
            pg_num: 256,
        },
    )
    .unwrap();
    let mut subscriber = mon.map().clone();
    let since = subscriber.epoch;
    let count = |mon: &Monitor, osd: i32| {
        up_sets(&mon.map().placement, 1)
            .unwrap()
            .iter()
            .filter(|s| s.contains(&osd))
            .count()
    };
    assert_eq!(count(&mon, 2), 128);
    mon.handle(
        0,
        Request::Reweight {
            id: 2,
            reweight: 0x8000,
        },
    )
    .unwrap();
    assert_eq!(mon.map().osds[&2].reweight, 0x8000);
    // The others take what it gives up: 768 copies over 5 + a half shares.
    let half = 768.0 * 0.5 / 5.5;
    assert!(
        (count(&mon, 2) as f64 - half).abs() <= 1.0,
        "{}",
        count(&mon, 2)
    );
    assert!(max_deviation(mon.map(), 1) < 1.0);
    let epoch = mon.map().epoch;
    mon.handle(
        0,
        Request::Reweight {
            id: 2,
            reweight: 0x8000,
        },
    )
    .unwrap();
    assert_eq!(mon.map().epoch, epoch, "the same reweight makes no epoch");
    mon.handle(
        0,
        Request::Reweight {
            id: 2,
            reweight: 0x10000,
        },
    )
    .unwrap();
    mon.handle(
        0,
        Request::CrushReweight {
            id: 4,
            weight: 0x20000,
        },
    )
    .unwrap();
    assert_eq!(mon.map().placement.crush.device_weight(4), Some(0x20000));
    // Size 3 on six hosts: osd.4 at weight 2 of 7 takes its share of the copies (within the
    // cap of one copy per PG).
    let double = (768.0 * 2.0 / 7.0f64).min(256.0);
    assert!(
        (count(&mon, 4) as f64 - double).abs() <= 1.0,
        "{}",
        count(&mon, 4)
    );
    assert!(max_deviation(mon.map(), 1) < 1.0);
    let epoch = mon.map().epoch;
    for (bad, why) in [
        (
            Request::Reweight {
                id: 1,
                reweight: 0x10001,
            },
            "past 1.0",
        ),
        (
            Request::CrushReweight {
                id: 1,
                weight: cairn_proto::mon::MAX_CRUSH_WEIGHT + 1,
            },
            "past 1000",
        ),
        (
            Request::CrushReweight {
                id: 42,
                weight: 0x10000,
            },
            "osd.42",
        ),
        (
            Request::Reweight {
                id: 42,
                reweight: 0x10000,
            },
            "osd.42",
        ),
    ] {
        let e = mon.handle(0, bad).unwrap_err();
        assert!(e.to_string().contains(why), "{e}");
    }
    assert_eq!(mon.map().epoch, epoch, "a refused change makes no epoch");
    for inc in mon.incrementals_since(since).unwrap() {
        subscriber.apply(&inc).unwrap();
    }
    assert_eq!(subscriber.encode(), mon.map().encode());
}

fn set_flags(mon: &mut Monitor, now: u64, names: &[&str], on: bool) -> u64 {
    let flags = names
        .iter()
        .flat_map(|n| MapFlag::parse_word(n).unwrap())
        .collect();
    match mon.handle(now, Request::SetFlags { flags, on }).unwrap() {
        Reply::Done { epoch } => epoch,
        other => panic!("{other:?}"),
    }
}

fn failure_reports(mon: &mut Monitor, now: u64, target: i32, reporters: [i32; 2]) {
    for reporter in reporters {
        let report = Request::FailureReport {
            reporter,
            target,
            failed_for_ms: 30_000,
            addr: String::new(),
            up_from: 0,
        };
        mon.handle(now, report).unwrap();
    }
}

#[test]
fn flags_hold_back_down_out_and_in_until_unset_and_travel_in_the_map() {
    let config = MonConfig {
        beacon_timeout_ms: 10_000,
        ..MonConfig::default()
    };
    let mut mon = Monitor::new(ClusterMap::new("f").unwrap(), config);
    boot(&mut mon, 0, 4, 4);
    let mut replica = mon.map().clone();
    let before = mon.map().epoch;
    let epoch = set_flags(&mut mon, 1_000, &["noout", "nodown", "pause"], true);
    assert_eq!(epoch, before + 1, "every flag set in one epoch");
    assert_eq!(
        set_flags(&mut mon, 1_000, &["noout"], true),
        epoch,
        "a flag already set makes no epoch"
    );
    for flag in [
        MapFlag::NoOut,
        MapFlag::NoDown,
        MapFlag::PauseRd,
        MapFlag::PauseWr,
    ] {
        assert!(mon.map().has(flag), "{flag}");
    }
    assert!(!mon.map().has(MapFlag::NoIn));
    let decoded = ClusterMap::decode(&mon.map().encode()).unwrap();
    assert_eq!(decoded.flags, mon.map().flags, "flags survive the encoding");
    for inc in mon.incrementals_since(replica.epoch).unwrap() {
        replica.apply(&inc).unwrap();
    }
    assert_eq!(replica.flags, mon.map().flags, "and the incrementals");

    // nodown: neither failure reports nor missing beacons mark an OSD down.
    failure_reports(&mut mon, 40_000, 3, [0, 1]);
    assert_eq!(mon.tick(40_000).unwrap(), None, "no beacon for 40 s");
    assert!(mon.map().osds.values().all(|o| o.up));
    // An operator still can.
    mon.handle(41_000, Request::MarkDown { id: 3 }).unwrap();
    assert!(!mon.map().osds[&3].up);
    // noout: down far past the down -> out interval, still in.
    assert_eq!(mon.tick(41_000 + 700_000).unwrap(), None);
    assert_eq!(mon.map().osds[&3].reweight, 0x10000);

    set_flags(&mut mon, 742_000, &["nodown"], false);
    failure_reports(&mut mon, 742_000, 2, [0, 1]);
    assert!(!mon.map().osds[&2].up, "reports count again once unset");
    set_flags(&mut mon, 742_000, &["noout"], false);
    mon.tick(743_000).unwrap();
    assert_eq!(mon.map().osds[&3].reweight, 0, "out at the next tick");
    assert!(mon.map().osds[&3].auto_out);

    // noin: the auto-out OSD boots and stays out; a new OSD joins out.
    set_flags(&mut mon, 744_000, &["noin"], true);
    let boot_as = |uuid: &str| Request::Boot {
        uuid: uuid.into(),
        host: "host3".into(),
        addr: "z".into(),
        crush_weight: 0x10000,
        want_id: None,
    };
    mon.handle(745_000, boot_as("uuid-3")).unwrap();
    assert!(mon.map().osds[&3].up);
    assert_eq!(mon.map().osds[&3].reweight, 0, "noin keeps it out");
    let new_id = match mon.handle(745_000, boot_as("uuid-new")).unwrap() {
        Reply::Booted { id, .. } => id,
        other => panic!("{other:?}"),
    };
    assert_eq!(mon.map().osds[&new_id].reweight, 0, "a new OSD joins out");
    set_flags(&mut mon, 746_000, &["noin", "pause"], false);
    assert!(mon.map().flags.is_empty());

    // noup: a known OSD boots and stays down; a new one is registered down and out; both come
    // up (the new one in) when they boot after the flag is unset.
    set_flags(&mut mon, 747_000, &["noup"], true);
    assert!(!mon.map().osds[&2].up);
    mon.handle(748_000, boot_as("uuid-2")).unwrap();
    assert!(!mon.map().osds[&2].up, "noup keeps it down");
    assert_eq!(mon.map().osds[&2].host, "host3", "its new host is recorded");
    let epoch = mon.map().epoch;
    mon.handle(748_000, boot_as("uuid-2")).unwrap();
    assert_eq!(mon.map().epoch, epoch, "booting again changes nothing");
    let newer = match mon.handle(748_000, boot_as("uuid-newer")).unwrap() {
        Reply::Booted { id, .. } => id,
        other => panic!("{other:?}"),
    };
    let entry = &mon.map().osds[&newer];
    assert!(!entry.up && entry.reweight == 0, "{entry:?}");
    set_flags(&mut mon, 749_000, &["noup"], false);
    mon.handle(750_000, boot_as("uuid-2")).unwrap();
    mon.handle(750_000, boot_as("uuid-newer")).unwrap();
    assert!(mon.map().osds[&2].up);
    let entry = &mon.map().osds[&newer];
    assert!(entry.up && entry.reweight == 0x10000, "{entry:?}");
    let page = cairn_mon::metrics::render_map(mon.map());
    assert!(page.contains("cairn_mon_flag{flag=\"noout\"} 0"), "{page}");
}

#[test]
fn an_osds_own_noout_keeps_it_in_while_the_others_go_out() {
    let mut mon = Monitor::new(ClusterMap::new("f").unwrap(), MonConfig::default());
    boot(&mut mon, 0, 4, 4);
    let epoch = mon.map().epoch;
    let set = |ids: Vec<i32>, on| Request::SetOsdFlag {
        ids,
        flag: MapFlag::NoOut,
        on,
    };
    assert!(mon.handle(1, set(vec![1, 9], true)).is_err());
    assert_eq!(
        mon.map().epoch,
        epoch,
        "an unknown OSD is refused without an epoch"
    );
    mon.handle(1, set(vec![1], true)).unwrap();
    assert!(mon.map().osds[&1].noout);
    assert_eq!(mon.map().epoch, epoch + 1);
    mon.handle(1, set(vec![1], true)).unwrap();
    assert_eq!(mon.map().epoch, epoch + 1, "already set: no epoch");
    let decoded = ClusterMap::decode(&mon.map().encode()).unwrap();
    assert!(decoded.osds[&1].noout && !decoded.osds[&2].noout);
    for id in [1, 2] {
        mon.handle(2, Request::MarkDown { id }).unwrap();
    }
    mon.tick(2 + 600_000).unwrap();
    assert_eq!(mon.map().osds[&2].reweight, 0, "osd.2 goes out");
    assert_eq!(mon.map().osds[&1].reweight, 0x10000, "osd.1 stays in");
    mon.handle(700_000, set(vec![1], false)).unwrap();
    mon.tick(700_001).unwrap();
    assert_eq!(
        mon.map().osds[&1].reweight,
        0,
        "out once its noout is removed"
    );
}

#[test]
fn an_osds_own_noup_nodown_and_noin_hold_it_alone() {
    let mut mon = Monitor::new(ClusterMap::new("f").unwrap(), MonConfig::default());
    boot(&mut mon, 0, 4, 4);
    let set = |ids: Vec<i32>, flag, on| Request::SetOsdFlag { ids, flag, on };
    let epoch = mon.map().epoch;
    assert!(
        mon.handle(1, set(vec![1], MapFlag::NoRecover, true))
            .is_err(),
        "a cluster-wide flag cannot be an OSD's own"
    );
    assert_eq!(mon.map().epoch, epoch);
    mon.handle(1, set(vec![1], MapFlag::NoDown, true)).unwrap();
    mon.handle(1, set(vec![2], MapFlag::NoUp, true)).unwrap();
    mon.handle(1, set(vec![3], MapFlag::NoIn, true)).unwrap();
    assert_eq!(mon.map().epoch, epoch + 3);
    let decoded = ClusterMap::decode(&mon.map().encode()).unwrap();
    assert_eq!(decoded.osds[&1].own_flags(), [MapFlag::NoDown]);
    assert_eq!(decoded.osds[&2].own_flags(), [MapFlag::NoUp]);
    assert_eq!(decoded.osds[&3].own_flags(), [MapFlag::NoIn]);

    // nodown: reports about osd.1 mark nothing, the same reports mark osd.0 down.
    failure_reports(&mut mon, 2, 1, [2, 3]);
    failure_reports(&mut mon, 2, 0, [2, 3]);
    assert!(mon.map().osds[&1].up, "osd.1 has nodown");
    assert!(!mon.map().osds[&0].up);
    // Nor does a beacon timeout; an operator's `osd down` does.
    for id in [2, 3] {
        mon.handle(
            40_000,
            Request::Beacon {
                id,
                full: false,
                nearfull: false,
            },
        )
        .unwrap();
    }
    mon.tick(40_000).unwrap();
    assert!(mon.map().osds[&1].up, "no beacon for 40 s, still up");
    mon.handle(40_001, Request::MarkDown { id: 1 }).unwrap();
    assert!(!mon.map().osds[&1].up);

    // noup: osd.2 boots and stays down; osd.0 boots and comes up.
    mon.handle(40_002, Request::MarkDown { id: 2 }).unwrap();
    let boot_again = |i: i32| Request::Boot {
        uuid: format!("uuid-{i}"),
        host: format!("host{i}"),
        addr: format!("127.0.0.1:{}", 7000 + i),
        crush_weight: 0x10000,
        want_id: None,
    };
    mon.handle(40_003, boot_again(2)).unwrap();
    mon.handle(40_003, boot_again(0)).unwrap();
    assert!(!mon.map().osds[&2].up, "osd.2 has noup");
    assert!(mon.map().osds[&0].up);
    mon.handle(40_004, set(vec![2], MapFlag::NoUp, false))
        .unwrap();
    mon.handle(40_005, boot_again(2)).unwrap();
    assert!(mon.map().osds[&2].up, "up once its noup is removed");

    // noin: osd.3 marked out by the timer boots and stays out; osd.1 comes back in.
    for id in [1, 3] {
        mon.handle(50_000, Request::MarkDown { id }).unwrap();
    }
    mon.tick(50_000 + 600_000).unwrap();
    assert_eq!(mon.map().osds[&3].reweight, 0);
    assert_eq!(mon.map().osds[&1].reweight, 0);
    mon.handle(660_000, boot_again(3)).unwrap();
    mon.handle(660_000, boot_again(1)).unwrap();
    assert!(mon.map().osds[&3].up && mon.map().osds[&1].up);
    assert_eq!(mon.map().osds[&3].reweight, 0, "osd.3 has noin");
    assert_eq!(mon.map().osds[&1].reweight, 0x10000);
}

#[test]
fn blocklisting_fences_an_instance_in_a_new_epoch_that_subscribers_reproduce() {
    let mut mon = Monitor::new(ClusterMap::new("fsid-b").unwrap(), MonConfig::default());
    let mut subscriber = mon.map().clone();
    let since = mon.map().epoch;
    // The monitor reads no clock: wall-clock time is its origin plus the `now` it is given.
    let now_s = 1_800_000_000;
    mon.set_unix_origin_ms(now_s * 1000);
    let add = |instance, expire_s| Request::Blocklist {
        instance,
        expire_s: Some(expire_s),
    };
    let epoch = match mon.handle(0, add(0xfeed, 600)).unwrap() {
        Reply::Done { epoch } => epoch,
        other => panic!("{other:?}"),
    };
    assert_eq!(epoch, since + 1, "the fence holds from a new epoch");
    assert!(mon.map().is_blocklisted(0xfeed, now_s));
    assert!(!mon.map().is_blocklisted(0xfeed, now_s + 601));
    // Bad requests are refused without an epoch.
    for bad in [add(0, 600), add(1, 0), add(1, 366 * 24 * 3600)] {
        assert!(mon.handle(0, bad).is_err());
    }
    let rm_unknown = Request::Blocklist {
        instance: 0xbeef,
        expire_s: None,
    };
    assert!(mon.handle(0, rm_unknown).is_err());
    assert_eq!(mon.map().epoch, epoch, "a refused fence makes no epoch");
    // A fence whose time passed is lifted by the monitor's tick, in an epoch of its own.
    mon.handle(0, add(0xaaaa, 1)).unwrap();
    assert_eq!(mon.tick(500).unwrap(), None, "not yet expired: no epoch");
    let lifted = mon
        .tick(1000)
        .unwrap()
        .expect("the expired fence is lifted");
    assert!(!mon.map().blocklist.contains_key(&0xaaaa));
    assert!(mon.map().blocklist.contains_key(&0xfeed), "the other stays");
    let rm = Request::Blocklist {
        instance: 0xfeed,
        expire_s: None,
    };
    match mon.handle(0, rm).unwrap() {
        Reply::Done { epoch } => assert_eq!(epoch, lifted + 1),
        other => panic!("{other:?}"),
    }
    assert!(mon.map().blocklist.is_empty());
    for inc in mon.incrementals_since(since).unwrap() {
        subscriber.apply(&inc).unwrap();
    }
    assert_eq!(subscriber.encode(), mon.map().encode());
}
