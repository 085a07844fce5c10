//! Where an NBD server accepts its connections: a TCP address, or a unix socket (qemu-nbd's
//! `--socket`, the `nbd+unix://` URIs of libnbd and QEMU).
//!
//! A unix socket is made readable and writable by its owner alone (mode 0600): the NBD
//! protocol authenticates no one, so on a shared host the socket's permissions are what keeps
//! other users off the images. It is bound in a directory of its own (mode 0700), made 0600
//! there and only then moved to its path, so no one else can connect while its mode is set. A
//! socket file left by a server that died (connecting to it is refused) is replaced; one a live
//! server answers on, one whose state cannot be told, or a path that is no socket, is refused
//! rather than taken over. A stopped server removes its socket only if it is still the same
//! file.

use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, UnixListener};
use tokio::sync::Semaphore;

use crate::error::RbdError;
use crate::nbd::{serve_connection, Exports, MAX_CONNECTIONS};

/// Permissions of a socket this server makes: its owner's alone.
pub const SOCKET_MODE: u32 = 0o600;

/// A bound listening endpoint of the NBD server.
pub enum NbdListener {
    /// A TCP address.
    Tcp(TcpListener),
    /// A unix socket, and its path (removed when the listener is dropped).
    Unix(UnixListener, SocketFile),
}

/// The path of a unix socket this server made; dropping it removes the file if it is still
/// that socket (same device and inode), so a stopped server leaves nothing for the next one to
/// clear and never removes another server's socket.
pub struct SocketFile {
    path: PathBuf,
    dev: u64,
    ino: u64,
}

impl SocketFile {
    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        let ours = std::fs::symlink_metadata(&self.path)
            .is_ok_and(|m| m.file_type().is_socket() && m.dev() == self.dev && m.ino() == self.ino);
        if ours {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Binds a unix socket at `path` with [`SOCKET_MODE`]. A socket there that refuses
/// connections (its server died) is replaced; a live one, one that cannot be probed, or any
/// other file, is refused.
pub async fn bind_unix(path: &Path) -> Result<NbdListener, RbdError> {
    let refused = |why: String| RbdError::Socket {
        path: path.display().to_string(),
        why,
    };
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(refused("exists and is not a socket".into()));
        }
        match tokio::net::UnixStream::connect(path).await {
            Ok(_) => return Err(refused("a server is listening on it".into())),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                std::fs::remove_file(path)
                    .map_err(|e| refused(format!("removing a stale one: {e}")))?;
            }
            Err(e) => {
                return Err(refused(format!(
                    "cannot tell whether a server listens on it: {e}"
                )))
            }
        }
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let private = parent.join(format!(".cairn-nbd-{}", std::process::id()));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&private)
        .map_err(|e| refused(format!("making {}: {e}", private.display())))?;
    let inner = private.join("s");
    let bound = UnixListener::bind(&inner)
        .and_then(|l| {
            std::fs::set_permissions(&inner, std::fs::Permissions::from_mode(SOCKET_MODE))?;
            std::fs::rename(&inner, path)?;
            Ok(l)
        })
        .map_err(|e| refused(e.to_string()));
    let _ = std::fs::remove_file(&inner);
    let _ = std::fs::remove_dir(&private);
    let listener = bound?;
    let meta = std::fs::symlink_metadata(path).map_err(|e| refused(e.to_string()))?;
    let file = SocketFile {
        path: path.to_path_buf(),
        dev: meta.dev(),
        ino: meta.ino(),
    };
    Ok(NbdListener::Unix(listener, file))
}

/// Serves `exports` to every connection `listener` accepts (at most [`MAX_CONNECTIONS`] at
/// once), until accepting fails for good.
pub async fn serve(listener: NbdListener, exports: Arc<Exports>) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let permit = slots
            .clone()
            .acquire_owned()
            .await
            .map_err(std::io::Error::other)?;
        let exports = exports.clone();
        let accepted = match &listener {
            NbdListener::Tcp(l) => l.accept().await.map(|(stream, peer)| {
                // Small replies (flush, write acks) must not wait for Nagle; a connection
                // that cannot be set so is closed, and the next one accepted at once.
                if let Err(e) = stream.set_nodelay(true) {
                    tracing::info!(%peer, error = %e, "nbd connection closed");
                    return;
                }
                tokio::spawn(async move {
                    log_end(serve_connection(stream, exports).await, &peer.to_string());
                    drop(permit);
                });
            }),
            NbdListener::Unix(l, _) => l.accept().await.map(|(stream, _)| {
                tokio::spawn(async move {
                    log_end(serve_connection(stream, exports).await, "unix socket");
                    drop(permit);
                });
            }),
        };
        if let Err(e) = accepted {
            // One failed accept (a connection reset before it was taken, no descriptor left
            // for now) ends that connection, not the server.
            tracing::warn!(error = %e, "accepting an nbd connection");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Logs how one connection ended.
fn log_end(ended: Result<(), crate::nbd::NbdError>, peer: &str) {
    match ended {
        Ok(()) => tracing::debug!(%peer, "nbd client disconnected"),
        Err(e) => tracing::info!(%peer, error = %e, "nbd connection closed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_socket_is_its_owners_and_a_stale_one_is_replaced_but_a_live_or_foreign_one_is_not() {
        let dir = std::env::temp_dir().join(format!("cairn-nbd-listen-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("nbd.sock");
        // A socket left by a server that died: bound, then its listener dropped without
        // removing the file.
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        assert!(path.exists(), "the stale socket is still there");
        let live = bind_unix(&path).await.expect("a stale socket is replaced");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, SOCKET_MODE);
        let again = bind_unix(&path).await;
        assert!(
            matches!(&again, Err(RbdError::Socket { why, .. }) if why.contains("listening")),
            "a live server's socket is refused"
        );
        let entries = std::fs::read_dir(&dir).unwrap().count();
        assert_eq!(entries, 1, "nothing left beside the socket");
        drop(live);
        assert!(!path.exists(), "a stopped server removes its socket");
        // Another server's socket at the path, made while this one ran, is not removed.
        let mine = bind_unix(&path).await.unwrap();
        std::fs::remove_file(&path).unwrap();
        let theirs = std::os::unix::net::UnixListener::bind(&path).unwrap();
        drop(mine);
        assert!(path.exists(), "another server's socket is left alone");
        drop(theirs);
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, b"not a socket").unwrap();
        let refused = bind_unix(&path).await;
        assert!(
            matches!(&refused, Err(RbdError::Socket { why, .. }) if why.contains("not a socket"))
        );
        assert_eq!(
            std::fs::read(&path).unwrap(),
            b"not a socket",
            "left as it was"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
