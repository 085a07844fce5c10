//! A `cairn up` cluster in a scratch directory that a command drives as an operator would:
//! stop one OSD process and start it again with the same arguments, stop everything. Used by
//! `cairn study recovery`, `cairn study nrs` and `cairn study cache --cluster`.
//!
//! The cluster's daemons lead process groups of their own, so neither Ctrl-C nor a signal to
//! the command reaches them; a command interrupted (SIGINT, SIGTERM, SIGHUP) while it holds
//! clusters stops them first, keeping their directories and logs, then exits with 128 plus the
//! signal's number.

use std::net::{SocketAddr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// Longest wait for a restarted OSD to serve.
const START_TIMEOUT: Duration = Duration::from_secs(300);

/// What `cairn up` is given.
pub struct UpSettings<'a> {
    /// OSD processes.
    pub osds: usize,
    /// Device file size of each OSD, MiB.
    pub device_mib: u64,
    /// Emulated device profile of every OSD; None for the plain files.
    pub profile: Option<&'a str>,
    /// Extra arguments for every `cairn osd run`.
    pub osd_args: &'a [String],
}

/// A cluster started with `cairn up --no-s3 --no-fs` in a directory of its own, without a pool.
/// Dropping it stops its processes and keeps the directory (the logs of a run that failed);
/// [`LocalCluster::down`] also removes it.
pub struct LocalCluster {
    dir: PathBuf,
    /// The monitor's address.
    pub mon: SocketAddr,
    running: bool,
}

impl LocalCluster {
    /// Starts the cluster in `dir` (which must not exist) on a free loopback port.
    pub fn up(settings: &UpSettings<'_>, dir: &Path) -> anyhow::Result<LocalCluster> {
        if dir.exists() {
            bail!("{} exists (a cluster of an earlier run?)", dir.display());
        }
        std::fs::create_dir_all(dir)?;
        stop_clusters_on_interrupt()?;
        held_clusters().push(dir.to_path_buf());
        let mon = free_loopback_addr()?;
        let mut cluster = LocalCluster {
            dir: dir.to_path_buf(),
            mon,
            running: true,
        };
        let mut up = vec![
            "up".to_string(),
            "--no-s3".into(),
            "--no-fs".into(),
            "--dir".into(),
            dir.display().to_string(),
            "--mon".into(),
            mon.to_string(),
            "--osds".into(),
            settings.osds.to_string(),
            "--device-mib".into(),
            settings.device_mib.to_string(),
            "--pool=".into(),
        ];
        if let Some(profile) = settings.profile {
            up.extend(["--osd-profile".into(), profile.to_string()]);
        }
        for a in settings.osd_args {
            up.push(format!("--osd-arg={a}"));
        }
        if let Err(e) = cairn_up(&up) {
            cluster.running = std::fs::metadata(dir.join("pids")).is_ok();
            return Err(e);
        }
        Ok(cluster)
    }

    /// The administrator of the cluster (`cairn up` made it with keys in its directory).
    pub fn admin(&self) -> anyhow::Result<cairn_client::tickets::ClientAuth> {
        crate::up_keys::admin_auth(&self.dir)
    }

    /// The administrator connected to the cluster: as an object client, and to the monitor
    /// (pools, marking OSDs in and out).
    pub async fn connect(
        &self,
    ) -> anyhow::Result<(
        std::sync::Arc<cairn_client::Client>,
        cairn_client::mon::MonClient,
    )> {
        let id = cairn_client::random_client_id;
        let admin = self.admin()?;
        let client = cairn_client::Client::connect_as(self.mon, id(), Some(admin.clone())).await?;
        let mon =
            cairn_client::mon::MonClient::connect_as(self.mon, id(), Some(admin.mon_credentials()))
                .await;
        Ok((std::sync::Arc::new(client), mon))
    }

