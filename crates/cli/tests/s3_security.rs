//! `cairn up --s3-tls --auth cephx` on free loopback ports: the gateway serves HTTPS with a generated local
//! CA, whose path `up` prints; the credentials file and the private key are mode 0600. Two
//! users from `cairn s3 user create` then drive `tests/s3/security.py` (boto3 and aws-cli
//! with `--ca-bundle`): ownership on every operation, canned ACLs and anonymous access,
//! bucket policies, SigV2 (boto3's default presigned URLs), checksum verification, and keys
//! revoked or users removed through the CLI refused at once by the running gateway.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{cairn, free_port, Cluster};

fn field(out: &str, name: &str) -> String {
    out.lines()
        .find_map(|l| l.strip_prefix(name))
        .map(|v| v.trim().to_string())
        .unwrap_or_else(|| panic!("no `{name}` in: {out}"))
}

#[cfg(unix)]
fn mode(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn access_control_sigv2_checksums_and_tls_against_cairn_up() {
    let boto = Command::new("python3")
        .args(["-c", "import boto3, botocore"])
        .output();
    assert!(
        boto.as_ref().is_ok_and(|o| o.status.success()),
        "this test needs python3 with boto3 and aws-cli: `pip install boto3 awscli`; got {boto:?}"
    );
    let mon = format!("127.0.0.1:{}", free_port());
    let s3 = format!("127.0.0.1:{}", free_port());
    let cluster = Cluster::new("s3sec");
    let d = cluster.arg();
    let (ok, out) = cairn(&[
        "up",
        "--no-fs",
        "--dir",
        &d,
        "--mon",
        &mon,
        "--s3",
        &s3,
        "--s3-tls",
        "--device-mib",
        "1024",
        "--pg-num",
        "16",
        "--auth",
        "cephx",
    ]);
    assert!(ok, "{out}");
    assert!(out.contains(&format!("https://{s3}")), "{out}");
    let ca = PathBuf::from(field(&out, "  S3 TLS CA:"));
    assert!(ca.exists(), "{out}");
    #[cfg(unix)]
    {
        assert_eq!(mode(&cluster.dir.join("s3-credentials")), 0o600);
        assert_eq!(mode(&cluster.dir.join("s3-key.pem")), 0o600);
    }

    // The cluster authenticates: the gateway is client.s3gw, the commands below client.admin.
    let keyring = cluster.dir.join("keyring").display().to_string();
    let (ok, out) = cairn(&["s3", "user", "create", "carol", "--mon", &mon]);
    assert!(
        !ok && out.contains("requires authentication"),
        "no key, no S3 user administration: {out}"
    );
    let mut keys = Vec::new();
    for name in ["alice", "bob"] {
        let (ok, out) = cairn(&[
            "--keyring",
            &keyring,
            "s3",
            "user",
            "create",
            name,
            "--mon",
            &mon,
        ]);
        assert!(ok, "{out}");
        keys.push((field(&out, "access_key:"), field(&out, "secret_key:")));
    }
    let (ok, out) = cairn(&[
        "--keyring",
        &keyring,
        "s3",
        "user",
        "create",
        "alice",
        "--mon",
        &mon,
    ]);
    assert!(
        !ok && out.contains("exists"),
        "a name is created once: {out}"
    );

    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/s3/security.py");
    let out = Command::new("timeout")
        .arg("600")
        .arg("python3")
        .arg(&script)
        .env("S3_ENDPOINT", format!("https://{s3}"))
        .env("S3_CA", &ca)
        .env("ALICE_KEY", &keys[0].0)
        .env("ALICE_SECRET", &keys[0].1)
        .env("BOB_KEY", &keys[1].0)
        .env("BOB_SECRET", &keys[1].1)
        .env("CAIRN", env!("CARGO_BIN_EXE_cairn"))
        .env("MON", &mon)
        .env("CAIRN_KEYRING", &keyring)
        .env_remove("AWS_PROFILE")
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .env("AWS_CONFIG_FILE", "/dev/null")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let gw_log = std::fs::read_to_string(cluster.dir.join("s3gw.log")).unwrap_or_default();
    let tail: String = gw_log.lines().rev().take(40).collect::<Vec<_>>().join("\n");
    assert!(
        out.status.success() && text.contains("ALL S3 SECURITY CHECKS PASSED"),
        "{text}\n--- gateway log (last lines, newest first) ---\n{tail}"
    );
    println!("{text}");
}
