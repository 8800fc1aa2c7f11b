//! Import of MovingAI MAPF benchmarks (`.map` + `.scen`), so users can bring the
//! standard grids: the first k scenario lines become k agents.
//!
//! `.map`: a header (`type`, `height H`, `width W`, `map`) then H rows of W tiles;
//! `.`, `G` and `S` are passable, `@`, `O`, `T` and `W` are obstacles (holes here). A
//! non-square map is padded to a square with holes. `.scen`: `version 1` then
//! tab-separated lines `bucket map width height start_x start_y goal_x goal_y optimal`
//! with x the column and y the row.
use super::instance::{Cell, Instance, InstanceError, MAX_SIZE, MIN_SIZE};

#[derive(Debug, thiserror::Error)]
pub enum MovingAiError {
    #[error("{file}: {source}")]
    Io {
        file: String,
        source: std::io::Error,
    },
    #[error("{file}:{line}: {message}")]
    Syntax {
        file: String,
        line: usize,
        message: String,
    },
    #[error("{file}: the map is {width}x{height}; this testbed takes squares of side {MIN_SIZE}..={MAX_SIZE} (non-square maps are padded)")]
    TooLarge {
        file: String,
        width: usize,
        height: usize,
    },
    #[error("{file}: asked for {wanted} agents, the scenario has {have} lines")]
    TooFewAgents {
        file: String,
        wanted: usize,
        have: usize,
    },
    #[error("{file}:{line}: {source}")]
    Instance {
        file: String,
        line: usize,
        source: InstanceError,
    },
}

/// Parse a `.map` file's text: (width, height, passable[row][col]).
pub fn parse_map(file: &str, text: &str) -> Result<(usize, usize, Vec<Vec<bool>>), MovingAiError> {
    let syntax = |line: usize, message: String| MovingAiError::Syntax {
        file: file.into(),
        line,
        message,
    };
    let mut lines = text.lines().enumerate();
    let (mut width, mut height) = (None, None);
    loop {
        let Some((i, l)) = lines.next() else {
            return Err(syntax(
                i_or_end(text),
                "missing the `map` line that starts the grid".into(),
            ));
        };
        let l = l.trim();
        let mut parts = l.split_whitespace();
        match parts.next() {
            Some("type") | None => {}
            Some("height") => height = Some(parse_num(parts.next(), i + 1, "height", file)?),
            Some("width") => width = Some(parse_num(parts.next(), i + 1, "width", file)?),
            Some("map") => break,
            Some(other) => return Err(syntax(i + 1, format!("unexpected header line {other:?}"))),
        }
    }
    let (Some(w), Some(h)) = (width, height) else {
        return Err(syntax(1, "header lacks `width` or `height`".into()));
    };
    let mut rows = Vec::with_capacity(h);
    for _ in 0..h {
        let Some((i, l)) = lines.next() else {
            return Err(syntax(
                i_or_end(text),
                format!("expected {h} grid rows, found {}", rows.len()),
            ));
        };
        let l = l.trim_end_matches(['\r', '\n']);
        if l.chars().count() != w {
            return Err(syntax(
                i + 1,
                format!("row has {} tiles, expected {w}", l.chars().count()),
            ));
        }
        let row = l
            .chars()
            .enumerate()
            .map(|(c, ch)| match ch {
                '.' | 'G' | 'S' => Ok(true),
                '@' | 'O' | 'T' | 'W' => Ok(false),
                other => Err(syntax(
                    i + 1,
                    format!("column {}: unknown tile {other:?}", c + 1),
                )),
            })
            .collect::<Result<Vec<bool>, _>>()?;
        rows.push(row);
    }
    Ok((w, h, rows))
}

fn i_or_end(text: &str) -> usize {
    text.lines().count() + 1
}

fn parse_num(
    tok: Option<&str>,
    line: usize,
    what: &str,
    file: &str,
) -> Result<usize, MovingAiError> {
    tok.and_then(|t| t.parse().ok())
        .ok_or_else(|| MovingAiError::Syntax {
            file: file.into(),
            line,
            message: format!("`{what}` needs a non-negative integer"),
        })
}

/// One scenario line: (line number, start (x, y), goal (x, y)).
type ScenLine = (usize, (usize, usize), (usize, usize));

