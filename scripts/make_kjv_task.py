#!/usr/bin/env python3
"""scripts/make_kjv_task.py: a multiple-choice task from the KJV validation split (the demo's task).

Each example is one verse of data/kjv/val.txt (the chapters prepare_kjv.sh holds out; none of it is
trained on): its first half of words as the context, and as choices its true second half plus 3
second halves of other validation verses of similar length (the 3 drawn from the 40 closest in
characters), in a seeded random order. A model that has learnt the text's style but not this verse
can still tell a grammatical continuation from a misfit; chance is 1/4.

  {"context": "And God said, Let there be", "choices": ["light: and there was light.", ...], "gold": 0}

The choice is scored as the continuation " " + choice (lm-eval's target delimiter), so neither side
carries the space. Verses of fewer than 8 words are skipped; examples are a seeded sample of the
rest, in verse order.

usage: scripts/make_kjv_task.py [--val data/kjv/val.txt] [--out data/kjv/kjv_mc.jsonl] [--n 500] [--seed 1234]
       scripts/make_kjv_task.py --summary RUN/log.jsonl   (make demo: the last "task" record, accuracy beside chance)
Standard library only; writes OUT.tmp then renames it.
"""
import argparse, json, os, random, sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--val", default="data/kjv/val.txt")
    ap.add_argument("--out", default="data/kjv/kjv_mc.jsonl")
    ap.add_argument("--n", type=int, default=500, help="examples (0 = every verse of 8 words or more)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--choices", type=int, default=4)
    ap.add_argument("--summary", default=None, help="print the last task record of this log.jsonl and exit")
    a = ap.parse_args()
    if a.summary:
        recs = [json.loads(l) for l in open(a.summary, encoding="utf-8") if '"type":"task"' in l]
        if not recs:
            sys.exit(f"make_kjv_task: error: {a.summary} has no task record ([eval] tasks)")
        r = recs[-1]
        print(f"demo: {r['task']} at step {r['step']} ({r['n']} multiple-choice examples): acc {r['acc']:.3f} +- "
              f"{r['acc_stderr']:.3f}, acc_norm {r['acc_norm']:.3f} +- {r['acc_norm_stderr']:.3f} | chance {r['chance']:.3f}"
              + (f" | untrained (step {recs[0]['step']}): acc {recs[0]['acc']:.3f}" if len(recs) > 1 else ""))
        return
    try:
        lines = open(a.val, encoding="utf-8").read().splitlines()
    except OSError as e:
        sys.exit(f"make_kjv_task: error: cannot read {a.val} ({e.strerror}): run scripts/prepare_kjv.sh first")
    verses = [l.split() for l in lines if l.strip() and l.strip() != "<|endoftext|>"]
    verses = [w for w in verses if len(w) >= 8]
    halves = [(" ".join(w[:len(w) // 2]), " ".join(w[len(w) // 2:])) for w in verses]
    if len(halves) < max(a.choices, 50):
        sys.exit(f"make_kjv_task: error: {a.val} has only {len(halves)} verses of 8 words or more")
    rng = random.Random(a.seed)
    picked = sorted(rng.sample(range(len(halves)), a.n)) if 0 < a.n < len(halves) else range(len(halves))
    by_len = sorted(range(len(halves)), key=lambda i: len(halves[i][1]))
    pos = {i: k for k, i in enumerate(by_len)}
    tmp = a.out + ".tmp"
    n = 0
    with open(tmp, "w", encoding="utf-8") as f:
        for i in picked:
            ctx, true = halves[i]
            # the 40 second halves closest in length (by rank), other verses, other texts
            k = pos[i]
            near = [j for j in by_len[max(0, k - 30):k + 31] if j != i and halves[j][1] != true]
            near.sort(key=lambda j: (abs(len(halves[j][1]) - len(true)), j))
            near = list({halves[j][1]: j for j in reversed(near)}.values())[::-1]   # one verse per distinct text
            near.sort(key=lambda j: (abs(len(halves[j][1]) - len(true)), j))
            others = rng.sample(near[:40], a.choices - 1)
            choices = [true] + [halves[j][1] for j in others]
            order = list(range(a.choices))
            rng.shuffle(order)
            f.write(json.dumps({"context": ctx, "choices": [choices[o] for o in order], "gold": order.index(0)},
                               ensure_ascii=False) + "\n")
            n += 1
    os.replace(tmp, a.out)
    print(f"make_kjv_task: {n} examples of {a.choices} choices from {a.val} (seed {a.seed}) -> {a.out}")


if __name__ == "__main__":
    main()
