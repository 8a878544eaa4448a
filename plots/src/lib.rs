//! What the PNG figures of `tessera-bench` and `tessera report --out` share: plotters' bitmap backend
//! draws text with ab_glyph from a TTF loaded at run time (DejaVu Sans from Debian's
//! fonts-dejavu-core, or the file named by `TESSERA_FONT`), registered once under [`FONT`]; every legend
//! is drawn beside the data, never over it ([`legend_column`]); [`figures`] holds the experiments' figures.

pub mod figures;

use anyhow::{anyhow, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::FontStyle;
use std::sync::OnceLock;

/// Environment variable naming a TTF font to use instead of the system's DejaVu Sans.
pub const FONT_ENV: &str = "TESSERA_FONT";
/// Where the system's DejaVu Sans lies on the common distributions.
const FONT_PATHS: [&str; 3] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
];
/// The family the font is registered as (use it in text styles: `(FONT, 20)`).
pub const FONT: &str = "sans-serif";

/// A drawing error of plotters as an error of ours.
pub fn err(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow!("drawing: {e}")
}

/// Registers the font once; an error says how to get one.
pub fn init_font() -> Result<()> {
    static LOADED: OnceLock<Result<(), NoFont>> = OnceLock::new();
    let r = LOADED.get_or_init(|| {
        let candidates: Vec<String> =
            std::env::var(FONT_ENV).ok().into_iter().chain(FONT_PATHS.iter().map(|s| s.to_string())).collect();
        register_first(&candidates)
    });
    r.clone().map_err(anyhow::Error::new)
}

/// No font could be registered ([`init_font`]): the paths tried, and how to get one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no usable TTF font (tried {}); install fonts-dejavu-core or set {FONT_ENV}", tried.join(", "))]
pub struct NoFont {
    pub tried: Vec<String>,
}

/// Registers the first of `candidates` (paths) that reads and parses as a font.
fn register_first(candidates: &[String]) -> Result<(), NoFont> {
    for p in candidates {
        if let Ok(bytes) = std::fs::read(p) {
            // The registry keeps fonts for the life of the process.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            if plotters::style::register_font(FONT, FontStyle::Normal, bytes).is_ok() {
                return Ok(());
            }
        }
    }
    Err(NoFont { tried: candidates.to_vec() })
}

/// How a series looks in a legend.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Swatch {
    /// A filled square (bars).
    Bar,
    /// A line of this width (line series).
    Line(u32),
    /// A dashed line (reference lines).
    Dashed,
    /// A filled dot (scatter points).
    Dot,
}

/// One line of a legend.
#[derive(Clone, Debug, PartialEq)]
pub struct LegendEntry {
    pub label: String,
    pub color: RGBColor,
    pub swatch: Swatch,
}

impl LegendEntry {
    pub fn new(label: impl Into<String>, color: RGBColor, swatch: Swatch) -> Self {
        LegendEntry { label: label.into(), color, swatch }
    }
}

/// The legend of every figure, beside its data, never over it: splits `area` into the chart's part
/// (returned) and a column on the right, as wide as the longest label needs, where `entries` are drawn
/// one per row, text of `size` px. No entries: `area` is returned whole.
pub fn legend_column<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    entries: &[LegendEntry],
    size: u32,
) -> Result<DrawingArea<DB, Shift>> {
    if entries.is_empty() {
        return Ok(area.clone());
    }
    let style = TextStyle::from((FONT, size).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
    let mut text_w = 0;
    for e in entries {
        text_w = text_w.max(area.estimate_text_size(&e.label, &style).map_err(err)?.0);
    }
    let (w, _) = area.dim_in_pixel();
    let column = (text_w + 48).min(w / 2);
    let (chart, legend) = area.split_horizontally(w - column);
    let row = size as i32 + 10;
    // Below where the chart's caption ends, in line with its plotting area.
    let top = 2 * size as i32 + 16;
    for (i, e) in entries.iter().enumerate() {
        let y = top + i as i32 * row;
        let c = e.color;
        match e.swatch {
            Swatch::Bar => legend.draw(&Rectangle::new([(6, y - 6), (20, y + 6)], c.filled())),
            Swatch::Line(width) => legend.draw(&PathElement::new(vec![(4, y), (24, y)], c.stroke_width(width))),
            Swatch::Dashed => {
                legend.draw(&PathElement::new(vec![(4, y), (10, y)], c.stroke_width(2))).map_err(err)?;
                legend.draw(&PathElement::new(vec![(16, y), (24, y)], c.stroke_width(2)))
            }
            Swatch::Dot => legend.draw(&Circle::new((14, y), 5, c.filled())),
        }
        .map_err(err)?;
        legend.draw(&Text::new(e.label.clone(), (32, y), style.clone())).map_err(err)?;
    }
    Ok(chart)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_legend_takes_a_column_beside_the_chart() {
        // The figures need a TTF font (CI installs fonts-dejavu-core); the error says how to get one.
        init_font().unwrap();
        let dir = std::env::temp_dir().join(format!("tessera-plots-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("legend.png");
        {
            let root = BitMapBackend::new(&p, (800, 400)).into_drawing_area();
            root.fill(&WHITE).unwrap();
            let entries = [
                LegendEntry::new("a long series name", RGBColor(1, 2, 3), Swatch::Bar),
                LegendEntry::new("b", RGBColor(4, 5, 6), Swatch::Dashed),
            ];
            let chart = legend_column(&root, &entries, 15).unwrap();
            let (w, h) = chart.dim_in_pixel();
            assert!(w < 800 && w > 500 && h == 400, "the chart keeps the rest: {w}x{h}");
            assert_eq!(legend_column(&root, &[], 15).unwrap().dim_in_pixel(), (800, 400), "no legend, no column");
            root.present().unwrap();
        }
        assert!(std::fs::metadata(&p).unwrap().len() > 500);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn no_usable_font_says_what_was_tried_and_how_to_get_one() {
        let e = register_first(&["/nonexistent/font.ttf".to_string()]).unwrap_err().to_string();
        assert!(e.contains("/nonexistent/font.ttf") && e.contains("fonts-dejavu-core") && e.contains(FONT_ENV), "{e}");
        // Found where the system keeps it (when it does): registered.
        if let Some(p) = FONT_PATHS.iter().find(|p| std::path::Path::new(p).exists()) {
            assert_eq!(register_first(&["/nonexistent/font.ttf".to_string(), p.to_string()]), Ok(()));
        }
    }
}
