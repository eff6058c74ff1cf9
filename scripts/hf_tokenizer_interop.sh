#!/usr/bin/env bash
# scripts/hf_tokenizer_interop.sh: `make interop`'s tokenizer.json part (data/hf_tokenizer.h)
# against the `tokenizers` library and transformers' AutoTokenizer. Not part of `make test`: it
# needs tokenizers, tiktoken and transformers (no torch), which go into a virtual environment
# made here on first use (BUILD/venv-tokenizer, shared with bench/bench_tokenizer.sh).
#   1. three byte-level BPEs of vocab 8192 trained here by `tokenizers` (GPT-2's, Qwen2's and
#      Llama 3's pre-tokenizer), and the three fixtures of tests/hf_tokenizer/: prepare's encoder
#      (tok_encode) gives the library's ids on 100,000 texts of every script, invalid UTF-8
#      included, and decode(encode(x)) == x (tests/interop/hf_tokenizers.py check);
#   1b. one Split pattern per construct that Oniguruma (the library) and PCRE2 read differently,
#      each in a BPE whose merges cross the cuts: ids equal to the library's; refused patterns
#      refused in one line; PCRE2's match limit an error in both (tests/interop/hf_patterns.py);
#      NFC on combining marks the library's older Unicode tables do not know (20,000 texts);
#   1c. real vocabularies converted the way transformers converts tiktoken files (cl100k with its
#      published pattern, Qwen2's 151,643 with NFC, o200k): ids equal to the library's on 5,000
#      mixed documents each (tests/interop/hf_real_vocab.py; tiktoken files from PyPI wheels);
#   2. KJV shards made with the Qwen2-style tokenizer.json, a tiny model trained 4 steps on them,
#      `gatedgpt_ckpt export --tokenizer SHARDS/tokenizer.json`: the exported tokenizer.json is the
#      file byte for byte, AutoTokenizer on the export gives prepare's ids for every validation
#      document, and `gatedgpt_ckpt sample` decodes with it. (The qwen2 tokenizers carry Qwen's NFC normalizer.)
#
# usage: scripts/hf_tokenizer_interop.sh [--build DIR] [--n TEXTS]
set -euo pipefail
build=build
n=100000
while [ $# -gt 0 ]; do
    case "$1" in
        --build) build=$2; shift 2 ;;
        --n) n=$2; shift 2 ;;
        -h|--help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "hf_tokenizer_interop: error: unknown argument '$1' (see --help)" >&2; exit 1 ;;
    esac
done
cd "$(dirname "${BASH_SOURCE[0]}")/.."
for t in prepare tok_encode train_gpt gatedgpt_ckpt; do
    [ -x "$build/$t" ] || { echo "hf_tokenizer_interop: error: $build/$t missing: run make build first" >&2; exit 1; }
done
bash scripts/prepare_kjv.sh "$build/prepare" > /dev/null
venv="$build/venv-tokenizer"
if ! "$venv/bin/python" -c "import tokenizers, tiktoken, transformers" 2>/dev/null; then
    echo "hf_tokenizer_interop: creating $venv (tokenizers, tiktoken, transformers; first use only)"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip
    "$venv/bin/pip" install -q tokenizers tiktoken transformers
fi
PY=$venv/bin/python
work=$build/hf-tokenizer-interop
rm -rf "$work"
mkdir -p "$work"

# ---- 1. ids on 100,000 texts ---------------------------------------------------------------------
"$PY" tests/interop/hf_tokenizers.py train "$work/tok8k" --vocab 8192 --corpus-bytes 2000000 --kjv data/kjv/train.txt
"$PY" tests/interop/hf_tokenizers.py check --tok-encode "$build/tok_encode" --dir "$work/tok8k" --n "$n"
"$PY" tests/interop/hf_tokenizers.py check --tok-encode "$build/tok_encode" --dir tests/hf_tokenizer --n "$n" --seed 2000

