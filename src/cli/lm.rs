//! `ledger lm generate`: sample from a language model — an HF model directory or an
//! `lm` checkpoint of the ledger — and print the token ids, the text and per-token
//! log-probs. A user's sanity check that a model loaded as it should.
use super::{CliError, CliResult};
use clap::Subcommand;
use mapf_ledger::seed::Seed;
use mapf_ledger::train::lm::{LmPolicy, Sampling};
use mapf_ledger::views::model::GenerateOutput;
use std::path::{Path, PathBuf};

#[derive(Subcommand, Debug)]
pub enum LmCommand {
    /// Generate a continuation of a prompt.
    Generate {
        /// An HF model directory (config.json, safetensors, tokenizer.json), or a
        /// checkpoint reference of the ledger (BRANCH, BRANCH@stageN, hash prefix).
        #[arg(long)]
        model: String,
        /// The user message (wrapped in the model's chat template unless --raw).
        #[arg(long)]
        prompt_file: PathBuf,
        #[arg(long, default_value_t = 64)]
        max_new_tokens: usize,
        /// 0 decodes greedily.
        #[arg(long, default_value_t = 0.0)]
        temperature: f64,
        #[arg(long, default_value_t = 1.0)]
        top_p: f64,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Feed the file's text as is, without the chat template.
        #[arg(long)]
        raw: bool,
        /// cpu, cuda or cuda:N.
        #[arg(long, default_value = "cpu")]
        device: String,
        #[arg(long)]
        json: bool,
    },
}

/// A language model from an HF directory or a ledger checkpoint (see
/// `stage::load_language_model`).
pub fn load(dir: &Path, model: &str, device: tch::Device) -> Result<LmPolicy, CliError> {
    Ok(mapf_ledger::stage::load_language_model(dir, model, device)?)
}

pub fn run(dir: &Path, cmd: LmCommand) -> CliResult {
    let LmCommand::Generate {
        model,
        prompt_file,
        max_new_tokens,
        temperature,
        top_p,
        seed,
        raw,
        device,
        json,
    } = cmd;
    if !(temperature >= 0.0 && temperature.is_finite()) {
        return Err(CliError::input(format!(
            "--temperature must be >= 0, got {temperature}"
        )));
    }
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(CliError::input(format!(
            "--top-p must be in (0, 1], got {top_p}"
        )));
    }
    let device =
        mapf_ledger::train::parse_device(&device).map_err(|e| CliError::input(e.to_string()))?;
    let text = std::fs::read_to_string(&prompt_file)
        .map_err(|e| CliError::input(format!("{}: {e}", prompt_file.display())))?;
    let lm = load(dir, &model, device)?;
    let prompt = if raw {
        lm.try_encode(&text)
    } else {
        lm.try_encode(&lm.arch.chat.wrap(&text))
    }
    .map_err(|e| CliError::input(format!("{}: {e}", prompt_file.display())))?;
    if prompt.is_empty() {
        return Err(CliError::input(format!(
            "{}: the prompt encodes to no tokens",
            prompt_file.display()
        )));
    }
    // The model reads at most max_position_embeddings positions; past that RoPE
    // extrapolates and the KV cache grows without bound (1e8 tokens once asked libtorch
    // for 25 GB and aborted), so the length is bounded before any allocation.
    let limit = (lm.model.cfg.max_position_embeddings.max(0) as usize).saturating_sub(prompt.len());
    if max_new_tokens == 0 || max_new_tokens > limit {
        return Err(CliError::input(format!(
            "--max-new-tokens {max_new_tokens}: must be in 1..={limit} (the model's max_position_embeddings {} less the prompt's {} tokens)",
            lm.model.cfg.max_position_embeddings,
            prompt.len()
        )));
    }
    let sampling = Sampling {
        temperature: if temperature > 0.0 { temperature } else { 1.0 },
        top_p,
        max_new_tokens,
    };
    let g = mapf_ledger::train::lm::generate::generate(
        &lm.model,
        std::slice::from_ref(&prompt),
        1,
        &[max_new_tokens],
        &sampling,
        temperature == 0.0,
        &lm.stop,
        Seed::root(seed).child("lm-generate", 0),
        true,
    )
    .remove(0);
    let out = GenerateOutput {
        text: lm
            .try_decode(&g.tokens)
            .map_err(|e| CliError::input(format!("{model}: {e}")))?,
        prompt_tokens: prompt,
        tokens: g.tokens,
        logprobs: g.logprobs,
        stopped: g.stopped,
    };
    if json {
        println!("{}", serde_json::to_string(&out).expect("serialises"));
    } else {
        println!("prompt tokens: {}", out.prompt_tokens.len());
        println!("{}", out.text);
        println!("--");
        for (t, lp) in out.tokens.iter().zip(&out.logprobs) {
            println!("{t}\t{lp:.6}\t{:?}", lm.decode(&[*t]));
        }
        println!(
            "{} tokens, {}",
            out.tokens.len(),
            if out.stopped {
                "stopped on a stop token"
            } else {
                "hit --max-new-tokens"
            }
        );
    }
    Ok(())
}
