//! The daemons `cairn up` started in a cluster directory, found again from its `pids` file.
//!
//! Every daemon `cairn up` starts (and every one a test or `cairn study` starts there) writes
//! its standard output to `DIR/NAME.log`. A pid from the file therefore counts as that
//! directory's daemon `NAME` only while the process runs and its standard output is still that
//! log: after a reboot or a crash the pid may belong to an unrelated process, which must never
//! be signalled by `cairn down` nor taken for a running monitor or OSD by `cairn up`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;

/// Name of the file, inside a cluster directory, that lists the pids of its daemons (the
/// monitor's first, then each OSD's in start order, then the S3 gateway's and any other).
pub(crate) const PIDS_FILE: &str = "pids";

/// One running daemon of a cluster directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RunningDaemon {
    /// Its log's name without `.log`: `mon`, `osd0`, `s3gw`, ...
    pub name: String,
    /// Its process id.
    pub pid: u32,
}

/// What a cluster directory's `pids` file says, checked against the running processes.
#[derive(Debug, Default)]
pub(crate) struct PidsFile {
    /// Whether the file exists.
    pub exists: bool,
    /// The daemons of the directory still running, in the file's order.
    pub running: Vec<RunningDaemon>,
    /// Pids in the file that are no daemon of the directory any more (exited, or reused).
    pub gone: Vec<u32>,
}

impl PidsFile {
    /// The running daemon called `name`, if any.
    pub fn find(&self, name: &str) -> Option<&RunningDaemon> {
        self.running.iter().find(|d| d.name == name)
    }
}

/// Reads `dir`'s `pids` file (a missing file is an empty one) and sorts its pids into the
/// directory's running daemons and the rest.
pub(crate) fn read(dir: &Path) -> anyhow::Result<PidsFile> {
    let path = dir.join(PIDS_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(PidsFile::default()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let dir = canonical(dir)?;
    let mut file = PidsFile {
        exists: true,
        ..PidsFile::default()
    };
    for pid in text.lines().filter_map(|l| l.trim().parse::<u32>().ok()) {
        match daemon_name(&dir, pid) {
            Some(name) => file.running.push(RunningDaemon { name, pid }),
            None => file.gone.push(pid),
        }
    }
    Ok(file)
}

/// Writes `pids` as `dir`'s `pids` file, one per line.
pub(crate) fn write(dir: &Path, pids: &[u32]) -> anyhow::Result<()> {
    let path = dir.join(PIDS_FILE);
    let text: String = pids.iter().map(|p| format!("{p}\n")).collect();
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
}

/// Process `pid`'s arguments after the program name (`None` once it has exited).
pub(crate) fn command_line(pid: u32) -> Option<Vec<String>> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(
        cmdline
            .split(|&b| b == 0)
            .skip(1)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect(),
    )
}

/// The value following `flag` on process `pid`'s command line, if it has one.
pub(crate) fn command_line_value(pid: u32, flag: &str) -> Option<String> {
    let mut args = command_line(pid)?.into_iter();
    args.find(|a| a == flag)?;
    args.next()
}

/// Longest `cairn up` waits for a daemon that is exiting (killed, its last I/O still
/// finishing) before it refuses to start another in its place.
pub(crate) const EXIT_WAIT: Duration = Duration::from_secs(30);

/// The kernel's per-task flag of a task that has begun to exit (`PF_EXITING`).
const PF_EXITING: u64 = 0x4;
/// SIGKILL's bit in `/proc/PID/status`'s pending-signal masks.
const SIGKILL_BIT: u64 = 1 << (9 - 1);

/// Whether process `pid` is on its way out: it has begun to exit, or a SIGKILL waits for it
/// (a process in uninterruptible sleep takes one only once its I/O ends). Such a process still
/// holds what it held (an OSD its store's lock), so it counts as running for `cairn down`; but
/// `cairn up` must wait for it rather than keep it as a daemon that runs.
pub(crate) fn is_dying(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    dying_from(&stat, &status)
}

/// [`is_dying`] from the texts of `/proc/PID/stat` and `/proc/PID/status` (empty when gone).
fn dying_from(stat: &str, status: &str) -> bool {
    let mut fields = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace())
        .into_iter()
        .flatten();
    let state = fields.next();
    let flags = fields
        .nth(5)
        .and_then(|f| f.parse::<u64>().ok())
        .unwrap_or(0);
    let kill_pending = status.lines().any(|l| {
        let Some((key, mask)) = l.split_once(':') else {
            return false;
        };
        matches!(key, "SigPnd" | "ShdPnd")
            && u64::from_str_radix(mask.trim(), 16).is_ok_and(|m| m & SIGKILL_BIT != 0)
    });
    matches!(state, Some("Z" | "X")) || flags & PF_EXITING != 0 || kill_pending
}

