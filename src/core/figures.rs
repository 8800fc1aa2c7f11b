//! Figures: validation curves per stage and size × stage heatmaps, drawn with plotters
//! as SVG (files, or strings the HTML report inlines) and PNG (for papers).
//!
//! Text is laid out and rasterised with ab_glyph from DejaVu Sans embedded in the binary
//! (the `dejavu` crate), registered under every family name plotters asks for. A fresh
//! machine without any installed font therefore draws the same PNG, and SVG labels are
//! sized from real glyph metrics.
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Once;

/// Line colours, in series order (the matplotlib "tab10" palette).
pub const COLORS: [(u8, u8, u8); 8] = [
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
];

/// The colour of series `i` as a CSS hex string (the report's legends match the plots).
pub fn css_color(i: usize) -> String {
    let (r, g, b) = COLORS[i % COLORS.len()];
    format!("#{r:02x}{g:02x}{b:02x}")
}

/// What a figure file is, by its extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Svg,
    Png,
}

/// The format a path asks for; anything but `.svg` or `.png` is refused, naming the path.
pub fn format_of(path: &Path) -> Result<Format, FigureError> {
    match path.extension().and_then(|e| e.to_str()) {
        Some(e) if e.eq_ignore_ascii_case("svg") => Ok(Format::Svg),
        Some(e) if e.eq_ignore_ascii_case("png") => Ok(Format::Png),
        _ => Err(FigureError::Format {
            path: path.to_path_buf(),
        }),
    }
}

/// Why a figure was not drawn.
#[derive(Debug, thiserror::Error)]
pub enum FigureError {
    #[error("{}: plots are written as SVG or PNG (name the file *.svg or *.png)", path.display())]
    Format { path: PathBuf },
    /// The plotting library's error, as it words it (and kept as the source).
    #[error("{0}")]
    Draw(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// Drawing into the file at `path` failed; the source says why.
    #[error("{}", path.display())]
    File {
        path: PathBuf,
        #[source]
        source: Box<FigureError>,
    },
}

/// One named curve: (name, [(stage, percentage)]).
pub type Series = (String, Vec<(u32, f64)>);

/// A 95% interval per point of one series: (x, low, high).
pub type Band = Vec<(u32, f64, f64)>;

/// Named curves of (x, y); x is a stage, or a GRPO step (`x_label` says which).
///
/// The y axis fits the data (and bands) with a margin, clamped to 0–100 when `percent`,
/// so a 3-point difference is visible instead of flattened on a fixed 0–100 axis.
/// Branches that coincide stay visible: earlier series are drawn wider underneath
/// later ones, and each has its own marker shape.
pub struct Curves<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    pub series: &'a [Series],
    /// Per series (same order; missing or empty: none), drawn as a shaded area.
    pub bands: &'a [Band],
    /// The values are percentages (the axis never leaves 0–100).
    pub percent: bool,
}

/// The y range that shows `values` with a margin (percentages stay inside 0–100).
pub fn y_range(values: impl Iterator<Item = f64>, percent: bool) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if lo > hi {
        return if percent { (0.0, 100.0) } else { (0.0, 1.0) };
    }
    let floor = if percent {
        2.0
    } else {
        (hi.abs().max(lo.abs()) * 0.05).max(1e-3)
    };
    let pad = ((hi - lo) * 0.08).max(floor);
    let (mut y0, mut y1) = (lo - pad, hi + pad);
    if percent {
        y0 = y0.max(0.0);
        y1 = y1.min(100.0);
    }
    (y0, y1)
}

/// Percentages per (size, stage); missing cells are drawn empty.
pub struct Heatmap<'a> {
    pub title: &'a str,
    pub values: &'a BTreeMap<(usize, u32), f64>,
}

const CURVES_SIZE: (u32, u32) = (800, 480);
/// PNGs are drawn at twice the SVG's size (print resolution), with scaled text and lines.
const PNG_SCALE: u32 = 2;

fn register_fonts() {
    static FONTS: Once = Once::new();
    FONTS.call_once(|| {
        for family in ["sans-serif", "serif", "monospace"] {
            for (style, bytes) in [
                (FontStyle::Normal, dejavu::sans::regular()),
                (FontStyle::Bold, dejavu::sans::bold()),
            ] {
                if plotters::style::register_font(family, style, bytes).is_err() {
                    panic!("the embedded DejaVu Sans is not a valid font");
                }
            }
        }
    });
}

