#!/usr/bin/env python3
"""tests/interop/hf_tokenizers.py: our tokenizer.json loader (data/hf_tokenizer.h) against the
`tokenizers` library. Needs `tokenizers` (a virtual environment: scripts/hf_tokenizer_interop.sh
makes one); never run from `make test`, which uses the fixtures this script writes.

  hf_tokenizers.py train DIR [--vocab N] [--corpus-bytes B] [--kjv FILE]
      trains three byte-level BPEs with `tokenizers` itself, one per pre-tokenizer: gpt2.json
      (ByteLevel(use_regex=True), GPT-2's pattern), qwen2.json (normalizer NFC, Split(Qwen2's pattern) +
      ByteLevel; its merges rewritten in the older "a b" string form) and llama3.json
      (Split(Llama 3's pattern) + ByteLevel, ignore_merges=True), each with special and
      non-special added tokens, on hf_texts.corpus (every script) plus KJV text if given.
  hf_tokenizers.py fixtures OUT
      `train` with vocab 1000 into OUT, then OUT/texts.bin (hf_texts.EDGE and hf_texts.texts, 300 in all, NUL-separated)
      and OUT/ids_NAME.txt: the ids `tokenizers` gives each text (one line each), what
      tests/test_hf_tokenizer.sh compares prepare's encoder with.
  hf_tokenizers.py check --tok-encode BIN --dir DIR [--n 100000] [--seed S]
      for each DIR/NAME.json: the ids of BIN (tok_encode --nul) on hf_texts.texts(n) against the
      `tokenizers` library's, and decode(ids) == text (token bytes from the file's vocabulary; the text in NFC, valid parts,
      for a tokenizer with normalizer NFC).
      Prints a table per tokenizer; exit 1 on any mismatch.

Reference ids of a text with bytes that are not UTF-8: the text is cut at runs of such bytes
(python's surrogateescape); the valid parts go through Tokenizer.encode(add_special_tokens=False)
and each invalid run through the BPE model alone (Tokenizer.model.tokenize of its ByteLevel
spelling), which is how data/hf_tokenizer.c treats a run of bytes that its regex cannot match.
"""
import argparse
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_texts  # noqa: E402

PATTERNS = {
    # Qwen2 / Qwen3's tokenizer.json Split pattern
    "qwen2": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
    # Llama 3's
    "llama3": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
}
ADDED = {  # (special tokens, non-special added tokens)
    "gpt2": (["<|endoftext|>"], ["<tool>"]),
    "qwen2": (["<|endoftext|>", "<|im_start|>", "<|im_end|>"], ["[TOOL]"]),
    "llama3": (["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"], ["<|end"]),
}
NAMES = ["gpt2", "qwen2", "llama3"]


def byte_to_char():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


B2C = byte_to_char()
C2B = {c: b for b, c in B2C.items()}


def all_added():
    out = []
    for sp, ns in ADDED.values():
        out += sp + ns
    return sorted(set(out))


