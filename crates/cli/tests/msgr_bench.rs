//! `cairn msgr bench`: the network layer of the bottom-up benchmark runs against an echo server
//! process of its own (unauthenticated, or in each wire mode), reports its round trips, stops
//! that server, and refuses sizes and depths out of bounds with a clear error.

mod common;

use common::cairn;

/// Processes running this test binary's `cairn msgr serve`.
fn echo_servers() -> Vec<u32> {
    let exe = env!("CARGO_BIN_EXE_cairn");
    let wanted = format!("{exe}\0msgr\0serve");
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).starts_with(&wanted))
                .unwrap_or(false)
        })
        .collect()
}

fn number_after(out: &str, label: &str) -> f64 {
    out.lines()
        .find_map(|l| l.strip_prefix(label))
        .unwrap_or_else(|| panic!("no {label:?} in {out}"))
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn round_trips_are_reported_and_the_echo_server_is_stopped() {
    for (shape, size, wire) in [
        ("read", "4096", "none"),
        ("write", "1048576", "none"),
        ("write", "1048576", "mac"),
        ("read", "262144", "secure"),
    ] {
        let args = [
            "msgr", "bench", "1", shape, "-b", size, "-t", "4", "--wire", wire,
        ];
        let (ok, out) = cairn(&args);
        assert!(ok, "{out}");
        assert!(number_after(&out, "Round trips:") > 0.0, "{out}");
        assert!(number_after(&out, "Average IOPS:") > 0.0, "{out}");
        let mb = number_after(&out, "Bandwidth (MB/sec):");
        assert!(mb > 0.0, "{out}");
        assert!(number_after(&out, "Latency p50    (ms):") > 0.0, "{out}");
    }
    assert!(
        echo_servers().is_empty(),
        "echo servers left: {:?}",
        echo_servers()
    );

    let (ok, out) = cairn(&["msgr", "bench", "1", "read", "-b", "100000000"]);
    assert!(!ok);
    assert!(out.contains("exceeds the limit"), "{out}");
    let (ok, out) = cairn(&["msgr", "bench", "1", "write", "-t", "5000"]);
    assert!(!ok);
    assert!(
        out.contains("requests in flight must be 1 to 1024"),
        "{out}"
    );
    let (ok, out) = cairn(&["msgr", "bench", "0", "write"]);
    assert!(!ok);
    assert!(out.contains("at least 1"), "{out}");
    assert!(!out.contains("panicked"), "{out}");
    assert!(
        echo_servers().is_empty(),
        "echo servers left: {:?}",
        echo_servers()
    );
}

#[test]
fn a_bench_killed_by_a_signal_takes_its_echo_server_with_it() {
    let mut bench = std::process::Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["msgr", "bench", "60", "read", "-b", "4096", "-t", "2"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let server = loop {
        let ours: Vec<u32> = echo_servers()
            .into_iter()
            .filter(|pid| parent_of(*pid) == Some(bench.id()))
            .collect();
        if let Some(pid) = ours.first() {
            break *pid;
        }
        assert!(started.elapsed().as_secs() < 30, "no echo server started");
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    bench.kill().unwrap();
    bench.wait().unwrap();
    let killed = std::time::Instant::now();
    while std::path::Path::new(&format!("/proc/{server}/cmdline")).exists()
        && std::fs::read(format!("/proc/{server}/cmdline")).is_ok_and(|c| !c.is_empty())
    {
        assert!(
            killed.elapsed().as_secs() < 10,
            "echo server {server} outlived its bench"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')')
        .next()?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}
