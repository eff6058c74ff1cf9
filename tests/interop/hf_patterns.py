#!/usr/bin/env python3
"""tests/interop/hf_patterns.py: tokenizer.json Split patterns whose meaning differs between the
`tokenizers` library (Oniguruma, Ruby syntax) and PCRE2, against data/hf_tokenizer.c's translation
(docs/formats.md "Hugging Face tokenizer.json", the regex table). One pattern per construct; each
is put into a base tokenizer.json (tests/hf_tokenizer/llama3.json or any Sequence [Split,
ByteLevel] file) in place of its pattern.

  hf_patterns.py check --tok-encode BIN --base JSON [--n 2000] [--seed S] [--prepare BIN]
      ids of BIN (tok_encode --nul) against the library's for every case, on the case's own texts
      and n texts of every script (hf_texts.texts); the refused patterns refused by prepare in one
      line naming the construct; the match-limit case an error in both. Exit 1 on any difference.
  hf_patterns.py base OUT
      the base tokenizer.json: a byte-level BPE of vocab 3000 that `tokenizers` trains on the
      cases' texts (each 40 times) and 300 kB of hf_texts.corpus with one pre-token per line, so
      that its merges cross the places where the patterns cut: any pre-token boundary of ours
      that is not the library's shows in the ids (a vocabulary trained with the pattern itself
      has no merge across its cuts, and most differences would not show).
  hf_patterns.py nfc --tok-encode BIN --tokenizer JSON [--n 20000]
      a tokenizer.json with normalizer NFC on texts with the marks of FROZEN: ids equal to the library's.
  hf_patterns.py fixtures --base JSON OUT
      OUT (JSON): every case with the library's ids on its texts and 12 general texts, what
      tests/test_hf_tokenizer.sh compares tok_encode with (no python packages needed there).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_texts  # noqa: E402

# cl100k_base's pattern as tiktoken publishes it (tiktoken_ext/openai_public.py); transformers'
# TikTokenConverter copies it into tokenizer.json verbatim
CL100K = r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""

# (name, pattern, texts): the same ids as the library's wanted
CASES = [
    ("cl100k_published", CL100K, ["54789", "in 1234567 years, 12 or 123456", "x 99999999999 y\n  \n", "3.14159 ٣٤٥٦٧"]),
    ("interval_plus", r"\p{N}{2}+|\p{L}{1,2}+|\s+|.", ["54789 12345 1", "abcde 1234567", "x y"]),
    ("interval_exact_optional", r"xa{2}?y|.", ["xy xy xy", "xaay xay xy zxyz"]),
    ("interval_no_min", r"\p{N}{,2}|\p{L}+|\s+|.", ["12345 a1b22c333", "{,2} 7"]),
    ("hex_h", r"\h+|\p{L}+|\s+|.", ["deadbeef 0x1F zzz", "cafe\tbabe"]),
    ("word_w", r"\w+|\s+|.", ["क्षत्रिय नमस्ते", "a_b é ab\u0301c x²y ½", "ⓐⓑ Ⅻ 12"]),
    ("boundary_b", r"\b\p{L}+|\p{L}|\s+|.", ["क्ष त्र", "ab\u0301c d", "x_y z"]),
    ("dollar_multiline", r"\p{L}+$|\s+$|\s+|\p{L}+|.", ["ab  \ncd \nef", "x\n\ny  \n"]),
    ("option_m", r"(?m:\p{L}.\p{L})|.", ["a\nb c d", "x\ny"]),
    ("escape_u", r"\u0041+|\p{L}+|\s+|.", ["AAAb AbA", "xA"]),
]
# (name, pattern, what prepare's one line must hold): refused
REFUSED = [
    ("option_s", r"(?s:.)|\s+", "option 's'"),
    ("posix_bracket", r"[[:alpha:]]+|.", r"POSIX bracket"),
    ("class_intersection", r"[a-z&&[^b]]+|.", r"class inside a class|&&"),
    ("not_word_in_class", r"[\W\d]+|.", r"\\W inside a \[...\] class"),
]
# NFC: combining marks of Unicode 10-15 that the library's older tables (class 0) do not reorder
# and utf8proc 2.8 does (data/hf_tokenizer.c hf_nfc_frozen_ranges); texts mixing them with bases
# and marks of every class, for a tokenizer.json with normalizer NFC
FROZEN = [0x07FD, 0x0898, 0x089F, 0x08CA, 0x08D3, 0x09FE, 0x0C3C, 0x0D3B, 0x0D3C, 0x0EBA, 0x1715, 0x1ABF, 0x1AC5, 0x1ACE,
          0x1DF6, 0x1DFA, 0xA82C, 0x10D24, 0x10EAB, 0x10EFD, 0x10F46, 0x10F82, 0x11070, 0x1133B, 0x1145E, 0x11839,
          0x1193D, 0x11943, 0x119E0, 0x11A34, 0x11A47, 0x11A99, 0x11D42, 0x11D44, 0x11D97, 0x11F41, 0x16FF0, 0x1E08F,
          0x1E130, 0x1E2AE, 0x1E2EC, 0x1E4EC]


def nfc_texts(n, seed):
    import random
    r = random.Random(seed)
    marks = ["\u0334", "\u0301", "\u0316", "\u05b0", "\u0d4d", "\u093c", "\u0327", "\u1dce", ""]
    bases = ["a", "e", "\u0d15", "o", " ", "\u05d0", "x", "\u0915", "A", "\u1100\u1161"]
    out = []
    for _ in range(n):
        t = ""
        for _ in range(r.randint(1, 6)):
            t += r.choice(bases) + "".join(r.choice([chr(r.choice(FROZEN))] + marks) for _ in range(r.randint(0, 3)))
        out.append(t)
    return out


# PCRE2's match limit (catastrophic backtracking): an error in both, never a silent pre-token
MATCH_LIMIT = ("match_limit", r"(\p{L}+)+!|\s+|.", "a" * 40 + "?")


def with_pattern(base, pattern, path):
    with open(base, encoding="utf-8") as f:
        j = json.load(f)
    j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = pattern
    with open(path, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False)


def lib_ids(path, texts):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(path)
    return [tok.encode(t, add_special_tokens=False).ids for t in texts]


def ours(tok_encode, path, texts):
    data = b"\0".join(t.encode("utf-8") for t in texts) + b"\0"
    r = subprocess.run([tok_encode, path, "--nul"], input=data, capture_output=True, check=False)
    if r.returncode != 0:
        return None, r.stderr.decode(errors="replace").strip()
    return [[int(x) for x in ln.split()] for ln in r.stdout.decode().split("\n")[:-1]], ""


def general(n, seed):  # valid UTF-8 only: the library takes str
    return [t.decode("utf-8") for t in hf_texts.texts(n, seed=seed, invalid=False)]


def check(a):
    bad = 0
    gen = general(a.n, a.seed)
    with tempfile.TemporaryDirectory() as d:
        print(f"patterns: {len(CASES)} patterns, each on its own texts and {a.n} texts of every script "
              f"(base {os.path.basename(a.base)})")
        for name, pat, texts in CASES:
            p = os.path.join(d, name + ".json")
            with_pattern(a.base, pat, p)
            txts = texts + gen
            want = lib_ids(p, txts)
            got, err = ours(a.tok_encode, p, txts)
            if got is None:
                print(f"  {name:24s} ours failed: {err}")
                bad += 1
                continue
            diff = [i for i in range(len(txts)) if got[i] != want[i]]
            own = sum(1 for i in diff if i < len(texts))
            print(f"  {name:24s} ids differ on {len(diff)} of {len(txts)} texts ({own} of its {len(texts)} own)")
            if diff:
                i = diff[0]
                print(f"    first: {txts[i][:60]!r}\n      ours {got[i][:20]}\n      tokenizers {want[i][:20]}")
            bad += len(diff)
        for name, pat, want_msg in REFUSED:
            p = os.path.join(d, name + ".json")
            with_pattern(a.base, pat, p)
            r = subprocess.run([a.tok_encode, p, "--nul"], input=b"x\0", capture_output=True, check=False)
            err = r.stderr.decode(errors="replace").strip()
            import re
            ok = r.returncode != 0 and len(err.splitlines()) == 1 and re.search(want_msg, err) and os.path.basename(p) in err
            try:
                lib_ids(p, ["x"])
                lib = "the library accepts it"
            except Exception as e:  # noqa: BLE001
                lib = "the library refuses it too: " + str(e)[:60]
            print(f"  {name:24s} refused in one line: {'yes' if ok else 'NO'} ({lib}): {err[:150]}")
            bad += not ok
        name, pat, text = MATCH_LIMIT
        p = os.path.join(d, name + ".json")
        with_pattern(a.base, pat, p)
        # the library panics (a pyo3 PanicException, with a Rust backtrace): in a child process
        r = subprocess.run([sys.executable, "-c", "import sys; from tokenizers import Tokenizer; "
                            "Tokenizer.from_file(sys.argv[1]).encode(sys.argv[2])", p, text],
                           capture_output=True, text=True, env=dict(os.environ, RUST_BACKTRACE="0"), check=False)
        lib = "no error" if r.returncode == 0 else "error: " + (
            [ln for ln in r.stderr.splitlines() if "Onig" in ln] + [r.stderr.strip()[-80:]])[0][:80]
        got, err = ours(a.tok_encode, p, [text])
        ok = got is None and "match limit" in err and lib.startswith("error")
        print(f"  {name:24s} ours: {err[:140] or got}; tokenizers: {lib}")
        bad += not ok
    print("patterns: PASS" if bad == 0 else "patterns: FAIL")
    return 1 if bad else 0


def nfc(a):
    txts = nfc_texts(a.n, 5)
    want = lib_ids(a.tokenizer, txts)
    got, err = ours(a.tok_encode, a.tokenizer, txts)
    diff = [i for i in range(len(txts)) if got is None or got[i] != want[i]]
    print(f"nfc: {os.path.basename(a.tokenizer)} on {a.n} texts with the {len(FROZEN)} sampled marks of Unicode 10-15: "
          f"ids differ on {len(diff)} {err}")
    print("nfc: PASS" if not diff else "nfc: FAIL")
    return 1 if diff else 0


def base(a):
    from tokenizers import Tokenizer, models, trainers, pre_tokenizers, decoders, Regex
    lines = [t + "\n" for _, _, texts in CASES for t in texts] * 40
    lines += hf_texts.corpus(300_000, seed=13).splitlines(keepends=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"[^\n]+\n?|\n"), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=3000, min_frequency=2, special_tokens=["<|endoftext|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(lines, trainer)
    tok.save(a.out)
    print(f"base: {a.out}: vocab {tok.get_vocab_size()}")


def fixtures(a):
    gen = general(12, 77)
    out = {"base": os.path.basename(a.base), "cases": [], "refused": [], "match_limit": {}}
    with tempfile.TemporaryDirectory() as d:
        for name, pat, texts in CASES:
            p = os.path.join(d, name + ".json")
            with_pattern(a.base, pat, p)
            txts = texts + gen
            out["cases"].append({"name": name, "pattern": pat, "texts": txts, "ids": lib_ids(p, txts)})
    txts = nfc_texts(60, 9)
    nfc_tok = os.path.join(os.path.dirname(a.base), "qwen2.json")
    out["nfc"] = {"tokenizer": "qwen2.json", "texts": txts, "ids": lib_ids(nfc_tok, txts)}
    out["refused"] = [{"name": n, "pattern": p, "message": m} for n, p, m in REFUSED]
    out["match_limit"] = {"name": MATCH_LIMIT[0], "pattern": MATCH_LIMIT[1], "text": MATCH_LIMIT[2]}
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
    print(f"fixtures: {len(CASES)} patterns into {a.out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check")
    c.add_argument("--tok-encode", required=True)
    c.add_argument("--base", required=True)
    c.add_argument("--n", type=int, default=2000)
    c.add_argument("--seed", type=int, default=3000)
    nf = sub.add_parser("nfc")
    nf.add_argument("--tok-encode", required=True)
    nf.add_argument("--tokenizer", required=True)
    nf.add_argument("--n", type=int, default=20000)
    b = sub.add_parser("base")
    b.add_argument("out")
    f = sub.add_parser("fixtures")
    f.add_argument("--base", required=True)
    f.add_argument("out")
    a = ap.parse_args()
    sys.exit(check(a) if a.cmd == "check" else base(a) if a.cmd == "base" else nfc(a) if a.cmd == "nfc" else fixtures(a))


if __name__ == "__main__":
    main()
