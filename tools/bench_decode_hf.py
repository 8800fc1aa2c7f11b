"""transformers' generate() on the same decode work as `ledger lm bench` (tools/cuda-bench.sh).

    python3 tools/bench_decode_hf.py CONFIG_JSON BATCHES PROMPT_TOKENS NEW_TOKENS [DEVICE]

CONFIG_JSON is a model's config.json (ledgers/models/shapes/*.config.json): the model is
made from it with random weights in bf16 (f32 on a CPU) and sdpa attention. BATCHES is
comma-separated. Like `ledger lm bench`: `batch` distinct prompts whose ids are
`(31 r + 7 j + 1) mod vocab`, every lane sampled at temperature 1 (no top-k, no top-p)
for exactly NEW_TOKENS tokens (min_new_tokens = max_new_tokens), and decode time is a
call's time minus the same call's with one new token. Prints one JSON object.
"""
import json
import os
import shutil
import sys
import tempfile
import time

import torch
from transformers import AutoConfig, AutoModelForCausalLM


def main():
    config_json, batches, prompt_tokens, new_tokens = sys.argv[1:5]
    device = sys.argv[5] if len(sys.argv) > 5 else ("cuda" if torch.cuda.is_available() else "cpu")
    batches = [int(b) for b in batches.split(",") if b]
    prompt_tokens, new_tokens = int(prompt_tokens), int(new_tokens)
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    with tempfile.TemporaryDirectory() as d:
        shutil.copy(config_json, os.path.join(d, "config.json"))
        cfg = AutoConfig.from_pretrained(d)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(1)
    with torch.device(device):
        try:
            model = AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation="sdpa")
        except TypeError:
            model = AutoModelForCausalLM.from_config(cfg, torch_dtype=dtype, attn_implementation="sdpa")
    model.eval()
    vocab = cfg.vocab_size

    def sync():
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    def call(batch, n):
        ids = torch.tensor(
            [[(31 * r + 7 * j + 1) % vocab for j in range(prompt_tokens)] for r in range(batch)],
            device=device,
        )
        mask = torch.ones_like(ids)
        sync()
        t = time.perf_counter()
        with torch.no_grad():
            out = model.generate(
                input_ids=ids,
                attention_mask=mask,
                do_sample=True,
                temperature=1.0,
                top_k=0,
                top_p=1.0,
                max_new_tokens=n,
                min_new_tokens=n,
                pad_token_id=0,
            )
        sync()
        assert out.shape[1] == prompt_tokens + n, out.shape
        return time.perf_counter() - t

    call(1, 2)  # first use of the kernels, untimed
    figures = []
    for b in batches:
        prefill = call(b, 1)
        full = call(b, new_tokens)
        steps = new_tokens - 1
        dt = max(full - prefill, 1e-9)
        figures.append(
            {
                "batch": b,
                "prompt_tokens": prompt_tokens,
                "new_tokens": new_tokens,
                "call_seconds": full,
                "prefill_seconds": prefill,
                "decode_tokens_per_s": b * steps / dt,
                "step_ms": dt / steps * 1e3,
            }
        )
        print(f"generate() batch {b}: {figures[-1]['decode_tokens_per_s']:.0f} tokens/s", file=sys.stderr)
    import transformers

    print(
        json.dumps(
            {
                "peer": "transformers generate() (sdpa)",
                "transformers": transformers.__version__,
                "torch": torch.__version__,
                "device": device,
                "dtype": str(dtype),
                "decode": figures,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
