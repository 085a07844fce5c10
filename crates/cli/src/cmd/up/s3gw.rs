//! The part of `cairn up` that starts an S3 gateway next to the cluster (optionally with a
//! generated TLS certificate) and prints its endpoint and keys. Credentials files are
//! created readable by their owner only.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::bail;
use cairn_s3::GatewayConfig;

/// The `admin` user whose keys `creds` (an AWS credentials file an earlier `cairn up` wrote)
/// holds, while the cluster still has it, so that a restarted gateway keeps the keys its users
/// configured; otherwise a new `admin` user.
async fn admin_user(cfg: &GatewayConfig, creds: &Path) -> anyhow::Result<cairn_s3::users::User> {
    let saved_key = std::fs::read_to_string(creds).ok().and_then(|text| {
        text.lines().find_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == "aws_access_key_id").then(|| v.trim().to_string())
        })
    });
    if let Some(key) = saved_key {
        if let Some(user) = cairn_s3::find_user(cfg, &key).await? {
            if user.name == "admin" {
                return Ok(user);
            }
        }
    }
    match cairn_s3::create_user(cfg, "admin").await {
        Err(cairn_s3::GatewayError::User(cairn_s3::users::UserError::Exists(_))) => {
            Ok(cairn_s3::add_key(cfg, "admin").await?)
        }
        other => Ok(other?),
    }
}

/// For `cairn up`: starts `cairn s3gw` on `listen` (log `s3gw.log` in `dir`) through `spawn`
/// and returns its pid at once, so that `cairn up` records it before waiting for it
/// ([`announce_for_up`]). With `tls`, the gateway serves HTTPS with the certificate of a
/// local CA, both generated in `dir` the first time.
pub fn spawn_for_up(
    dir: &Path,
    mon: SocketAddr,
    listen: SocketAddr,
    metrics: bool,
    tls: bool,
    keyring: Option<&Path>,
    spawn: impl Fn(&Path, &str, &[String]) -> anyhow::Result<u32>,
) -> anyhow::Result<u32> {
    let mut args = vec![
        "s3gw".to_string(),
        "--mon".into(),
        mon.to_string(),
        "--listen".into(),
        listen.to_string(),
    ];
    if metrics {
        args.extend(["--metrics".into(), "127.0.0.1:0".into()]);
    }
    if let Some(k) = keyring {
        let name = cairn_auth::EntityName::Client(crate::up_keys::S3GW.into());
        args.extend([
            "--keyring".into(),
            k.display().to_string(),
            "--name".into(),
            name.to_string(),
        ]);
    }
    if tls {
        let g = cairn_s3::tls::generate(dir, &[listen.ip().to_string()])?;
        args.extend([
            "--tls-cert".into(),
            g.cert.display().to_string(),
            "--tls-key".into(),
            g.key.display().to_string(),
        ]);
    }
    spawn(dir, "s3gw", &args)
}

/// For `cairn up`, once the gateway [`spawn_for_up`] started on `listen` is recorded: waits
/// until it serves, takes the `admin` user of `dir/s3-credentials` (or creates one and saves
/// its keys there, mode 0600) and prints the endpoint and keys (and, with `tls`, the CA file
/// clients need).
pub fn announce_for_up(
    dir: &Path,
    mon: SocketAddr,
    listen: SocketAddr,
    tls: bool,
    cluster_auth: Option<cairn_client::tickets::ClientAuth>,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let log = dir.join("s3gw.log");
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("serving on") {
            break;
        }
        if Instant::now() > deadline || text.contains("Error") {
            bail!(
                "the S3 gateway did not start on {listen} (see {}): {}",
                log.display(),
                text.trim()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let cfg = GatewayConfig {
        mon,
        cluster_auth,
        ..GatewayConfig::default()
    };
    let creds = dir.join("s3-credentials");
    let user = crate::runtime::command()?.block_on(admin_user(&cfg, &creds))?;
    cairn_s3::tls::write_file(
        &creds,
        format!(
            "[default]\naws_access_key_id = {}\naws_secret_access_key = {}\n",
            user.access_key, user.secret_key
        )
        .as_bytes(),
        true,
    )?;
    let scheme = if tls { "https" } else { "http" };
    println!(
        "S3 gateway on {scheme}://{listen} (user 'admin', keys also in {}):",
        creds.display()
    );
    println!("  export AWS_ACCESS_KEY_ID={}", user.access_key);
    println!("  export AWS_SECRET_ACCESS_KEY={}", user.secret_key);
    if tls {
        let ca = dir.join("s3-ca.pem");
        println!("  S3 TLS CA: {}", ca.display());
        println!(
            "  aws --endpoint-url https://{listen} --ca-bundle {} s3 mb s3://demo",
            ca.display()
        );
    } else {
        println!("  aws --endpoint-url http://{listen} s3 mb s3://demo");
    }
    Ok(())
}