    /// The pid `cairn up` recorded for the `i`-th OSD it started (the monitor's comes first).
    fn osd_pid(&self, i: usize) -> anyhow::Result<i32> {
        let pids = std::fs::read_to_string(self.dir.join("pids"))?;
        pids.lines()
            .nth(i + 1)
            .and_then(|l| l.trim().parse().ok())
            .with_context(|| format!("no pid of OSD {i} in {}/pids", self.dir.display()))
    }

    /// The id the monitor gave the `i`-th OSD `cairn up` started (ids follow boot order, not
    /// start order), from its log's `osd.N serving on` line.
    pub fn osd_id(&self, i: usize) -> anyhow::Result<i32> {
        let log = self.dir.join(format!("osd{i}.log"));
        let text = std::fs::read_to_string(&log)?;
        text.lines()
            .find_map(|l| {
                l.strip_prefix("osd.")?
                    .split_once(" serving on")?
                    .0
                    .parse()
                    .ok()
            })
            .with_context(|| format!("no `osd.N serving on` line in {}", log.display()))
    }

    /// Stops the `i`-th OSD as `cairn down` would and returns the arguments it ran with.
    pub fn stop_osd(&self, i: usize) -> anyhow::Result<Vec<String>> {
        let pid = self.osd_pid(i)?;
        let args = crate::cluster_dir::command_line(pid as u32)
            .with_context(|| format!("OSD {i} (pid {pid}) is not running"))?;
        crate::cluster_dir::stop_processes(&[pid])?;
        Ok(args)
    }

