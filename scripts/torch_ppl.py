#!/usr/bin/env python3
"""Perplexity of a Hugging Face folder in PyTorch/transformers, measured the way
`kvasir perplexity` (and llama-perplexity) measures it, to check kvasir against transformers.

The text's token ids come from kvasir (`kvasir tokenize -m FOLDER --bos < TEXT`, one line of
ids), so that both sides score the same tokens; the script also encodes the text with the
folder's own tokenizer (transformers) and says whether the ids agree. Non-overlapping windows
of --ctx tokens each start with BOS (the window's first token replaced by it) and score
their second half: position j predicts the window's token j+1 for j in [ctx/2, ctx-1).
Perplexity is exp of the mean negative log-likelihood, in float64 from float32 logits.

Given kvasir's `perplexity --json` outputs (--kvasir FILE, repeatable), it compares each
one's perplexity and token count with transformers' and exits 1 when a relative difference
exceeds --tol (default 0.5%, the issue's bound against llama.cpp).

    kvasir tokenize -m models/tinystories-656k --bos < text.txt > ids.txt
    kvasir perplexity -m models/tinystories-656k -f text.txt --ctx 256 --json > cpu.json
    python3 scripts/torch_ppl.py --hf models/tinystories-656k --ids ids.txt --text text.txt \\
        --ctx 256 --kvasir cpu.json
"""
import argparse
import json
import math
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hf", required=True, help="Hugging Face model folder")
    ap.add_argument("--ids", required=True, help="token ids of the text, as `kvasir tokenize --bos` prints them")
    ap.add_argument("--text", help="the text itself, to compare the folder's own tokenizer with kvasir's ids")
    ap.add_argument("--ctx", type=int, default=512, help="window length (kvasir perplexity --ctx)")
    ap.add_argument("--chunks", type=int, default=0, help="most windows (0: all)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--kvasir", action="append", default=[], help="a `kvasir perplexity --json` output to compare")
    ap.add_argument("--tol", type=float, default=5e-3, help="largest relative perplexity difference")
    args = ap.parse_args()

    ids = [int(t) for t in open(args.ids).read().split()]
    model = AutoModelForCausalLM.from_pretrained(args.hf, torch_dtype=getattr(torch, args.dtype),
                                                 attn_implementation="eager").to("cuda").eval()
    bos = model.config.bos_token_id
    tok_note = "not checked"
    if args.text:
        hf_ids = AutoTokenizer.from_pretrained(args.hf)(open(args.text).read())["input_ids"]
        same = sum(1 for a, b in zip(hf_ids, ids) if a == b)
        tok_note = f"{same}/{len(ids)} ids as transformers' tokenizer ({len(hf_ids)} ids)"

    ctx = args.ctx
    if len(ids) < 2 * ctx:
        sys.exit(f"torch_ppl: the text has {len(ids)} tokens: need at least {2 * ctx}")
    starts = list(range(0, len(ids) - ctx + 1, ctx))
    if args.chunks > 0:
        starts = starts[:args.chunks]
    nll, scored = 0.0, 0
    with torch.no_grad():
        for s in starts:
            window = ids[s:s + ctx]
            if bos is not None:
                window[0] = bos
            logits = model(torch.tensor([window], device="cuda"), use_cache=False).logits[0].float()
            logp = torch.log_softmax(logits.double(), dim=-1)
            pos = torch.arange(ctx // 2, ctx - 1, device="cuda")
            nxt = torch.tensor(ids[s + ctx // 2 + 1:s + ctx], device="cuda")
            nll -= logp[pos, nxt].sum().item()
            scored += len(pos)
    ppl = math.exp(nll / scored)
    print(f"RESULT|torch_ppl|{args.hf}|ctx {ctx}, {len(starts)} windows, {scored} tokens|perplexity {ppl:.6f}|tokenizer: {tok_note}")
    rc = 0
    for path in args.kvasir:
        k = json.load(open(path))
        rel = abs(k["perplexity"] - ppl) / ppl
        ok = rel <= args.tol and k["tokens"] == scored and k["ctx"] == ctx
        rc |= 0 if ok else 1
        print(f"RESULT|torch_ppl|{path}|kvasir {k['perplexity']:.6f} over {k['tokens']} tokens|relative difference {rel:.2e}|{'ok' if ok else 'FAIL'}")
    sys.exit(rc)


if __name__ == "__main__":
    main()
