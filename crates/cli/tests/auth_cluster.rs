//! A `cairn up --auth cephx` cluster: keys are made readable by their owner only, the monitor
//! refuses anyone without a valid key (no key, a wrong key, a removed entity), the monitor and
//! the OSDs (through tickets) enforce each entity's capabilities, and `cairn auth` manages
//! entities as Ceph's does. What a
//! refused request would have changed (the map's epoch, the objects) stays as it was.

mod common;

use common::{cairn, free_port, Cluster};

/// `cairn --keyring KEYRING [--name NAME] ARGS`.
fn as_entity(keyring: &str, name: Option<&str>, args: &[&str]) -> (bool, String) {
    let mut all = vec!["--keyring", keyring];
    if let Some(n) = name {
        all.extend(["--name", n]);
    }
    all.extend_from_slice(args);
    cairn(&all)
}

/// The map epoch `cairn status` reports.
fn epoch(keyring: &str, mon: &str) -> u64 {
    let (ok, out) = as_entity(keyring, None, &["status", "--mon", mon]);
    assert!(ok, "{out}");
    out.split_whitespace()
        .skip_while(|w| *w != "epoch")
        .nth(1)
        .and_then(|e| e.trim_matches(|c: char| !c.is_ascii_digit()).parse().ok())
        .unwrap_or_else(|| panic!("no epoch in {out}"))
}

