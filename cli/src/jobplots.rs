//! `tessera report --out DIR`'s PNG plots: bandwidth over time, the request-size CDF and the per-file
//! access map. Drawn with plotters' bitmap backend like the benchmarks' figures (`tessera_bench::plots`);
//! text needs a TTF font found at run time ([`tessera_plots`]: DejaVu Sans, or the file named by
//! `TESSERA_FONT`).

use anyhow::Result;
use plotters::prelude::*;
use std::path::{Path, PathBuf};
use tessera_iostats::characterize::{Access, JobReport};
use tessera_plots::{err, init_font, legend_column, LegendEntry, Swatch, FONT};

const READ: RGBColor = RGBColor(30, 100, 200);
const WRITE: RGBColor = RGBColor(230, 140, 30);
const SHARED: RGBColor = RGBColor(200, 40, 40);
const LOCAL: RGBColor = RGBColor(40, 160, 70);

/// Draws the three plots into `dir`; returns their paths.
pub fn draw(r: &JobReport, dir: &Path, stem: &str) -> Result<Vec<PathBuf>> {
    init_font()?;
    let bw = dir.join(format!("{stem}-bandwidth.png"));
    bandwidth(r, &bw)?;
    let cdf = dir.join(format!("{stem}-sizes.png"));
    sizes(r, &cdf)?;
    let map = dir.join(format!("{stem}-files.png"));
    files(r, &map)?;
    Ok(vec![bw, cdf, map])
}

fn bandwidth(r: &JobReport, path: &Path) -> Result<()> {
    let root = BitMapBackend::new(path, (1000, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let entries = [LegendEntry::new("read", READ, Swatch::Line(3)), LegendEntry::new("write", WRITE, Swatch::Line(3))];
    let area = legend_column(&root, &entries, 14)?;
    let n = r.read_mib_s_series.len().max(1);
    let xmax = n as f64 * r.dt_s;
    let ymax = r.read_mib_s_series.iter().chain(&r.write_mib_s_series).fold(0.0f64, |a, b| a.max(*b)).max(1e-3) * 1.15;
    let mut chart = ChartBuilder::on(&area)
        .caption(format!("job {}: bandwidth per {} s window", r.job, r.dt_s), (FONT, 20))
        .margin(14)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..xmax, 0f64..ymax)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("time since the job started (s)")
        .y_desc("MiB/s")
        .axis_desc_style((FONT, 16))
        .label_style((FONT, 13))
        .draw()
        .map_err(err)?;
    for (c, s) in [(READ, &r.read_mib_s_series), (WRITE, &r.write_mib_s_series)] {
        // Steps: each window's rate over its whole length.
        let pts: Vec<(f64, f64)> =
            s.iter().enumerate().flat_map(|(i, v)| [(i as f64 * r.dt_s, *v), ((i + 1) as f64 * r.dt_s, *v)]).collect();
        chart.draw_series(LineSeries::new(pts, c.stroke_width(2))).map_err(err)?;
    }
    root.present().map_err(err)?;
    Ok(())
}

fn sizes(r: &JobReport, path: &Path) -> Result<()> {
    let root = BitMapBackend::new(path, (1000, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let shown = [("read", READ, &r.read_size_cdf, &r.read_sizes), ("write", WRITE, &r.write_size_cdf, &r.write_sizes)]
        .into_iter()
        .filter(|(_, _, _, counts)| counts.iter().sum::<u64>() > 0)
        .collect::<Vec<_>>();
    let entries: Vec<LegendEntry> =
        shown.iter().map(|(n, c, _, _)| LegendEntry::new(*n, *c, Swatch::Line(3))).collect();
    let area = legend_column(&root, &entries, 14)?;
    let labels = r.size_buckets.clone();
    let n = labels.len();
    let mut chart = ChartBuilder::on(&area)
        .caption(format!("job {}: request-size CDF", r.job), (FONT, 20))
        .margin(14)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..(n as f64 - 0.5), 0f64..1.05)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_labels(n)
        .x_label_formatter(&|x| labels.get(x.round() as usize).cloned().unwrap_or_default())
        .x_desc("request size (bytes, bucket)")
        .y_desc("share of requests ≤ bucket")
        .axis_desc_style((FONT, 16))
        .label_style((FONT, 12))
        .draw()
        .map_err(err)?;
    for (_, c, cdf, _) in shown {
        let pts: Vec<(f64, f64)> = cdf.iter().enumerate().map(|(i, v)| (i as f64, *v)).collect();
        chart.draw_series(LineSeries::new(pts.clone(), c.stroke_width(3))).map_err(err)?;
        chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, c.filled()))).map_err(err)?;
    }
    root.present().map_err(err)?;
    Ok(())
}

/// One bar per file (bytes moved), coloured by access (task-local green, shared red), labelled with its
/// processes and spatial class.
fn files(r: &JobReport, path: &Path) -> Result<()> {
    let shown = &r.files[..r.files.len().min(40)];
    let h = (120 + 28 * shown.len().max(1)) as u32;
    let root = BitMapBackend::new(path, (1000, h)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mib =
        |f: &tessera_iostats::characterize::FileReport| (f.read_bytes + f.write_bytes) as f64 / (1u64 << 20) as f64;
    let xmax = shown.iter().map(mib).fold(0.0f64, f64::max).max(1e-3) * 1.6;
    let k = shown.len().max(1) as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("job {}: files (green task-local, red shared)", r.job), (FONT, 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(10)
        .build_cartesian_2d(0f64..xmax, 0f64..k)
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .disable_y_axis()
        .x_desc("MiB read + written")
        .axis_desc_style((FONT, 15))
        .label_style((FONT, 12))
        .draw()
        .map_err(err)?;
    for (i, f) in shown.iter().enumerate() {
        let y = k - i as f64 - 1.0;
        let c = if f.access == Access::Shared { SHARED } else { LOCAL };
        chart.draw_series([Rectangle::new([(0.0, y + 0.15), (mib(f), y + 0.85)], c.filled())]).map_err(err)?;
        let stride = f.stride_bytes.map(|s| format!(" {s} B")).unwrap_or_default();
        let label = format!("{}  {} proc.  {}{stride}", f.path, f.processes, f.spatial);
        chart.draw_series([Text::new(label, (mib(f) + xmax * 0.01, y + 0.75), (FONT, 13))]).map_err(err)?;
    }
    root.present().map_err(err)?;
    Ok(())
}
