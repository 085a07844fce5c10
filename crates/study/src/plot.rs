//! PNG line plots shared by the studies.
//!
//! Owns chart layout and the font: text uses an embedded DejaVu Sans Mono (assets/, Bitstream
//! Vera license), so every plot of every `cairn` command renders the same on any machine. It
//! must never decide what is plotted.

use plotters::prelude::*;
use std::path::Path;
use std::sync::OnceLock;

/// The embedded font.
static FONT_BYTES: &[u8] = include_bytes!("../assets/DejaVuSansMono.ttf");

/// Registers the embedded font as plotters' "sans-serif" (once per process); true if text can be
/// drawn. Every plotting command calls this before drawing.
pub fn register_font() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, FONT_BYTES).is_ok()
    })
}

fn fonts_available() -> bool {
    register_font()
}

/// One named series of (x, y) points.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend label.
    pub label: String,
    /// Points.
    pub points: Vec<(f64, f64)>,
}

/// Errors while drawing.
#[derive(Debug, thiserror::Error)]
#[error("plot {path}: {reason}")]
pub struct PlotError {
    /// Output file.
    pub path: String,
    /// What failed.
    pub reason: String,
}

/// Draws `series` as lines into a `width_px` x `height_px` PNG at `path`.
pub fn line_chart(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    (width_px, height_px): (u32, u32),
) -> Result<(), PlotError> {
    let err = |e: &dyn std::fmt::Display| PlotError {
        path: path.display().to_string(),
        reason: e.to_string(),
    };
    let text = fonts_available();
    let x_max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .fold(1e-9, f64::max);
    let y_max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(1e-9, f64::max)
        * 1.05;
    let root = BitMapBackend::new(path, (width_px, height_px)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut b = ChartBuilder::on(&root);
    b.margin(15);
    if text {
        b.caption(title, ("sans-serif", 22))
            .x_label_area_size(40)
            .y_label_area_size(60);
    }
    let mut chart = b
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)
        .map_err(|e| err(&e))?;
    let mut mesh = chart.configure_mesh();
    if text {
        mesh.x_desc(x_label).y_desc(y_label);
    } else {
        mesh.disable_x_axis().disable_y_axis();
    }
    mesh.draw().map_err(|e| err(&e))?;
    let colours = [RED, BLUE, GREEN, MAGENTA, CYAN, BLACK];
    for (i, s) in series.iter().enumerate() {
        let c = colours[i % colours.len()];
        let drawn = chart
            .draw_series(LineSeries::new(s.points.iter().copied(), c.stroke_width(2)))
            .map_err(|e| err(&e))?;
        if text {
            drawn
                .label(s.label.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c));
        }
    }
    if text {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
