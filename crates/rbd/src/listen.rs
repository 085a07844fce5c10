//! Where an NBD server accepts its connections: a TCP address, or a unix socket (qemu-nbd's
//! `--socket`, the `nbd+unix://` URIs of libnbd and QEMU).
//!
//! A unix socket is made readable and writable by its owner alone (mode 0600): the NBD
//! protocol authenticates no one, so on a shared host the socket's permissions are what keeps
//! other users off the images. A socket file left by a server that died is replaced; one a live
//! server answers on, or a path that is no socket, is refused rather than taken over.

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
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

/// The path of a unix socket this server made; dropping it removes the file, so a stopped
/// server leaves nothing for the next one to clear.
pub struct SocketFile(PathBuf);

impl SocketFile {
    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        // Only a socket: a file put there since is someone else's.
        if std::fs::symlink_metadata(&self.0).is_ok_and(|m| m.file_type().is_socket()) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

/// Binds a unix socket at `path` with [`SOCKET_MODE`]. A socket there that nothing answers on
/// (its server died) is replaced; a live one, or any other file, is refused.
pub async fn bind_unix(path: &Path) -> Result<NbdListener, RbdError> {
    let refused = |why: String| RbdError::Socket {
        path: path.display().to_string(),
        why,
    };
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(refused("exists and is not a socket".into()));
        }
        if tokio::net::UnixStream::connect(path).await.is_ok() {
            return Err(refused("a server is listening on it".into()));
        }
        std::fs::remove_file(path).map_err(|e| refused(format!("removing a stale one: {e}")))?;
    }
    let listener = UnixListener::bind(path).map_err(|e| refused(e.to_string()))?;
    let file = SocketFile(path.to_path_buf());
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(SOCKET_MODE))
        .map_err(|e| refused(format!("setting its mode: {e}")))?;
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
            NbdListener::Tcp(l) => l.accept().await.and_then(|(stream, peer)| {
                // Small replies (flush, write acks) must not wait for Nagle.
                stream.set_nodelay(true)?;
                Ok(tokio::spawn(async move {
                    log_end(serve_connection(stream, exports).await, &peer.to_string());
                    drop(permit);
                }))
            }),
            NbdListener::Unix(l, _) => l.accept().await.map(|(stream, _)| {
                tokio::spawn(async move {
                    log_end(serve_connection(stream, exports).await, "unix socket");
                    drop(permit);
                })
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
    async fn a_socket_is_its_owners_and_a_stale_one_is_replaced_but_a_live_one_is_not() {
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
        drop(live);
        assert!(!path.exists(), "a stopped server removes its socket");
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
