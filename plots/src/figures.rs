//! The experiments' figures (`tessera-bench`): grouped bars, lines, scatter and histogram panels, each
//! with its legend in a column beside the data ([`crate::legend_column`]).

use anyhow::{bail, Result};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::Path;

use crate::{err, legend_column, LegendEntry, Swatch, FONT};

/// Pixels a figure adds for its legend column ([`crate::legend_column`]), so the data keep their room.
const LEGEND_ROOM: u32 = 180;
pub use crate::{init_font, FONT_ENV};

/// Colours of series in order (off, even, iorchestrator, ...).
const PALETTE: [RGBColor; 10] = [
    RGBColor(110, 110, 110),
    RGBColor(230, 140, 30),
    RGBColor(30, 100, 200),
    RGBColor(40, 160, 70),
    RGBColor(200, 40, 40),
    RGBColor(140, 80, 180),
    RGBColor(20, 170, 170),
    RGBColor(140, 90, 40),
    RGBColor(230, 110, 180),
    RGBColor(150, 150, 20),
];

pub fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// Same mode, same colour in every figure: vanilla grey, even orange, IOrchestrator blue.
fn series_color(i: usize, name: &str) -> RGBColor {
    let n = name.to_ascii_lowercase();
    if n.contains("vanilla") || n.starts_with("without") || n == "off" {
        color(0)
    } else if n.contains("even") {
        color(1)
    } else if n.contains("iorchestrator") {
        color(2)
    } else {
        color(i + 3)
    }
}

/// One chart of grouped bars: for each group, one bar per series.
#[derive(Clone, Debug, PartialEq)]
pub struct BarPanel {
    pub title: String,
    pub groups: Vec<String>,
    /// (series name, value per group; NaN = missing).
    pub series: Vec<(String, Vec<f64>)>,
}

/// Grouped bars, panels stacked vertically; `y_label` on every panel.
pub fn grouped_bars(path: &Path, title: &str, y_label: &str, panels: &[BarPanel]) -> Result<()> {
    init_font()?;
    if panels.is_empty() {
        bail!("nothing to plot");
    }
    let width = 260 + 150 * panels.iter().map(|p| p.groups.len()).max().unwrap_or(1) as u32 + LEGEND_ROOM;
    let width = width.max(11 * title.chars().count() as u32 + 40).max(700);
    let height = 60 + 380 * panels.len() as u32;
    let root = BitMapBackend::new(path, (width, height)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let root = root.titled(title, (FONT, 22)).map_err(err)?;
    for (area, panel) in root.split_evenly((panels.len(), 1)).iter().zip(panels) {
        let n = panel.groups.len().max(1);
        let ymax = panel.series.iter().flat_map(|s| s.1.iter()).copied().filter(|v| v.is_finite()).fold(0.0, f64::max);
        // Headroom above the tallest bar for its value.
        let ymax = if ymax > 0.0 { ymax * 1.12 } else { 1.0 };
        let entries: Vec<LegendEntry> = panel
            .series
            .iter()
            .enumerate()
            .map(|(si, (name, _))| LegendEntry::new(name, series_color(si, name), Swatch::Bar))
            .collect();
        let area = legend_column(area, &entries, 15)?;
        let mut chart = ChartBuilder::on(&area)
            .caption(&panel.title, (FONT, 20))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), 0f64..ymax)
            .map_err(err)?;
        let groups = panel.groups.clone();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n)
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < groups.len() {
                    groups[i as usize].clone()
                } else {
                    String::new()
                }
            })
            .x_label_style((FONT, 15))
            .y_label_style((FONT, 14))
            .y_desc(y_label)
            .axis_desc_style((FONT, 16))
            .draw()
            .map_err(err)?;
        let k = panel.series.len().max(1) as f64;
        let bar = 0.8 / k;
        for (si, (name, values)) in panel.series.iter().enumerate() {
            let c = series_color(si, name);
            let x0 = |g: usize| g as f64 - 0.4 + si as f64 * bar;
            chart
                .draw_series(
                    values
                        .iter()
                        .enumerate()
                        .filter(|(_, v)| v.is_finite())
                        .map(|(g, &v)| Rectangle::new([(x0(g), 0.0), (x0(g) + bar * 0.92, v)], c.filled())),
                )
                .map_err(err)?;
            chart
                .draw_series(values.iter().enumerate().filter(|(_, v)| v.is_finite()).map(|(g, &v)| {
                    Text::new(
                        if v.abs() < 10.0 { format!("{v:.2}") } else { format!("{v:.1}") },
                        (x0(g) + bar * 0.46, v),
                        TextStyle::from((FONT, 12).into_font()).pos(Pos::new(HPos::Center, VPos::Bottom)),
                    )
                }))
                .map_err(err)?;
        }
    }
    root.present().map_err(err)?;
    Ok(())
}

