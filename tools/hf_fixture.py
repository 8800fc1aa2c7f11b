#!/usr/bin/env python3
"""Make the Hugging Face parity fixture under tests/fixtures/hf (committed; CI never runs this).

What it writes, deterministically (fixed seeds):
  tokenizer.json, tokenizer_config.json   a tiny byte-level BPE in Qwen2/Qwen3's style
                                          (NFC, Qwen's split regex, byte level, ChatML specials)
  tiny-qwen3/   Qwen3: hidden 64, 2 layers, 4 heads / 2 KV heads, head_dim 32, untied head,
                saved in 2+ shards with model.safetensors.index.json
  tiny-qwen2/   Qwen2: hidden 32, 1 layer, q/k/v biases, tied embeddings, one file
  tiny-llama3/  Llama: hidden 32, 1 layer, Llama-3 RoPE scaling, one file
  each with reference.json: for 3 prompts, the prompt ids, 24 greedy tokens from
  transformers' generate() and the log-prob of each (log_softmax of the raw logits), plus
  the top-5 log-probs at the prompt's last position.

Weights are drawn with a larger std than transformers' default so greedy decoding has clear
margins (the script asserts a top-1/top-2 logit gap > 1e-3 at every step).

Rerun (needs torch 2.11, transformers >= 5, tokenizers, safetensors in a venv):
    /root/hfenv/bin/python tools/hf_fixture.py --out tests/fixtures/hf
"""
import argparse
import json
import os
import shutil

import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import (LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, Qwen2Config,
                          Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

QWEN_SPLIT = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def corpus():
    lines = []
    for n in range(3, 11):
        lines.append(f"Multi-agent path finding on a {n}x{n} frozen lake with 2 agents.")
        lines.append(" ".join("F" if (i * n) % 5 else "H" for i in range(n)))
        lines.append(f'{{"sizes": {{"{n}": {{"data_ratio": 0.{n}, "hole_ratio": 0.1, "wait_ratio": 0.2}}}}}}')
    for a in range(1, 6):
        lines.append(f"agent {a}: start ({a}, {a + 1}) goal ({a + 2}, 0)")
        lines.append(f"agent {a}: R R D W U L D D R")
    lines.append("Moves: U (row - 1), D (row + 1), L (column - 1), R (column + 1), W (wait).")
    lines.append("All agents move at the same time. No agent may leave the grid, enter a hole.")
    lines.append("The résumé → naïve café: déjà vu, 北京, emoji-free text.")
    return lines * 20


def make_tokenizer(out):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=400, min_frequency=2, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus(), trainer)
    tok.save(os.path.join(out, "tokenizer.json"))
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": CHAT_TEMPLATE,
                   "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, f, indent=1)
    return PreTrainedTokenizerFast.from_pretrained(out)


def randomise(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.2 * torch.randn(p.shape, generator=g))


def reference(model, tok, prompts):
    out = []
    for text in prompts:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        inp = torch.tensor([ids])
        with torch.no_grad():
            g = model.generate(inp, attention_mask=torch.ones_like(inp), do_sample=False, max_new_tokens=24,
                               min_new_tokens=24, eos_token_id=None, pad_token_id=0,
                               output_logits=True, return_dict_in_generate=True)
            new = g.sequences[0, len(ids):].tolist()
            logprobs = []
            for step, logits in enumerate(g.logits):
                lp = torch.log_softmax(logits[0].float(), -1)
                top2 = torch.topk(logits[0], 2).values
                assert (top2[0] - top2[1]).item() > 1e-3, f"near tie at step {step}"
                logprobs.append(lp[new[step]].item())
            last = torch.log_softmax(model(inp).logits[0, -1].float(), -1)
            top = torch.topk(last, 5)
        out.append({"prompt": text, "prompt_ids": ids, "generated": new, "logprobs": logprobs,
                    "top5_ids": top.indices.tolist(), "top5_logprobs": top.values.tolist(),
                    "decoded": tok.decode(new)})
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/fixtures/hf")
    a = ap.parse_args()
    if os.path.exists(a.out):
        shutil.rmtree(a.out)
    os.makedirs(a.out)
    torch.manual_seed(0)
    tok = make_tokenizer(a.out)
    v = len(tok)
    chat = tok.apply_chat_template([{"role": "user", "content": "4x4 2 agents\nF F H F"}],
                                   add_generation_prompt=True, tokenize=False)
    prompts = [
        "agent 1: R R D",
        chat,
        " ".join(corpus()[:12]),
    ]
    common = dict(vocab_size=v, bos_token_id=None, eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
                  max_position_embeddings=512, rms_norm_eps=1e-6)
    models_ = {
        "tiny-qwen3": (Qwen3ForCausalLM, Qwen3Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=32, tie_word_embeddings=False,
                        rope_theta=10000.0, **common), "200KB", 1),
        "tiny-qwen2": (Qwen2ForCausalLM, Qwen2Config(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                        rope_theta=10000.0, **common), None, 2),
        "tiny-llama3": (LlamaForCausalLM, LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
                        rope_theta=500000.0,
                        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                      "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
                        **common), None, 3),
    }
    for name, (cls, cfg, shard, seed) in models_.items():
        d = os.path.join(a.out, name)
        model = cls(cfg).float().eval()
        # Draw weights until greedy decoding has clear margins on every prompt.
        for attempt in range(20):
            randomise(model, seed + 100 * attempt)
            try:
                ref = reference(model, tok, prompts)
                break
            except AssertionError:
                continue
        else:
            raise SystemExit(f"{name}: no seed without near ties")
        kwargs = {"max_shard_size": shard} if shard else {}
        model.save_pretrained(d, safe_serialization=True, **kwargs)
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(a.out, f), d)
        with open(os.path.join(d, "reference.json"), "w") as f:
            json.dump({"transformers": __import__("transformers").__version__, "torch": torch.__version__,
                       "cases": ref}, f)
    cases = ["agent 1: R R D W", "  two  spaces\nand\n\nnewlines\t tab", "12345 6.75 x10",
             "café déjà → 北京", "<|im_start|>user\nhi<|im_end|>", "{\"sizes\": {\"5\": {}}}", "", " ", "FFHF\nHFFF"]
    with open(os.path.join(a.out, "tokenizer_cases.json"), "w") as f:
        json.dump([{"text": c, "ids": tok(c, add_special_tokens=False)["input_ids"]} for c in cases], f)


if __name__ == "__main__":
    main()