#[cfg(unix)]
fn mode_of(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn an_authenticated_cluster_refuses_strangers_and_enforces_capabilities() {
    let cluster = Cluster::new("auth");
    let mon = format!("127.0.0.1:{}", free_port());
    let (ok, out) = cluster.up(&mon, &["--osds", "2", "--pg-num", "8", "--auth", "cephx"]);
    assert!(ok, "{out}");
    let dir = &cluster.dir;
    #[cfg(unix)]
    for f in ["keyring", "mon.keyring", "osd0.keyring", "osd1.keyring"] {
        assert_eq!(mode_of(&dir.join(f)), 0o600, "{f}");
    }
    let admin = dir.join("keyring").display().to_string();

    // No key, or a wrong one: refused with the reason, quickly.
    let (ok, out) = cairn(&["status", "--mon", &mon]);
    assert!(!ok && out.contains("requires authentication"), "{out}");
    let forged = dir.join("forged.keyring");
    std::fs::write(
        &forged,
        "[client.admin]\n\tkey = AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n",
    )
    .unwrap();
    let (ok, out) = as_entity(
        &forged.display().to_string(),
        None,
        &["status", "--mon", &mon],
    );
    assert!(!ok && out.contains("do not match"), "{out}");

    // The administrator reads, writes and manages keys.
    let before = epoch(&admin, &mon);
    let payload = dir.join("payload");
    let bytes: Vec<u8> = (0..300_000u32).map(|i| (i * 31 % 251) as u8).collect();
    std::fs::write(&payload, &bytes).unwrap();
    let p = payload.display().to_string();
    let (ok, out) = as_entity(
        &admin,
        None,
        &["put", "--mon", &mon, "-p", "data", "obj", &p],
    );
    assert!(ok, "{out}");
    let back = dir.join("back");
    let b = back.display().to_string();
    let (ok, out) = as_entity(
        &admin,
        None,
        &["get", "--mon", &mon, "-p", "data", "obj", &b],
    );
    assert!(ok, "{out}");
    assert_eq!(
        std::fs::read(&back).unwrap(),
        bytes,
        "read back the bytes written"
    );

    let reader = dir.join("reader.keyring").display().to_string();
    let (ok, out) = as_entity(
        &admin,
        None,
        &[
            "auth",
            "--mon",
            &mon,
            "get-or-create",
            "client.reader",
            "mon",
            "allow r",
            "osd",
            "allow r pool=data",
            "-o",
            &reader,
        ],
    );
    assert!(ok, "{out}");
    #[cfg(unix)]
    assert_eq!(mode_of(std::path::Path::new(&reader)), 0o600);
    let (ok, out) = as_entity(&admin, None, &["auth", "--mon", &mon, "ls"]);
    assert!(
        ok && out.contains("[client.reader]") && out.contains("[osd.1]"),
        "{out}"
    );
    let (ok, out) = as_entity(
        &admin,
        None,
        &["auth", "--mon", &mon, "print-key", "client.reader"],
    );
    assert!(
        ok && std::fs::read_to_string(&reader)
            .unwrap()
            .contains(out.trim()),
        "{out}"
    );

    // A reader reads but may neither change the map, delete a pool nor manage keys.
    let r = Some("client.reader");
    let (ok, out) = as_entity(&reader, r, &["status", "--mon", &mon]);
    assert!(ok, "{out}");
    for args in [
        vec!["osd", "--mon", &mon, "out", "1"],
        vec!["pool", "--mon", &mon, "rm", "data"],
        vec!["auth", "--mon", &mon, "ls"],
        vec![
            "auth",
            "--mon",
            &mon,
            "get-or-create",
            "client.x",
            "mon",
            "allow *",
        ],
    ] {
        let (ok, out) = as_entity(&reader, r, &args);
        assert!(!ok && out.contains("permission denied"), "{args:?}: {out}");
    }
    // On the OSDs (through the monitor's tickets): it reads the pool, but writes nothing and
    // runs no admin command.
    let (ok, out) = as_entity(&reader, r, &["get", "--mon", &mon, "-p", "data", "obj", &b]);
    assert!(ok, "{out}");
    assert_eq!(std::fs::read(&back).unwrap(), bytes);
    let (ok, out) = as_entity(&reader, r, &["put", "--mon", &mon, "-p", "data", "obj", &b]);
    assert!(!ok && out.contains("permission denied"), "{out}");
    let (ok, out) = as_entity(
        &reader,
        r,
        &["tell", "--mon", &mon, "osd.0", "config", "show"],
    );
    assert!(!ok && out.contains("permission denied"), "{out}");
    let (ok, out) = as_entity(
        &admin,
        None,
        &["tell", "--mon", &mon, "osd.0", "config", "show"],
    );
    assert!(ok, "{out}");
    // An OSD's key is an OSD's: it cannot act as an operator either.
    let osd0 = dir.join("osd0.keyring").display().to_string();
    let (ok, out) = as_entity(&osd0, Some("osd.0"), &["osd", "--mon", &mon, "out", "1"]);
    assert!(!ok && out.contains("permission denied"), "{out}");
    assert_eq!(
        epoch(&admin, &mon),
        before,
        "refused requests changed nothing"
    );

    // Capabilities change at once; a removed entity is refused at its next connection.
    let (ok, out) = as_entity(
        &admin,
        None,
        &[
            "auth",
            "--mon",
            &mon,
            "caps",
            "client.reader",
            "mon",
            "allow rw",
        ],
    );
    assert!(ok, "{out}");
    let (ok, out) = as_entity(&reader, r, &["osd", "--mon", &mon, "reweight", "1", "1.0"]);
    assert!(ok, "{out}");
    let (ok, out) = as_entity(
        &admin,
        None,
        &[
            "auth",
            "--mon",
            &mon,
            "caps",
            "client.reader",
            "osd",
            "allow bogus",
        ],
    );
    assert!(!ok && out.contains("bogus"), "{out}");
    let (ok, out) = as_entity(
        &admin,
        None,
        &["auth", "--mon", &mon, "rm", "client.reader"],
    );
    assert!(ok, "{out}");
    let (ok, out) = as_entity(&reader, r, &["status", "--mon", &mon]);
    assert!(!ok && out.contains("unknown entity"), "{out}");
    let (ok, out) = as_entity(&admin, None, &["auth", "--mon", &mon, "rm", "client.admin"]);
    assert!(!ok && out.contains("lock itself out"), "{out}");

    // The objects are as they were.
    let (ok, out) = as_entity(
        &admin,
        None,
        &["get", "--mon", &mon, "-p", "data", "obj", &b],
    );
    assert!(ok, "{out}");
    assert_eq!(std::fs::read(&back).unwrap(), bytes);
}