fn err<E: std::error::Error + Send + Sync + 'static>(e: E) -> FigureError {
    FigureError::Draw(Box::new(e))
}

fn draw_curves<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    c: &Curves,
    k: u32,
) -> Result<(), FigureError>
where
    DB::ErrorType: 'static,
{
    draw_curves_into(root, c, k)?;
    root.present().map_err(err)
}

/// Panels side by side (left to right), presented once.
fn draw_panels<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    panels: &[Curves],
    k: u32,
) -> Result<(), FigureError>
where
    DB::ErrorType: 'static,
{
    let areas = root.split_evenly((1, panels.len().max(1)));
    for (area, c) in areas.iter().zip(panels) {
        draw_curves_into(area, c, k)?;
    }
    root.present().map_err(err)
}

fn draw_curves_into<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    c: &Curves,
    k: u32,
) -> Result<(), FigureError>
where
    DB::ErrorType: 'static,
{
    let stages: Vec<u32> = c
        .series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.0))
        .collect();
    let x0 = stages.iter().copied().min().unwrap_or(0) as i32;
    let x1 = (stages.iter().copied().max().unwrap_or(1) as i32).max(x0 + 1);
    let (y0, y1) = y_range(
        c.series
            .iter()
            .flat_map(|s| s.1.iter().map(|p| p.1))
            .chain(c.bands.iter().flatten().flat_map(|b| [b.1, b.2])),
        c.percent,
    );
    let k = k as i32;
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(root)
        .caption(c.title, ("sans-serif", 20 * k))
        .margin(12 * k)
        .x_label_area_size(40 * k)
        .y_label_area_size(50 * k)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(c.x_label)
        .y_desc(c.y_label)
        // One label per stage; at most a dozen over hundreds of steps.
        .x_labels(((x1 - x0 + 1) as usize).min(12))
        .y_label_formatter(&|v| {
            if y1 - y0 >= 10.0 {
                format!("{v:.0}")
            } else if y1 - y0 >= 1.0 {
                format!("{v:.1}")
            } else {
                format!("{v:.3}")
            }
        })
        .label_style(("sans-serif", 12 * k))
        .axis_desc_style(("sans-serif", 14 * k))
        .draw()
        .map_err(err)?;
    // Bands first, under every line.
    for (i, band) in c.bands.iter().enumerate().take(c.series.len()) {
        if band.len() < 2 {
            continue;
        }
        let (r, g, b) = COLORS[i % COLORS.len()];
        let outline: Vec<(i32, f64)> = band
            .iter()
            .map(|&(x, _, hi)| (x as i32, hi))
            .chain(band.iter().rev().map(|&(x, lo, _)| (x as i32, lo)))
            .collect();
        chart
            .draw_series(std::iter::once(Polygon::new(
                outline,
                RGBColor(r, g, b).mix(0.14).filled(),
            )))
            .map_err(err)?;
    }
    let n = c.series.len() as i32;
    for (i, (name, pts)) in c.series.iter().enumerate() {
        let (r, g, b) = COLORS[i % COLORS.len()];
        let color = RGBColor(r, g, b);
        // Earlier series wider, so one drawn exactly over another still shows its edge.
        let width = (k * (2 + (n - 1 - i as i32).min(4))) as u32;
        chart
            .draw_series(LineSeries::new(
                pts.iter().map(|&(s, v)| (s as i32, v)),
                color.stroke_width(width),
            ))
            .map_err(err)?
            .label(name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20 * k, y)], color.stroke_width(width))
            });
        // Markers on per-stage curves (a shape per series); a line alone over hundreds
        // of steps.
        if pts.len() <= 40 {
            let m = 3 * k + (n - 1 - i as i32).min(2) * k;
            let at = |&(s, v): &(u32, f64)| (s as i32, v);
            match i % 3 {
                0 => chart
                    .draw_series(pts.iter().map(|p| Circle::new(at(p), m, color.filled())))
                    .map(|_| ()),
                1 => chart
                    .draw_series(
                        pts.iter()
                            .map(|p| TriangleMarker::new(at(p), m + k, color.filled())),
                    )
                    .map(|_| ()),
                _ => chart
                    .draw_series(
                        pts.iter()
                            .map(|p| Cross::new(at(p), m, color.stroke_width(2 * k as u32))),
                    )
                    .map(|_| ()),
            }
            .map_err(err)?;
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .legend_area_size(28 * k)
        .label_font(("sans-serif", 12 * k))
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(err)
}

