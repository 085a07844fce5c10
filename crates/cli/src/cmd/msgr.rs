//! `cairn msgr`: the messenger on its own, the network layer of the bottom-up benchmark.
//!
//! `cairn msgr bench` starts `cairn msgr serve` as a process of its own (as an OSD is), keeps
//! requests in flight on one session to it (as `cairn bench` keeps ops on one OSD) and prints
//! rados-bench-like totals: what a client and an OSD on this machine can exchange with no
//! storage behind them.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context};
use cairn_msgr::bench::{run_load, serve_echo, BenchAuthorizer, LoadSpec};
use cairn_msgr::protect::WireMode;
use cairn_msgr::session::Listener;
use cairn_msgr::Limits;
use clap::{Args, Subcommand, ValueEnum};

/// `cairn msgr ...`.
#[derive(Args)]
pub struct MsgrArgs {
    #[command(subcommand)]
    command: MsgrCommand,
}

#[derive(Subcommand)]
enum MsgrCommand {
    /// Answer benchmark requests (started by `cairn msgr bench`; prints its address first).
    Serve {
        /// Address to listen on (port 0: any free port).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
        /// Worker threads (an OSD's by default, see `cairn osd run --threads`).
        #[arg(long, default_value_t = crate::runtime::DEFAULT_OSD_THREADS)]
        threads: usize,
        /// Authenticate every connection and protect its frames in at least this mode
        /// (`none`: no authentication).
        #[arg(long, default_value = "none")]
        wire: Wire,
    },
    /// Round trips to an echo server in another process, like `cairn bench` against one OSD.
    Bench(BenchArgs),
}

/// How the benchmark's connection is protected.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Wire {
    /// No authentication: crc32c only.
    None,
    /// Authenticated, every frame MACed.
    Mac,
    /// Authenticated, every frame MACed and encrypted.
    Secure,
}

impl Wire {
    fn mode(self) -> Option<WireMode> {
        match self {
            Wire::None => None,
            Wire::Mac => Some(WireMode::Mac),
            Wire::Secure => Some(WireMode::Secure),
        }
    }

    fn arg(self) -> &'static str {
        match self {
            Wire::None => "none",
            Wire::Mac => "mac",
            Wire::Secure => "secure",
        }
    }
}

/// What the requests carry.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Shape {
    /// Requests carry the data, replies are bare (as writes).
    Write,
    /// Requests are bare, replies carry the data (as reads).
    Read,
}

#[derive(Args)]
struct BenchArgs {
    /// Duration in seconds.
    seconds: u64,
    /// write (data in requests) or read (data in replies).
    shape: Shape,
    /// Data bytes per request or reply.
    #[arg(short = 'b', long = "block-size", default_value_t = 4 << 20)]
    block_size: usize,
    /// Requests in flight.
    #[arg(short = 't', long = "concurrent-ios", default_value_t = 16)]
    in_flight: usize,
    /// Worker threads of the echo server started here, as an OSD's (`cairn osd run
    /// --threads`; default: an OSD's).
    #[arg(long, default_value_t = crate::runtime::DEFAULT_OSD_THREADS)]
    server_threads: usize,
    /// An echo server already running (`cairn msgr serve`) instead of a new one.
    #[arg(long)]
    server: Option<SocketAddr>,
    /// Wire mode: `none` (crc32c only), `mac` (authenticated, every frame MACed) or `secure`
    /// (also encrypted), on both ends.
    #[arg(long, default_value = "none")]
    wire: Wire,
}

/// Runs a `cairn msgr` subcommand.
pub fn run(args: MsgrArgs) -> anyhow::Result<()> {
    match args.command {
        MsgrCommand::Serve {
            listen,
            threads,
            wire,
        } => serve(listen, threads, wire),
        MsgrCommand::Bench(b) => bench(b),
    }
}

fn serve(listen: SocketAddr, threads: usize, wire: Wire) -> anyhow::Result<()> {
    // The OSD's runtime shape and messenger limits, so the server side costs what an OSD's
    // messaging costs.
    let rt = crate::runtime::osd_runtime(threads)?;
    rt.block_on(async {
        let limits = Limits::single_worker();
        let authz = wire.mode().map(|min_mode| {
            std::sync::Arc::new(BenchAuthorizer { min_mode })
                as std::sync::Arc<dyn cairn_msgr::handshake::Authorizer>
        });
        let listener = Listener::bind_with_auth(listen, limits, authz).await?;
        println!("listening on {}", listener.local_addr());
        serve_echo(listener, limits).await;
        Ok(())
    })
}

/// The echo server process a bench started; killed when dropped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `cairn msgr serve` on a free loopback port. The server is killed when this process
/// ends in any way (`PR_SET_PDEATHSIG`), so a bench stopped by a signal leaves nothing behind.
#[allow(unsafe_code)] // pre_exec: see the SAFETY note inside.
fn start_server(threads: usize, wire: Wire) -> anyhow::Result<(Server, SocketAddr)> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().context("finding the cairn binary")?;
    let mut command = Command::new(exe);
    command
        .args(["msgr", "serve", "--threads", &threads.to_string()])
        .args(["--wire", wire.arg()])
        .stdout(Stdio::piped())
        .stdin(Stdio::null());
    // SAFETY: runs in the child between fork and exec and only makes one async-signal-safe
    // system call.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    let child = command.spawn().context("starting `cairn msgr serve`")?;
    let mut server = Server(child);
    let stdout = server
        .0
        .stdout
        .take()
        .context("no stdout from the server")?;
    let mut first = String::new();
    BufReader::new(stdout)
        .read_line(&mut first)
        .context("reading the server's address")?;
    let addr = first
        .trim()
        .strip_prefix("listening on ")
        .and_then(|a| a.parse().ok())
        .with_context(|| format!("unexpected first line from the server: {first:?}"))?;
    Ok((server, addr))
}

fn bench(a: BenchArgs) -> anyhow::Result<()> {
    if a.seconds == 0 || a.in_flight == 0 {
        bail!("seconds and --concurrent-ios must be at least 1");
    }
    let (_server, addr) = match a.server {
        Some(addr) => (None, addr),
        None => {
            let (s, addr) = start_server(a.server_threads, a.wire)?;
            (Some(s), addr)
        }
    };
    let spec = LoadSpec {
        in_flight: a.in_flight,
        request_bytes: if a.shape == Shape::Write {
            a.block_size
        } else {
            0
        },
        reply_bytes: if a.shape == Shape::Read {
            a.block_size
        } else {
            0
        },
        duration: Duration::from_secs(a.seconds),
    };
    // The client's runtime shape of `cairn bench`.
    let rt = crate::runtime::command()?;
    let report = rt.block_on(run_load(addr, Limits::default(), spec, a.wire.mode()))?;
    println!("Total time run:         {:.3}", report.seconds);
    println!("Round trips:            {}", report.ops);
    println!("Data size:              {}", a.block_size);
    println!("Bandwidth (MB/sec):     {:.3}", report.mb_per_second());
    println!("Average IOPS:           {:.1}", report.ops_per_second());
    for (name, q) in [("p50", 0.5), ("p95", 0.95), ("p99", 0.99), ("p99.5", 0.995)] {
        println!("Latency {name:<6} (ms):   {:.3}", report.latency_ms(q));
    }
    Ok(())
}
