#!/usr/bin/env python3
"""tests/llmc_shard.py: llm.c token shards written and read with numpy, independently of the
project's C code (data/shard.c), for tests/test_llmc_shard.sh.

The format, as llm.c's dev/data/data_common.py writes it: a header of 256 int32 ([0] magic,
[1] version, [2] number of tokens, the rest zero), then the tokens: uint16 (magic 20240520,
version 1) or uint32 (magic 20240801, version 7). Our tokenizer.bin (docs/formats.md) is parsed
here too, to turn token ids into their bytes.

  llmc_shard.py gen OUT.npy N TOKENIZER SEED
        N random token ids in [0, V) of the tokenizer, each followed by the separator id 1 (the
        byte 0x01, in no merged token): decoded text splits back into the ids exactly
  llmc_shard.py write OUT.bin TOKENS.npy u16|u32 [--magic M] [--version V] [--count C]
                     [--flip I]
        a shard as llm.c writes it; the options write a damaged one: another magic, version or
        header count, or token I changed to another id
  llmc_shard.py ids TOKENIZER TOKENS.npy TEXT
        TEXT (what the project decoded from a shard of TOKENS.npy) split at the separators and
        mapped back to ids: exit 0 when they equal TOKENS.npy, else print how many differ and
        where the first one is, exit 1
  llmc_shard.py read SHARD TOKENIZER
        read a shard with numpy: check the header (magic/version pair, count against the file
        size, zero padding), every token < V; print "magic M version V count N max X" on stderr
        and the tokens' bytes (end-of-text as <|endoftext|>) on stdout; exit 1 on a bad shard
"""
import sys

import numpy as np

FORMATS = {20240520: (1, np.uint16), 20240801: (7, np.uint32)}   # magic: (version, dtype)
SEP = 1   # the byte 0x01: not in any text the tests train a tokenizer on