fn heatmap_size(h: &Heatmap) -> (u32, u32) {
    let stages = h
        .values
        .keys()
        .map(|k| k.1)
        .collect::<std::collections::BTreeSet<_>>();
    let sizes = h
        .values
        .keys()
        .map(|k| k.0)
        .collect::<std::collections::BTreeSet<_>>();
    (
        140 + 56 * stages.len().max(1) as u32,
        110 + 34 * sizes.len().max(1) as u32,
    )
}

fn draw_heatmap<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    h: &Heatmap,
    k: u32,
) -> Result<(), FigureError>
where
    DB::ErrorType: 'static,
{
    use plotters::style::colors::colormaps::{ColorMap, ViridisRGB};
    let stages: Vec<u32> = h
        .values
        .keys()
        .map(|k| k.1)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let sizes: Vec<usize> = h
        .values
        .keys()
        .map(|k| k.0)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let (s0, s1) = (
        *stages.first().unwrap_or(&0) as f64,
        *stages.last().unwrap_or(&0) as f64,
    );
    let (n0, n1) = (
        *sizes.first().unwrap_or(&0) as f64,
        *sizes.last().unwrap_or(&0) as f64,
    );
    let ki = k as i32;
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(root)
        .caption(h.title, ("sans-serif", 16 * ki))
        .margin(10 * ki)
        .x_label_area_size(36 * ki)
        .y_label_area_size(48 * ki)
        .build_cartesian_2d(s0 - 0.5..s1 + 0.5, n0 - 0.5..n1 + 0.5)
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc("stage")
        .y_desc("map size")
        .x_labels(stages.len().max(1) * 2 + 1)
        .y_labels(sizes.len().max(1) * 2 + 1)
        .x_label_formatter(&|x| whole(*x))
        .y_label_formatter(&|y| whole(*y))
        .label_style(("sans-serif", 12 * ki))
        .axis_desc_style(("sans-serif", 13 * ki))
        .draw()
        .map_err(err)?;
    for (&(size, stage), &v) in h.values {
        let (x, y) = (stage as f64, size as f64);
        let fill = ViridisRGB.get_color(v.clamp(0.0, 100.0) / 100.0);
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(x - 0.5, y - 0.5), (x + 0.5, y + 0.5)],
                fill.filled(),
            )))
            .map_err(err)?;
        let ink = if v > 60.0 { BLACK } else { WHITE };
        chart
            .draw_series(std::iter::once(Text::new(
                format!("{v:.0}"),
                (x, y),
                ("sans-serif", 12 * ki)
                    .into_font()
                    .color(&ink)
                    .pos(Pos::new(HPos::Center, VPos::Center)),
            )))
            .map_err(err)?;
    }
    root.present().map_err(err)
}

/// Integer tick labels only (cells are centred on whole stages and sizes).
fn whole(x: f64) -> String {
    if (x - x.round()).abs() < 1e-6 {
        format!("{}", x.round() as i64)
    } else {
        String::new()
    }
}

fn svg_string(
    size: (u32, u32),
    draw: impl FnOnce(&DrawingArea<SVGBackend, Shift>) -> Result<(), FigureError>,
) -> Result<String, FigureError> {
    register_fonts();
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, size).into_drawing_area();
        draw(&root)?;
    }
    Ok(out)
}

fn write_file(
    path: &Path,
    size: (u32, u32),
    draw_svg: impl FnOnce(&DrawingArea<SVGBackend, Shift>) -> Result<(), FigureError>,
    draw_png: impl FnOnce(&DrawingArea<BitMapBackend, Shift>) -> Result<(), FigureError>,
) -> Result<(), FigureError> {
    register_fonts();
    let named = |e: FigureError| FigureError::File {
        path: path.to_path_buf(),
        source: Box::new(e),
    };
    match format_of(path)? {
        Format::Svg => {
            let root = SVGBackend::new(path, size).into_drawing_area();
            draw_svg(&root).map_err(named)
        }
        Format::Png => {
            let root = BitMapBackend::new(path, (size.0 * PNG_SCALE, size.1 * PNG_SCALE))
                .into_drawing_area();
            draw_png(&root).map_err(named)
        }
    }
}

/// Curves as an SVG document (for inlining).
pub fn curves_svg(c: &Curves) -> Result<String, FigureError> {
    svg_string(CURVES_SIZE, |root| draw_curves(root, c, 1))
}

/// Curves into an SVG or PNG file, by the path's extension.
pub fn write_curves(path: &Path, c: &Curves) -> Result<(), FigureError> {
    write_file(
        path,
        CURVES_SIZE,
        |root| draw_curves(root, c, 1),
        |root| draw_curves(root, c, PNG_SCALE),
    )
}

