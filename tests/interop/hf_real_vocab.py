#!/usr/bin/env python3
"""tests/interop/hf_real_vocab.py: real vocabularies of 100k-200k tokens as tokenizer.json files,
converted the way transformers converts tiktoken files (TikTokenConverter, what
AutoTokenizer runs on a tiktoken checkpoint: ignore_merges, the pattern copied verbatim), for
`make interop` (scripts/hf_tokenizer_interop.sh) and `make bench` (bench/bench_tokenizer.sh).
No hub downloads: the tiktoken files come from PyPI wheels that ship them (pinned versions,
`pip download --no-deps` into the cache directory on first use):
  cl100k   litellm 1.110.2 ships tiktoken's cl100k_base cache file (100,256 ranks)
  o200k    the same wheel, o200k_base (199,998 ranks)
  qwen     dashscope 2.0.2 ships qwen.tiktoken (151,643 ranks: Qwen2's vocabulary), with Qwen2's
           pattern and its NFC normalizer, as Qwen2's own tokenizer.json has them

  hf_real_vocab.py convert CACHE OUT
      OUT/NAME/tokenizer.json for the three (special tokens: <|endoftext|> and the like, as tiktoken
      and Qwen define them)
  hf_real_vocab.py check --tok-encode BIN --dir OUT [--n 5000] [--seed S]
      ids of BIN against the `tokenizers` library on n mixed documents (hf_texts, up to 200 chunks
      of every script each, valid UTF-8: the library encodes str; every fifth with combining marks
      that the library's NFC tables do not know) per vocabulary. Exit 1 on any
      difference.
"""
import argparse
import base64
import glob
import os
import subprocess
import sys
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_texts  # noqa: E402

WHEELS = {"litellm": "1.110.2", "dashscope": "2.0.2"}
CL100K_PAT = r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
O200K_PAT = "|".join([
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""", r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""", r"""\s*[\r\n]+""", r"""\s+(?!\S)""", r"""\s+"""])
QWEN_PAT = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
# name: (wheel, member, pattern, special tokens, NFC)
VOCABS = {
    "cl100k": ("litellm", "litellm/litellm_core_utils/tokenizers/9b5ad71b2ce5302211f9c61530b329a4922fc6a4", CL100K_PAT,
               ["<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|endofprompt|>"], False),
    "qwen": ("dashscope", "dashscope/resources/qwen.tiktoken", QWEN_PAT,
             ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], True),
    "o200k": ("litellm", "litellm/litellm_core_utils/tokenizers/fb374d419588a4632f3f557e76b4b70aebbca790", O200K_PAT,
              ["<|endoftext|>", "<|endofprompt|>"], False),
}
NAMES = list(VOCABS)


def tiktoken_file(cache, name):
    """The tiktoken file of vocabulary name, fetched into cache on first use."""
    wheel, member = VOCABS[name][:2]
    path = os.path.join(cache, os.path.basename(member))
    if os.path.exists(path):
        return path
    os.makedirs(cache, exist_ok=True)
    whl = glob.glob(os.path.join(cache, f"{wheel}-{WHEELS[wheel]}-*.whl"))
    if not whl:
        print(f"real_vocab: pip download --no-deps {wheel}=={WHEELS[wheel]} (ships {os.path.basename(member)}; first use only)")
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", f"{wheel}=={WHEELS[wheel]}", "-d", cache],
                       check=True)
        whl = glob.glob(os.path.join(cache, f"{wheel}-{WHEELS[wheel]}-*.whl"))
    with zipfile.ZipFile(whl[0]) as z, open(path + ".tmp", "wb") as f:
        f.write(z.read(member))
    os.replace(path + ".tmp", path)
    return path


def ranks(cache, name):
    """bytes -> rank, read as tiktoken.load.load_tiktoken_bpe does"""
    out = {}
    with open(tiktoken_file(cache, name), "rb") as f:
        for line in f:
            if line.strip():
                tok, r = line.split()
                out[base64.b64decode(tok)] = int(r)
    return out


def convert(cache, out):
    from tokenizers import normalizers
    from transformers.convert_slow_tokenizer import TikTokenConverter
    for name, (_, _, pat, specials, nfc) in VOCABS.items():
        path = os.path.join(out, name, "tokenizer.json")
        if os.path.exists(path):
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tok = TikTokenConverter(vocab_file=tiktoken_file(cache, name), pattern=pat, extra_special_tokens=specials).converted()
        if nfc:
            tok.normalizer = normalizers.NFC()
        tok.save(path + ".tmp")
        os.replace(path + ".tmp", path)
        print(f"real_vocab: {path}: vocab {tok.get_vocab_size()} (TikTokenConverter{', NFC' if nfc else ''})")


def documents(n, seed):
    """every fifth document gets combining marks of Unicode 10-15 (hf_patterns.FROZEN) mixed in"""
    from hf_patterns import nfc_texts
    docs = [t.decode("utf-8") for t in hf_texts.texts(n, seed=seed, invalid=False, max_chunks=200)]
    marks = nfc_texts(n // 5 + 1, seed)
    return [d + (" " + marks[i // 5] if i % 5 == 0 else "") for i, d in enumerate(docs)]


def check(a):
    from tokenizers import Tokenizer
    docs = documents(a.n, a.seed)
    data = b"\0".join(d.encode("utf-8") for d in docs) + b"\0"
    bad = 0
    print(f"real_vocab: {a.n} mixed documents, {len(data) / 1e6:.1f} MB")
    for name in NAMES:
        path = os.path.join(a.dir, name, "tokenizer.json")
        tok = Tokenizer.from_file(path)
        want = [e.ids for e in tok.encode_batch(docs, add_special_tokens=False)]
        r = subprocess.run([a.tok_encode, path, "--nul"], input=data, capture_output=True, check=False)
        if r.returncode != 0:
            print(f"  {name}: tok_encode failed: {r.stderr.decode(errors='replace').strip()}")
            bad += 1
            continue
        got = [[int(x) for x in ln.split()] for ln in r.stdout.decode().split("\n")[:-1]]
        diff = [i for i in range(len(docs)) if got[i] != want[i]]
        print(f"  {name:7s} vocab {tok.get_vocab_size():6d}: ids differ on {len(diff)} of {len(docs)} documents "
              f"({sum(map(len, want))} ids)")
        if diff:
            i = diff[0]
            j = next(k for k, (x, y) in enumerate(zip(got[i] + [-1], want[i] + [-1])) if x != y)
            print(f"    first: document {i}, id {j}: ours {got[i][j:j + 8]}, tokenizers {want[i][j:j + 8]} "
                  f"({tok.decode(want[i][max(0, j - 3):j + 5])!r})")
        bad += len(diff)
    print("real_vocab: PASS" if bad == 0 else "real_vocab: FAIL")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("convert")
    c.add_argument("cache")
    c.add_argument("out")
    k = sub.add_parser("check")
    k.add_argument("--tok-encode", required=True)
    k.add_argument("--dir", required=True)
    k.add_argument("--n", type=int, default=5000)
    k.add_argument("--seed", type=int, default=4000)
    a = ap.parse_args()
    if a.cmd == "convert":
        convert(a.cache, a.out)
    else:
        sys.exit(check(a))


if __name__ == "__main__":
    main()
