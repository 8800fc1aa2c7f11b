#!/usr/bin/env python3
"""Time transformers' generate() on an HF model directory: the peer of `cargo bench --bench
trainer`, which calls this script itself when HF_PYTHON names a Python with torch 2.11 and
transformers (so both run in the same run, on the same machine, on the same checkpoint).

Sampling with temperature 1, top-p 1 and a KV cache, exactly `--new-tokens` tokens per row
(min_new_tokens = max_new_tokens, so both sides decode the same number of tokens). Three
shapes, each the same work the ledger's side of the bench does:

- `single`: one prompt, batch 1;
- `distinct`: the first `--lanes` prompts of `--prompts-file` (one chat text per line, JSON),
  one sample each, left-padded into one batch: what evaluation does;
- `shared`: the first prompt, `num_return_sequences = --lanes` samples of it: what a GRPO
  group does. (generate() expands the prompt to every row before its prefill, so it
  prefills `--lanes` copies; the ledger prefills once and copies the cache. That is the
  API's work, and the bench says so where it prints the ratio.)

Prints one JSON line per shape: {"shape", "lanes", "new_tokens", "seconds", "tokens_per_s"}.

    python tools/bench_transformers.py --model target/bench-lm/tiny \
        --prompts-file target/bench-lm/tiny-prompts.jsonl --threads 1
"""
import argparse
import json
import time

import torch
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompts-file", required=True, help="JSON lines {\"text\": task text}")
    ap.add_argument("--shapes", default="single,distinct,shared")
    ap.add_argument("--lanes", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=3.0)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    tok = PreTrainedTokenizerFast(tokenizer_file=f"{a.model}/tokenizer.json")
    tok.pad_token_id = 0
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32).eval()
    texts = [json.loads(l)["text"] for l in open(a.prompts_file) if l.strip()]
    # The same chat-formatted prompts the ledger feeds (ChatML, as exported).
    chat = [f"<|im_start|>user\n{t}<|im_end|>\n<|im_start|>assistant\n" for t in texts]
    for shape in a.shapes.split(","):
        if shape == "single":
            rows, ret = chat[:1], 1
        elif shape == "distinct":
            assert len(chat) >= a.lanes, f"{a.prompts_file} holds {len(chat)} prompts, not {a.lanes}"
            rows, ret = chat[: a.lanes], 1
        elif shape == "shared":
            rows, ret = chat[:1], a.lanes
        else:
            raise SystemExit(f"unknown shape {shape!r}")
        enc = tok(rows, add_special_tokens=False, return_tensors="pt", padding=True)
        kw = dict(attention_mask=enc["attention_mask"], do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                  max_new_tokens=a.new_tokens, min_new_tokens=a.new_tokens, pad_token_id=0, use_cache=True,
                  num_return_sequences=ret)
        lanes = len(rows) * ret
        with torch.no_grad():
            out = model.generate(enc["input_ids"], **kw)  # warm-up
            assert out.shape[0] == lanes and out.shape[1] == enc["input_ids"].shape[1] + a.new_tokens
            t0, reps = time.perf_counter(), 0
            while time.perf_counter() - t0 < a.seconds or reps < 2:
                model.generate(enc["input_ids"], **kw)
                reps += 1
            dt = time.perf_counter() - t0
        print(json.dumps({"shape": shape, "lanes": lanes, "new_tokens": a.new_tokens, "seconds": dt / reps,
                          "tokens_per_s": lanes * a.new_tokens * reps / dt}), flush=True)


if __name__ == "__main__":
    main()
