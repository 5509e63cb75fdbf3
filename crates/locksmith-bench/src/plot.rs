//! `--plot FILE.svg|FILE.png`: a latency CDF of the uncontended cycle per backend, and a
//! throughput bar chart (contended and many locks) per backend, side by side in one image.
//!
//! PNG is drawn into an RGB buffer by plotters' bitmap backend and encoded with the `png` crate
//! (a small encoder, instead of the `image` crate plotters would otherwise pull in).
//!
//! Text is laid out with a font compiled into the binary (DejaVu Sans, see
//! `assets/DejaVuSans.LICENSE`), so plotting needs no system fonts to build or to run.

use std::path::Path;

use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

use super::report::BackendReport;
use super::stats::cdf;

/// DejaVu Sans, registered as plotters' `sans-serif`.
const FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");

/// Width and height of the image, in pixels.
const SIZE: (u32, u32) = (1280, 520);

/// The image formats `--plot` writes, chosen by the file's extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Svg,
    Png,
}

/// Checks `--plot`'s file name before anything runs, so a typo costs no benchmark run.
pub(crate) fn check_path(path: &Path) -> Result<Format, String> {
    match path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).as_deref() {
        Some("svg") => Ok(Format::Svg),
        Some("png") => Ok(Format::Png),
        _ => Err(format!("{}: the plot file must end in .svg or .png", path.display())),
    }
}

/// Draws the charts of `reports` into `path`, as SVG or PNG by its extension.
pub(crate) fn draw(path: &Path, reports: &[BackendReport], clients: u32, locks: u32) -> Result<(), String> {
    register_font("sans-serif", FontStyle::Normal, FONT).map_err(|_| "the built-in font is unreadable".to_string())?;
    match check_path(path)? {
        Format::Svg => charts(SVGBackend::new(path, SIZE).into_drawing_area(), reports, clients, locks),
        Format::Png => {
            let mut rgb = vec![0u8; SIZE.0 as usize * SIZE.1 as usize * 3];
            charts(BitMapBackend::with_buffer(&mut rgb, SIZE).into_drawing_area(), reports, clients, locks)?;
            write_png(path, &rgb)
        }
    }
}

fn charts<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    reports: &[BackendReport],
    clients: u32,
    locks: u32,
) -> Result<(), String> {
    root.fill(&WHITE).map_err(err)?;
    let (left, right) = root.split_horizontally(SIZE.0 / 2);
    latency_cdf(&left, reports)?;
    throughput(&right, reports, clients, locks)?;
    root.present().map_err(err)
}

fn write_png(path: &Path, rgb: &[u8]) -> Result<(), String> {
    let io = |e: std::io::Error| format!("writing {}: {e}", path.display());
    let file = std::io::BufWriter::new(std::fs::File::create(path).map_err(io)?);
    let mut encoder = png::Encoder::new(file, SIZE.0, SIZE.1);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header().map_err(|e| format!("writing {}: {e}", path.display()))?;
    writer.write_image_data(rgb).map_err(|e| format!("writing {}: {e}", path.display()))?;
    writer.finish().map_err(|e| format!("writing {}: {e}", path.display()))
}

fn err(e: impl std::fmt::Display) -> String {
    format!("drawing the plot: {e}")
}

fn color(i: usize) -> RGBColor {
    let (r, g, b) = Palette99::pick(i).to_rgba().rgb();
    RGBColor(r, g, b)
}

/// Short label of backend `i` under its bars: its number and scheme (the CDF legend has the URL).
fn short(i: usize, url: &str) -> String {
    format!("{}: {}", i + 1, url.split_once("://").map_or(url, |(s, _)| s))
}

fn latency_cdf<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    reports: &[BackendReport],
) -> Result<(), String> {
    // (backend index, legend, CDF points) of every backend that ran the uncontended workload.
    type Curve = (usize, String, Vec<(f64, f64)>);
    let series: Vec<Curve> = reports
        .iter()
        .enumerate()
        .filter_map(|(i, r)| r.cycles().map(|h| (i, format!("{}: {}", i + 1, r.backend), cdf(&h))))
        .filter(|(_, _, points)| !points.is_empty())
        .collect();
    let lo = series.iter().flat_map(|s| s.2.iter().map(|p| p.0)).fold(f64::INFINITY, f64::min).max(1.0);
    let hi = series.iter().flat_map(|s| s.2.iter().map(|p| p.0)).fold(1.0, f64::max) * 1.2;
    let lo = if lo.is_finite() && lo < hi { lo * 0.8 } else { 1.0 };
    let mut chart = ChartBuilder::on(area)
        .caption("Uncontended lock→unlock cycle: latency CDF", ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d((lo..hi).log_scale(), 0f64..1f64)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("latency µs (log scale)")
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_desc("fraction of cycles")
        .draw()
        .map_err(err)?;
    for (i, label, points) in series {
        let c = color(i);
        chart
            .draw_series(LineSeries::new(points, c.stroke_width(2)))
            .map_err(err)?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 12))
        .draw()
        .map_err(err)
}

fn throughput<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    reports: &[BackendReport],
    clients: u32,
    locks: u32,
) -> Result<(), String> {
    let n = reports.len().max(1);
    let value = |v: Option<f64>| v.unwrap_or(0.0);
    let top = reports
        .iter()
        .map(|r| value(r.median.contended_acq_per_sec).max(value(r.median.many_acq_per_sec)))
        .fold(1.0, f64::max)
        * 1.1;
    let labels: Vec<String> = reports.iter().enumerate().map(|(i, r)| short(i, &r.backend)).collect();
    let mut chart = ChartBuilder::on(area)
        .caption("Throughput: acquisitions per second", ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        // A segmented 0..k has k + 1 segments: one per backend is 0..n - 1 (0..0 draws nothing,
        // so a single backend gets an empty second segment).
        .build_cartesian_2d((0..n.max(2) - 1).into_segmented(), 0f64..top)
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n)
        .x_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => labels.get(*i).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .y_label_formatter(&|v| format!("{v:.0}"))
        .y_desc("acquisitions/s")
        .draw()
        .map_err(err)?;
    // Two bars per backend: contended in the left half of its segment, many locks in the right.
    let bars = [(format!("{clients}×1 contended"), BLUE, 0usize), (format!("{locks}×{locks} many locks"), RED, 1usize)];
    for (label, c, half) in bars {
        let rects = reports.iter().enumerate().map(move |(i, r)| {
            let v = value(if half == 0 { r.median.contended_acq_per_sec } else { r.median.many_acq_per_sec });
            let (from, to) = if half == 0 {
                (SegmentValue::Exact(i), SegmentValue::CenterOf(i))
            } else {
                (SegmentValue::CenterOf(i), SegmentValue::Exact(i + 1))
            };
            let mut bar = Rectangle::new([(from, 0.0), (to, v)], c.mix(0.7).filled());
            bar.set_margin(0, 0, 4, 4);
            bar
        });
        chart
            .draw_series(rects)
            .map_err(err)?
            .label(label)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 15, y + 5)], c.mix(0.7).filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 12))
        .draw()
        .map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--plot` takes .svg and .png (any case) and refuses everything else before a run.
    #[test]
    fn plot_format_comes_from_the_extension() {
        assert_eq!(check_path(Path::new("bench.svg")), Ok(Format::Svg));
        assert_eq!(check_path(Path::new("out/BENCH.PNG")), Ok(Format::Png));
        assert!(check_path(Path::new("bench.jpg")).unwrap_err().contains(".svg or .png"));
        assert!(check_path(Path::new("bench")).is_err());
    }
}
