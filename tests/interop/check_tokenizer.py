#!/usr/bin/env python3
"""tests/interop/check_tokenizer.py: our tokenizer vs its Hugging Face export (tools/export_tokenizer.h).

  check_tokenizer.py check DIR TEXTS IDS [--label NAME]
      DIR: an export (tokenizer.json, tokenizer_config.json, special_tokens_map.json); TEXTS: UTF-8
      texts, each ended by a NUL byte; IDS: the ids our tokenizer gives them, one line per text
      (`tok_encode TOKENIZER --nul < TEXTS`). Loads DIR with transformers' AutoTokenizer and with
      tokenizers.Tokenizer.from_file and checks, for every text: the ids (AutoTokenizer's
      __call__ and encode, tokenizers' encode), decode(ids) == text with both, and
      decode([end-of-text] + ids) == "<|endoftext|>" + text. Prints a table; exit 1 on a mismatch.
  check_tokenizer.py run --tok-encode BIN --tokenizer TOK.bin --out DIR [--text-file FILE]...
                         [--lines N] [--random N] [--seed S]
      exports TOK.bin into DIR (BIN --export-hf), builds the test texts (ASCII edge cases,
      non-ASCII, random strings over a tricky alphabet, the first N lines (default all) and the
      whole of each text file), encodes them with BIN and checks each group as `check` does.
  check_tokenizer.py light --tok-encode BIN --tokenizer TOK.bin --out DIR [--text-file FILE]...
                           [--lines N] [--random N] [--seed S]
      python's standard library only (for `make test`): exports, then checks tokenizer.json
      against TOK.bin itself (vocab = every token's bytes in GPT-2's byte-level spelling, merges
      in order, end-of-text, the Split regex and the rest of the pipeline), and re-implements the
      pipeline (the Split regex with python's `re`, byte-level BPE by merge rank) to compare ids
      with BIN on the edge cases, random strings and the first N lines (default 300) of each file.
  check_tokenizer.py synth OUT [--bytes N] [--seed S]
      writes a deterministic synthetic text rich in non-ASCII letters, digits and whitespace,
      to train a tokenizer with many non-ASCII merges on (the KJV one has none).

`check` and `run` need `tokenizers` and `transformers` (no torch): run them with the python of a
virtual environment that has them, never from `make test`.
"""
import argparse
import json
import os
import random
import re
import struct
import subprocess
import sys

EOT = "<|endoftext|>"

# ---- test texts ----------------------------------------------------------------------------------

ASCII_EDGE = [
    "", " ", "  ", "\n", "\n\n", " \n", "\n ", "\t", "\t\t\n", "\r\n", "a\r\nb\r\n", "\x0b\x0c", "x\x0by\x0cz",
    "Hello world", "Hello  world", "Hello   world", "Hello \tworld", "Hello\t world", "trailing   ", "trailing \n",
    "  leading", "\n\nleading", " \t \t x", "a \n b", "end.\n", "two lines\nand more\n\n\n",
    "it's", "It's", "IT'S", "it'S", "I'm can't won't they're we've you'll he'd", "'s's's", "'ll've're", "don''t",
    "'hello'", "''", "' s", "x'", "rock'n'roll", "O'Neil's", "'S 'T 'M 'D 'RE 'VE 'LL", "'re'", "it's'",
    "abc123", "123abc", "a1b2c3", "2024-06-11", "3.14159", " 42", "  42", "x 1 22 333 4444", "1,000,000",
    "v1.2.3-rc4", "0x7F", "100%", "$5.00", "#1!", "...", "?!?!", "!!!  ???", " .", "--", "---->",
    "(a) [b] {c} <d>", "\"quoted\"", "back\\slash", "a_b_c", "snake_case and camelCase", "e-mail@example.com",
    "http://example.com/a?b=c&d=e#f", "~`^|", "1+1=2", "a/b\\c",
    EOT, "a" + EOT + "b", " " + EOT + " ", EOT + "\n" + EOT, "<|endoftext", "|>" + EOT + "<|", "<|endoftext|>x",
    "x\x00y", "\x00", "\x01\x02\x1b[0m\x7f", "tab\tsep\tvalues\t1\t2",
    "In the beginning God created the heaven and the earth.\n",
    "   word", "word   ", "   \n   ", "a  \n  b", " \n\n x", "x\n\n  \n", "\t\tindented code\n\tmore",
]

