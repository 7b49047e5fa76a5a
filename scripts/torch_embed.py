#!/usr/bin/env python3
"""PyTorch/transformers oracle of kvasir's embeddings: the BERT encoder (embeddings and
cross-encoder scores) and decoders' last-token and mean embeddings.

Synthesizes the bert-tiny and bert-tiny-reranker Hugging Face folders with kvasir, serves
each with `kvasir serve`, and compares over HTTP with transformers in float32:
  - /v1/embeddings of token-id inputs (normalize false) against BertModel's last hidden
    state pooled as the model says (cls) and, from a second server with --pooling mean,
    mean-pooled: cosine >= --min-cos for every input;
  - /v1/embeddings of texts against BertModel on the ids of the folder's tokenizer.json
    (transformers' fast tokenizer): the same, so tokenization agrees too;
  - /v1/score of text pairs against BertForSequenceClassification's sigmoid(logit) on the
    tokenizer's pair encoding (token_type_ids 0/1): |difference| <= --score-tol;
  - /v1/embeddings of token-id inputs from small synthesized Qwen3 and Llama decoders
    (Hugging Face folders, f32) served with --pooling last and with --pooling mean (their
    pooling engine; three of the inputs share a 200-token prefix, which the prefix cache
    serves), against Qwen3Model's and LlamaModel's last hidden state (after the final norm)
    at the last token, or its mean over the tokens: cosine >= --min-cos for every input.
Exits 1 on any miss. Runs on the CPU or a GPU (torch picks cuda when present).

    CGO_ENABLED=0 go build -o bin/kvasir ./cmd/kvasir
    python3 scripts/torch_embed.py --kvasir bin/kvasir [--kvasir-device cuda]
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import urllib.request

import torch
from transformers import BertForSequenceClassification, BertModel, LlamaModel, PreTrainedTokenizerFast, Qwen3Model

TEXTS = ["hello world", "The quick brown fox jumps over the lazy dog.", "paris", "What is the capital of France?",
         "search query: embedding model", "a", "Über café naïve"]
PAIRS = [("what is the capital of france", "paris is the capital of france"), ("cat", "the lazy dog"),
         ("hello", "hello world"), ("sun", "The river runs through the city.")]


# Small decoders for last-token embeddings: (config.json, the transformers class whose last
# hidden state is the embedding).
DECODERS = {
    "qwen3-tiny": ({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 128,
                    "intermediate_size": 384, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                    "head_dim": 32, "vocab_size": 512, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6,
                    "rope_theta": 1000000, "tie_word_embeddings": True, "hidden_act": "silu", "torch_dtype": "float32"},
                   Qwen3Model),
    "llama-tiny": ({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 128,
                    "intermediate_size": 384, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                    "vocab_size": 512, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 500000,
                    "tie_word_embeddings": False, "hidden_act": "silu", "torch_dtype": "float32"},
                   LlamaModel),
}


def serve(kvasir, device, model, *flags):
    p = subprocess.Popen([kvasir, "serve", "-m", model, "--port", "0", "--threads", "4", "--device", device, *flags],
                         stderr=subprocess.PIPE, text=True)
    for line in p.stderr:
        m = re.search(r"serving \S+ on (http://\S+/v1)", line)
        if m:
            # Keep reading the log so that the server never blocks on a full pipe.
            threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
            return p, m.group(1)
    sys.exit(f"kvasir serve {model} did not start")


def post(base, path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return json.load(r)


def cos(a, b):
    return float(torch.nn.functional.cosine_similarity(a, b, dim=0))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvasir", default="bin/kvasir")
    ap.add_argument("--kvasir-device", default="cpu", help="where kvasir runs the encoder: cpu or cuda")
    ap.add_argument("--min-cos", type=float, default=0.9999)
    ap.add_argument("--score-tol", type=float, default=1e-4)
    args = ap.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    tmp = tempfile.mkdtemp(prefix="kvasir-embed-")
    emb_dir, rr_dir = os.path.join(tmp, "bert-tiny"), os.path.join(tmp, "bert-tiny-reranker")
    for shape, d in (("bert-tiny", emb_dir), ("bert-tiny-reranker", rr_dir)):
        subprocess.run([args.kvasir, "synth", "--shape", shape, "--seed", "3", "-o", d], check=True)
    fails = 0

    def check(what, c):
        nonlocal fails
        ok = c >= args.min_cos
        fails += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {what}: cosine {c:.7f}")

    model = BertModel.from_pretrained(emb_dir, dtype=torch.float32, add_pooling_layer=False).to(dev).eval()
    tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(emb_dir, "tokenizer.json"))
    vocab = model.config.vocab_size
    rng = random.Random(7)
    id_inputs = [[2] + [rng.randrange(5, vocab) for _ in range(n)] + [3] for n in (0, 1, 7, 30, 120, 400)]

    def hidden(ids, types=None):
        with torch.no_grad():
            t = torch.tensor([ids], device=dev)
            tt = torch.tensor([types], device=dev) if types else torch.zeros_like(t)
            return model(input_ids=t, token_type_ids=tt).last_hidden_state[0].float().cpu()

    for pooling, flags in (("cls", ()), ("mean", ("--pooling", "mean"))):
        proc, base = serve(args.kvasir, args.kvasir_device, emb_dir, *flags)
        try:
            got = post(base, "/embeddings", {"input": id_inputs, "normalize": False})["data"]
            for i, ids in enumerate(id_inputs):
                h = hidden(ids)
                want = h[0] if pooling == "cls" else h.mean(0)
                check(f"embedding {pooling} ids len {len(ids)}", cos(torch.tensor(got[i]["embedding"]), want))
            for text in TEXTS:
                ids = tok(text)["input_ids"]
                res = post(base, "/embeddings", {"input": text})
                n = res["usage"]["prompt_tokens"]
                if n != len(ids):
                    fails += 1
                    print(f"FAIL text {text!r}: kvasir ran {n} tokens, the tokenizer.json gives {len(ids)}: {ids}")
                h = hidden(ids)
                want = h[0] if pooling == "cls" else h.mean(0)
                check(f"embedding {pooling} text {text!r} ({len(ids)} tokens)", cos(torch.tensor(res["data"][0]["embedding"]), want))
        finally:
            proc.terminate()
            proc.wait()

    rr = BertForSequenceClassification.from_pretrained(rr_dir, dtype=torch.float32).to(dev).eval()
    rtok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(rr_dir, "tokenizer.json"))
    proc, base = serve(args.kvasir, args.kvasir_device, rr_dir)
    try:
        got = post(base, "/score", {"text_1": [a for a, _ in PAIRS], "text_2": [b for _, b in PAIRS]})["data"]
        for i, (a, b) in enumerate(PAIRS):
            # token_type_ids asked for: a tokenizer built from tokenizer.json alone may leave
            # them out, and the model then reads segment B as segment 0.
            enc = rtok(a, b, return_tensors="pt", return_token_type_ids=True).to(dev)
            with torch.no_grad():
                want = torch.sigmoid(rr(**enc).logits[0, 0]).item()
            d = abs(got[i]["score"] - want)
            ok = d <= args.score_tol
            fails += not ok
            print(f"{'ok  ' if ok else 'FAIL'} score {a!r} / {b!r}: kvasir {got[i]['score']:.6f}, torch {want:.6f}")
    finally:
        proc.terminate()
        proc.wait()

    for name, (config, cls) in DECODERS.items():
        d = os.path.join(tmp, name)
        cfg = d + ".json"
        with open(cfg, "w") as f:
            json.dump(config, f)
        subprocess.run([args.kvasir, "synth", "--config", cfg, "--dtype", "f32", "--seed", "3", "--quiet", "-o", d], check=True)
        dec = cls.from_pretrained(d, dtype=torch.float32).to(dev).eval()
        ids = [[rng.randrange(0, config["vocab_size"]) for _ in range(n)] for n in (1, 2, 9, 40, 300)]
        # Inputs sharing a 200-token prefix, so that the pooling engine's prefix cache
        # serves all but the first (last-token pooling).
        head = [rng.randrange(0, config["vocab_size"]) for _ in range(200)]
        ids += [head + [rng.randrange(0, config["vocab_size"]) for _ in range(n)] for n in (1, 5, 17)]
        for pooling in ("last", "mean"):
            proc, base = serve(args.kvasir, args.kvasir_device, d, "--pooling", pooling)
            try:
                got = post(base, "/embeddings", {"input": ids, "normalize": False})["data"]
                for i, seq in enumerate(ids):
                    with torch.no_grad():
                        h = dec(input_ids=torch.tensor([seq], device=dev)).last_hidden_state[0].float().cpu()
                    want = h[-1] if pooling == "last" else h.mean(dim=0)
                    check(f"{name} {pooling} embedding ids len {len(seq)}", cos(torch.tensor(got[i]["embedding"]), want))
            finally:
                proc.terminate()
                proc.wait()
    print(f"{fails} failures (kvasir on {args.kvasir_device}, torch on {dev}, torch {torch.__version__})")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
