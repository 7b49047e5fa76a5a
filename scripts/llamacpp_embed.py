#!/usr/bin/env python3
"""llama.cpp oracle of kvasir's embeddings: llama-embedding against /v1/embeddings.

Synthesizes GGUF models with `kvasir synth` (nomic-bert, jina-bert-v2 with and without its
optional norms, BERT, and a small qwen2 decoder served with last-token pooling, as
gte-Qwen2 is: llama.cpp c392e50 predates qwen3), embeds the same
texts with llama.cpp's llama-embedding (its own tokenizer and graph, no normalization) and
with `kvasir serve` (normalize false), and compares them: cosine >= --min-cos for every
text, and the same token count. Exits 1 on any miss. Needs only the standard library.

    CGO_ENABLED=0 go build -o bin/kvasir ./cmd/kvasir
    python3 scripts/llamacpp_embed.py --kvasir bin/kvasir --llama-embedding PATH/llama-embedding
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import threading
import urllib.request

TEXTS = ["hello world", "The quick brown fox jumps over the lazy dog.", "paris", "What is the capital of France?",
         "search query: embedding model", "a", "the city river sun cat dog quick brown fox jumps lazy hello " * 8]

# A small qwen2 decoder (f32) for last-token embeddings.
QWEN2_TINY = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 128,
              "intermediate_size": 384, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "vocab_size": 512, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 1000000,
              "tie_word_embeddings": True, "hidden_act": "silu", "torch_dtype": "float32"}

# (name, decoder config or None for an encoder shape, kvasir serve flags, llama-embedding
# flags): each encoder is served with the pooling its metadata names; the decoder's
# pooling is asked for on both sides.
MODELS = [
    ("nomic-bert-tiny", None, (), ()),
    ("jina-bert-v2-tiny", None, (), ()),
    ("jina-bert-v2-tiny-norms", None, (), ()),
    ("bert-tiny", None, (), ()),
    ("qwen2-tiny-last", QWEN2_TINY, ("--pooling", "last"), ("--pooling", "last")),
]


def serve(kvasir, model, *flags):
    p = subprocess.Popen([kvasir, "serve", "-m", model, "--port", "0", "--threads", "2", *flags],
                         stderr=subprocess.PIPE, text=True)
    for line in p.stderr:
        m = re.search(r"serving \S+ on (http://\S+/v1)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
            return p, m.group(1)
    sys.exit(f"kvasir serve {model} did not start")


def post(base, path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return json.load(r)


def cos(a, b):
    ab = sum(x * y for x, y in zip(a, b))
    return ab / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def llama_embed(binary, model, text, flags):
    out = subprocess.run([binary, "-m", model, "-c", "2048", "-b", "2048", "-ub", "2048", "-t", "2", "-p", text,
                          "--embd-normalize", "-1", "--embd-output-format", "json", "--verbose-prompt", *flags],
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"llama-embedding {model}: exit {out.returncode}: {out.stderr[-2000:]}")
    # --verbose-prompt prints the prompt's tokens ("  id -> 'piece'") before the JSON.
    head, _, body = out.stdout.partition("\n{")
    n = len(re.findall(r"^\s*\d+ -> ", head, re.M))
    return json.loads("{" + body)["data"][0]["embedding"], n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvasir", default="bin/kvasir")
    ap.add_argument("--llama-embedding", required=True)
    ap.add_argument("--min-cos", type=float, default=0.9999)
    ap.add_argument("--models", default="", help="comma-separated shapes to check (default: all)")
    args = ap.parse_args()
    only = set(filter(None, args.models.split(",")))
    tmp = tempfile.mkdtemp(prefix="kvasir-llamacpp-embed-")
    fails = 0
    for shape, config, kflags, lflags in MODELS:
        if only and shape not in only:
            continue
        path = os.path.join(tmp, shape + ".gguf")
        what = ["--shape", shape]
        if config:
            cp = os.path.join(tmp, shape + ".json")
            with open(cp, "w") as f:
                json.dump(config, f)
            what = ["--config", cp, "--dtype", "f32"]
        subprocess.run([args.kvasir, "synth", *what, "--seed", "3", "-o", path], check=True, stderr=subprocess.DEVNULL)
        proc, base = serve(args.kvasir, path, *kflags)
        worst = 1.0
        try:
            for text in TEXTS:
                want, n = llama_embed(args.llama_embedding, path, text, lflags)
                res = post(base, "/embeddings", {"input": text, "normalize": False})
                got, kn = res["data"][0]["embedding"], res["usage"]["prompt_tokens"]
                c = cos(got, want)
                worst = min(worst, c)
                ok = c >= args.min_cos and kn == n
                fails += not ok
                print(f"{'ok  ' if ok else 'FAIL'} {shape} {text[:40]!r}: {kn} tokens (llama.cpp {n}), cosine {c:.9f}")
        finally:
            proc.terminate()
            proc.wait()
        print(f"RESULT|{shape}|worst cosine {worst:.9f}|{len(TEXTS)} texts")
    print(f"{fails} failures")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
