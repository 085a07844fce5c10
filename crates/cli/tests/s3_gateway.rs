//! `cairn up` with its S3 gateway on free loopback ports, plus a second gateway started from a
//! TOML config with a tiny per-user request rate; `tests/s3/e2e.py` drives both with boto3
//! and aws-cli, plus s3cmd and rclone round trips (buckets, objects 0 B..100 MiB verified by
//! MD5, ranges, conditions, copy, listing 10,100 keys with delimiters and pagination, batch
//! delete, multipart, presigned URLs, tampered and expired signatures, aws-chunked uploads with
//! tampered chunks and trailers, error codes, SlowDown); `tests/s3/versioning.py`,
//! `tagging.py`, `cors.py`, `object_lock.py`, `copies.py`, `checksums.py` and `errors.py` then
//! check bucket versioning, tagging, CORS, object lock, UploadPartCopy, part numbers, CRC64NVME,
//! GetObjectAttributes and a table of error answers with boto3, aws-cli, rclone, plain HTTP
//! requests and restic. `cairn s3 user create` makes the keys.
//! Every wait is bounded and everything is torn down even on failure. Only rclone may be
//! missing, and only outside CI: that part is then skipped with a warning.

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};

use common::{cairn, free_port, Cluster};

/// Starts `cairn s3gw --config CONFIG` as one of the cluster's processes, logging to
/// `NAME.log` in its directory, and waits until it serves.
fn start_gateway(cluster: &mut Cluster, config: &std::path::Path, name: &str) {
    let path = cluster.dir.join(format!("{name}.log"));
    let log = std::fs::File::create(&path).unwrap();
    cluster.extra.push(
        Command::new(env!("CARGO_BIN_EXE_cairn"))
            .args(["s3gw", "--config", &config.display().to_string()])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !std::fs::read_to_string(&path)
        .unwrap_or_default()
        .contains("serving on")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "{name} gateway did not start: {}",
            std::fs::read_to_string(&path).unwrap_or_default()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

fn field(out: &str, name: &str) -> String {
    out.lines()
        .find_map(|l| l.strip_prefix(name))
        .map(|v| v.trim().to_string())
        .unwrap_or_else(|| panic!("no `{name}` in: {out}"))
}

#[test]
fn boto3_and_aws_cli_against_cairn_up() {
    let boto = Command::new("python3")
        .args(["-c", "import boto3, botocore; print(boto3.__version__)"])
        .output();
    let have_boto = boto.as_ref().is_ok_and(|o| o.status.success());
    assert!(
        have_boto,
        "this test needs python3 with boto3 and aws-cli: `pip install boto3 awscli` (.ci/run \
         installs them); got {boto:?}"
    );
    let s3cmd = Command::new("s3cmd").arg("--version").output();
    assert!(
        s3cmd.as_ref().is_ok_and(|o| o.status.success()),
        "this test needs s3cmd: `pip install s3cmd`; got {s3cmd:?}"
    );
    let aws = Command::new("aws").arg("--version").output();
    assert!(
        aws.as_ref().is_ok_and(|o| o.status.success()),
        "this test needs aws-cli: `pip install awscli`; got {aws:?}"
    );

    let rclone = Command::new("rclone").arg("version").output();
    if !rclone.as_ref().is_ok_and(|o| o.status.success()) {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI needs rclone for this test (`apt-get install rclone`, .ci/run does it)"
        );
        eprintln!(
            "\n{bar}\n!!! rclone is not installed: the rclone round trip is SKIPPED \
             (apt-get install rclone)\n{bar}\n",
            bar = "!".repeat(78)
        );
    }

    let mon = format!("127.0.0.1:{}", free_port());
    let s3 = format!("127.0.0.1:{}", free_port());
    let limited = format!("127.0.0.1:{}", free_port());
    let fast = format!("127.0.0.1:{}", free_port());
    let mut cluster = Cluster::new("s3");
    let dir = cluster.dir.clone();
    let d = dir.display().to_string();
    let up = || {
        cairn(&[
            "up",
            "--no-fs",
            "--dir",
            &d,
            "--mon",
            &mon,
            "--s3",
            &s3,
            "--device-mib",
            "1024",
            "--pg-num",
            "16",
        ])
    };
    let (ok, out) = up();
    assert!(ok, "{out}");
    assert!(out.contains(&format!("http://{s3}")), "{out}");
    assert!(out.contains("AWS_ACCESS_KEY_ID="), "{out}");
    let gw_page = out
        .lines()
        .find_map(|l| l.strip_prefix("Prometheus metrics: "))
        .and_then(|l| l.split(", ").find_map(|p| p.strip_prefix("s3gw http://")))
        .and_then(|p| p.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("no S3 gateway page printed: {out}"))
        .to_string();
    let limited_page = format!("127.0.0.1:{}", free_port());

    let (ok, out) = cluster.cairn(&["s3", "user", "create", "tester", "--mon", &mon]);
    assert!(ok, "{out}");
    let access = field(&out, "access_key:");
    let secret = field(&out, "secret_key:");
    assert_eq!(access.len(), 20, "{out}");
    assert_eq!(secret.len(), 40, "{out}");

    let config = dir.join("limited.toml");
    std::fs::write(
        &config,
        format!(
            "mon = \"{mon}\"\nlisten = \"{limited}\"\nmetrics = \"{limited_page}\"\nkeyring = \"{}\"\nname = \"client.s3gw\"\n[limits]\nuser_requests_per_s = 0.01\n",
            dir.join("s3gw.keyring").display()
        ),
    )
    .unwrap();
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "mon = \"127.0.0.1:1\"\nlistne = \"x\"\n").unwrap();
    let (ok, out) = cluster.cairn(&["s3gw", "--config", &bad.display().to_string()]);
    assert!(
        !ok && out.contains("listne"),
        "unknown keys are refused: {out}"
    );
    start_gateway(&mut cluster, &config, "limited");
    // A gateway whose lifecycle day is a second, with a domain for virtual-hosted requests
    // and a second storage class (its own entity, allowed the class's pool too).
    let fast_keyring = dir.join("s3fast.keyring").display().to_string();
    let (ok, out) = cluster.cairn(&[
        "auth",
        "--mon",
        &mon,
        "get-or-create",
        "client.s3fast",
        "mon",
        "allow rw",
        "osd",
        "allow rw pool=s3, allow rw pool=s3-cold",
        "-o",
        &fast_keyring,
    ]);
    assert!(ok, "{out}");
    let fast_config = dir.join("fast.toml");
    let fast_page = format!("127.0.0.1:{}", free_port());
    let fast_settings = |listen: &str, page: &str| {
        format!(
            "mon = \"{mon}\"\nlisten = \"{listen}\"\nmetrics = \"{page}\"\nkeyring = \"{fast_keyring}\"\nname = \"client.s3fast\"\n\
             lifecycle_day_secs = 1\nlifecycle_interval_ms = 500\ndomains = [\"s3.cairn.test\"]\n\
             [storage_classes]\nCOLD = \"s3-cold\"\n",
        )
    };
    std::fs::write(&fast_config, fast_settings(&fast, &fast_page)).unwrap();
    start_gateway(&mut cluster, &fast_config, "fast");
    let fast_pid = cluster.extra.last().unwrap().id();

    for (script, passed) in [
        ("e2e.py", "ALL S3 CHECKS PASSED"),
        ("versioning.py", "ALL VERSIONING CHECKS PASSED"),
        ("tagging.py", "ALL TAGGING CHECKS PASSED"),
        ("cors.py", "ALL CORS CHECKS PASSED"),
        ("object_lock.py", "ALL OBJECT LOCK CHECKS PASSED"),
        ("copies.py", "ALL COPY CHECKS PASSED"),
        ("checksums.py", "ALL CHECKSUM CHECKS PASSED"),
        ("errors.py", "ALL ERROR CHECKS PASSED"),
        ("lifecycle.py", "ALL LIFECYCLE CHECKS PASSED"),
        ("controls.py", "ALL CONTROL CHECKS PASSED"),
        ("s3cmd_features.py", "ALL S3CMD FEATURE CHECKS PASSED"),
    ] {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/s3")
            .join(script);
        let out = Command::new("timeout")
            .arg("900")
            .arg("python3")
            .arg(&path)
            .env("S3_ENDPOINT", format!("http://{s3}"))
            .env("S3_LIMITED_ENDPOINT", format!("http://{limited}"))
            .env("S3_FAST_ENDPOINT", format!("http://{fast}"))
            .env("CAIRN_BIN", env!("CARGO_BIN_EXE_cairn"))
            .env("CAIRN_MON", &mon)
            .env("CAIRN_KEYRING", cluster.keyring())
            .env("AWS_ACCESS_KEY_ID", &access)
            .env("AWS_SECRET_ACCESS_KEY", &secret)
            .env_remove("AWS_PROFILE")
            .env("AWS_CONFIG_FILE", "/dev/null")
            .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        let log = match script {
            "lifecycle.py" | "controls.py" | "s3cmd_features.py" => "fast.log",
            _ => "s3gw.log",
        };
        let gw_log = std::fs::read_to_string(dir.join(log)).unwrap_or_default();
        let tail: String = gw_log.lines().rev().take(40).collect::<Vec<_>>().join("\n");
        assert!(
            out.status.success() && text.contains(passed),
            "{script}: {text}\n--- gateway log (last lines, newest first) ---\n{tail}"
        );
    }

    // The gateways' pages counted what the clients did: objects stored, requests refused at
    // the signature check (4xx), and on the limited gateway operations refused with SlowDown.
    let value = |page: &str, sample: &str| -> f64 {
        page.lines()
            .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {sample} on:\n{page}"))
    };
    let page = common::http_get(&gw_page, "/metrics");
    assert!(
        value(
            &page,
            "cairn_s3_operations_total{op=\"PutObject\",admission=\"admitted\"}"
        ) > 0.0
    );
    assert!(
        value(
            &page,
            "cairn_s3_http_requests_total{method=\"PUT\",status=\"2xx\"}"
        ) > 0.0
    );
    assert!(
        value(
            &page,
            "cairn_s3_http_requests_total{method=\"GET\",status=\"4xx\"}"
        ) > 0.0
    );
    assert!(value(&page, "cairn_s3_received_bytes_total{method=\"PUT\"}") > 100e6);
    assert_eq!(value(&page, "cairn_s3_requests_in_flight"), 0.0);
    let limited = common::http_get(&limited_page, "/metrics");
    let refused: f64 = limited
        .lines()
        .filter(|l| l.starts_with("cairn_s3_operations_total") && l.contains("\"refused\""))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum();
    assert!(refused > 0.0, "no SlowDown counted:\n{limited}");
    let slow_down: f64 = ["GET", "PUT", "POST", "DELETE", "HEAD"]
        .iter()
        .map(|m| {
            value(
                &limited,
                &format!("cairn_s3_http_requests_total{{method=\"{m}\",status=\"5xx\"}}"),
            )
        })
        .sum();
    assert!(slow_down > 0.0, "SlowDown is a 503:\n{limited}");

    // Gateways over one pool take turns at the lifecycle pass: a second fast gateway runs
    // none while the first holds the lease, and takes over once the first is killed.
    let passes = |page: &str| {
        value(
            &common::http_get(page, "/metrics"),
            "cairn_s3_lifecycle_passes_total",
        )
    };
    let (fast2, fast2_page) = (
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
    );
    let fast2_config = dir.join("fast2.toml");
    std::fs::write(&fast2_config, fast_settings(&fast2, &fast2_page)).unwrap();
    start_gateway(&mut cluster, &fast2_config, "fast2");
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert!(passes(&fast_page) > 0.0, "the first gateway runs passes");
    assert_eq!(passes(&fast2_page), 0.0, "the second waits its turn");
    common::signal("-KILL", fast_pid);
    common::wait_exited(fast_pid);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    while passes(&fast2_page) == 0.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the second gateway never took over the lifecycle pass: {}",
            std::fs::read_to_string(dir.join("fast2.log")).unwrap_or_default()
        );
        std::thread::sleep(std::time::Duration::from_millis(250));
    }

    // A gateway killed with -9 is started again by `up` with the admin keys it had (the
    // credentials file's), which still sign requests.
    let creds = std::fs::read_to_string(dir.join("s3-credentials")).unwrap();
    let gateway = *cluster.pids().last().unwrap();
    common::signal("-9", gateway);
    common::wait_exited(gateway);
    let (ok, out) = up();
    assert!(ok && out.contains("started: s3gw"), "{out}");
    assert_eq!(
        std::fs::read_to_string(dir.join("s3-credentials")).unwrap(),
        creds
    );
    let admin_key = field(&creds.replace(" = ", ": "), "aws_access_key_id:");
    assert!(
        out.contains(&format!("AWS_ACCESS_KEY_ID={admin_key}")),
        "{out}"
    );
    // aws-cli with the admin keys of the credentials file `up` wrote.
    let aws = |args: &[&str]| {
        Command::new("aws")
            .args(["--endpoint-url", &format!("http://{s3}")])
            .args(args)
            .env(
                "AWS_SHARED_CREDENTIALS_FILE",
                dir.join("s3-credentials").display().to_string(),
            )
            .env("AWS_CONFIG_FILE", "/dev/null")
            .env_remove("AWS_ACCESS_KEY_ID")
            .env_remove("AWS_SECRET_ACCESS_KEY")
            .env_remove("AWS_PROFILE")
            .env("AWS_DEFAULT_REGION", "us-east-1")
            .output()
            .unwrap()
    };
    let ls = aws(&["s3", "ls"]);
    assert!(
        ls.status.success(),
        "the kept admin keys must still sign: {}",
        String::from_utf8_lossy(&ls.stderr)
    );

    // The gateway's pool at its quota: PUTs get radosgw's 403 QuotaExceeded (aws-cli shows
    // the code), and lifting the quota lets them through again.
    assert!(aws(&["s3", "mb", "s3://quota-test"]).status.success());
    let small = dir.join("small.txt");
    std::fs::write(&small, b"quota").unwrap();
    let small = small.display().to_string();
    let quota =
        |n: &str| cluster.cairn(&["pool", "--mon", &mon, "set-quota", "s3", "max_objects", n]);
    let (ok, out) = quota("1");
    assert!(ok, "{out}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let refused = loop {
        let put = aws(&["s3", "cp", &small, "s3://quota-test/k"]);
        if !put.status.success() {
            break String::from_utf8_lossy(&put.stderr).into_owned();
        }
        assert!(std::time::Instant::now() < deadline, "PUTs never refused");
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    assert!(refused.contains("QuotaExceeded"), "{refused}");
    let (ok, out) = quota("0");
    assert!(ok, "{out}");
    let put = aws(&["s3", "cp", &small, "s3://quota-test/k"]);
    assert!(
        put.status.success(),
        "PUT after the quota is lifted: {}",
        String::from_utf8_lossy(&put.stderr)
    );
}
