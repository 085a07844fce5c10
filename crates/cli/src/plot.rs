//! PNG charts for commands whose results people would rather look at than read.
//!
//! Text is drawn with the embedded font registered by `cairn_study::plot::register_font`, so
//! plots render the same on a machine without system fonts.

use std::path::Path;

use anyhow::{anyhow, Context};
use plotters::prelude::*;

use crate::convert::{sat_usize, small_u32};

/// Registers the embedded font (once per process); a failure leaves plots without text.
pub fn register_font() {
    let _ = cairn_study::plot::register_font();
}

/// One bar of a bar chart, with its target drawn as a tick.
pub struct Bar {
    /// Label under the bar (drawn for every bar when they fit).
    pub label: String,
    /// Bar height.
    pub value: f64,
    /// Target line for this bar.
    pub target: f64,
}

/// Widest chart drawn, in pixels.
const MAX_CHART_WIDTH: usize = 4000;
/// Pixels per character of a bar's label at the label font's size.
const LABEL_CHAR_PX: usize = 7;

/// Draws a per-item bar chart against per-item targets into a PNG file; the legend names the
/// targets `target_label` (what they are: a fair share, the seed's figure, a limit). Bars are
/// wide enough for their labels, up to [`MAX_CHART_WIDTH`].
pub fn bar_chart(
    path: &Path,
    title: &str,
    y_label: &str,
    target_label: &str,
    bars: &[Bar],
) -> anyhow::Result<()> {
    register_font();
    let longest = bars
        .iter()
        .map(|b| b.label.chars().count())
        .max()
        .unwrap_or(0);
    let per_bar = (longest * LABEL_CHAR_PX + 12).max(14);
    let width = small_u32((bars.len() * per_bar + 160).clamp(640, MAX_CHART_WIDTH));
    let root = BitMapBackend::new(path, (width, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let y_max = bars
        .iter()
        .map(|b| b.value.max(b.target))
        .fold(1.0f64, f64::max)
        * 1.1;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..bars.len() as f64, 0f64..y_max)
        .map_err(|e| anyhow!("{e}"))?;
    // Few bars: a key point at every half unit, each bar's label at its centre. Many: a label
    // at every step-th bar's left edge.
    let centred = bars.len() <= 30;
    let step = (bars.len() / 30).max(1);
    let key_points = match centred {
        true => bars.len() * 2 + 1,
        false => bars.len().min(30),
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .y_desc(y_label)
        .x_labels(key_points)
        .x_label_formatter(&|x| {
            let at_centre = (x - x.floor() - 0.5).abs() < 1e-6;
            if centred != at_centre {
                return String::new();
            }
            let i = sat_usize(x.floor());
            match i.is_multiple_of(step) {
                true => bars.get(i).map(|b| b.label.clone()).unwrap_or_default(),
                false => String::new(),
            }
        })
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    chart
        .draw_series(bars.iter().enumerate().map(|(i, b)| {
            let over = b.value > b.target + 1.0;
            let under = b.value < b.target - 1.0;
            let color = if over {
                RED.mix(0.7)
            } else if under {
                BLUE.mix(0.7)
            } else {
                GREEN.mix(0.7)
            };
            Rectangle::new(
                [(i as f64 + 0.1, 0.0), (i as f64 + 0.9, b.value)],
                color.filled(),
            )
        }))
        .map_err(|e| anyhow!("{e}"))?;
    chart
        .draw_series(bars.iter().enumerate().map(|(i, b)| {
            PathElement::new(
                vec![(i as f64, b.target), (i as f64 + 1.0, b.target)],
                BLACK.stroke_width(2),
            )
        }))
        .map_err(|e| anyhow!("{e}"))?
        .label(target_label)
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], BLACK.stroke_width(2)));
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    root.present()
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}
