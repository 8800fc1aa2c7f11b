//! The study's files: study.csv, study.md, the validation curve (study.svg, study.png)
//! and study.json (what `ledger report --study DIR` reads back), written into one
//! directory.
use super::csv::study_csv;
use super::markdown::study_markdown;
use super::model::StudyReport;
use super::tables::study_series;

/// Why the study's files could not be written (rendered with its causes, [`Chain`],
/// as `path: cause`).
///
/// [`Chain`]: crate::ledger::Chain
#[derive(Debug, thiserror::Error)]
pub enum StudyWriteError {
    /// Creating `dir` or writing the file at `path` failed.
    #[error("{}", path.display())]
    Io {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Figure(#[from] crate::figures::FigureError),
}

/// Write study.csv, study.md, study.svg, study.png and study.json into `dir` (listed in
/// `r.files`).
pub fn write_study(r: &mut StudyReport, dir: &std::path::Path) -> Result<(), StudyWriteError> {
    let io = |p: &std::path::Path, source: std::io::Error| StudyWriteError::Io {
        path: p.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    let csv = dir.join("study.csv");
    std::fs::write(&csv, study_csv(r)).map_err(|e| io(&csv, e))?;
    let md = dir.join("study.md");
    std::fs::write(&md, study_markdown(r)).map_err(|e| io(&md, e))?;
    let svg = dir.join("study.svg");
    let series = study_series(r);
    let title = format!(
        "Validation valid % per stage (fork of {} at stage {}, mean over {} seeds)",
        r.from, r.at, r.seeds
    );
    let curves = crate::figures::Curves {
        x_label: "stage",
        title: &title,
        y_label: "valid %",
        series: &series,
        bands: &[],
        percent: true,
    };
    crate::figures::write_curves(&svg, &curves)?;
    let png = dir.join("study.png");
    crate::figures::write_curves(&png, &curves)?;
    let json = dir.join("study.json");
    r.files = [&csv, &md, &svg, &png, &json]
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    // study.json is what `ledger report --study DIR` reads back.
    std::fs::write(
        &json,
        serde_json::to_string_pretty(&*r).expect("a study report serialises"),
    )
    .map_err(|e| io(&json, e))?;
    Ok(())
}