/// Waits up to [`EXIT_WAIT`] for process `pid` to be gone; false if it still runs then.
pub(crate) fn wait_gone(pid: u32) -> bool {
    let deadline = Instant::now() + EXIT_WAIT;
    while crate::cluster_dir::is_running(pid as i32) {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

fn canonical(dir: &Path) -> anyhow::Result<PathBuf> {
    dir.canonicalize()
        .with_context(|| format!("resolving {}", dir.display()))
}

/// The daemon name of process `pid` when it runs with its standard output on a log file
/// directly inside `dir` (canonical); `None` for an exited process, a zombie, or any other.
fn daemon_name(dir: &Path, pid: u32) -> Option<String> {
    if !crate::cluster_dir::is_running(pid as i32) {
        return None;
    }
    let out = std::fs::read_link(format!("/proc/{pid}/fd/1")).ok()?;
    if out.parent()? != dir {
        return None;
    }
    // A log removed while its daemon runs reads `NAME.log (deleted)`.
    let file = out.file_name()?.to_str()?;
    file.strip_suffix(" (deleted)")
        .unwrap_or(file)
        .strip_suffix(".log")
        .map(str::to_string)
}

/// Starts `cairn ARGS` (this same executable) as daemon `name` of the cluster in `dir`, its
/// output in `dir/NAME.log`; returns its pid.
///
/// Each daemon leads a process group of its own, as a daemon should: a signal meant for the
/// command that started it (Ctrl-C at the terminal, `timeout` stopping its group, a hangup
/// sent to a job) does not reach the cluster, and job control of one daemon does not
/// touch the others.
pub(crate) fn spawn(dir: &Path, name: &str, args: &[String]) -> anyhow::Result<u32> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe()?;
    let log = std::fs::File::create(dir.join(format!("{name}.log")))?;
    let child = Command::new(exe)
        .process_group(0)
        .args(args)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("starting {name}"))?;
    Ok(child.id())
}

/// How long `cairn down` waits for a stopped process to exit before it sends SIGKILL, and
/// again after SIGKILL before it gives up.
const DOWN_GRACE: Duration = Duration::from_secs(20);

/// Sends SIGTERM to each of `pids` (in order), SIGKILL to those still running after
/// `DOWN_GRACE`, and waits until every one has exited; returns how many were signalled.
pub(crate) fn stop_processes(pids: &[i32]) -> anyhow::Result<usize> {
    let mut stopped = Vec::new();
    for &pid in pids {
        let status = Command::new("kill").arg(pid.to_string()).status()?;
        if status.success() {
            stopped.push(pid);
        }
    }
    let lingering = wait_for_exit(&stopped, DOWN_GRACE);
    for pid in &lingering {
        eprintln!("process {pid} still running after {DOWN_GRACE:?}; sending SIGKILL");
        Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()?;
    }
    let lingering = wait_for_exit(&lingering, DOWN_GRACE);
    anyhow::ensure!(
        lingering.is_empty(),
        "processes {lingering:?} did not exit even after SIGKILL"
    );
    Ok(stopped.len())
}

