//! Typed errors of authentication and authorization.

use thiserror::Error;

/// Everything that can be wrong with a name, a key, a keyring, a capability or a ticket.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum AuthError {
    /// Not an entity name (`mon.`, `osd.N` or `client.NAME`).
    #[error("bad entity name {name:?}: {why}")]
    BadEntity {
        /// What was given.
        name: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// Not a key: bad base64, or the wrong length.
    #[error("bad key: {0}")]
    BadKey(String),
    /// A capability string outside the grammar.
    #[error("bad capability {cap:?}: {why}")]
    BadCaps {
        /// The capability string.
        cap: String,
        /// What is wrong with it.
        why: String,
    },
    /// A keyring file that cannot be read or parsed.
    #[error("keyring {path}: {why}")]
    Keyring {
        /// The file.
        path: String,
        /// What is wrong (with its line number when a line is).
        why: String,
    },
    /// A ticket that is not valid here: altered, sealed with another secret, or expired.
    #[error("ticket refused: {0}")]
    Ticket(String),
    /// A sealed value that does not open with the key: not made with it, or altered.
    #[error("sealed value refused: not sealed with this key, or altered")]
    Unseal,
}
