#!/usr/bin/env python3
"""tests/bpe_reference.py: our BPE encoder (data/tokenizer.c, through tools/tok_encode) against an
independent reference written from docs/formats.md, python's standard library only.

  bpe_reference.py --tok-encode BIN --work DIR [--tokenizer TOK.bin --text-file FILE]... [--lines N]
                   [--random N] [--seed S]

The reference reads tokenizer.bin itself (header, checksum, merges; every token's bytes rebuilt
from the merges and compared with the stored ones), cuts text into pre-tokens with the documented
regex (a bytes pattern with the documented byte classes), and encodes each pre-token by the
textbook rule: while some adjacent pair is a merge, merge the pair of lowest rank, the leftmost
one among equal ranks, one merge at a time. The C encoder is written differently (all occurrences
of the best pair per sweep below 65 bytes, a heap over positions above).

Tokenizers:
  hand     written here: merges chosen so that they compete for the same bytes ("abc" with
           (b,c) rank 0 and (a,b) rank 1 must be a + bc), overlapping pairs (aaa), two ids with
           the same bytes, a pair listed twice (the first rank counts), merges that pre-tokens
           never allow (across a space), bytes >= 0x80
  random   written here: 300 random merges over a 5-letter alphabet (seeded): merges compete
           everywhere
  each --tokenizer given (the KJV one in `make test`)
Texts: hand-made competing cases, seeded random strings over the small alphabets (pieces up to
~400 bytes, so the C encoder's heap path runs too), bytes >= 0x80, invalid UTF-8, NUL bytes, and
the first N lines of each --text-file. Checks, per tokenizer: our ids == the reference's ids on
every text; our ids decode (token bytes rebuilt here) to the text; no end-of-text id. On the
written tokenizers also: the reference == applying the merge list in order (the documented
equivalence). On every tokenizer, each plausible wrong encoder (highest rank first, rightmost
among equal ranks, leftmost pair with any merge) differs from the reference on some text, so the
texts can tell them apart.
Prints one line per tokenizer; "FAIL: ..." lines and exit 1 on any mismatch.
"""
import argparse
import os
import random
import re
import struct
import subprocess
import sys

MAGIC = 20250611
EOT_TEXT = b"<|endoftext|>"

# ---- the file format (docs/formats.md, "Tokenizer file") ----------------------------------------