    /// Starts the `i`-th OSD again with `args` and records its pid for `cairn down`.
    pub fn start_osd(&self, i: usize, args: &[String]) -> anyhow::Result<()> {
        let name = format!("osd{i}");
        let pid = crate::cluster_dir::spawn(&self.dir, &name, args)?;
        let path = self.dir.join("pids");
        let mut pids: Vec<String> = std::fs::read_to_string(&path)?
            .lines()
            .map(String::from)
            .collect();
        match pids.get_mut(i + 1) {
            Some(line) => *line = pid.to_string(),
            None => bail!("no line for OSD {i} in {}", path.display()),
        }
        std::fs::write(&path, pids.join("\n") + "\n")?;
        let deadline = Instant::now() + START_TIMEOUT;
        let log = self.dir.join(format!("{name}.log"));
        while !std::fs::read_to_string(&log).is_ok_and(|l| l.contains("serving on")) {
            if Instant::now() > deadline || !crate::cluster_dir::is_running(pid as i32) {
                bail!("OSD {i} did not start again (see {})", log.display());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    /// Stops every process.
    pub fn stop(&mut self) -> anyhow::Result<()> {
        // Held throughout: an interrupt meanwhile waits for this stop, or this one for it.
        let mut held = held_clusters();
        if self.running {
            self.running = false;
            cairn(&[
                "down".into(),
                "--dir".into(),
                self.dir.display().to_string(),
            ])?;
        }
        held.retain(|d| d != &self.dir);
        Ok(())
    }

    /// Stops every process and removes the directory.
    pub fn down(mut self) -> anyhow::Result<()> {
        self.stop()?;
        std::fs::remove_dir_all(&self.dir)
            .with_context(|| format!("removing {}", self.dir.display()))
    }
}

impl Drop for LocalCluster {
    /// A run that failed stops its processes and keeps their logs.
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// The directories of the clusters this process started and has not stopped.
fn held_clusters() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    static HELD: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
    HELD.lock().unwrap_or_else(|p| p.into_inner())
}

/// The pid of the `cairn up` running now, if any: an interrupt stops it before its cluster.
fn up_in_flight() -> std::sync::MutexGuard<'static, Option<u32>> {
    static UP: Mutex<Option<u32>> = Mutex::new(None);
    UP.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `cairn up ARGS` as [`cairn`] does, its pid known to the interrupt handler meanwhile.
fn cairn_up(args: &[String]) -> anyhow::Result<String> {
    let child = Command::new(std::env::current_exe()?)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .context("running cairn up")?;
    *up_in_flight() = Some(child.id());
    let out = child.wait_with_output();
    *up_in_flight() = None;
    stdout_of(args, out.context("running cairn up")?)
}

/// Installs, once per process, the handler that stops the held clusters when the process is
/// interrupted (see the module's documentation). The signals are caught from when this
/// returns: a thread of its own waits for them.
fn stop_clusters_on_interrupt() -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    static INSTALLED: Once = Once::new();
    let mut result = Ok(());
    INSTALLED.call_once(|| {
        result = (|| -> anyhow::Result<()> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let (mut int, mut term, mut hup) = {
                let _entered = rt.enter();
                (
                    signal(SignalKind::interrupt())?,
                    signal(SignalKind::terminate())?,
                    signal(SignalKind::hangup())?,
                )
            };
            std::thread::Builder::new()
                .name("cluster-interrupt".into())
                .spawn(move || {
                    let number = rt.block_on(async {
                        tokio::select! {
                            _ = int.recv() => libc::SIGINT,
                            _ = term.recv() => libc::SIGTERM,
                            _ = hup.recv() => libc::SIGHUP,
                        }
                    });
                    stop_held_clusters_and_exit(number);
                })?;
            Ok(())
        })();
    });
    result.context("catching interrupts to stop the cluster on them")
}

/// Stops a `cairn up` in flight and every held cluster (`cairn down`), then exits with 128 +
/// `signal`. The list of held clusters stays locked until the exit, so the command's own
/// threads cannot start or stop one meanwhile; the report is written last, and its failure
/// (a closed pipe, a hung-up terminal) is ignored, so that nothing stops the stopping.
fn stop_held_clusters_and_exit(signal: i32) -> ! {
    use std::io::Write;
    let held = held_clusters();
    if let Some(pid) = *up_in_flight() {
        stop_up_in_flight(pid);
    }
    let mut report = Vec::new();
    for dir in held.iter() {
        let down = Command::new(std::env::current_exe().unwrap_or_else(|_| "cairn".into()))
            .process_group(0)
            .args(["down", "--dir"])
            .arg(dir)
            .output();
        let outcome = match down {
            Ok(out) if out.status.success() => "stopped".to_string(),
            Ok(out) => format!(
                "not stopped: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            Err(e) => format!("not stopped: {e}"),
        };
        report.push(format!(
            "interrupted: the cluster in {} {outcome} (its logs stay there)",
            dir.display()
        ));
    }
    let _ = writeln!(std::io::stderr(), "{}", report.join("\n"));
    std::process::exit(128 + signal)
}

/// Longest wait for an interrupted `cairn up` to exit.
const UP_STOP_GRACE: Duration = Duration::from_secs(10);

/// Sends SIGTERM to `cairn up` process `pid` and waits (at most [`UP_STOP_GRACE`]) until it
/// has exited, so that the `pids` file `cairn down` reads is no longer being written.
fn stop_up_in_flight(pid: u32) {
    let Ok(pid) = i32::try_from(pid) else {
        return;
    };
    if Command::new("kill").arg(pid.to_string()).status().is_err() {
        return;
    }
    let deadline = Instant::now() + UP_STOP_GRACE;
    while crate::cluster_dir::is_running(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs this binary with `args`; its output is returned, or the error names it.
fn cairn(args: &[String]) -> anyhow::Result<String> {
    let out = Command::new(std::env::current_exe()?)
        .args(args)
        .output()
        .with_context(|| format!("running cairn {}", args.join(" ")))?;
    stdout_of(args, out)
}

/// The standard output of `cairn ARGS` that ended as `out`, or an error with its standard
/// error when it failed.
fn stdout_of(args: &[String], out: std::process::Output) -> anyhow::Result<String> {
    if !out.status.success() {
        bail!(
            "cairn {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A loopback address no one listens on now.
fn free_loopback_addr() -> anyhow::Result<SocketAddr> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}
