//! What image and export operations fail with.

use cairn_client::ClientError;

/// An image operation's failure.
#[derive(Debug, thiserror::Error)]
pub enum RbdError {
    /// The cluster refused or failed the operation.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// No image of that name.
    #[error("no image {0}")]
    NotFound(String),
    /// An image of that name exists already.
    #[error("image {0} exists already")]
    Exists(String),
    /// A name, size or range out of bounds.
    #[error("invalid: {0}")]
    Invalid(String),
    /// Another client holds the image's exclusive lock.
    #[error("locked: {0}")]
    Locked(String),
    /// This handle's exclusive lock was lost (taken over, broken, or not renewed in time):
    /// it writes nothing more.
    #[error("lock lost: {0}")]
    LockLost(String),
    /// A write through a read-only handle (a snapshot, or an image opened to read).
    #[error("read-only: {0}")]
    ReadOnly(String),
    /// The image or snapshot is in use (snapshots of an image being removed, clones of a
    /// snapshot being removed).
    #[error("busy: {0}")]
    Busy(String),
    /// A unix socket the NBD server cannot listen on (a live server's, a file that is no
    /// socket, or one it cannot make).
    #[error("socket {path}: {why}")]
    Socket {
        /// The socket's path.
        path: String,
        /// Why it cannot be used.
        why: String,
    },
    /// An image header that does not decode.
    #[error("corrupt image header of {name}: {why}")]
    Corrupt {
        /// The image.
        name: String,
        /// What is wrong with it.
        why: String,
    },
}