NON_ASCII = [
    "café", "naïve résumé", "Ångström", "Crème brûlée", "Æsir œuvre ß", "Zürich, München", " éé", "éte\u0301",
    "e\u0301\u0302\u0303", "\u0301start", "a\u0308\u0332", "日本語のテキスト", "中文 文本", "한국어 텍스트",
    "Привет, мир!", "Γειά σου Κόσμε", "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "สวัสดีชาวโลก",
    "😀", "😀😁", "emoji 😀 here", "👍🏽", "👨\u200d👩\u200d👧", "🇫🇷🇩🇪", "❤\ufe0f", "\ufeffBOM",
    "non\u00a0breaking", "\u00a0\u00a0", "x\u2028y\u2029z", "\u0085next", "ideo\u3000space", "en\u2003space",
    "１２３ fullwidth", "٣٤٥ digits", "Ⅻ roman", "½ ¼", "²³", "x²+y²", "€100", "£5", "¥", "©®™", "«quotes»",
    "„Anführung“", "\u201cquoted\u201d", "it\u2019s", "em\u2014dash", "…", "•bullet", "\u00adsoft hyphen",
    "\ufffd", "\U0010ffff", "\U0001d400\U0001d401", "ẞ", "İstanbul", "ǅ", "a\u0300b", "   日本", "日本   ",
    "\n日本\n", "Ωmega 1ω2", "ø1ø", "x'é", "é's", "café's", "Ünïcödé'll", "\u00a0's", "tab\t日本\tend",
]

RANDOM_ATOMS = [" ", " ", " ", "\t", "\n", "\r", "\x0b", "\x0c", "a", "Z", "s", "t", "l", "e", "r", "v", "d", "m", "x",
                "'", "'", "0", "7", ".", ",", "!", "-", "_", "<", "|", ">", "\x1b", "\x7f", "é", "中", "😀",
                "\u0301", "\u00a0", "\u2028", "\u0085", "\u3000", "５", "\u200d", "\ufeff", "٣", "Ⅻ", "ß", "\U0010ffff",
                "'s", "'S", "'ll", "'re", "'ve", EOT, "the", " the", "and", "  ", "\n\n"]


def random_texts(n, seed):
    rng = random.Random(seed)
    return ["".join(rng.choice(RANDOM_ATOMS) for _ in range(rng.randint(0, 24))) for _ in range(n)]


SYLLABLES = [  # by script: a word takes its syllables from one list
    ["ca", "fé", "na", "ïve", "ré", "su", "mé", "über", "stra", "ße", "ñu", "ção", "ø", "å", "œu", "vre", "è", "ê"],
    ["κα", "λη", "μέ", "ρα", "κό", "σμε", "ου", "Ελ", "λά", "δα"],
    ["при", "вет", "мир", "да", "ска", "жи", "ть", "Мо", "сква"],
    ["日本", "語", "中文", "文本", "東京", "の", "は", "テキ", "スト", "大", "学"],
    ["한국", "어", "텍", "스트", "안녕", "하세", "요"],
    ["مر", "حبا", "بال", "عالم", "שלום", "עו", "לם"],
    ["नम", "स्ते", "दुनि", "या", "हिं", "दी"],
    ["😀", "👍🏽", "❤\ufe0f", "🇫🇷", "🎉", "👨\u200d👩\u200d👧"],
    ["e\u0301", "a\u0308", "o\u0302", "n\u0303"],
    ["the", "and", "of", "in", "it", "is", "don", "can", "ex", "am", "ple", "word", "Cap", "TION"],
    ["0", "1", "42", "７", "٣", "Ⅻ", "½", "2024"],
]
SEPARATORS = [" "] * 12 + ["  ", "\u00a0", "\u3000", ", ", ". ", "\n", "\n\n", "\t", " — ", "\u2028", "\x85", "'s ",
              "'ll ", "'S ", " 123 ", "!? ", " (", ") ", ": ", "'", " \n", "\n  ", "...", "\r\n", " <|endoftext|> "]


