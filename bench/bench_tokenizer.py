#!/usr/bin/env python3
"""bench/bench_tokenizer.py: tokens per second of prepare's tokenizer.json encoder against the
`tokenizers` library (encode_batch, one thread) and tiktoken (encode_ordinary, one thread) on the
same text, one core, side by side (bench/bench_tokenizer.sh runs it in a virtual environment).

The text: KJV (data/kjv/train.txt) repeated, mixed 4:1 with multilingual text of every script
(tests/interop/hf_texts.corpus), --mb million characters (100: 111 MB of UTF-8), cut into
documents by "<|endoftext|>" lines (KJV chapters; 40 lines of the rest). The repetition helps
every encoder with a pre-token cache (ours, tokenizers'); tiktoken has none. The tokenizers: real
vocabularies (tests/interop/hf_real_vocab.py): cl100k (100,256 ranks, its published pattern), Qwen2's
(151,643, Qwen's pattern, NFC) and o200k (199,998), tiktoken files from PyPI wheels converted to
tokenizer.json by transformers' TikTokenConverter. tiktoken runs its own file with the same
pattern (no NFC: tiktoken has none; and it reads cl100k's \p{N}{1,3}+ as possessive, the
library as runs of 1-3: digit runs over 3 differ), so its token count may differ a little from
prepare's and the library's, which must be equal (checked).

prepare is timed end to end by its own "encoded ... in S s" line: reading the file, cutting
documents, encoding, writing the shard (the tokenizer load is outside it).
"""
import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "interop"))
import hf_texts  # noqa: E402
import hf_real_vocab  # noqa: E402

SEP = "<|endoftext|>"


def make_text(path, mb, kjv):
    if os.path.exists(path) and os.path.getsize(path) >= mb * 1_000_000 - 10_000_000:
        return
    with open(kjv, encoding="utf-8") as f:
        bible = f.read()
    multi_lines = hf_texts.corpus(4_000_000, seed=5).splitlines(keepends=True)
    multi = "".join(l + (SEP + "\n" if i % 40 == 39 else "") for i, l in enumerate(multi_lines))
    target = mb * 1_000_000
    parts, size = [], 0
    while size < target:  # 4 parts KJV, 1 part multilingual
        for p in (bible, bible, bible, multi):
            if not p.endswith("\n"):
                p += "\n"
            parts.append(p + SEP + "\n")
            size += len(p.encode("utf-8"))
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write("".join(parts)[:target])


def documents(path):
    with open(path, encoding="utf-8", newline="") as f:  # newline="": keep \r\n as it is in the file
        text = f.read()
    docs = [d for d in re.split(r"(?m)^<\|endoftext\|>\r?\n?", text) if d]
    return docs, len(text.encode("utf-8"))


def run_prepare(prepare, tok, text, work, pin):
    out = os.path.join(work, "shards")
    shutil.rmtree(out, ignore_errors=True)
    cmd = pin + [prepare, "--train", text, "--tokenizer", tok, "--out", out, "--quiet"]
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        sys.exit(f"bench: prepare failed: {r.stderr}")
    m = re.search(r"encoded ([\d.]+) MB in ([\d.]+) s", r.stdout)
    t = re.search(r"train: (\d+) documents, \d+ bytes, (\d+) tokens", r.stdout)
    docs, tokens = int(t.group(1)), int(t.group(2))
    return tokens - docs, float(m.group(2))


def run_tokenizers(tok_path, docs):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tok_path)
    n = 0
    t0 = time.perf_counter()
    for i in range(0, len(docs), 256):
        for e in tok.encode_batch(docs[i:i + 256], add_special_tokens=False):
            n += len(e.ids)
    return n, time.perf_counter() - t0


def tiktoken_encoding(cache, name):
    import tiktoken
    return tiktoken.Encoding(name="bench_" + name, pat_str=hf_real_vocab.VOCABS[name][2],
                             mergeable_ranks=hf_real_vocab.ranks(cache, name), special_tokens={})


def run_tiktoken(enc, docs):
    n = 0
    t0 = time.perf_counter()
    for d in docs:
        n += len(enc.encode_ordinary(d))
    return n, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prepare", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--kjv", default="data/kjv/train.txt")
    ap.add_argument("--mb", type=int, default=100)
    ap.add_argument("--names", default="cl100k,qwen,o200k")
    ap.add_argument("--vocab-dir", default="build/real-vocab")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    cpu = platform.processor()
    try:
        cpu = next(l.split(":", 1)[1].strip() for l in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
                   if l.startswith("Model name"))
    except Exception:
        pass
    pin = ["taskset", "-c", "0"] if shutil.which("taskset") else []
    if pin:
        os.sched_setaffinity(0, {0})  # this process (tokenizers, tiktoken) on the same one core
    text = os.path.join(a.work, f"text_{a.mb}mb.txt")
    make_text(text, a.mb, a.kjv)
    hf_real_vocab.convert(a.vocab_dir, a.vocab_dir)
    docs, nbytes = documents(text)
    import tiktoken
    import tokenizers
    print(f"bench_tokenizer: {nbytes / 1e6:.1f} MB, {len(docs)} documents; one core ({cpu}); "
          f"tokenizers {tokenizers.__version__} (RAYON_NUM_THREADS={os.environ.get('RAYON_NUM_THREADS')}), "
          f"tiktoken {tiktoken.__version__}")
    print(f"{'tokenizer':10s} {'encoder':22s} {'tokens':>11s} {'s':>7s} {'Mtok/s':>7s} {'MB/s':>6s} {'prepare x':>9s}")
    for name in a.names.split(","):
        tp = os.path.join(a.vocab_dir, name, "tokenizer.json")
        rows = [("prepare (ours)",) + run_prepare(a.prepare, tp, text, a.work, pin),
                ("tokenizers encode_batch",) + run_tokenizers(tp, docs),
                ("tiktoken",) + run_tiktoken(tiktoken_encoding(a.vocab_dir, name), docs)]
        ours = rows[0][1] / rows[0][2]
        for label, n, s in rows:
            print(f"{name:10s} {label:22s} {n:11d} {s:7.2f} {n / s / 1e6:7.2f} {nbytes / s / 1e6:6.1f} {ours / (n / s):9.2f}")
        if rows[0][1] != rows[1][1]:
            print(f"  ERROR: prepare and tokenizers give different token counts ({rows[0][1]} vs {rows[1][1]})")
        if rows[2][1] != rows[0][1]:
            print(f"  note: tiktoken's count differs by {100 * (rows[2][1] - rows[0][1]) / rows[0][1]:+.3f}%")
    shutil.rmtree(os.path.join(a.work, "shards"), ignore_errors=True)


if __name__ == "__main__":
    main()
