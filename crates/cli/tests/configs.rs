//! Daemons started from TOML config files (the multi-machine way): `cairn mon --config` and
//! `cairn osd run --config` on free loopback ports; unknown keys are refused with an error.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn cairn(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

fn spawn(args: &[&str]) -> Daemon {
    Daemon(
        Command::new(env!("CARGO_BIN_EXE_cairn"))
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

#[test]
fn daemons_run_from_config_files() {
    let dir = std::env::temp_dir().join(format!("cairn-configs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mon = format!("127.0.0.1:{}", free_port());
    let mon_toml = dir.join("mon.toml");
    std::fs::write(
        &mon_toml,
        format!(
            "listen = \"{mon}\"\nfsid = \"site-a\"\ndata = \"{}\"\n",
            dir.join("mon").display()
        ),
    )
    .unwrap();
    let osd_toml = dir.join("osd.toml");
    std::fs::write(
        &osd_toml,
        format!(
            "mon = \"{mon}\"\ndata = \"{}\"\nhost = \"rack1-node7\"\ndevice_mib = 128\n",
            dir.join("osd").display()
        ),
    )
    .unwrap();
    let _mon = spawn(&["mon", "--config", &mon_toml.display().to_string()]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(&mon).is_err() {
        assert!(
            Instant::now() < deadline,
            "monitor did not start from its config"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let _osd = spawn(&["osd", "run", "--config", &osd_toml.display().to_string()]);
    let mut tree = String::new();
    while Instant::now() < deadline {
        let (ok, out) = cairn(&["osd", "--mon", &mon, "tree"]);
        if ok && out.contains("rack1-node7") {
            tree = out;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        tree.contains("osd.0") && tree.contains("up"),
        "OSD from config did not register: {tree}"
    );
    let (ok, out) = cairn(&["status", "--mon", &mon]);
    assert!(ok && out.contains("site-a"), "{out}");
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "listen = \"127.0.0.1:1\"\nfsdi = \"typo\"\n").unwrap();
    let (ok, out) = cairn(&["mon", "--config", &bad.display().to_string()]);
    assert!(
        !ok && out.contains("fsdi"),
        "an unknown key must be named: {out}"
    );
    let (ok, out) = cairn(&["osd", "run"]);
    assert!(
        !ok && out.contains("--data"),
        "an OSD without a data directory must be refused: {out}"
    );
    drop(_osd);
    drop(_mon);
    let _ = std::fs::remove_dir_all(&dir);
}
