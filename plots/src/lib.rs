//! What the PNG figures of `tessera-bench` and `tessera report --out` share: plotters' bitmap backend
//! draws text with ab_glyph from a TTF loaded at run time (DejaVu Sans from Debian's
//! fonts-dejavu-core, or the file named by `TESSERA_FONT`), registered once under [`FONT`].

use anyhow::{anyhow, Result};
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
    static LOADED: OnceLock<Result<(), String>> = OnceLock::new();
    let r = LOADED.get_or_init(|| {
        let candidates: Vec<String> =
            std::env::var(FONT_ENV).ok().into_iter().chain(FONT_PATHS.iter().map(|s| s.to_string())).collect();
        register_first(&candidates)
    });
    r.clone().map_err(|e| anyhow!(e))
}

/// Registers the first of `candidates` (paths) that reads and parses as a font.
fn register_first(candidates: &[String]) -> Result<(), String> {
    for p in candidates {
        if let Ok(bytes) = std::fs::read(p) {
            // The registry keeps fonts for the life of the process.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            if plotters::style::register_font(FONT, FontStyle::Normal, bytes).is_ok() {
                return Ok(());
            }
        }
    }
    Err(format!("no usable TTF font (tried {}); install fonts-dejavu-core or set {FONT_ENV}", candidates.join(", ")))
}

/// The legend every figure draws: the series' labels at `pos`, text of `size` px, on a translucent white box.
pub fn legend<'a, DB, CT>(
    chart: &mut plotters::chart::ChartContext<'a, DB, CT>,
    pos: plotters::chart::SeriesLabelPosition,
    size: u32,
) -> Result<()>
where
    DB: plotters::prelude::DrawingBackend + 'a,
    CT: plotters::coord::CoordTranslate,
{
    use plotters::style::{Color, BLACK, WHITE};
    chart
        .configure_series_labels()
        .position(pos)
        .label_font((FONT, size))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_usable_font_says_what_was_tried_and_how_to_get_one() {
        let e = register_first(&["/nonexistent/font.ttf".to_string()]).unwrap_err();
        assert!(e.contains("/nonexistent/font.ttf") && e.contains("fonts-dejavu-core") && e.contains(FONT_ENV), "{e}");
        // Found where the system keeps it (when it does): registered.
        if let Some(p) = FONT_PATHS.iter().find(|p| std::path::Path::new(p).exists()) {
            assert_eq!(register_first(&["/nonexistent/font.ttf".to_string(), p.to_string()]), Ok(()));
        }
    }
}