/// Lines with markers: (series name, points); `hlines` are horizontal reference lines (name, y).
pub fn lines(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(String, Vec<(f64, f64)>)],
    hlines: &[(String, f64)],
) -> Result<()> {
    init_font()?;
    let pts = series.iter().flat_map(|s| s.1.iter());
    let xmin = pts.clone().map(|p| p.0).fold(f64::INFINITY, f64::min);
    let xmax = pts.clone().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max);
    let ymax = pts.map(|p| p.1).chain(hlines.iter().map(|h| h.1)).filter(|v| v.is_finite()).fold(0.0, f64::max);
    if !xmin.is_finite() || !xmax.is_finite() {
        bail!("nothing to plot");
    }
    let pad = ((xmax - xmin) * 0.08).max(0.5);
    let ymax = if ymax > 0.0 { ymax * 1.1 } else { 1.0 };
    let root = BitMapBackend::new(path, ((900 + LEGEND_ROOM).max(10 * title.chars().count() as u32 + 40), 560))
        .into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let entries: Vec<LegendEntry> = (series.iter().enumerate())
        .map(|(i, (name, _))| LegendEntry::new(name, series_color(i, name), Swatch::Line(3)))
        .chain(hlines.iter().map(|(name, _)| LegendEntry::new(name, color(0), Swatch::Dashed)))
        .collect();
    let area = legend_column(&root, &entries, 15)?;
    let mut chart = ChartBuilder::on(&area)
        .caption(title, (FONT, 20))
        .margin(14)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d((xmin - pad)..(xmax + pad), 0f64..ymax)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .axis_desc_style((FONT, 17))
        .label_style((FONT, 14))
        .draw()
        .map_err(err)?;
    for (i, (name, p)) in series.iter().enumerate() {
        let c = series_color(i, name);
        chart.draw_series(LineSeries::new(p.iter().copied(), c.stroke_width(3))).map_err(err)?;
        chart.draw_series(p.iter().map(|&xy| Circle::new(xy, 5, c.filled()))).map_err(err)?;
        chart
            .draw_series(p.iter().map(|&(x, y)| {
                Text::new(
                    format!("{y:.1}"),
                    (x, y),
                    TextStyle::from((FONT, 13).into_font()).pos(Pos::new(HPos::Center, VPos::Bottom)),
                )
            }))
            .map_err(err)?;
    }
    for (_, y) in hlines {
        let c = color(0);
        let y = *y;
        chart
            .draw_series(DashedLineSeries::new(vec![(xmin - pad, y), (xmax + pad, y)], 8, 6, c.stroke_width(2)))
            .map_err(err)?;
    }
    root.present().map_err(err)?;
    Ok(())
}

/// A scatter panel: title and points (x, y, series index).
pub type ScatterPanel = (String, Vec<(f64, f64, usize)>);

