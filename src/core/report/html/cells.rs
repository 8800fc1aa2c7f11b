//! The page's building blocks, shared by every section: a number that cites its events
//! ([`cite`]), valid/optimal cell pairs and their headers, branch colour swatches,
//! labels, the heatmap colours and inline SVG figures.
use crate::figures::css_color;
use crate::ledger::Hash;
use maud::{html, Markup, PreEscaped};

/// A number that cites its events: `data-ev` holds their full hashes.
pub(super) fn cite(text: &str, events: &[Hash], what: &str) -> Markup {
    let full: Vec<String> = events.iter().map(|h| h.to_hex()).collect();
    let short: Vec<String> = events.iter().map(|h| h.short()).collect();
    html! {
        span.n data-ev=(full.join(" ")) title={ (what) " · event " (short.join(", ")) } { (text) }
    }
}

/// Two cells, valid % then optimal %, citing `events`; two dashes when not evaluated.
pub(super) fn rate_pair(cell: Option<(String, String)>, events: &[Hash], what: &str) -> Markup {
    html! {
        @match cell {
            Some((v, o)) => { td { (cite(&v, events, what)) } td { (cite(&o, events, what)) } }
            None => { td { "–" } td { "–" } }
        }
    }
}

/// The second header row of a table with `groups` valid/optimal column pairs, after
/// `blank` empty header cells.
pub(super) fn rate_header(blank: usize, groups: usize) -> Markup {
    html! {
        tr {
            @for _ in 0..blank { th {} }
            @for _ in 0..groups { th { "valid %" } th { "optimal %" } }
        }
    }
}

/// The first cell of a paper-layout row: `N×N`, or the Sum row's label (`None`).
pub(super) fn size_label(n: Option<usize>) -> String {
    n.map(|n| format!("{n}×{n}"))
        .unwrap_or_else(|| "Sum".into())
}

/// "sizes.9.data_ratio" -> "9×9 data"; "agents" stays.
pub(super) fn field_label(f: &str) -> String {
    let parts: Vec<&str> = f.split('.').collect();
    match parts.as_slice() {
        ["sizes", n, k] => format!("{n}×{n} {}", k.trim_end_matches("_ratio")),
        _ => f.to_string(),
    }
}

/// A setting as the page prints it ([`number`](crate::views::number)); a dash when unset.
pub(super) fn value(x: Option<f64>) -> String {
    x.map_or_else(|| "–".into(), crate::views::number)
}

/// "" for one, else the plural ending `many`.
pub(super) fn plural(n: usize, many: &'static str) -> &'static str {
    if n == 1 {
        ""
    } else {
        many
    }
}

/// A valid-rate colour (the viridis map of the heatmap figures) and a readable ink.
pub(super) fn heat(v: f64) -> (String, &'static str) {
    use plotters::style::colors::colormaps::{ColorMap, ViridisRGB};
    let c = ViridisRGB.get_color(v.clamp(0.0, 100.0) / 100.0);
    (
        format!("#{:02x}{:02x}{:02x}", c.0, c.1, c.2),
        if v > 60.0 { "#000" } else { "#fff" },
    )
}

/// The colour square of the `i`th branch or engineer (its line in the figures).
pub(super) fn swatch(i: usize) -> Markup {
    html! { i.sw style={ "background:" (css_color(i)) } {} }
}

/// A column-pair header per name (branches or engineers), each with its colour.
pub(super) fn name_headers<'a>(names: impl Iterator<Item = &'a str>) -> Markup {
    html! {
        @for (i, name) in names.enumerate() {
            th colspan="2" { (swatch(i)) (name) }
        }
    }
}

/// An SVG figure of ours (plotters escapes the text it draws), scaled with the page:
/// plotters writes a fixed width/height; keep them as the aspect ratio via viewBox and
/// let CSS size the element.
pub(super) fn inline_svg(svg: String) -> Markup {
    if svg.contains("viewBox") {
        return PreEscaped(svg);
    }
    let dims = |attr: &str| -> Option<u32> {
        let i = svg.find(&format!("{attr}=\""))? + attr.len() + 2;
        svg[i..].split('"').next()?.parse().ok()
    };
    PreEscaped(match (dims("width"), dims("height")) {
        (Some(w), Some(h)) => svg.replacen("<svg ", &format!("<svg viewBox=\"0 0 {w} {h}\" "), 1),
        _ => svg,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_cite_full_hashes() {
        let h = Hash::of_blob(b"x");
        let s = cite("1.00", &[h], "a < b").into_string();
        assert!(s.contains(&format!("data-ev=\"{}\"", h.to_hex())), "{s}");
        assert!(s.contains("a &lt; b"), "{s}");
    }

    #[test]
    fn markup_in_text_stays_text() {
        let s = cite("<script>x</script>", &[], "\"><td>").into_string();
        assert_eq!(
            s,
            "<span class=\"n\" data-ev=\"\" title=\"&quot;&gt;&lt;td&gt; · event \">&lt;script&gt;x&lt;/script&gt;</span>"
        );
    }

    #[test]
    fn fields_read_as_sizes() {
        assert_eq!(field_label("sizes.9.data_ratio"), "9×9 data");
        assert_eq!(field_label("agents"), "agents");
    }
}
