//! Admin commands to one daemon (`cairn tell osd.N ...`): a list of words in, text out.

use serde::{Deserialize, Serialize};

/// Operator -> daemon command.
pub const MSG_ADMIN: u16 = 0x0220;
/// Daemon -> operator answer.
pub const MSG_ADMIN_REPLY: u16 = 0x0221;

/// A command, e.g. `["config", "set", "osd_op_queue", "wpq"]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdminRequest {
    /// Request id, echoed.
    pub tid: u64,
    /// The words of the command.
    pub args: Vec<String>,
}

/// The answer: the command's output, or why it failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdminReply {
    /// The request's id.
    pub tid: u64,
    /// Output or error.
    pub result: Result<String, String>,
}
