//! `--plot FILE.svg`: bandwidth and latency against message size, side by
//! side, both axes logarithmic, one line per operation.

use std::path::Path;

use plotters::prelude::*;

use super::report::Report;
use super::{Op, Test};
use crate::cmd::{CliError, fmt_size};

const WIDTH: u32 = 1280;
const HEIGHT: u32 = 540;

fn color(op: Op) -> RGBColor {
    match op {
        Op::Write => RGBColor(0x1f, 0x77, 0xb4),
        Op::Read => RGBColor(0xd6, 0x27, 0x28),
        Op::Send => RGBColor(0x2c, 0xa0, 0x2c),
        Op::Atomic => RGBColor(0x94, 0x67, 0xbd),
    }
}

/// Checks that `path` names a file in an existing directory (plotters
/// reports a missing directory only when it writes, after the run).
pub(crate) fn check_path(path: &Path) -> Result<(), CliError> {
    let e = |m: String| CliError::new(format!("--plot {}: {m}", path.display()));
    if path.as_os_str().is_empty() || path.is_dir() {
        return Err(e("not a file name".into()));
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.is_dir() {
            return Err(e(format!("no directory {}", dir.display())));
        }
    }
    Ok(())
}

/// Draws the two panels into `path`.
pub(crate) fn draw(path: &Path, report: &Report) -> Result<(), CliError> {
    let e = |e: String| CliError::new(format!("--plot {}: {e}", path.display()));
    check_path(path)?;
    let root = SVGBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(x.to_string()))?;
    let c = &report.config;
    let title = format!(
        "softrdma perf: {} -> {}, MTU {}, {} polling",
        c.client, c.server, c.mtu, c.polling
    );
    let root = root
        .titled(&title, ("sans-serif", 20))
        .map_err(|x| e(x.to_string()))?;
    let (left, right) = root.split_horizontally(WIDTH / 2);
    panel(
        &left,
        "Bandwidth",
        "bandwidth (MB/s, 10^6 bytes per second)",
        &report.series(Test::Bw),
    )
    .map_err(e)?;
    panel(
        &right,
        "Latency p50 (WRITE/SEND one-way, READ/ATOMIC round trip)",
        "latency p50 (microseconds)",
        &report.series(Test::Lat),
    )
    .map_err(e)?;
    root.present().map_err(|x| e(x.to_string()))?;
    Ok(())
}

fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    y_desc: &str,
    series: &[(Op, Vec<(f64, f64)>)],
) -> Result<(), String> {
    let pts = series.iter().flat_map(|(_, p)| p.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        if y > 0.0 {
            y0 = y0.min(y);
            y1 = y1.max(y);
        }
    }
    if x0 > x1 || y0 > y1 {
        let style = ("sans-serif", 16).into_font().color(&BLACK);
        area.draw_text(&format!("{title}: no data in this run"), &style, (40, 60))
            .map_err(|x| x.to_string())?;
        return Ok(());
    }
    let x_range = (x0 / 1.5..x1 * 1.5).log_scale().base(2.0);
    let y_range = (y0 / 2.0..y1 * 2.0).log_scale();
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(x_range, y_range)
        .map_err(|x| x.to_string())?;
    chart
        .configure_mesh()
        .x_desc("message size (bytes, log scale)")
        .y_desc(y_desc)
        .x_labels(10)
        .y_labels(8)
        .x_label_formatter(&|v| fmt_size(v.round() as u64))
        .y_label_formatter(&|v| short(*v))
        .axis_desc_style(("sans-serif", 14))
        .draw()
        .map_err(|x| x.to_string())?;
    for (op, p) in series {
        let col = color(*op);
        let name = op.name().to_uppercase();
        chart
            .draw_series(LineSeries::new(p.iter().copied(), col.stroke_width(2)))
            .map_err(|x| x.to_string())?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], col.stroke_width(2)));
        chart
            .draw_series(p.iter().map(|&pt| Circle::new(pt, 3, col.filled())))
            .map_err(|x| x.to_string())?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(|x| x.to_string())?;
    Ok(())
}

/// Axis numbers: 0.5, 12, 1.2k, 3M.
fn short(v: f64) -> String {
    if v >= 1e6 {
        format!("{}M", trim(v / 1e6))
    } else if v >= 1e3 {
        format!("{}k", trim(v / 1e3))
    } else {
        trim(v)
    }
}

fn trim(v: f64) -> String {
    let s = if v >= 10.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}