/// Curves side by side (valid % beside optimal %, say) into an SVG or PNG file.
pub fn write_panels(path: &Path, panels: &[Curves]) -> Result<(), FigureError> {
    let size = (CURVES_SIZE.0 * panels.len().max(1) as u32, CURVES_SIZE.1);
    write_file(
        path,
        size,
        |root| draw_panels(root, panels, 1),
        |root| draw_panels(root, panels, PNG_SCALE),
    )
}

/// A heatmap as an SVG document.
pub fn heatmap_svg(h: &Heatmap) -> Result<String, FigureError> {
    svg_string(heatmap_size(h), |root| draw_heatmap(root, h, 1))
}

/// A heatmap into an SVG or PNG file, by the path's extension.
pub fn write_heatmap(path: &Path, h: &Heatmap) -> Result<(), FigureError> {
    write_file(
        path,
        heatmap_size(h),
        |root| draw_heatmap(root, h, 1),
        |root| draw_heatmap(root, h, PNG_SCALE),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_by_extension() {
        assert_eq!(format_of(Path::new("a/b.SVG")).unwrap(), Format::Svg);
        assert_eq!(format_of(Path::new("b.png")).unwrap(), Format::Png);
        let e = format_of(Path::new("plot.pdf")).unwrap_err().to_string();
        assert!(e.contains("plot.pdf") && e.contains("*.png"), "{e}");
    }

    #[test]
    fn png_has_text_drawn_from_the_embedded_font() {
        // Two PNGs that differ only in their title must differ in pixels: the glyphs
        // are really rasterised (no font found would draw nothing or fail).
        let dir = tempfile::tempdir().unwrap();
        let series = vec![("main".to_string(), vec![(0, 10.0), (1, 30.0)])];
        let mut bytes = Vec::new();
        for title in ["A", "B"] {
            let p = dir.path().join(format!("{title}.png"));
            write_curves(
                &p,
                &Curves {
                    x_label: "stage",
                    title,
                    y_label: "valid %",
                    series: &series,
                    bands: &[],
                    percent: true,
                },
            )
            .unwrap();
            let b = std::fs::read(&p).unwrap();
            assert_eq!(&b[..8], b"\x89PNG\r\n\x1a\n");
            // IHDR: width and height, big-endian, at bytes 16..24.
            let w = u32::from_be_bytes(b[16..20].try_into().unwrap());
            let h = u32::from_be_bytes(b[20..24].try_into().unwrap());
            assert_eq!((w, h), (1600, 960));
            bytes.push(b);
        }
        assert_ne!(bytes[0], bytes[1]);
    }

    #[test]
    fn the_axis_fits_the_data() {
        // Close curves get a close axis; percentages never leave 0-100.
        let (lo, hi) = y_range([41.0, 43.5, 44.0].into_iter(), true);
        assert!(
            lo > 35.0 && lo < 41.0 && hi > 44.0 && hi < 50.0,
            "{lo} {hi}"
        );
        assert_eq!(y_range([0.0, 100.0].into_iter(), true), (0.0, 100.0));
        assert_eq!(y_range(std::iter::empty(), true), (0.0, 100.0));
        // Rewards are not percentages: negative values stay on the axis.
        let (lo, hi) = y_range([-0.5, 1.5].into_iter(), false);
        assert!(lo < -0.5 && hi > 1.5);
        let series = vec![("a".to_string(), vec![(0, 41.0), (1, 44.0)])];
        let svg = curves_svg(&Curves {
            title: "t",
            x_label: "stage",
            y_label: "valid %",
            series: &series,
            bands: &[vec![(0, 38.0, 44.0), (1, 41.0, 47.0)]],
            percent: true,
        })
        .unwrap();
        assert!(!svg.contains(">\n100\n<"), "no 0-100 axis for 41-47");
        assert!(svg.contains("<polygon"), "the band is drawn");
    }

    #[test]
    fn heatmap_labels_every_cell() {
        let mut values = BTreeMap::new();
        for size in 3..=5 {
            for stage in 0..3 {
                values.insert((size, stage), (size * 10 + stage as usize) as f64);
            }
        }
        let svg = heatmap_svg(&Heatmap {
            title: "main",
            values: &values,
        })
        .unwrap();
        for v in values.values() {
            assert!(svg.contains(&format!(">\n{v:.0}\n<")), "cell {v} labelled");
        }
    }
}
