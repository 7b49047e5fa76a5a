#!/usr/bin/env python3
"""PyTorch/transformers reference run of a synthesized Hugging Face folder on the GPU.

Loads the folder with transformers (float32 weights upcast from the files, or --dtype),
runs the prompt, prints the last position's logits and greedy tokens, and, given the JSON
that the Go GPU test wrote (KVASIR_GPU_OUT/kvasir_NAME.json: prompt, logits, tokens),
compares them with kvasir's: relative error ||kvasir - torch|| / ||torch|| and the number of
leading greedy tokens that agree. Exits 1 when the error exceeds --tol or the tokens part.

    python3 scripts/torch_ref.py --hf models/llama-3.2-1b --record out/kvasir_llama-3.2-1b.json
"""
import argparse
import json
import sys

import torch
from transformers import AutoModelForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hf", required=True, help="Hugging Face model folder")
    ap.add_argument("--record", help="kvasir's JSON record to compare with")
    ap.add_argument("--prompt", help="comma-separated token ids (default: the record's)")
    ap.add_argument("-n", type=int, default=32, help="greedy tokens to generate")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--tol", type=float, default=2e-2)
    args = ap.parse_args()

    rec = None
    if args.record:
        with open(args.record) as f:
            rec = json.load(f)
    if args.prompt:
        prompt = [int(x) for x in args.prompt.split(",")]
    elif rec:
        prompt = rec["prompt"]
    else:
        sys.exit("need --prompt or --record")
    n = len(rec["tokens"]) if rec else args.n

    dtype = getattr(torch, args.dtype)
    model = AutoModelForCausalLM.from_pretrained(args.hf, dtype=dtype).to("cuda").eval()
    ids = torch.tensor([prompt], device="cuda")
    with torch.no_grad():
        logits = model(ids).logits[0, -1].float()
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False,
                             min_new_tokens=n, pad_token_id=0)
    tokens = out[0, len(prompt):].tolist()
    print("torch logits[:8]:", [round(v, 4) for v in logits[:8].tolist()])
    print("torch greedy:", tokens)
    if rec is None:
        return 0
    ours = torch.tensor(rec["logits"], device="cuda")
    err = (torch.linalg.vector_norm(ours - logits) / torch.linalg.vector_norm(logits)).item()
    same = 0
    while same < min(len(tokens), len(rec["tokens"])) and tokens[same] == rec["tokens"][same]:
        same += 1
    print("kvasir greedy:", rec["tokens"])
    print(f"RESULT|torch|{args.hf} ({args.dtype}) vs kvasir cuda: logits rel. error|{err:.2e}|greedy {same}/{n} equal")
    return 0 if err <= args.tol and same == n else 1


if __name__ == "__main__":
    sys.exit(main())