def fnv1a64_project(data):
    """the checksum: FNV-1a 64 with the project's offset basis 1469598103934665603 (docs/formats.md)"""
    h = 1469598103934665603
    for c in data:
        h = ((h ^ c) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def spell(merges):
    """every token's bytes: 0..255 single bytes, 256+i = bytes(a_i) + bytes(b_i), then end-of-text"""
    toks = [bytes([b]) for b in range(256)]
    for a, b in merges:
        toks.append(toks[a] + toks[b])
    toks.append(EOT_TEXT)
    return toks


def write_tokenizer(path, merges):
    toks = spell(merges)
    V, M = len(toks), len(merges)
    body = b"".join(struct.pack("<2i", a, b) for a, b in merges)
    body += struct.pack(f"<{V}i", *[len(t) for t in toks]) + b"".join(toks)
    h = fnv1a64_project(body)
    header = struct.pack("<10I54i", MAGIC, 1, V, V - 1, M, 1, sum(len(t) for t in toks), 0,
                         h & 0xFFFFFFFF, h >> 32, *([0] * 54))
    with open(path, "wb") as f:
        f.write(header + body)


def read_tokenizer(path):
    """(merges [(a, b)], token bytes [bytes]) of a tokenizer.bin, checked as docs/formats.md says"""
    def bad(msg):
        raise SystemExit(f"error: bpe_reference: tokenizer '{path}': {msg}")
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 256:
        bad(f"{len(data)} bytes, shorter than the 256-byte header")
    h = struct.unpack_from("<64i", data, 0)
    V, eot, M, pre, T = h[2], h[3], h[4], h[5], h[6]
    if h[0] != MAGIC or h[1] != 1 or pre != 1:
        bad(f"magic {h[0]} version {h[1]} pre-tokenizer {pre}: want {MAGIC}, 1, 1")
    if M != V - 257 or eot != V - 1:
        bad(f"header: vocab_size {V}, merges {M}, end-of-text {eot}")
    if len(data) != 256 + 8 * M + 4 * V + T:
        bad(f"size {len(data)} != 256 + 8M + 4V + T = {256 + 8 * M + 4 * V + T}")
    s = fnv1a64_project(data[256:])
    if (h[8] & 0xFFFFFFFF, h[9] & 0xFFFFFFFF) != (s & 0xFFFFFFFF, s >> 32):
        bad("checksum mismatch")
    merges = [struct.unpack_from("<2i", data, 256 + 8 * i) for i in range(M)]
    for i, (a, b) in enumerate(merges):
        if not (0 <= a < 256 + i and 0 <= b < 256 + i):
            bad(f"merge {i} joins ({a}, {b}), not both below {256 + i}")
    toks = spell(merges)
    lens = struct.unpack_from(f"<{V}i", data, 256 + 8 * M)
    off = 256 + 8 * M + 4 * V
    for i, n in enumerate(lens):
        if data[off:off + n] != toks[i]:
            bad(f"token {i}'s stored bytes differ from what the merges spell")
        off += n
    return merges, toks


# ---- pre-tokenization (docs/formats.md, "Pre-tokenization (rules version 1)") ---------------------
# GPT-2's regex 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ on bytes,
# letters = A-Z a-z and every byte >= 0x80, digits = 0-9, whitespace = space \t \n \v \f \r, other
# = the rest. python's re tries alternatives in order and backtracks \s+ for the lookahead, which
# is the documented "first rule that matches" with rule 5's "run minus its last byte".
_L = rb"A-Za-z\x80-\xff"
_N = rb"0-9"
_S = rb" \t\n\x0b\x0c\r"
PRE_RE = re.compile(
    rb"'s|'t|'re|'ve|'m|'ll|'d"
    rb"| ?[" + _L + rb"]+"
    rb"| ?[" + _N + rb"]+"
    rb"| ?[^" + _S + _L + _N + rb"]+"
    rb"|[" + _S + rb"]+(?![^" + _S + rb"])"
    rb"|[" + _S + rb"]+", re.DOTALL)


def pretokenize(text):
    out, pos = [], 0
    for m in PRE_RE.finditer(text):
        if m.start() != pos:  # every byte is in some class, so the matches tile the text
            raise AssertionError(f"pre-tokenizer regex skipped bytes {text[pos:m.start()]!r}")
        out.append(m.group())
        pos = m.end()
    if pos != len(text):
        raise AssertionError(f"pre-tokenizer regex left {text[pos:]!r}")
    return out


# ---- encoding (docs/formats.md, "Encoding") ------------------------------------------------------

class Reference:
    """the textbook byte-level BPE over one tokenizer's merge list"""

    def __init__(self, merges):
        self.merges = merges
        self.rank = {}
        for r, pair in enumerate(merges):
            self.rank.setdefault(pair, r)  # a pair listed twice: its first (lowest) rank
        self.cache = {}

    def bpe(self, piece):
        """one merge at a time: the adjacent pair of lowest rank; leftmost among equal ranks"""
        ids = list(piece)
        while len(ids) > 1:
            best_r, best_i = None, None
            for i in range(len(ids) - 1):
                r = self.rank.get((ids[i], ids[i + 1]))
                if r is not None and (best_r is None or r < best_r):
                    best_r, best_i = r, i
            if best_r is None:
                break
            ids[best_i:best_i + 2] = [256 + best_r]
        return ids

    def encode(self, text):
        out = []
        for p in pretokenize(text):
            if p not in self.cache:
                self.cache[p] = self.bpe(p)
            out += self.cache[p]
        return out

    def encode_merge_list(self, text):
        """the other documented formulation: each merge in list order, all occurrences left to right"""
        out = []
        for p in pretokenize(text):
            ids = list(p)
            for r, (a, b) in enumerate(self.merges):
                if len(ids) < 2:
                    break
                new, k = [], 0
                while k < len(ids):
                    if k + 1 < len(ids) and ids[k] == a and ids[k + 1] == b:
                        new.append(256 + r)
                        k += 2
                    else:
                        new.append(ids[k])
                        k += 1
                ids = new
            out += ids
        return out


def wrong_encoders(ref):
    """plausible wrong encoders; the texts must tell each of them from the reference"""
    def run(choose):
        def enc(text):
            out = []
            for p in pretokenize(text):
                ids = list(p)
                while True:
                    cands = [(ref.rank[(ids[i], ids[i + 1])], i) for i in range(len(ids) - 1)
                             if (ids[i], ids[i + 1]) in ref.rank]
                    if not cands:
                        break
                    r, i = choose(cands)
                    ids[i:i + 2] = [256 + r]
                out += ids
            return out
        return enc
    return {
        "highest rank first": run(lambda c: max(c, key=lambda x: (x[0], -x[1]))),
        "rightmost among equal ranks": run(lambda c: min(c, key=lambda x: (x[0], -x[1]))),
        "leftmost pair with any merge": run(lambda c: min(c, key=lambda x: x[1])),
    }


# ---- tokenizers written here ---------------------------------------------------------------------

def hand_merges():
    """merges that compete; comments give the id each creates and its bytes. Ranks 4, 7, 11, 13,
    22 and 27 never apply to any text (the encoder must agree that they do not)."""
    a, b, c, d, sp, ap, s = ord("a"), ord("b"), ord("c"), ord("d"), ord(" "), ord("'"), ord("s")
    m = [
        (b, c),        # 256 bc       rank 0: in "abc" it beats (a,b) of rank 1 -> a + bc
        (a, b),        # 257 ab
        (a, a),        # 258 aa       overlapping: "aaa" -> aa + a (leftmost), never a + aa
        (c, d),        # 259 cd
        (257, 259),    # 260 abcd     needs ab and cd, which (b,c) of rank 0 prevents in "abcd"
        (a, 256),      # 261 abc
        (258, a),      # 262 aaa
        (a, 258),      # 263 aaa      the same bytes as 262 by the route a + aa, which leftmost-first never takes
        (258, 258),    # 264 aaaa
        (256, d),      # 265 bcd
        (d, d),        # 266 dd
        (a, sp),       # 267 "a "     never applies: a space starts the next pre-token
        (sp, a),       # 268 " a"
        (268, 256),    # 269 " abc"   never forms: in " abc" (b,c) rank 0 goes first, then (a,bc)
        (sp, 261),     # 270 " abc"   rank 5 before (sp,a) rank 12, so " abc" = " " + "abc" -> 270
        (ap, s),       # 271 "'s"
        (0xC3, 0xA9),  # 272 é (UTF-8)
        (272, 272),    # 273 éé
        (a, 272),      # 274 "aé"
        (0xFF, 0xFE),  # 275 invalid UTF-8 bytes, letters for the pre-tokenizer
        (c, c),        # 276 cc
        (276, c),      # 277 ccc
        (c, 276),      # 278 ccc      never: "ccc" -> cc c -> 277; "cccc" -> cc c c -> cc cc -> 279
        (276, 276),    # 279 cccc
        (ord("1"), ord("2")),  # 280 12
        (ord("2"), ord("3")),  # 281 23   "123" -> 12 + 3 (rank 280 < 281)
        (d, a),        # 282 da
        (a, b),        # 283 ab again: a pair listed twice; its first rank (257) is the one that counts
        (266, 266),    # 284 dddd
        (266, d),      # 285 ddd
    ]
    return m


def random_merges(n, alphabet, seed):
    """n distinct merges, each joining two random earlier ids of a small alphabet's vocabulary"""
    rng = random.Random(seed)
    ids = list(alphabet)
    seen, m = set(), []
    while len(m) < n:
        # favour short tokens so that many merges apply and compete
        a = rng.choice(ids[:len(alphabet)] * 3 + ids)
        b = rng.choice(ids[:len(alphabet)] * 3 + ids)
        if (a, b) in seen:
            continue
        seen.add((a, b))
        m.append((a, b))
        ids.append(255 + len(m))
    return m


# ---- texts ---------------------------------------------------------------------------------------

HAND_TEXTS = [
    b"abc", b"abcd", b"ab", b"bc", b"aab", b"abab", b"ababab", b"bcbc", b"abcabc", b"aabc", b"abbc",
    b"a", b"aa", b"aaa", b"aaaa", b"aaaaa", b"aaaaaaa", b"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    b"cc", b"ccc", b"cccc", b"ccccc", b"cccccccc", b"dd", b"ddd", b"dddd", b"ddddd", b"dada", b"adad",
    b"bcd", b"abcdd", b"dabcd", b"cdcd", b"bcdbcd", b"123", b"1234", b"12123", b"2323",
    b"a b", b"a a", b"a  a", b" abc", b"  abc", b"abc abc", b"a\nabc", b"'s", b"it's abc's", b"'sabc",
    b"\xc3\xa9", b"\xc3\xa9\xc3\xa9", b"a\xc3\xa9\xc3\xa9", b"ca\xc3\xa9", b"\xc3\xa9abc",
    b"\xff\xfe", b"\xff\xfe\xff", b"\xfe\xff\xfe", b"a\xff\xfeabc", b"\xc3", b"\xa9\xc3", b"\x80\x81\x82",
    b"<|endoftext|>", b"ab<|endoftext|>cd", b"", b" ", b"\n\n", b"a\tb\rc\x0bd\x0ce",
    b"ab" * 60, b"a" * 65, b"a" * 200, b"abc" * 40, b"bc" * 70 + b"a", b"c" * 130, b"d" * 99,
    b"a" + b"bcd" * 50, b"\xc3\xa9" * 80,
]
NUL_TEXTS = [b"a\x00b", b"abc\x00abc", b"\x00\x00aa\x00"]  # encoded one per tok_encode run (--nul cuts at NUL)


def random_texts(rng, n, atoms, max_atoms):
    return [b"".join(rng.choice(atoms) for _ in range(rng.randint(0, max_atoms))) for _ in range(n)]


def texts_for(rng, alphabet_atoms, n_random):
    t = list(HAND_TEXTS)
    t += random_texts(rng, n_random, alphabet_atoms, 24)
    # long pieces (> 64 bytes: the C encoder's heap path): one letter-only run each
    letters = [x for x in alphabet_atoms if x.isalpha()]
    t += [b"".join(rng.choice(letters) for _ in range(rng.randint(65, 400))) for _ in range(max(4, n_random // 20))]
    t += [bytes(rng.randrange(256) for _ in range(rng.randint(1, 60))) for _ in range(max(4, n_random // 20))]
    return t


# ---- our side ------------------------------------------------------------------------------------

def our_ids(tok_encode, tokenizer, texts, work):
    """ids from tok_encode --nul (texts without NUL), one run per text holding a NUL"""
    plain = [t for t in texts if b"\x00" not in t]
    path = os.path.join(work, "texts.bin")
    with open(path, "wb") as f:
        f.write(b"".join(t + b"\x00" for t in plain))
    r = subprocess.run([tok_encode, tokenizer, "--nul", path], capture_output=True)
    if r.returncode != 0:
        raise SystemExit(f"error: bpe_reference: tok_encode {tokenizer} failed: {r.stderr.decode(errors='replace').strip()}")
    lines = r.stdout.decode().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) != len(plain):
        raise SystemExit(f"error: bpe_reference: tok_encode gave {len(lines)} lines for {len(plain)} texts")
    got = dict(zip(plain, ([int(x) for x in ln.split()] for ln in lines)))
    for t in texts:
        if b"\x00" in t:
            path1 = os.path.join(work, "one.bin")
            with open(path1, "wb") as f:
                f.write(t)
            r = subprocess.run([tok_encode, tokenizer, path1], capture_output=True)
            if r.returncode != 0:
                raise SystemExit(f"error: bpe_reference: tok_encode on a text with NUL failed: {r.stderr.decode(errors='replace').strip()}")
            got[t] = [int(x) for x in r.stdout.split()]
    return [got[t] for t in texts]


def first_diff(x, y):
    k = 0
    while k < min(len(x), len(y)) and x[k] == y[k]:
        k += 1
    return k


def check_tokenizer(label, tok_encode, path, texts, written, fails):
    merges, toks = read_tokenizer(path)
    ref = Reference(merges)
    ours = our_ids(tok_encode, path, texts, os.path.dirname(path) or ".")
    V = len(toks)
    bad = ntok = 0
    for t, x in zip(texts, ours):
        y = ref.encode(t)
        ntok += len(x)
        if x != y:
            bad += 1
            if bad <= 5:
                k = first_diff(x, y)
                fails.append(f"{label}: ids differ on {t[:50]!r}: at {k}: ours {x[k:k + 6]}, reference {y[k:k + 6]}")
        if any(not (0 <= i < V - 1) for i in x) or b"".join(toks[i] for i in x) != t:
            bad += 1
            fails.append(f"{label}: our ids do not decode back to {t[:50]!r} (or hold end-of-text / out-of-range ids)")
    line = f"{label}: {len(texts)} texts, {ntok} tokens, {len(merges)} merges: ours == reference on {len(texts) - bad}"
    if written:
        nl = sum(ref.encode_merge_list(t) != ref.encode(t) for t in texts)
        if nl:
            fails.append(f"{label}: the reference and the merge list in order differ on {nl} texts")
        line += f"; merge list in order == reference on {len(texts) - nl}"
    for name, enc in wrong_encoders(ref).items():
        nd = sum(enc(t) != ref.encode(t) for t in texts)
        line += f"; '{name}' differs on {nd}"
        if nd == 0:
            fails.append(f"{label}: the texts cannot tell '{name}' from the reference")
    print(line)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tok-encode", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--tokenizer", action="append", default=[])
    ap.add_argument("--text-file", action="append", default=[])
    ap.add_argument("--lines", type=int, default=2000)
    ap.add_argument("--random", type=int, default=400)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    rng = random.Random(args.seed)
    fails = []

    # the pre-tokenizer regex against the documented examples (docs/formats.md)
    examples = {b"I'm can't": b"I|'m| can|'t", b"a   b": b"a|  | b", b"x\n\nY": b"x|\n|\n|Y",
                b"abc123 456!!? ...": b"abc|123| 456|!!?| ...", b"'hello'": b"'|hello|'", b"end   ": b"end|   ",
                b"Don'T": b"Don|'|T"}
    for text, want in examples.items():
        got = b"|".join(pretokenize(text))
        if got != want:
            fails.append(f"reference pre-tokenizer: {text!r} -> {got!r}, docs/formats.md says {want!r}")

    hand_atoms = [b"a", b"b", b"c", b"d", b"a", b"b", b"c", b"aa", b"ab", b"bc", b"cc", b"dd", b" ", b"  ",
                  b"'s", b"'", b"1", b"2", b"3", b"\xc3\xa9", b"\xc3", b"\xff\xfe", b"\n", b"x", b"."]
    hand = os.path.join(args.work, "hand.bin")
    write_tokenizer(hand, hand_merges())
    check_tokenizer("hand", args.tok_encode, hand, texts_for(rng, hand_atoms, args.random), True, fails)

    alphabet = b"abcde"
    rnd = os.path.join(args.work, "random.bin")
    write_tokenizer(rnd, random_merges(300, alphabet, args.seed))
    rnd_atoms = [bytes([x]) for x in alphabet] * 4 + [b" ", b"\n", b"'", b"1", b"\xc3\xa9"]
    check_tokenizer("random", args.tok_encode, rnd, texts_for(rng, rnd_atoms, args.random), True, fails)

    lines = []
    for path in args.text_file:
        with open(path, "rb") as f:
            lines += f.read().splitlines(keepends=True)[:args.lines]
    for path in args.tokenizer:
        kjv_atoms = [b"the", b"and", b"of", b"LORD", b" ", b"th", b"e", b"a", b"s", b"'s", b":", b",", b"\n",
                     b"\xc3\xa9", b"1", b"23"]
        texts = texts_for(rng, kjv_atoms, args.random) + lines
        check_tokenizer(os.path.basename(os.path.dirname(path)) or path, args.tok_encode, path, texts, False, fails)

    for f in fails:
        print("FAIL:", f)
    print(f"{'ok' if not fails else 'FAILED'}: {len(fails)} failure(s)")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
