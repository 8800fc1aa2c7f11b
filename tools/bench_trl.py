#!/usr/bin/env python3
"""Time TRL's GRPOTrainer on an HF model directory: the GRPO peer of `cargo bench --bench
trainer`, which runs this script itself when HF_PYTHON names a Python with torch 2.11,
transformers and trl (`tools/hf-venv.sh` makes one), on the same checkpoint, the same
prompts and the same thread count, in the same run.

What one step is, here as in the ledger's `grpo::step`: sample `--group` completions of
each of `--batch` prompts (temperature 1, top-p 1, no top-k, ending at the tokenizer's
EOS or at the row's cap), score them, group-normalised
advantages, one forward of prompt + completion with gradients, the clipped-ratio loss
(epsilon 0.2, token mean over the batch: loss_type "dapo"), an entropy bonus of 0.001,
backward, one optimiser step (AdamW here, Adam there). One update per generation batch
(num_iterations 1: the old log-probs are the sampling policy's, no extra forward), no
reference model (beta 0, as the bench's kl_coef 0), no gradient checkpointing, f32.

Like for like with the ledger's side: `--prompts` holds the ledger's own batches in the
order its steps draw them (`--batch` rows a step, the first step untimed), each row with
the new-token cap the ledger gives that instance (`"cap"`). The dataset is read in order
(`shuffle_dataset = False`), and a logits processor ends each row at its cap (EOS forced
as its last token, so a capped row costs the same decode steps as the ledger's, which
stops at its budget without one); `max_completion_length` is the largest cap.

The reward is a stub (a function of the completion's length, so groups have a spread):
the ledger scores plans with its testbed, which costs it a few milliseconds per step.

Prints one JSON line: {"steps", "seconds_per_step", "steps_per_s",
"completion_tokens_per_step", "mean_completion_length"}; the first step (warm-up) is not
timed.

    python tools/bench_trl.py --model ledgers/models/mapf-base-indep --prompts target/bench-lm/base-grpo-prompts.jsonl
"""
import argparse
import json
import tempfile
import time

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, LogitsProcessor, LogitsProcessorList, TrainerCallback
from trl import GRPOConfig, GRPOTrainer


class RowCaps(LogitsProcessor):
    """Ends each row at the cap of its prompt: EOS is the only token allowed once a row
    has written cap - 1 tokens. A row's prompt is found by its tokens (left padding
    stripped), so the caps follow the rows wherever TRL puts them in the batch."""

    def __init__(self, caps, pad, eos):
        self.caps, self.pad, self.eos = caps, pad, eos
        self.start, self.row_caps = None, None

    def __call__(self, input_ids, scores):
        if self.start is None:
            self.start = input_ids.shape[1]
            rows = []
            for ids in input_ids.tolist():
                i = 0
                while i < len(ids) and ids[i] == self.pad:
                    i += 1
                key = tuple(ids[i:])
                assert key in self.caps, "a prompt TRL generated for is not in --prompts"
                rows.append(self.caps[key])
            self.row_caps = torch.tensor(rows)
        written = input_ids.shape[1] - self.start
        done = self.row_caps - 1 <= written
        if done.any():
            eos_only = torch.full_like(scores[0], float("-inf"))
            eos_only[self.eos] = 0.0
            scores[done] = eos_only
        return scores


class Clock(TrainerCallback):
    def __init__(self):
        self.ends, self.lengths = [], []

    def on_step_end(self, args, state, control, **kw):
        self.ends.append(time.perf_counter())

    def on_log(self, args, state, control, logs=None, **kw):
        if logs and "completions/mean_length" in logs:
            self.lengths.append(logs["completions/mean_length"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompts", required=True,
                    help="JSON lines {\"prompt\": chat-formatted text, \"cap\": new-token cap}, in step order")
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=4, help="timed steps (after one warm-up step)")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    rows = [json.loads(l) for l in open(a.prompts) if l.strip()]
    prompts = [r["prompt"] for r in rows]
    assert len(prompts) >= a.batch * (a.steps + 1), f"{a.prompts}: {len(prompts)} rows, {a.steps + 1} steps need {a.batch * (a.steps + 1)}"
    tok = AutoTokenizer.from_pretrained(a.model)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32)
    caps = {}
    for r in rows:
        key = tuple(tok(r["prompt"], add_special_tokens=False)["input_ids"])
        assert caps.get(key, r["cap"]) == r["cap"], "one prompt with two caps"
        caps[key] = r["cap"]
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    plain_generate = model.generate

    def capped_generate(*args, **kw):
        kw["logits_processor"] = LogitsProcessorList([RowCaps(caps, pad, tok.eos_token_id)])
        return plain_generate(*args, **kw)

    # TRL calls generate() on this very module (CPU, one process: no wrapper).
    model.generate = capped_generate

    def reward(completions, **kw):
        return [float(len(c) % 7) for c in completions]

    with tempfile.TemporaryDirectory() as out:
        cfg = GRPOConfig(
            output_dir=out,
            per_device_train_batch_size=a.batch * a.group,
            gradient_accumulation_steps=1,
            num_generations=a.group,
            max_completion_length=max(r["cap"] for r in rows),
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            beta=0.0,
            epsilon=0.2,
            entropy_coef=0.001,
            loss_type="dapo",
            num_iterations=1,
            learning_rate=3e-4,
            max_steps=a.steps + 1,
            logging_steps=1,
            report_to="none",
            save_strategy="no",
            use_cpu=True,
            bf16=False,
            fp16=False,
            dataloader_num_workers=0,
            log_completions=False,
            seed=0,
            shuffle_dataset=False,
        )
        clock = Clock()
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=reward,
            args=cfg,
            train_dataset=Dataset.from_list([{"prompt": p} for p in prompts]),
            processing_class=tok,
            callbacks=[clock],
        )
        trainer.train()
    ends = clock.ends
    dt = (ends[-1] - ends[0]) / (len(ends) - 1)
    timed = clock.lengths[1:] or clock.lengths
    mean_len = sum(timed) / max(len(timed), 1)
    print(json.dumps({"steps": len(ends) - 1, "seconds_per_step": dt, "steps_per_s": 1.0 / dt,
                      "completion_tokens_per_step": mean_len * a.batch * a.group,
                      "mean_completion_length": mean_len}), flush=True)


if __name__ == "__main__":
    main()
