#!/usr/bin/env python3
"""PyTorch/transformers reference run of a synthesized Hugging Face folder on the GPU.

Loads the folder with transformers (float32 weights upcast from the files, or --dtype),
runs the prompt, prints the last position's logits and greedy tokens, and, given the JSON
records kvasir wrote (KVASIR_GPU_OUT/kvasir_NAME.json: prompt, logits, tokens, and the
backend that made them), compares each with transformers': relative error
||kvasir - torch|| / ||torch||, the largest error relative to the largest logit
max|kvasir - torch| / max|torch|, and the number of leading greedy tokens that agree.
Exits 1 when an error exceeds its tolerance (--tol, --max-rel-tol) or the tokens part.

    python3 scripts/torch_ref.py --hf models/llama-3.2-1b --record out/kvasir_llama-3.2-1b.json
    python3 scripts/torch_ref.py --hf models/gemma2-tiny --attn eager --no-cache --max-rel-tol 1e-4 \\
        --record out/kvasir_gemma2-tiny_cpu.json --record out/kvasir_gemma2-tiny_cuda.json
"""
import argparse
import json
import sys

import torch
from transformers import AutoModelForCausalLM


def greedy(model, prompt, n, use_cache):
    """Returns n greedy tokens after prompt, and the logits each was picked from (None with
    the cache): with generate() and its KV cache, or (use_cache False) by running the whole
    sequence for every token, which leaves no room for a cache implementation
    (sliding-window caches included) to differ from the model's definition."""
    ids = torch.tensor([prompt], device="cuda")
    if use_cache:
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False,
                             min_new_tokens=n, pad_token_id=0)
        return out[0, len(prompt):].tolist(), None
    tokens, steps = [], []
    for _ in range(n):
        logits = model(ids, use_cache=False).logits[0, -1].float()
        nxt = int(torch.argmax(logits).item())  # the first of ties, as kvasir picks
        tokens.append(nxt)
        steps.append(logits)
        ids = torch.cat([ids, torch.tensor([[nxt]], device="cuda")], dim=1)
    return tokens, steps


def max_rel(ours, theirs):
    """max|ours - theirs| / max|theirs|."""
    return (torch.max(torch.abs(ours - theirs)) / torch.max(torch.abs(theirs))).item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hf", required=True, help="Hugging Face model folder")
    ap.add_argument("--record", action="append", default=[], help="kvasir's JSON record to compare with (repeatable)")
    ap.add_argument("--prompt", help="comma-separated token ids (default: the first record's)")
    ap.add_argument("-n", type=int, default=32, help="greedy tokens to generate")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--attn", help="transformers attn_implementation (eager: Gemma 2's soft-capping)")
    ap.add_argument("--no-cache", action="store_true", help="greedy tokens by full forward passes, no KV cache")
    ap.add_argument("--tol", type=float, default=2e-2, help="bound on ||kvasir - torch|| / ||torch||")
    ap.add_argument("--max-rel-tol", type=float, help="bound on max|kvasir - torch| / max|torch|")
    args = ap.parse_args()

    recs = []
    for path in args.record:
        with open(path) as f:
            recs.append(json.load(f))
    if args.prompt:
        prompt = [int(x) for x in args.prompt.split(",")]
    elif recs:
        prompt = recs[0]["prompt"]
    else:
        sys.exit("need --prompt or --record")
    for rec in recs:
        if rec["prompt"] != prompt:
            sys.exit(f"records of different prompts: {args.record}")
    n = len(recs[0]["tokens"]) if recs else args.n

    torch.backends.cuda.matmul.allow_tf32 = False  # float32 means float32
    torch.backends.cudnn.allow_tf32 = False
    dtype = getattr(torch, args.dtype)
    kw = {"attn_implementation": args.attn} if args.attn else {}
    model = AutoModelForCausalLM.from_pretrained(args.hf, dtype=dtype, **kw).to("cuda").eval()
    ids = torch.tensor([prompt], device="cuda")
    with torch.no_grad():
        logits = model(ids).logits[0, -1].float()
        tokens, steps = greedy(model, prompt, n, not args.no_cache)
    print("torch logits[:8]:", [round(v, 4) for v in logits[:8].tolist()])
    print("torch greedy:", tokens)
    ok = True
    for rec in recs:
        ours = torch.tensor(rec["logits"], device="cuda")
        err = (torch.linalg.vector_norm(ours - logits) / torch.linalg.vector_norm(logits)).item()
        worst = max_rel(ours, logits)
        same = 0
        while same < min(len(tokens), len(rec["tokens"])) and tokens[same] == rec["tokens"][same]:
            same += 1
        # The logits of every step both took the same way (the sequences agree up to it).
        if steps is not None and "steps" in rec:
            for i in range(min(same + 1, len(steps), len(rec["steps"]))):
                worst = max(worst, max_rel(torch.tensor(rec["steps"][i], device="cuda"), steps[i]))
        backend = rec.get("backend", "cuda")
        print(f"kvasir {backend} greedy:", rec["tokens"])
        print(f"RESULT|torch|{args.hf} ({args.dtype}) vs kvasir {backend}: logits rel. error|{err:.2e}|"
              f"max rel. error {worst:.2e} over the prompt and {min(same, n)} steps, greedy {same}/{n} equal")
        ok = ok and err <= args.tol and same == n
        if args.max_rel_tol is not None:
            ok = ok and worst <= args.max_rel_tol
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
