//! Reading a CRUSH map file: crushtool's text or `crushtool --dump` JSON.

use std::path::Path;

use anyhow::Context;
use cairn_crush::{json, text, CrushMap};

/// Loads a map from crushtool text or from `crushtool --dump` JSON.
pub fn load_map(path: &Path) -> anyhow::Result<CrushMap> {
    let data =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let map = if path.extension().is_some_and(|e| e == "json") {
        json::from_json(&data)
    } else {
        text::parse(&data)
    };
    map.with_context(|| format!("in {}", path.display()))
}