def train(out_dir, vocab, corpus_bytes, kjv):
    from tokenizers import Tokenizer, models, trainers, pre_tokenizers, decoders, normalizers, Regex
    os.makedirs(out_dir, exist_ok=True)
    text = hf_texts.corpus(corpus_bytes, seed=11)
    if kjv:
        with open(kjv, encoding="utf-8") as f:
            text += f.read()[:corpus_bytes]
    lines = text.splitlines(keepends=True)
    for name in NAMES:
        tok = Tokenizer(models.BPE(ignore_merges=(name == "llama3")))
        if name == "gpt2":
            tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        else:
            tok.pre_tokenizer = pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(PATTERNS[name]), behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        tok.decoder = decoders.ByteLevel()
        if name == "qwen2":  # as Qwen2/3's tokenizer.json
            tok.normalizer = normalizers.NFC()
        special, plain = ADDED[name]
        trainer = trainers.BpeTrainer(vocab_size=vocab, min_frequency=2, special_tokens=special, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train_from_iterator(lines, trainer)
        tok.add_tokens(plain)
        path = os.path.join(out_dir, name + ".json")
        tok.save(path)
        if name == "qwen2":  # the older "a b" form of merges (GPT-2's, Qwen2's files)
            with open(path, encoding="utf-8") as f:
                j = json.load(f)
            j["model"]["merges"] = [m if isinstance(m, str) else " ".join(m) for m in j["model"]["merges"]]
            with open(path, "w", encoding="utf-8") as f:
                json.dump(j, f, ensure_ascii=False, indent=1)
            Tokenizer.from_file(path)  # still loads
        print(f"train: {path}: vocab {tok.get_vocab_size()}")


def ref_ids(tok, b):
    s = b.decode("utf-8", "surrogateescape")
    ids = []
    for m in re.finditer(r"[\udc80-\udcff]+|[^\udc80-\udcff]+", s):
        part = m.group(0)
        if "\udc80" <= part[0] <= "\udcff":
            raw = part.encode("utf-8", "surrogateescape")
            ids += [t.id for t in tok.model.tokenize("".join(B2C[x] for x in raw))]
        else:
            ids += tok.encode(part, add_special_tokens=False).ids
    return ids


def nfc_bytes(b, added):
    """What a tokenizer with normalizer NFC decodes b's ids to: each text between added tokens with
    its valid UTF-8 parts in NFC (the library normalizes after cutting the added tokens out)."""
    import unicodedata
    s = b.decode("utf-8", "surrogateescape")
    cut = re.compile("(" + "|".join(map(re.escape, sorted(added, key=len, reverse=True))) + ")")
    def nfc(t):
        return "".join(p if "\udc80" <= p[0] <= "\udcff" else unicodedata.normalize("NFC", p)
                       for p in re.findall(r"[\udc80-\udcff]+|[^\udc80-\udcff]+", t))
    return "".join(p if i % 2 else nfc(p) for i, p in enumerate(cut.split(s))).encode("utf-8", "surrogateescape")


def token_bytes(path):
    """id -> bytes from the file itself: the vocabulary unspelled, added tokens as their content."""
    with open(path, encoding="utf-8") as f:
        j = json.load(f)
    tb = {i: bytes(C2B[c] for c in s) for s, i in j["model"]["vocab"].items()}
    for a in j["added_tokens"]:
        tb[a["id"]] = a["content"].encode("utf-8")
    return tb


def ours(tok_encode, path, txts):
    data = b"\0".join(txts) + b"\0"
    r = subprocess.run([tok_encode, path, "--nul"], input=data, capture_output=True, check=False)
    if r.returncode != 0:
        sys.exit(f"check: {tok_encode} {path} failed: {r.stderr.decode(errors='replace')}")
    lines = r.stdout.decode().split("\n")[:-1]
    assert len(lines) == len(txts), (len(lines), len(txts))
    return [[int(x) for x in ln.split()] for ln in lines]


IGNORE_MERGES_WORD = " Привет"


def add_whole_token(path, word):
    """Adds word's ByteLevel spelling to model.vocab (a new id) without a merge that makes it: only
    model.ignore_merges gives that id (as in Llama 3's vocabulary, which holds such tokens)."""
    from tokenizers import Tokenizer
    with open(path, encoding="utf-8") as f:
        j = json.load(f)
    spelled = "".join(B2C[x] for x in word.encode("utf-8"))
    # the next model id; added tokens above it move up one (`tokenizers` renumbers an added token
    # whose id does not follow the model's vocabulary when it loads the file)
    new = len(j["model"]["vocab"])
    for a in j["added_tokens"]:
        if a["id"] >= new:
            a["id"] += 1
    j["model"]["vocab"][spelled] = new
    with open(path, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False, indent=1)
    Tokenizer.from_file(path)


def fixtures(out):
    from tokenizers import Tokenizer
    train(out, 1000, 400_000, None)
    add_whole_token(os.path.join(out, "llama3.json"), IGNORE_MERGES_WORD)
    txts = [e.encode("utf-8") for e in hf_texts.EDGE] + hf_texts.texts(300 - len(hf_texts.EDGE), seed=7, added=all_added(), max_chunks=16)
    with open(os.path.join(out, "texts.bin"), "wb") as f:
        f.write(b"\0".join(txts) + b"\0")
    for name in NAMES:
        tok = Tokenizer.from_file(os.path.join(out, name + ".json"))
        with open(os.path.join(out, f"ids_{name}.txt"), "w") as f:
            for t in txts:
                f.write(" ".join(map(str, ref_ids(tok, t))) + "\n")
    print(f"fixtures: {len(txts)} texts, ids of {', '.join(NAMES)} in {out}")


def check(tok_encode, d, n, seed):
    from tokenizers import Tokenizer
    txts = hf_texts.texts(n, seed=seed, added=all_added())
    scripts_note = f"{len(hf_texts.KINDS) + 2} kinds of text (incl. added tokens, invalid UTF-8)"
    bad = 0
    print(f"check: {n} texts, {sum(map(len, txts)) / 1e6:.1f} MB, {scripts_note}")
    for name in NAMES:
        path = os.path.join(d, name + ".json")
        tok = Tokenizer.from_file(path)
        got = ours(tok_encode, path, txts)
        tb = token_bytes(path)
        j = json.load(open(path, encoding="utf-8"))
        nfc = (j.get("normalizer") or {}).get("type") == "NFC"
        added = [a["content"] for a in j["added_tokens"]]
        mism = rt = ninv = 0
        first = None
        for t, g in zip(txts, got):
            want = ref_ids(tok, t)
            if g != want:
                mism += 1
                first = first or (t, g, want)
            if b"".join(tb[i] for i in g) != (nfc_bytes(t, added) if nfc else t):
                rt += 1
            ninv += t != t.decode("utf-8", "replace").encode("utf-8")
        print(f"  {name:7s} vocab {tok.get_vocab_size():6d}: ids differ on {mism} of {n} texts "
              f"({ninv} with invalid UTF-8); decode(encode(x)) != x on {rt}")
        if first:
            t, g, w = first
            print(f"    first: text {t[:80]!r}\n      ours {g[:30]}\n      tokenizers {w[:30]}")
        bad += mism + rt
    print("check: PASS" if bad == 0 else "check: FAIL")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("dir")
    t.add_argument("--vocab", type=int, default=1000)
    t.add_argument("--corpus-bytes", type=int, default=400_000)
    t.add_argument("--kjv")
    f = sub.add_parser("fixtures")
    f.add_argument("out")
    c = sub.add_parser("check")
    c.add_argument("--tok-encode", required=True)
    c.add_argument("--dir", required=True)
    c.add_argument("--n", type=int, default=100_000)
    c.add_argument("--seed", type=int, default=1000)
    a = ap.parse_args()
    if a.cmd == "train":
        train(a.dir, a.vocab, a.corpus_bytes, a.kjv)
    elif a.cmd == "fixtures":
        fixtures(a.out)
    else:
        sys.exit(check(a.tok_encode, a.dir, a.n, a.seed))


if __name__ == "__main__":
    main()
