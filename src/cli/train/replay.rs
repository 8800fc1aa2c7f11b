//! `ledger replay`: deterministic re-verification of recorded stages, and
//! counterfactual replays of a stage with another engineer (see [`mapf_ledger::replay`]).
//!
//! A replay changes no branch: it recomputes on scratch refs that live in the writer's
//! memory alone, so no way out leaves one behind (Ctrl-C and SIGTERM end it at once,
//! exit 130; what it appended is unreachable, for `gc`). `--record` appends a
//! `ReplayVerified` event per matched stage to the branch, which moves its head.
//!
//! Exit codes: 0 every compared event matched or the counterfactual ran; 1 a mismatch
//! or an altered record (the branch is left unchanged); 2 usage or input error; 130
//! interrupted.
use crate::cli::{CliError, CliResult};
use mapf_ledger::replay::{self, setup, ReplayError};
use mapf_ledger::stage::progress::Bars;
use mapf_ledger::stage::Pipeline;
use std::path::Path;
use std::sync::atomic::AtomicBool;

/// Arguments of `ledger replay`.
#[derive(clap::Args, Debug)]
pub struct ReplayArgs {
    /// The branch whose stages to replay (or to fork the counterfactual from).
    #[arg(long, default_value = "main")]
    pub branch: String,
    /// The stage to replay (N or stageN; 0 is the warm-up). Default: every completed stage.
    #[arg(long, value_parser = mapf_ledger::ledger::parse_stage)]
    pub stage: Option<u32>,
    /// Recompute and compare every event hash (the default without --engineer).
    #[arg(long)]
    pub verify: bool,
    /// Record the verification: one `replay_verified` event per matched stage, appended
    /// to the branch (its head moves). Without it a replay changes nothing.
    #[arg(long, conflicts_with = "engineer")]
    pub record: bool,
    /// Counterfactual: re-run --stage N with this engineer on a scratch fork.
    #[arg(long)]
    pub engineer: Option<mapf_ledger::engineer::EngineerSpec>,
    /// Keep the counterfactual fork under this name.
    #[arg(long, value_name = "NAME")]
    pub keep: Option<String>,
    /// Call LLM engineers' endpoints instead of reusing the recorded replies.
    #[arg(long)]
    pub live: bool,
    /// cpu, cuda or cuda:N. Default: the device the replayed stages recorded (a run
    /// made with `run --device cuda` replays on CUDA), else the plan's.
    #[arg(long)]
    pub device: Option<mapf_ledger::train::DeviceSpec>,
    /// Print the outcome as JSON (schemas/replay.json, replay-counterfactual.json).
    #[arg(long)]
    pub json: bool,
}

/// A replay error with the contract's exit code (see [`mapf_ledger::diagnosis::diagnose`]).
fn replay_error(e: ReplayError) -> CliError {
    if let ReplayError::Interrupted(n) = e {
        eprintln!(
            "interrupted: the replay of stage {n} stopped; nothing was recorded and its scratch work is removed"
        );
        return CliError {
            code: 130,
            message: "interrupted".into(),
        };
    }
    let message = mapf_ledger::ledger::Chain(&e);
    if mapf_ledger::diagnosis::diagnose(&e).damaged {
        CliError::check(format!("replay failed: {message}"))
    } else {
        CliError::input(message.to_string())
    }
}

pub fn run(dir: &Path, args: ReplayArgs) -> CliResult {
    let stage = args.stage;
    setup::check_asked(args.keep.is_some(), args.engineer.is_some(), args.verify)?;
    let mut ledger = crate::cli::open_writer(dir)?;
    let recorded = setup::recorded_setups(&ledger, &args.branch, stage)?;
    // A replay's work is scratch and ends at once; a kept counterfactual's branch stops
    // at its next durable point, as `run` does.
    let stop = match args.keep {
        Some(_) => super::run::stop_on_ctrl_c(),
        None => mapf_ledger::interrupt::on_signal(
            mapf_ledger::interrupt::Work::Scratch,
            "the replay stopped; nothing was recorded (its work was scratch, and no ref of it remains)",
        ),
    };
    if args.engineer.is_none() {
        // Before libtorch picks its kernels: run the recorded ones where this CPU can.
        setup::pin_kernels(&recorded);
    }
    let other_engineer = args.engineer.is_some();
    let mut pipeline = setup::pipeline(&mut ledger, args.device, other_engineer, &recorded, stage)?;
    match &args.engineer {
        Some(engineer) => {
            let n = setup::counterfactual_stage(stage)?;
            counterfactual(&mut pipeline, &args, n, engineer, &stop)
        }
        None => verify(&mut pipeline, &args, stage, &recorded, &stop),
    }
}

fn verify(
    pipeline: &mut Pipeline<'_>,
    args: &ReplayArgs,
    stage: Option<u32>,
    recorded: &[setup::RecordedSetup],
    stop: &AtomicBool,
) -> CliResult {
    use mapf_ledger::replay::branch::{verify_branch, Said, VerifyError};
    let branch = &args.branch;
    let mut bars = || Box::new(Bars::new(args.json)) as Box<dyn mapf_ledger::stage::Progress>;
    let mut say = |s: Said<'_>| match s {
        Said::Note(note) => eprintln!("ledger: note: {note}"),
        Said::Matched(r) if !args.json => println!("{}", r.matched_line()),
        Said::Matched(_) => {}
    };
    let what = (branch.as_str(), stage, args.live);
    let v = verify_branch(pipeline, what, recorded, &mut bars, stop, &mut say).map_err(
        |e| match e {
            VerifyError::Replay(e) => replay_error(e),
            e => CliError::input(e.to_string()),
        },
    )?;
    let report = |matched, mismatch, ids: Option<&[mapf_ledger::ledger::Hash]>| {
        let r = mapf_ledger::views::show::ReplayReport::new(branch, matched, mismatch, ids);
        println!("{}", serde_json::to_string(&r).expect("serialises"));
    };
    if let Some(m) = v.mismatch {
        if args.json {
            report(v.matched, Some(m.clone()), None);
        }
        return Err(CliError::check(format!(
            "replay mismatch on {branch}: {m} (the branch was not changed)"
        )));
    }
    let ids = if args.record {
        Some(
            replay::record_verified(pipeline, branch, &v.matched, args.live)
                .map_err(|e| CliError::input(e.to_string()))?,
        )
    } else {
        None
    };
    if args.json {
        report(v.matched, None, ids.as_deref());
        return Ok(());
    }
    let line = replay::branch::recorded_line(pipeline.ledger, branch, ids.as_deref());
    print!("{line}");
    Ok(())
}

fn counterfactual(
    pipeline: &mut Pipeline<'_>,
    args: &ReplayArgs,
    n: u32,
    engineer: &mapf_ledger::engineer::EngineerSpec,
    stop: &AtomicBool,
) -> CliResult {
    let keep = args.keep.as_deref();
    let mut bars = Bars::new(args.json);
    let c = replay::counterfactual(pipeline, &args.branch, n, engineer, keep, &mut bars, stop)
        .map_err(replay_error)?;
    crate::cli::say(args.json, &c, |c| {
        mapf_ledger::replay::branch::render_counterfactual(c, &args.branch, n)
    })
}
