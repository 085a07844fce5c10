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
    /// An image header that does not decode.
    #[error("corrupt image header of {name}: {why}")]
    Corrupt {
        /// The image.
        name: String,
        /// What is wrong with it.
        why: String,
    },
}
