//! A daemon's settings from a TOML file, with the same names and defaults as its flags.
//!
//! Each setting is declared once, as a clap argument with its default; the TOML file takes
//! the same field names, and a field it leaves out gets clap's default (see
//! [`clap_defaults`]).

use anyhow::Context;

/// Reads a daemon's settings from a TOML file; unknown keys are errors.
pub fn load_config<T: for<'de> serde::Deserialize<'de>>(
    path: &std::path::Path,
) -> anyhow::Result<T> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    toml::from_str(&text).with_context(|| format!("in {}", path.display()))
}

/// The settings `T` holds when no flag is given: clap's defaults, the one place they are
/// declared, which a daemon's `Default` (and so its TOML file's missing fields) takes.
pub fn clap_defaults<T: clap::Args + clap::FromArgMatches>() -> T {
    let command = T::augment_args(clap::Command::new("defaults"));
    let matches = command
        .try_get_matches_from(["defaults"])
        .expect("every setting is optional or has a default");
    T::from_arg_matches(&matches).expect("clap's defaults parse as the settings")
}