/// Parse a `.scen` file's text into its agent lines.
pub fn parse_scen(file: &str, text: &str) -> Result<Vec<ScenLine>, MovingAiError> {
    let mut out = Vec::new();
    for (i, l) in text.lines().enumerate() {
        let l = l.trim();
        if l.is_empty() || l.starts_with("version") {
            continue;
        }
        let f: Vec<&str> = l.split('\t').collect();
        let f: Vec<&str> = if f.len() >= 9 {
            f
        } else {
            l.split_whitespace().collect()
        };
        if f.len() < 9 {
            return Err(MovingAiError::Syntax {
                file: file.into(),
                line: i + 1,
                message: format!(
                    "expected 9 fields (bucket map width height sx sy gx gy optimal), found {}",
                    f.len()
                ),
            });
        }
        let num = |j: usize, what: &str| parse_num(Some(f[j]), i + 1, what, file);
        out.push((
            i + 1,
            (num(4, "start_x")?, num(5, "start_y")?),
            (num(6, "goal_x")?, num(7, "goal_y")?),
        ));
    }
    Ok(out)
}

/// Build an instance from `.map` and `.scen` texts with the first `agents` scenario lines.
pub fn import(
    map_file: &str,
    map_text: &str,
    scen_file: &str,
    scen_text: &str,
    agents: usize,
) -> Result<Instance, MovingAiError> {
    let (w, h, rows) = parse_map(map_file, map_text)?;
    let n = w.max(h);
    if !(MIN_SIZE..=MAX_SIZE).contains(&n) {
        return Err(MovingAiError::TooLarge {
            file: map_file.into(),
            width: w,
            height: h,
        });
    }
    let mut holes = vec![true; n * n];
    for (r, row) in rows.iter().enumerate() {
        for (c, &pass) in row.iter().enumerate() {
            holes[r * n + c] = !pass;
        }
    }
    let lines = parse_scen(scen_file, scen_text)?;
    if lines.len() < agents {
        return Err(MovingAiError::TooFewAgents {
            file: scen_file.into(),
            wanted: agents,
            have: lines.len(),
        });
    }
    let (mut starts, mut goals) = (Vec::new(), Vec::new());
    for &(line, (sx, sy), (gx, gy)) in &lines[..agents] {
        for (x, y, what) in [(sx, sy, "start"), (gx, gy, "goal")] {
            if x >= w || y >= h {
                return Err(MovingAiError::Syntax {
                    file: scen_file.into(),
                    line,
                    message: format!("{what} ({x}, {y}) is outside the {w}x{h} map"),
                });
            }
        }
        starts.push((sy * n + sx) as Cell);
        goals.push((gy * n + gx) as Cell);
    }
    let last = lines[agents.max(1) - 1].0;
    Instance::new(n, holes, starts, goals).map_err(|source| MovingAiError::Instance {
        file: scen_file.into(),
        line: last,
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAP: &str = "type octile\nheight 4\nwidth 5\nmap\n.....\n.@@..\n.....\nT....\n";
    const SCEN: &str = "version 1\n0\tm.map\t5\t4\t0\t0\t4\t3\t7\n0\tm.map\t5\t4\t4\t0\t0\t2\t6\n";

    #[test]
    fn imports_and_pads_to_square() {
        let i = import("m.map", MAP, "m.scen", SCEN, 2).unwrap();
        assert_eq!(i.size(), 5);
        assert!(i.is_hole(i.cell(1, 1)) && i.is_hole(i.cell(3, 0)));
        assert!(
            (0..5).all(|c| i.is_hole(i.cell(4, c))),
            "padding row is holes"
        );
        assert_eq!(i.starts(), &[i.cell(0, 0), i.cell(0, 4)]);
        assert_eq!(i.goals(), &[i.cell(3, 4), i.cell(2, 0)]);
    }

    #[test]
    fn errors_name_file_and_line() {
        let e = import(
            "m.map",
            "type octile\nheight 2\nwidth 3\nmap\n...\n.x.\n",
            "s",
            SCEN,
            1,
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("m.map:6:"), "{e}");
        let e = import("m.map", MAP, "m.scen", SCEN, 3)
            .unwrap_err()
            .to_string();
        assert!(e.contains("asked for 3 agents"), "{e}");
        let e = import(
            "m.map",
            MAP,
            "m.scen",
            "version 1\n0\tm\t5\t4\t1\t1\t4\t3\t7\n",
            1,
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("m.scen:2:") && e.contains("hole"), "{e}");
    }
}
