#!/usr/bin/env python3
"""tests/interop/hf_texts.py: deterministic test texts for the tokenizer.json checks (standard library only).

texts(n, seed) -> list of bytes: each text mixes one to three "scripts" from SCRIPTS (Latin,
Cyrillic, Greek, Arabic, Hebrew, Devanagari, CJK, Thai, emoji, code, digit runs, whitespace runs,
contractions, added tokens, invalid UTF-8), so that every branch of the GPT-2 / Qwen2 / Llama 3
pre-tokenizer patterns and of byte-level BPE is hit: Unicode letters and marks (\\p{L} vs Mn/Mc),
\\p{N} beyond ASCII, White_Space beyond ASCII (U+0085, U+00A0, U+2028, U+3000, and U+180E, which
is not White_Space), case-insensitive contractions, digit runs longer than 3, \\r\\n runs, added
tokens inside words, and bytes that are not UTF-8 (truncated, overlong, surrogates, > U+10FFFF).
No text holds a NUL byte (texts are NUL-separated in files).

corpus(nbytes, seed) -> str: training text for the tokenizers (valid UTF-8, no added tokens).
"""
import random


def _rng_chars(lo, hi):
    return [chr(c) for c in range(lo, hi + 1)]


LATIN = list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") + list("éèêñüößøåçÅÉÑſŁłœæ")
ALPHABETS = {
    "latin": LATIN,
    "cyrillic": _rng_chars(0x0410, 0x044F) + ["ё", "Ё", "ї", "ґ"],
    "greek": _rng_chars(0x0391, 0x03A9) + _rng_chars(0x03B1, 0x03C9) + ["ά", "ή", "ί", "ό", "ς"],
    "arabic": _rng_chars(0x0621, 0x064A) + ["\u064b", "\u064e", "\u0650", "\u0651", "\u0652"],
    "hebrew": _rng_chars(0x05D0, 0x05EA) + ["\u05b0", "\u05b7", "\u05bc"],
    "devanagari": _rng_chars(0x0905, 0x0939) + ["\u093e", "\u093f", "\u0940", "\u0947", "\u094d", "\u0902"],
    "cjk": _rng_chars(0x4E00, 0x4E80) + _rng_chars(0x3041, 0x3060) + _rng_chars(0x30A1, 0x30C0) + ["、", "。", "「", "」"],
    "thai": _rng_chars(0x0E01, 0x0E2E) + ["\u0e31", "\u0e34", "\u0e35", "\u0e48", "\u0e49", "\u0e32", "\u0e33"],
}
EMOJI = ["😀", "😂", "🙏", "👍", "👍🏽", "❤️", "🇺🇳", "👨‍👩‍👧", "🎉", "🔥", "✨", "\u2764", "\ufe0f", "🤖"]
DIGITS = ["0123456789", "٠١٢٣٤٥٦٧٨٩", "०१२३४५६७८९", "๐๑๒๓", "½²³", "１２３"]
SPACES = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\u00a0", "\u2009", "\u3000", "\u0085",
          "\u2028", "\u180e", "\x0b", "\x0c", "\n   \n", "\t\t "]
PUNCT = list(".,;:!?-()[]{}\"'/\\@#$%^&*+=<>|~`_") + ["…", "—", "«", "»", "’", "“"]
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'LL", "'ſ", "’s", "'x", "''"]
CODE = ["def f(x):\n    return x**2  # sq\n", "for (int i = 0; i < n; i++) { a[i] += b[i]; }",
        "if x != None and y >= 3:\n\tprint(f'{x!r}')", "<div class=\"a\">&amp;</div>", "SELECT * FROM t WHERE id=42;",
        "camelCaseName snake_case_name CONST_NAME", "x = [1, 2, 3]\n\n\n", "#include <stdio.h>\r\n", "  \t// TODO\n"]
# not in NFC (for a normalizer NFC, Qwen2/3's): decomposed letters, marks out of canonical order,
# Hangul jamo, singletons (Angstrom, Ohm), composition exclusions, a mark with no base
DECOMPOSED = ["e\u0301", "A\u030a", "n\u0303", "a\u0323\u0302", "a\u0302\u0323", "\u1100\u1161\u11a8", "\u212b",
              "\u2126", "\u0958", "\u03b1\u0301", "\u0301", "o\u0308\u0304", "\u0915\u093c", "Z\u0338", ">\u0338",
              "\u0e40\u0e01\u0e48", "\u30ab\u3099", "i\u0307\u0301"]