def die(msg):
    print(f"FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def load_tokenizer(path):
    """id -> bytes, from our tokenizer.bin (docs/formats.md "Tokenizer file")"""
    raw = open(path, "rb").read()
    h = np.frombuffer(raw[:256], dtype="<i4")
    magic, version, V, eot, M, _, T = (int(x) for x in h[:7])
    if magic != 20250611 or version != 1:
        die(f"{path}: tokenizer magic {magic} version {version}")
    if len(raw) != 256 + 8 * M + 4 * V + T or V != 256 + M + 1 or eot != V - 1:
        die(f"{path}: tokenizer sizes V {V} M {M} T {T} do not fit its {len(raw)} bytes")
    merges = np.frombuffer(raw[256:256 + 8 * M], dtype="<i4").reshape(M, 2)
    lens = np.frombuffer(raw[256 + 8 * M:256 + 8 * M + 4 * V], dtype="<i4")
    blob = raw[256 + 8 * M + 4 * V:]
    ends = np.cumsum(lens)
    toks = [blob[e - n:e] for n, e in zip(lens.tolist(), ends.tolist())]
    # the merges determine the bytes: check them (an independent reading of the format)
    for i, (a, b) in enumerate(merges.tolist()):
        if toks[256 + i] != toks[a] + toks[b]:
            die(f"{path}: token {256 + i} is not the concatenation of its merge ({a}, {b})")
    if toks[:256] != [bytes([i]) for i in range(256)] or toks[eot] != b"<|endoftext|>":
        die(f"{path}: ids 0..255 are not the bytes, or end-of-text is not <|endoftext|>")
    return toks


def cmd_gen(out, n, tok_path, seed):
    toks = load_tokenizer(tok_path)
    V = len(toks)
    rng = np.random.default_rng(int(seed))
    ids = rng.integers(0, V - 1, int(n))
    ids[ids >= SEP] += 1            # anything but the separator, end-of-text included
    ids[::97] = V - 1               # some end-of-text ids for sure
    ids[1::89] = V - 2              # and the highest merged id
    seq = np.empty(2 * len(ids), dtype=np.int64)
    seq[0::2], seq[1::2] = ids, SEP
    np.save(out, seq)


def cmd_write(out, npy, kind, opts):
    toks = np.load(npy)
    dtype = np.uint16 if kind == "u16" else np.uint32
    magic = 20240520 if kind == "u16" else 20240801
    header = np.zeros(256, dtype=np.int32)
    header[0] = int(opts.get("--magic", magic))
    header[1] = int(opts.get("--version", FORMATS[magic][0]))
    header[2] = int(opts.get("--count", len(toks)))
    assert toks.max() < np.iinfo(dtype).max + 1 and toks.min() >= 0
    body = toks.astype(dtype)
    if "--flip" in opts:
        i = int(opts["--flip"])
        body[i] = body[i] - 1 if body[i] > 2 else body[i] + 2   # another id, never the separator
    with open(out, "wb") as f:        # as data_common.write_datafile: header, then the tokens
        f.write(header.tobytes())
        f.write(body.tobytes())


def cmd_ids(tok_path, npy, text_path):
    toks = load_tokenizer(tok_path)
    sep = bytes([SEP])
    index = {}
    for i, t in enumerate(toks):
        if i != SEP and sep in t:
            die(f"{tok_path}: token {i} contains the separator byte")
        if t in index:
            die(f"{tok_path}: tokens {index[t]} and {i} have the same bytes {t!r}")
        index[t] = i
    want = np.load(npy)[0::2]
    text = open(text_path, "rb").read()
    pieces = text.split(sep)
    if pieces[-1] != b"":
        die(f"{text_path}: does not end with a separator (truncated?): {len(pieces) - 1} separators")
    got = np.array([index.get(p, -1) for p in pieces[:-1]], dtype=np.int64)
    if len(got) != len(want):
        die(f"{text_path}: {len(got)} tokens read back, {len(want)} written")
    bad = np.flatnonzero(got != want)
    if len(bad):
        k = int(bad[0])
        read = f"{int(got[k])}" if got[k] >= 0 else f"{pieces[k]!r} (the bytes of no token)"
        die(f"{len(bad)} of {len(want)} tokens differ; the first: token {k} (shard position {2 * k}): "
            f"read {read}, written {int(want[k])}")
    print(f"{len(want)} tokens read back equal the {len(want)} written "
          f"(ids 0..{int(want.max())}, {int((want >= 256).sum())} merged, {int((want == len(toks) - 1).sum())} end-of-text)")


def cmd_read(path, tok_path):
    toks = load_tokenizer(tok_path)
    raw = open(path, "rb").read()
    if len(raw) < 1024:
        die(f"{path}: {len(raw)} bytes, shorter than the 1024-byte header")
    header = np.frombuffer(raw[:1024], dtype="<i4")
    magic, version, n = (int(x) for x in header[:3])
    if magic not in FORMATS:
        die(f"{path}: magic {magic}, not an llm.c shard (20240520 or 20240801)")
    want_version, dtype = FORMATS[magic]
    if version != want_version:
        die(f"{path}: magic {magic} with version {version}, want {want_version}")
    if header[3:].any():
        die(f"{path}: header ints 3..255 not zero")
    width = np.dtype(dtype).itemsize
    if len(raw) != 1024 + n * width:
        die(f"{path}: header count {n} x {width} bytes + 1024 != file size {len(raw)}")
    ids = np.frombuffer(raw[1024:], dtype=np.dtype(dtype).newbyteorder("<"))
    if n and int(ids.max()) >= len(toks):
        die(f"{path}: token {int(ids.max())} >= vocab {len(toks)}")
    print(f"magic {magic} version {version} count {n} max {int(ids.max()) if n else -1}", file=sys.stderr)
    sys.stdout.buffer.write(b"".join(toks[i] for i in ids.tolist()))


def main():
    a = sys.argv[1:]
    if a[:1] == ["gen"] and len(a) == 5:
        cmd_gen(*a[1:])
    elif a[:1] == ["write"] and len(a) >= 4 and a[3] in ("u16", "u32") and len(a) % 2 == 0:
        cmd_write(a[1], a[2], a[3], dict(zip(a[4::2], a[5::2])))
    elif a[:1] == ["ids"] and len(a) == 4:
        cmd_ids(*a[1:])
    elif a[:1] == ["read"] and len(a) == 3:
        cmd_read(*a[1:])
    else:
        print(__doc__)
        sys.exit(2)


if __name__ == "__main__":
    main()