def synthetic_corpus(nbytes, seed):
    """deterministic text rich in non-ASCII letters, digits and whitespace of every kind"""
    rng = random.Random(seed)
    out, n = [], 0
    while n < nbytes:
        syl = rng.choice(SYLLABLES)
        w = "".join(rng.choice(syl) for _ in range(rng.randint(1, 4))) + rng.choice(SEPARATORS)
        out.append(w)
        n += len(w.encode("utf-8"))
    return "".join(out)


def cmd_synth(args):
    with open(args.out, "w", encoding="utf-8", newline="") as f:
        f.write(synthetic_corpus(args.bytes, args.seed))
    return 0


def file_texts(path, nlines):
    """(lines of the file with their newline, up to nlines (0: all), the whole file), as str"""
    with open(path, "rb") as f:
        whole = f.read().decode("utf-8")
    lines = re.findall(r"[^\n]*\n|[^\n]+$", whole)  # not splitlines: \x85, \u2028 ... are letters for us
    return (lines if nlines <= 0 else lines[:nlines]), whole


# ---- our side: tok_encode --------------------------------------------------------------------------

def export(tok_encode, tokenizer, out, max_len=1024):
    r = subprocess.run([tok_encode, tokenizer, "--export-hf", out, "--model-max-length", str(max_len)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("error: check_tokenizer: export failed: " + (r.stderr.strip() or r.stdout.strip()))


def our_ids(tok_encode, tokenizer, texts):
    """our ids for each text: one `tok_encode --nul` call; texts holding a NUL byte one by one"""
    out = [None] * len(texts)
    plain = [i for i, t in enumerate(texts) if "\0" not in t]
    data = b"".join(texts[i].encode("utf-8") + b"\0" for i in plain)
    r = subprocess.run([tok_encode, tokenizer, "--nul"], input=data, capture_output=True)
    if r.returncode != 0:
        sys.exit("error: check_tokenizer: tok_encode failed: " + r.stderr.decode(errors="replace").strip())
    lines = r.stdout.decode().split("\n")[:len(plain)]
    for i, line in zip(plain, lines):
        out[i] = [int(x) for x in line.split()]
    for i, t in enumerate(texts):
        if out[i] is None:
            r = subprocess.run([tok_encode, tokenizer], input=t.encode("utf-8"), capture_output=True, check=True)
            out[i] = [int(x) for x in r.stdout.split()]
    return out


def read_group(texts_path, ids_path):
    with open(texts_path, "rb") as f:
        data = f.read()
    parts = data.split(b"\0")
    if parts and parts[-1] == b"":
        parts.pop()
    texts = [p.decode("utf-8") for p in parts]
    with open(ids_path) as f:
        ids = [[int(x) for x in line.split()] for line in f.read().split("\n")[:len(texts)]]
    if len(ids) != len(texts):
        sys.exit(f"error: check_tokenizer: {len(texts)} texts in {texts_path} but {len(ids)} lines in {ids_path}")
    return texts, ids


# ---- the Hugging Face side ------------------------------------------------------------------------

class HF:
    def __init__(self, d):
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        import tokenizers
        import transformers
        transformers.logging.set_verbosity_error()
        self.auto = transformers.AutoTokenizer.from_pretrained(d)
        self.raw = tokenizers.Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        # "<|endoftext|>" inside a text is bytes for us; tokenizer_config.json's split_special_tokens
        # does this for AutoTokenizer, a bare tokenizers.Tokenizer needs the flag set
        self.raw.encode_special_tokens = True
        self.versions = f"tokenizers {tokenizers.__version__}, transformers {transformers.__version__}"


def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def check_group(hf, label, texts, ids, report):
    a, raw = hf.auto, hf.raw
    eot = a.eos_token_id
    n_bad = {"auto": 0, "encode": 0, "tokenizers": 0, "decode": 0, "eot": 0}
    shown = 0
    call_ids = a(texts)["input_ids"] if texts else []
    raw_ids = [e.ids for e in raw.encode_batch(texts)] if texts else []
    for i, t in enumerate(texts):
        bad = []
        if call_ids[i] != ids[i]:
            n_bad["auto"] += 1; bad.append(("AutoTokenizer(text)", call_ids[i]))
        enc = a.encode(t)
        if enc != ids[i]:
            n_bad["encode"] += 1; bad.append(("AutoTokenizer.encode", enc))
        if raw_ids[i] != ids[i]:
            n_bad["tokenizers"] += 1; bad.append(("Tokenizer.encode", raw_ids[i]))
        d1, d2 = a.decode(ids[i]), raw.decode(ids[i], skip_special_tokens=False)
        if d1 != t or d2 != t:
            n_bad["decode"] += 1; bad.append(("decode", repr(d1 if d1 != t else d2)))
        if a.decode([eot] + ids[i]) != EOT + t:
            n_bad["eot"] += 1; bad.append(("decode([eot]+ids)", repr(a.decode([eot] + ids[i]))))
        if bad and shown < 5:
            shown += 1
            print(f"MISMATCH [{label} #{i}] text {t[:80]!r}{'...' if len(t) > 80 else ''}")
            print(f"  ours: {ids[i][:40]}")
            for what, got in bad:
                if isinstance(got, list):
                    k = first_diff(got, ids[i])
                    print(f"  {what}: first difference at {k}: ours {ids[i][k:k + 8]} theirs {got[k:k + 8]}")
                else:
                    print(f"  {what}: {got}")
    ntok = sum(len(x) for x in ids)
    ok = not any(n_bad.values())
    report.append((label, len(texts), ntok, n_bad, ok))
    return ok


def print_table(report, versions):
    print(f"\ntokenizer export vs our tokenizer ({versions}); columns: texts that differ")
    print(f"{'group':<26} {'texts':>7} {'tokens':>9} {'Auto()':>7} {'encode':>7} {'tokzrs':>7} {'decode':>7} {'eot+':>5}  result")
    for label, nt, ntok, b, ok in report:
        print(f"{label:<26} {nt:>7} {ntok:>9} {b['auto']:>7} {b['encode']:>7} {b['tokenizers']:>7} {b['decode']:>7} "
              f"{b['eot']:>5}  {'ok' if ok else 'MISMATCH'}")
    nt = sum(r[1] for r in report)
    ntok = sum(r[2] for r in report)
    print(f"{'total':<26} {nt:>7} {ntok:>9}  {'all equal' if all(r[4] for r in report) else 'MISMATCHES'}")


def cmd_check(args):
    hf = HF(args.dir)
    texts, ids = read_group(args.texts, args.ids)
    report = []
    ok = check_group(hf, args.label, texts, ids, report)
    print_table(report, hf.versions)
    return 0 if ok else 1


def build_groups(args):
    groups = [("ascii edge cases", ASCII_EDGE), ("non-ascii", NON_ASCII),
              (f"random x{args.random} (seed {args.seed})", random_texts(args.random, args.seed))]
    for path in args.text_file:
        lines, whole = file_texts(path, args.lines)
        name = os.path.basename(os.path.dirname(path)) + "/" + os.path.basename(path)
        groups.append((f"{name} lines", lines))
        groups.append((f"{name} whole", [whole]))
    return groups


def cmd_run(args):
    export(args.tok_encode, args.tokenizer, args.out)
    hf = HF(args.out)
    report = []
    ok = True
    for label, texts in build_groups(args):
        ids = our_ids(args.tok_encode, args.tokenizer, texts)
        ok &= check_group(hf, label, texts, ids, report)
    print_table(report, hf.versions)
    print(f"export: {args.out}; vocab_size {len(hf.auto)}, end-of-text id {hf.auto.eos_token_id}")
    return 0 if ok else 1


# ---- light: the standard library only -------------------------------------------------------------

def bytes_to_unicode():
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    m, n = {}, 0
    for b in range(256):
        if b in keep:
            m[b] = chr(b)
        else:
            m[b] = chr(256 + n)
            n += 1
    return m


def read_tokenizer_bin(path):
    """(V, eot, merges [(a, b)], token bytes [bytes]) of our tokenizer.bin (docs/formats.md)"""
    with open(path, "rb") as f:
        data = f.read()
    h = struct.unpack_from("<64i", data, 0)
    if h[0] != 20250611:
        raise SystemExit(f"error: check_tokenizer: {path}: not a gatedgpt tokenizer (magic {h[0]})")
    V, eot, M = h[2], h[3], h[4]
    merges = [struct.unpack_from("<2i", data, 256 + 8 * i) for i in range(M)]
    off = 256 + 8 * M
    lens = struct.unpack_from(f"<{V}i", data, off)
    off += 4 * V
    toks = []
    for n in lens:
        toks.append(data[off:off + n])
        off += n
    return V, eot, merges, toks


class PyBPE:
    """tokenizer.json's pipeline in plain python: Split(regex, Isolated), ByteLevel, BPE by rank"""

    def __init__(self, tj):
        pre = tj["pre_tokenizer"]["pretokenizers"]
        self.regex = re.compile(pre[0]["pattern"]["Regex"])
        self.b2u = bytes_to_unicode()
        self.vocab = tj["model"]["vocab"]
        self.ranks = {}
        for r, m in enumerate(tj["model"]["merges"]):
            a, b = m.split(" ") if isinstance(m, str) else m
            self.ranks[(a, b)] = r
        self.cache = {}

    def pieces(self, text):
        out, pos = [], 0
        for mt in self.regex.finditer(text):
            if mt.start() > pos:  # Isolated keeps the unmatched stretches as pieces too
                out.append(text[pos:mt.start()])
            out.append(mt.group())
            pos = mt.end()
        if pos < len(text):
            out.append(text[pos:])
        return out

    def bpe(self, piece):
        if piece in self.cache:
            return self.cache[piece]
        sym = [self.b2u[b] for b in piece.encode("utf-8")]
        while len(sym) > 1:
            best = min(range(len(sym) - 1), key=lambda i: (self.ranks.get((sym[i], sym[i + 1]), 1 << 62), i))
            if (sym[best], sym[best + 1]) not in self.ranks:
                break
            sym[best:best + 2] = [sym[best] + sym[best + 1]]
        ids = [self.vocab[s] for s in sym]
        self.cache[piece] = ids
        return ids

    def encode(self, text):
        return [i for p in self.pieces(text) for i in self.bpe(p)]


def cmd_light(args):
    fails = []

    def check(what, cond):
        if not cond:
            fails.append(what)
            print("FAIL:", what)

    export(args.tok_encode, args.tokenizer, args.out, 1024)
    with open(os.path.join(args.out, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    with open(os.path.join(args.out, "tokenizer_config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    with open(os.path.join(args.out, "special_tokens_map.json"), encoding="utf-8") as f:
        stm = json.load(f)
    check("no .tmp files left", not [n for n in os.listdir(args.out) if n.endswith(".tmp")])
    V, eot, merges, toks = read_tokenizer_bin(args.tokenizer)
    b2u = bytes_to_unicode()
    spell = ["".join(b2u[b] for b in t) for t in toks]
    m = tj["model"]
    check("model BPE, no unk/dropout/prefix/suffix, ignore_merges false, no byte_fallback",
          m["type"] == "BPE" and m["dropout"] is None and m["unk_token"] is None and not m["ignore_merges"]
          and not m["byte_fallback"] and m["continuing_subword_prefix"] is None and m["end_of_word_suffix"] is None)
    check(f"vocab size {len(m['vocab'])} == {V}", len(m["vocab"]) == V)
    check("vocab maps the byte-level spelling of every token's bytes to its id",
          all(m["vocab"].get(spell[i]) == i for i in range(V)))
    check(f"merges count {len(m['merges'])} == {len(merges)}", len(m["merges"]) == len(merges))
    check("merges in rank order, 'left right' of the spellings",
          all(s == spell[a] + " " + spell[b] for s, (a, b) in zip(m["merges"], merges)))
    at = tj["added_tokens"]
    check("one special added token <|endoftext|> with our end-of-text id",
          len(at) == 1 and at[0]["content"] == EOT and at[0]["id"] == eot == V - 1 and at[0]["special"]
          and not at[0]["normalized"])
    pre = tj["pre_tokenizer"]
    check("pre_tokenizer Sequence[Split(regex, Isolated), ByteLevel(no prefix space, no regex)]",
          pre["type"] == "Sequence" and len(pre["pretokenizers"]) == 2
          and pre["pretokenizers"][0]["type"] == "Split" and pre["pretokenizers"][0]["behavior"] == "Isolated"
          and not pre["pretokenizers"][0]["invert"] and "Regex" in pre["pretokenizers"][0]["pattern"]
          and pre["pretokenizers"][1]["type"] == "ByteLevel" and not pre["pretokenizers"][1]["add_prefix_space"]
          and not pre["pretokenizers"][1]["use_regex"])
    check("the Split regex is the documented one", pre["pretokenizers"][0]["pattern"]["Regex"] == (
        r"'s|'t|'re|'ve|'m|'ll|'d| ?[^\x00-@\[-`{-\x7F]+| ?[0-9]+| ?[\x00-\x08\x0E-\x1F!-/:-@\[-`{-\x7F]+"
        r"|[\t-\r ]+(?![^\t-\r ])|[\t-\r ]+"))
    check("no normalizer, no post-processor, ByteLevel decoder",
          tj["normalizer"] is None and tj["post_processor"] is None and tj["decoder"]["type"] == "ByteLevel")
    check("tokenizer_config: PreTrainedTokenizerFast, eos/bos <|endoftext|>, split_special_tokens, max length",
          cfg["tokenizer_class"] == "PreTrainedTokenizerFast" and cfg["eos_token"] == EOT and cfg["bos_token"] == EOT
          and cfg["split_special_tokens"] is True and cfg["model_max_length"] == 1024
          and cfg["clean_up_tokenization_spaces"] is False and cfg["added_tokens_decoder"][str(eot)]["content"] == EOT)
    check("special_tokens_map", stm.get("eos_token") == EOT and stm.get("bos_token") == EOT)

    # the pipeline re-implemented (python's re for the regex; every class in it is explicit ASCII
    # or its complement, which python's re and Oniguruma read alike)
    bpe = PyBPE(tj)
    texts = [t for t in ASCII_EDGE + NON_ASCII + random_texts(args.random, args.seed)]
    for path in args.text_file:
        texts += file_texts(path, args.lines)[0]
    ids = our_ids(args.tok_encode, args.tokenizer, texts)
    ntok = bad = 0
    for t, x in zip(texts, ids):
        y = bpe.encode(t)
        ntok += len(x)
        if y != x:
            bad += 1
            if bad <= 5:
                k = first_diff(x, y)
                print(f"FAIL: python re-implementation differs on {t[:60]!r}: at {k}: ours {x[k:k + 6]} "
                      f"re-implementation {y[k:k + 6]}")
        dec = b"".join(toks[i] for i in x)
        if dec != t.encode("utf-8"):
            bad += 1
            print(f"FAIL: our ids do not decode back to {t[:60]!r}")
    check(f"python re-implementation of tokenizer.json == our ids on {len(texts)} texts", bad == 0)
    print(f"light: {len(texts)} texts, {ntok} tokens compared with a python re-implementation of tokenizer.json; "
          f"vocab {V}, {len(merges)} merges, end-of-text {eot}")
    print(f"{'ok' if not fails else 'FAILED'}: {len(fails)} check(s) failed")
    return 1 if fails else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check")
    c.add_argument("dir")
    c.add_argument("texts")
    c.add_argument("ids")
    c.add_argument("--label", default="texts")
    for name in ("run", "light"):
        r = sub.add_parser(name)
        r.add_argument("--tok-encode", required=True)
        r.add_argument("--tokenizer", required=True)
        r.add_argument("--out", required=True)
        r.add_argument("--text-file", action="append", default=[])
        r.add_argument("--lines", type=int, default=0 if name == "run" else 300)
        r.add_argument("--random", type=int, default=3000 if name == "run" else 400)
        r.add_argument("--seed", type=int, default=1)
    sy = sub.add_parser("synth")
    sy.add_argument("out")
    sy.add_argument("--bytes", type=int, default=300000)
    sy.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    return {"check": cmd_check, "run": cmd_run, "light": cmd_light, "synth": cmd_synth}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