/// Scatter panels side by side: (panel title, points (x, y, series index)), with series names.
pub fn scatter_panels(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    names: &[String],
    panels: &[ScatterPanel],
) -> Result<()> {
    init_font()?;
    if panels.is_empty() {
        bail!("nothing to plot");
    }
    let w = (560 * panels.len() as u32 + LEGEND_ROOM).max(10 * title.chars().count() as u32 + 40);
    let root = BitMapBackend::new(path, (w, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let root = root.titled(title, (FONT, 20)).map_err(err)?;
    let entries: Vec<LegendEntry> =
        names.iter().enumerate().map(|(si, name)| LegendEntry::new(name, color(si + 1), Swatch::Dot)).collect();
    let root = legend_column(&root, &entries, 14)?;
    let ymax = panels.iter().flat_map(|p| p.1.iter()).map(|p| p.1).fold(0.0, f64::max).max(1e-9) * 1.05;
    for (area, (ptitle, pts)) in root.split_evenly((1, panels.len())).iter().zip(panels) {
        let xmax = pts.iter().map(|p| p.0).fold(0.0, f64::max).max(1e-3);
        let mut chart = ChartBuilder::on(area)
            .caption(ptitle, (FONT, 18))
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(65)
            .build_cartesian_2d(0f64..xmax, 0f64..ymax)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc(x_label)
            .y_desc(y_label)
            .axis_desc_style((FONT, 15))
            .label_style((FONT, 13))
            .draw()
            .map_err(err)?;
        for si in 0..names.len() {
            let c = color(si + 1);
            chart
                .draw_series(pts.iter().filter(|p| p.2 == si).map(|p| Circle::new((p.0, p.1), 2, c.filled())))
                .map_err(err)?;
        }
    }
    root.present().map_err(err)?;
    Ok(())
}

/// Histogram panels side by side over the same bins: (panel title, count per bin).
pub fn histogram_panels(
    path: &Path,
    title: &str,
    x_label: &str,
    bin_labels: &[String],
    panels: &[(String, Vec<u64>)],
) -> Result<()> {
    init_font()?;
    if panels.is_empty() || bin_labels.is_empty() {
        bail!("nothing to plot");
    }
    let w = (600 * panels.len() as u32).max(10 * title.chars().count() as u32 + 40);
    let root = BitMapBackend::new(path, (w, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let root = root.titled(title, (FONT, 20)).map_err(err)?;
    let ymax = panels.iter().flat_map(|p| p.1.iter()).copied().max().unwrap_or(1).max(1) as f64 * 1.15;
    let n = bin_labels.len();
    for (pi, (area, (ptitle, counts))) in root.split_evenly((1, panels.len())).iter().zip(panels).enumerate() {
        let mut chart = ChartBuilder::on(area)
            .caption(ptitle, (FONT, 18))
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(65)
            .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), 0f64..ymax)
            .map_err(err)?;
        let labels = bin_labels.to_vec();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n)
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < labels.len() {
                    labels[i as usize].clone()
                } else {
                    String::new()
                }
            })
            .x_desc(x_label)
            .y_desc("requests")
            .axis_desc_style((FONT, 15))
            .label_style((FONT, 13))
            .draw()
            .map_err(err)?;
        let c = color(pi * 2);
        chart
            .draw_series(
                counts
                    .iter()
                    .enumerate()
                    .map(|(i, &v)| Rectangle::new([(i as f64 - 0.4, 0.0), (i as f64 + 0.4, v as f64)], c.filled())),
            )
            .map_err(err)?;
    }
    root.present().map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_pngs_when_a_font_exists() {
        // The figures need a TTF font (CI installs fonts-dejavu-core); the error says how to get one.
        init_font().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bars.png");
        let panel = BarPanel {
            title: "read".into(),
            groups: vec!["a".into(), "b".into()],
            series: vec![("off".into(), vec![1.0, 2.0]), ("on".into(), vec![1.5, f64::NAN])],
        };
        grouped_bars(&p, "t", "MiB/s", &[panel]).unwrap();
        assert!(std::fs::metadata(&p).unwrap().len() > 1000);
        let p = dir.path().join("lines.png");
        lines(&p, "t", "x", "y", &[("s".into(), vec![(0.0, 1.0), (10.0, 2.0)])], &[("off".into(), 1.5)]).unwrap();
        assert!(p.exists());
    }
}