INVALID = [b"\xff", b"\xfe\xff", b"\x80", b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98", b"\xc0\x80", b"\xed\xa0\x80",
           b"\xf5\x80\x80\x80", b"\xc3\x28", b"\xa0\xa1", b"\xe0\x80\xaf"]


def _word(r, script):
    a = ALPHABETS[script]
    return "".join(r.choice(a) for _ in range(r.randint(1, 9)))


def _chunk(r, kind, added):
    if kind in ALPHABETS:
        return _word(r, kind)
    if kind == "emoji":
        return "".join(r.choice(EMOJI) for _ in range(r.randint(1, 3)))
    if kind == "code":
        c = r.choice(CODE)
        i = r.randint(0, len(c) - 1)
        return c[i:i + r.randint(3, 40)]
    if kind == "digits":
        d = r.choice(DIGITS)
        return "".join(r.choice(d) for _ in range(r.randint(1, 12)))
    if kind == "space":
        return "".join(r.choice(SPACES) for _ in range(r.randint(1, 3)))
    if kind == "decomposed":
        return "".join(r.choice(DECOMPOSED) for _ in range(r.randint(1, 3)))
    if kind == "contraction":
        return r.choice(LATIN) * r.randint(0, 3) + r.choice(CONTRACTIONS)
    if kind == "added" and added:
        t = r.choice(added)
        return t if r.random() < 0.8 else t[:r.randint(1, len(t) - 1)]  # sometimes a prefix only
    return r.choice(PUNCT)


KINDS = list(ALPHABETS) + ["emoji", "code", "digits", "space", "contraction", "punct", "decomposed"]


def text(r, added=(), invalid=True, max_chunks=24):
    """One test text as bytes."""
    kinds = r.sample(KINDS, r.randint(1, 3))
    out = []
    for _ in range(r.randint(1, max_chunks)):
        x = r.random()
        if invalid and x < 0.04:
            out.append(r.choice(INVALID))
            continue
        kind = "added" if (added and x < 0.08) else r.choice(kinds)
        out.append(_chunk(r, kind, list(added)).encode("utf-8"))
        y = r.random()
        if y < 0.5:
            out.append(b" ")
        elif y < 0.6:
            out.append(r.choice(SPACES).encode("utf-8"))
        elif y < 0.7:
            out.append(r.choice(PUNCT).encode("utf-8"))
    return b"".join(out).replace(b"\0", b"")


# hand-written cases every fixture holds: White_Space that ASCII \s lacks, and U+180E that is not White_Space
EDGE = ["a\u00a0b c", "x \u3000 y\u3000\u3000z", "\u0085\u0085w", "q\u180e r", "\u2028\u2029 k", "\u00a0\u00a0\u00a0",
        "Hello Привет world", "Привет, Привет!", "don'ſ 'ſ", "tab\t\u00a0\n\u3000end",
        "Cafe\u0301 re\u0301sume\u0301", "\u1100\u1161\u11a8\u1100\u1161 \u212b\u2126", "<|im_end|>\u0338 [TOOL]e\u0301"]


def texts(n, seed, added=(), invalid=True, max_chunks=24):
    r = random.Random(seed)
    return [text(r, added, invalid, max_chunks) for _ in range(n)]


def corpus(nbytes, seed):
    """Training text: words of every script, sentences and lines, digits, code."""
    r = random.Random(seed)
    parts, size = [], 0
    vocab = {s: [_word(r, s) for _ in range(300)] for s in ALPHABETS}
    while size < nbytes:
        s = r.choice(list(ALPHABETS))
        words = [r.choice(vocab[s]) for _ in range(r.randint(3, 15))]
        # mostly plain spaces; sometimes Unicode White_Space (so that merges with it exist)
        line = "".join(w + (" " if r.random() < 0.85 else r.choice(SPACES)) for w in words).rstrip(" ")
        if r.random() < 0.2:
            line += " " + _chunk(r, r.choice(["digits", "code", "emoji", "contraction"]), [])
        line += r.choice([".", ",", "!", "?", "", " —"]) + "\n"
        parts.append(line)
        size += len(line.encode("utf-8"))
    return "".join(parts)