# ---- 1b. Split patterns as the library reads them (Oniguruma, Ruby syntax): one per construct ------
"$PY" tests/interop/hf_patterns.py check --tok-encode "$build/tok_encode" --base tests/hf_tokenizer/patterns_base.json --n 2000
"$PY" tests/interop/hf_patterns.py nfc --tok-encode "$build/tok_encode" --tokenizer "$work/tok8k/qwen2.json" --n 20000

# ---- 1c. real vocabularies (100k-200k tokens) converted by transformers' TikTokenConverter ---------
# the tiktoken files come from PyPI wheels (pinned; cached in BUILD/real-vocab, ~46 MB, first use)
"$PY" tests/interop/hf_real_vocab.py convert "$build/real-vocab" "$build/real-vocab"
"$PY" tests/interop/hf_real_vocab.py check --tok-encode "$build/tok_encode" --dir "$build/real-vocab" --n 5000

# ---- 2. shards -> tiny model -> export -> AutoTokenizer ------------------------------------------
tok=$work/tok8k/qwen2.json
"$build/prepare" --train data/kjv/train.txt --val data/kjv/val.txt --tokenizer "$tok" --out "$work/shards" --quiet
V=$("$PY" -c "import json,sys; j=json.load(open(sys.argv[1])); print(max(list(j['model']['vocab'].values())+[a['id'] for a in j['added_tokens']])+1)" "$tok")
"$build/train_gpt" --config configs/tiny_gated.ini --model.vocab_size="$V" --model.n_layer=2 --model.d_model=32 --model.n_head=2 \
    --model.n_kv_head=1 --model.head_dim=16 --model.d_ff=64 --model.max_seq_len=32 --train.batch_size=2 --train.seq_len=32 \
    --train.steps=4 --train.warmup_steps=1 --train.threads=1 --log.val_every=0 --metrics.probe_every=0 --log.sample_every=0 \
    --checkpoint.checkpoint_every=4 --data.train_glob="$work/shards/train_*.bin" --data.val_glob="$work/shards/val_*.bin" \
    --data.tokenizer="$work/shards/tokenizer.json" --log.run_dir="$work/run" > "$work/train.log" 2>&1 \
    || { echo "hf_tokenizer_interop: FAIL: training (log: $work/train.log)"; tail -5 "$work/train.log"; exit 1; }
"$build/gatedgpt_ckpt" export "$work/run/checkpoints" --out "$work/export" --tokenizer "$work/shards/tokenizer.json"
cmp "$work/export/tokenizer.json" "$tok" && echo "interop: the exported tokenizer.json is the imported file, byte for byte"
"$build/gatedgpt_ckpt" sample "$work/run/checkpoints" --prompt "And God said" --tokens 16 --greedy > "$work/sample.txt"
echo "interop: gatedgpt_ckpt sample: $(head -c 200 "$work/sample.txt" | tr '\n' ' ')"
"$PY" - "$work/export" "$work/shards/val_000000.bin" data/kjv/val.txt <<'EOF'
import re, struct, sys
from transformers import AutoTokenizer
exp, shard, val = sys.argv[1:4]
tok = AutoTokenizer.from_pretrained(exp)
b = open(shard, "rb").read()
h = struct.unpack("<256i", b[:1024])
w = 2 if h[0] == 20240520 else 4
ids = list(struct.unpack("<%d%s" % (h[2], "H" if w == 2 else "I"), b[1024:1024 + w * h[2]]))
text = open(val, encoding="utf-8", newline="").read()
docs = [d for d in re.split(r"(?m)^<\|endoftext\|>\r?\n?", text) if d]
want = []
for d in docs:  # prepare: end-of-text, then the document
    want += [tok.eos_token_id] + tok(d, add_special_tokens=False)["input_ids"]
ok = ids == want
print(f"interop: AutoTokenizer({exp}) on {len(docs)} validation documents: {len(want)} ids, "
      f"{'equal to' if ok else 'DIFFERENT from'} prepare's shard ({len(ids)} ids)")
sys.exit(0 if ok else 1)
EOF
echo "hf_tokenizer_interop: PASS"
