"""Helpers of tools/cuda-check.sh, run with a CUDA torch 2.11 and transformers.

  shaped OUT CONFIG TOKENIZER_DIR  a checkpoint of CONFIG's exact shape (e.g. Qwen3-4B,
      ledgers/models/shapes) with random bf16 weights, for memory and speed checks where
      the real weights cannot be downloaded. The tokenizer is TOKENIZER_DIR's (the
      project's own), padded with placeholder tokens to the config's vocabulary, so
      every id the model samples decodes.
  parity MODEL_DIR GENERATE_JSON   transformers on CUDA in bf16 against the output of
      `ledger lm generate --json --device cuda` on the same directory: how many greedy
      tokens transformers picks alike, and the largest log-prob difference.
"""
import json
import shutil
import sys
import time

import torch


def shaped(out, config, tok_dir):
    from transformers import AutoConfig, AutoModelForCausalLM

    t0 = time.time()
    fields = json.load(open(config))
    cfg = AutoConfig.for_model(fields.pop("model_type"), **fields)
    cfg.eos_token_id, cfg.bos_token_id = 2, 0  # the project's tokenizer's ids
    torch.manual_seed(0)
    with torch.device("cuda"):
        m = AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16)
    m.save_pretrained(out, safe_serialization=True)
    tok = json.load(open(f"{tok_dir}/tokenizer.json"))
    vocab = tok["model"]["vocab"]
    used = set(vocab.values()) | {a["id"] for a in tok.get("added_tokens", [])}
    for i in range(cfg.vocab_size):
        if i not in used:
            vocab[f"@@{i}"] = i
    json.dump(tok, open(f"{out}/tokenizer.json", "w"))
    for f in ["tokenizer_config.json", "generation_config.json"]:
        shutil.copy(f"{tok_dir}/{f}", f"{out}/{f}")
    n = sum(p.numel() for p in m.parameters())
    print(f"{out}: {n / 1e9:.2f} B parameters, random bf16, in {time.time() - t0:.1f} s")


def parity(model_dir, gen_json):
    from transformers import AutoModelForCausalLM

    g = json.load(open(gen_json))
    m = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).cuda().eval()
    ids = torch.tensor([g["prompt_tokens"] + g["tokens"]], device="cuda")
    with torch.no_grad():
        lp = torch.log_softmax(m(ids).logits.float(), -1)[0]
    p = len(g["prompt_tokens"])
    hf = [lp[p - 1 + i, t].item() for i, t in enumerate(g["tokens"])]
    greedy = lp[p - 1 : -1].argmax(-1).tolist()
    d = [abs(a - b) for a, b in zip(hf, g["logprobs"])]
    print(json.dumps({
        "model": model_dir,
        "tokens": len(g["tokens"]),
        "greedy_agree": sum(int(a == b) for a, b in zip(greedy, g["tokens"])),
        "first_disagreement": next(
            (i for i, (a, b) in enumerate(zip(greedy, g["tokens"])) if a != b), None),
        "max_abs_dlogprob": max(d),
        "mean_abs_dlogprob": sum(d) / len(d),
    }))


if __name__ == "__main__":
    {"shaped": shaped, "parity": parity}[sys.argv[1]](*sys.argv[2:])
