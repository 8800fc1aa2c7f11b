#!/usr/bin/env python3
"""Time transformers' generate() on an HF model directory: the peer of `cargo bench --bench
trainer`, which calls this script itself when HF_PYTHON names a Python with torch 2.11 and
transformers (so both run in the same run, on the same machine, on the same checkpoint).

Sampling with temperature 1, top-p 1 and a KV cache, exactly `--new-tokens` tokens per row
(min_new_tokens = max_new_tokens, so both sides decode the same number of tokens).
Prints one JSON line per batch size: {"batch", "new_tokens", "seconds", "tokens_per_s"}.

    python tools/bench_transformers.py --model target/bench-lm/tiny --batch 1,64 --threads 1
"""
import argparse
import json
import time

import torch
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--batch", default="1,64")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--prompt-file")
    ap.add_argument("--seconds", type=float, default=3.0)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    tok = PreTrainedTokenizerFast(tokenizer_file=f"{a.model}/tokenizer.json")
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32).eval()
    text = open(a.prompt_file).read() if a.prompt_file else "4x4 2 agents\nF F F F\n"
    # The same chat-formatted prompt the ledger feeds (ChatML, as exported).
    prompt = f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"
    ids = torch.tensor([tok(prompt, add_special_tokens=False)["input_ids"]])
    for b in [int(x) for x in a.batch.split(",")]:
        inp = ids.repeat(b, 1)
        kw = dict(attention_mask=torch.ones_like(inp), do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                  max_new_tokens=a.new_tokens, min_new_tokens=a.new_tokens, pad_token_id=0, use_cache=True)
        with torch.no_grad():
            model.generate(inp, **kw)  # warm-up
            t0, reps = time.perf_counter(), 0
            while time.perf_counter() - t0 < a.seconds or reps < 2:
                model.generate(inp, **kw)
                reps += 1
            dt = time.perf_counter() - t0
        print(json.dumps({"batch": b, "new_tokens": a.new_tokens, "seconds": dt / reps,
                          "tokens_per_s": b * a.new_tokens * reps / dt}), flush=True)


if __name__ == "__main__":
    main()