/// Polls until every pid in `pids` has exited (a zombie with no thread left holds no locks or files)
/// or `grace` passes; returns those still running.
fn wait_for_exit(pids: &[i32], grace: Duration) -> Vec<i32> {
    let deadline = Instant::now() + grace;
    loop {
        let running: Vec<i32> = pids.iter().copied().filter(|&p| is_running(p)).collect();
        if running.is_empty() || Instant::now() >= deadline {
            return running;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether process `pid` still exists as more than a zombie, read from `/proc/PID/stat` (its
/// state is the first field after the parenthesised command name). A zombie thread-group
/// leader whose other threads are still exiting counts as running: the process's files, and
/// so the locks on its store and map, close only when its last thread is gone.
pub(crate) fn is_running(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next());
    match state {
        None | Some("X") => false,
        Some("Z") => std::fs::read_dir(format!("/proc/{pid}/task")).is_ok_and(|t| t.count() > 1),
        Some(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    /// A process logging into the directory is its daemon (also once its log was removed); one
    /// logging elsewhere (a reused pid), an exited one and garbage lines are not; a missing
    /// file is empty.
    #[test]
    fn only_processes_logging_into_the_directory_count_as_its_daemons() {
        let dir = std::env::temp_dir().join(format!("cairn-piddir-{}", std::process::id()));
        let other = dir.join("elsewhere");
        std::fs::create_dir_all(&other).unwrap();
        assert!(!read(&dir).unwrap().exists);
        let sleeper = |log: &Path| {
            Command::new("sleep")
                .arg("30")
                .stdin(Stdio::null())
                .stdout(std::fs::File::create(log).unwrap())
                .spawn()
                .unwrap()
        };
        let mut ours = sleeper(&dir.join("osd1.log"));
        let mut unlinked = sleeper(&dir.join("mon.log"));
        std::fs::remove_file(dir.join("mon.log")).unwrap();
        let mut foreign = sleeper(&other.join("osd2.log"));
        let mut exited = Command::new("true").spawn().unwrap();
        exited.wait().unwrap();
        std::fs::write(
            dir.join(PIDS_FILE),
            format!(
                "{}\nnot a pid\n{}\n{}\n{}\n",
                ours.id(),
                foreign.id(),
                exited.id(),
                unlinked.id()
            ),
        )
        .unwrap();
        let file = read(&dir).unwrap();
        assert!(file.exists);
        assert_eq!(
            file.running,
            vec![
                RunningDaemon {
                    name: "osd1".into(),
                    pid: ours.id()
                },
                RunningDaemon {
                    name: "mon".into(),
                    pid: unlinked.id()
                }
            ]
        );
        assert_eq!(file.gone, vec![foreign.id(), exited.id()]);
        assert_eq!(file.find("osd1").map(|d| d.pid), Some(ours.id()));
        assert_eq!(command_line(ours.id()), Some(vec!["30".to_string()]));
        assert_eq!(command_line_value(ours.id(), "--listen"), None);
        for child in [&mut ours, &mut foreign, &mut unlinked] {
            child.kill().unwrap();
            child.wait().unwrap();
        }
        assert!(read(&dir).unwrap().running.is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A process that has begun to exit, has a SIGKILL pending (in its thread or shared
    /// mask) or is a zombie is dying; a sleeping or running one with other signals pending is
    /// not; this process and a live child are not.
    #[test]
    fn dying_processes_are_told_from_running_ones() {
        let stat = |state: &str, flags: u64| {
            format!("4242 (tokio (rt) x) {state} 1 4242 4242 0 -1 {flags} 12 0 0 0 5 6")
        };
        let status =
            |sig: &str, shd: &str| format!("Name:\tcairn\nSigPnd:\t{sig}\nShdPnd:\t{shd}\n");
        let idle = status("0000000000000000", "0000000000000000");
        assert!(!dying_from(&stat("S", 0x400040), &idle));
        assert!(!dying_from(
            &stat("R", 0x400040),
            &status("0000000000000002", "0000000000004000")
        ));
        assert!(dying_from(&stat("D", 0x400044), &idle));
        assert!(dying_from(
            &stat("D", 0x400040),
            &status("0000000000000100", "0000000000000000")
        ));
        assert!(dying_from(
            &stat("D", 0x400040),
            &status("0000000000000000", "0000000000000100")
        ));
        assert!(dying_from(&stat("Z", 0x400040), &idle));
        assert!(!dying_from("", ""));
        assert!(!is_dying(std::process::id()));
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        assert!(!is_dying(child.id()));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(wait_gone(child.id()));
    }
}
