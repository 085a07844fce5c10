//! The crushtool text format (what `crushtool -d` prints and `crushtool -c` reads).
//!
//! [`parse`] compiles text with crushtool's semantics (legacy tunables unless stated, f32
//! weights truncated to 16.16, default item weights, `pos`, automatic ids, device-class shadow
//! trees); [`write`] prints a map back. Errors name the line and column; nothing here panics on
//! malformed input.

mod lexer;
mod parse;
mod write;

pub use parse::parse;
pub use write::{format_weight, write};
