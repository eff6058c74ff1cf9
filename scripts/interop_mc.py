#!/usr/bin/env python3
"""scripts/interop_mc.py: multiple-choice evaluation against transformers and lm-evaluation-harness
(part of `make interop`; scripts/interop.py calls mc_rows, or run it alone).

A tiny model is trained a few steps (train_gpt), exported (gatedgpt_ckpt export, tokenizer.json
included) and scored on two task files by `gatedgpt_ckpt mc --lls`:
  generic     250 examples of scripts/make_kjv_task.py (KJV validation verses), plus examples with a
              context ending in spaces (lm-eval moves them onto the continuation), non-ASCII choices
              (characters != bytes), 60 of ASCII junk against CJK text (where acc_norm, over
              characters, and acc_bytes pick differently) and contexts longer than max_seq_len
              (cut from the left)
  hellaswag   250 lines in HellaSwag's own form (activity_label, ctx_a, ctx_b, endings, label as a
              string) made from KJV validation verses, with the WikiHow artifacts its preprocessing
              removes (" [title]", "[header]", "[step]", double spaces, mixed case for capitalize())
Checks, per task file:
  ll      every choice's log-likelihood from `mc --lls` against transformers (AutoModelForCausalLM +
          AutoTokenizer on the export, fp32): the context/continuation split as lm-eval's
          _encode_pair, cut from the left to max_length + 1, sum of log_softmax   <= 1e-4 absolute
  text    (hellaswag) our preprocessed context and choices == lm-eval's hellaswag utils on the line
  lm-eval lm_eval.simple_evaluate(model="hf", pretrained=the export, a custom task read from the
          local JSONL): acc, acc_norm, acc_bytes and their stderrs equal ours, and its per-choice
          log-likelihoods (log_samples) within 1e-4 of ours

usage: PYTHON scripts/interop_mc.py --build DIR [--keep DIR]   (the venv of scripts/interop.sh, with lm-eval)
"""
import argparse, json, os, random, subprocess, sys, tempfile

import numpy as np

TOL_LL = 1e-4
# a tiny Qwen3 (tiny_baseline) and its gated twin (Qwen3-Next, tiny_gated), max_seq_len 64: the
# longest KJV rows (~80 tokens) are cut from the left, in both implementations
SMALL = ["--model.n_layer=2", "--model.d_model=64", "--model.n_head=4", "--model.head_dim=16", "--model.d_ff=128",
         "--model.max_seq_len=64", "--model.n_kv_head=2", "--train.batch_size=4", "--train.seq_len=64",
         "--train.tokens_per_step=0", "--train.warmup_steps=2", "--log.val_every=0", "--metrics.probe_every=0",
         "--log.sample_every=0", "--log.log_every=1000"]
KINDS = {"qwen3": "tiny_baseline.ini", "qwen3_next": "tiny_gated.ini"}


os.environ.setdefault("HF_HUB_OFFLINE", "1")        # the task files are local; nothing to fetch
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def generic_file(path, work):
    """make_kjv_task's examples + the edge cases named in the docstring"""
    base = os.path.join(work, "kjv250.jsonl")
    rc, out = run([sys.executable, "scripts/make_kjv_task.py", "--n", "250", "--seed", "7", "--out", base])
    if rc != 0:
        raise SystemExit(f"interop_mc: make_kjv_task.py failed: {out}")
    lines = [json.loads(l) for l in open(base, encoding="utf-8")]
    # verses the examples above do not hold: the same text split at another word would give two
    # requests with one lm-eval cache key (lm_cache_collisions)
    used = {d["context"] + " " + d["choices"][d["gold"]] for d in lines}
    verses = [l for l in open("data/kjv/val.txt", encoding="utf-8").read().splitlines() if len(l.split()) >= 12 and l not in used]
    rng = random.Random(11)
    extra = []
    for i in range(12):   # trailing spaces (and a tab) on the context
        v = verses[i].split()
        extra.append({"context": " ".join(v[:6]) + ("  " if i % 3 else " \t"), "choices": [" ".join(v[6:]), " ".join(verses[i + 40].split()[6:])],
                      "gold": 0})
    for i in range(12):   # non-ASCII choices: characters != bytes
        v = verses[100 + i].split()
        accents = ["caf\u00e9 na\u00efve \u00fcber", "\u00c6thelred \u00e6\u00f8\u00e5", "\u6771\u4eac", "r\u00e9sum\u00e9"]
        extra.append({"context": " ".join(v[:5]), "choices": [" ".join(v[5:]), rng.choice(accents) + " " + " ".join(v[5:8]),
                                                             " ".join(verses[200 + i].split()[5:])], "gold": i % 3})
    for i in range(60):   # ASCII junk against CJK (3 bytes a character): acc_norm and acc_bytes pick differently
        junk = "".join(rng.choice("qxzjkvw#%&@~^") for _ in range(rng.randint(6, 14)))
        cjk = "".join(chr(rng.randint(0x4E00, 0x9FA5)) for _ in range(rng.randint(3, 8)))
        extra.append({"context": " ".join(verses[500 + i].split()[:6]), "choices": [junk, cjk], "gold": i % 2})
    for i in range(6):   # contexts far longer than max_seq_len: cut from the left
        ctx = " ".join(verses[300 + 3 * i:300 + 3 * i + 3])
        extra.append({"context": ctx, "choices": [" ".join(verses[310 + i].split()[:12]), verses[320 + i][:40]], "gold": 1})
    with open(path, "w", encoding="utf-8") as f:
        for l in lines + extra:
            f.write(json.dumps(l, ensure_ascii=False) + "\n")
    return len(lines) + len(extra)


def hellaswag_file(path, n=250):
    """HellaSwag-form lines from KJV validation verses, with the artifacts lm-eval's preprocessing removes"""
    verses = [l.split() for l in open("data/kjv/val.txt", encoding="utf-8").read().splitlines() if len(l.split()) >= 12]
    rng = random.Random(5)
    labels = ["Reading scripture", "Personal Care and Style", "Family Life", "Food and Entertaining", "Shepherding"]
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            v = verses[(i * 7) % len(verses)]
            a, b = len(v) // 3, 2 * len(v) // 3
            ctx_b = " ".join(v[a:b])
            if i % 4 == 1:
                ctx_b = ctx_b.upper()        # capitalize() lowercases all but the first character
            elif i % 4 == 2:
                ctx_b = "[header] " + ctx_b  # removed by the [..] rule (leaves a space: then "  " -> " ")
            ends = [" ".join(v[b:])]
            for j in range(3):
                w = verses[(i * 7 + 13 * (j + 1)) % len(verses)]
                ends.append(" ".join(w[2 * len(w) // 3:]))
            if i % 5 == 0:
                ends[1] = ends[1] + " [title] " + "Step two."
            if i % 6 == 0:
                ends[2] = "[step] " + ends[2] + "  "
            gold = rng.randrange(4)
            ends[0], ends[gold] = ends[gold], ends[0]
            doc = {"ind": i, "activity_label": labels[i % len(labels)], "ctx_a": " ".join(v[:a]), "ctx_b": ctx_b,
                   "ctx": " ".join(v[:b]), "endings": ends, "source_id": f"kjv~{i}", "split": "val", "split_type": "indomain",
                   "label": str(gold)}
            f.write(json.dumps(doc) + "\n")
    return n


def hf_lls(model, tok, examples, max_len):
    """every choice's log-likelihood, lm-eval's definition written out (one row at a time)"""
    import torch
    out = []
    with torch.no_grad():
        for ctx, choices in examples:
            lls = []
            for ch in choices:
                cont = " " + ch
                n_sp = len(ctx) - len(ctx.rstrip())
                c, k = (ctx[:-n_sp], ctx[-n_sp:] + cont) if n_sp else (ctx, cont)
                whole = tok(c + k, add_special_tokens=False)["input_ids"]
                ce = tok(c, add_special_tokens=False)["input_ids"]
                ke = whole[len(ce):]
                row = (ce + ke)[-(max_len + 1):]
                logits = model(torch.tensor([row[:-1]])).logits[0].double()
                lp = torch.log_softmax(logits, dim=-1)
                n_in = len(row) - 1
                lls.append(float(sum(lp[q, row[q + 1]] for q in range(n_in - len(ke), n_in))))
            out.append(lls)
    return out


def lm_cache_collisions(tok, examples):
    """Requests that share lm-eval's logits-cache key (context tokens + continuation tokens but the
    last) with a request split elsewhere: lm-eval 0.4.13's hf model (group_by="contexts") runs one
    forward for the key and gathers the shorter continuation's log-probabilities from the leading
    positions of the longer one's logits (its greedy check takes the trailing ones), so its
    log-likelihood for such a request is wrong. The files here are made without any; counted so
    that the comparison with lm-eval stays meaningful."""
    keys = {}
    for e, (ctx, choices) in enumerate(examples):
        for ch in choices:
            cont = " " + ch
            n_sp = len(ctx) - len(ctx.rstrip())
            c, k = (ctx[:-n_sp], ctx[-n_sp:] + cont) if n_sp else (ctx, cont)
            ce = tok(c, add_special_tokens=False)["input_ids"]
            ke = tok(c + k, add_special_tokens=False)["input_ids"][len(ce):]
            keys.setdefault(tuple(ce + ke[:-1]), set()).add(len(ke))
    return sum(len(v) for v in keys.values() if len(v) > 1)


def lm_eval_run(exp, task_dir, name, work):
    import lm_eval
    from lm_eval.tasks import TaskManager
    r = lm_eval.simple_evaluate(model="hf", model_args=f"pretrained={exp},dtype=float32,device=cpu", tasks=[name],
                                task_manager=TaskManager(include_path=task_dir), batch_size=16, log_samples=True,
                                bootstrap_iters=100)   # > 0, else no stderr; a mean's is the closed form (mean_stderr)
    res = r["results"][name]
    samples = sorted(r["samples"][name], key=lambda s: s["doc_id"])
    lls = [[float(x[0]) for x in s["filtered_resps"]] for s in samples]
    return res, lls


def write_yaml(task_dir, name, path, hellaswag):
    with open(os.path.join(task_dir, name + ".yaml"), "w") as f:
        f.write(f"task: {name}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {os.path.abspath(path)}\n"
                "test_split: test\noutput_type: multiple_choice\n")
        if hellaswag:   # lm-eval's own hellaswag task definition (tasks/hellaswag/hellaswag.yaml), on the local file
            f.write("process_docs: !function hs_utils.process_docs\ndoc_to_text: \"{{query}}\"\ndoc_to_target: \"{{label}}\"\n"
                    "doc_to_choice: \"choices\"\n")
        else:
            f.write("doc_to_text: context\ndoc_to_target: gold\ndoc_to_choice: choices\n")
        f.write("metric_list:\n  - metric: acc\n  - metric: acc_norm\n  - metric: acc_bytes\n")
    if hellaswag:
        with open(os.path.join(task_dir, "hs_utils.py"), "w") as f:
            f.write("from lm_eval.tasks.hellaswag.utils import process_docs  # noqa: F401\n")


def mc_rows(work, build, kinds=("qwen3", "qwen3_next"), steps=30):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from lm_eval.tasks.hellaswag.utils import preprocess
    train, tool = os.path.join(build, "train_gpt"), os.path.join(build, "gatedgpt_ckpt")
    files = {"generic": os.path.join(work, "mc_generic.jsonl"), "hellaswag": os.path.join(work, "mc_hellaswag.jsonl")}
    counts = {"generic": generic_file(files["generic"], work), "hellaswag": hellaswag_file(files["hellaswag"])}
    rows, failed = [], 0
    for kind in kinds:
        run_dir = os.path.join(work, "mc_" + kind)
        rc, out = run([train, "--config", "configs/" + KINDS[kind], *SMALL, f"--train.steps={steps}",
                       f"--checkpoint.checkpoint_every={steps}", f"--log.run_dir={run_dir}"])
        ck, exp = os.path.join(run_dir, "checkpoints"), run_dir + "_hf"
        if rc == 0:
            rc, out = run([tool, "export", ck, "--out", exp])
        if rc != 0:
            print(f"FAIL mc {kind}: training/export: {out[-400:]}")
            failed += 1
            continue
        model = AutoModelForCausalLM.from_pretrained(exp, dtype=torch.float32).eval()
        tok = AutoTokenizer.from_pretrained(exp)
        cls = type(model).__name__
        for form, path in files.items():
            name = f"gg_{form}_{kind}"
            lls_path = os.path.join(work, name + "_lls.jsonl")
            rc, out = run([tool, "mc", ck, "--task", path, "--lls", lls_path, "--json", "--progress", "-1"])
            if rc != 0:
                print(f"FAIL mc {form} {kind}: {out.strip()[-400:]}")
                failed += 1
                continue
            ours = json.loads(out.strip().splitlines()[-1])
            dump = [json.loads(l) for l in open(lls_path, encoding="utf-8")]
            docs = [json.loads(l) for l in open(path, encoding="utf-8")]
            text_ok = True
            if form == "hellaswag":   # lm-eval's preprocessing of each line == ours
                for d, o in zip(docs, dump):
                    q = preprocess(d["activity_label"] + ": " + d["ctx_a"] + " " + d["ctx_b"].capitalize())
                    text_ok &= q == o["context"] and [preprocess(e) for e in d["endings"]] == o["choices"]
                examples = [(o["context"], o["choices"]) for o in dump]
            else:
                examples = [(d["context"], d["choices"]) for d in docs]
            hf = hf_lls(model, tok, examples, model.config.max_position_embeddings)
            coll = lm_cache_collisions(tok, examples)
            d_hf = max(abs(a - b) for o, h in zip(dump, hf) for a, b in zip(o["lls"], h))
            task_dir = os.path.join(work, name + "_task")
            os.makedirs(task_dir, exist_ok=True)
            write_yaml(task_dir, name, path, form == "hellaswag")
            res, lm_lls = lm_eval_run(exp, task_dir, name, work)
            d_lm = max(abs(a - b) for o, h in zip(dump, lm_lls) for a, b in zip(o["lls"], h))
            same = all(abs(res[f"{m},none"] - ours[m]) <= 1e-12 and abs(res[f"{m}_stderr,none"] - ours[m + "_stderr"]) <= 1e-12
                       for m in ("acc", "acc_norm", "acc_bytes"))
            ok = d_hf <= TOL_LL and d_lm <= TOL_LL and same and text_ok and coll == 0 and len(dump) == counts[form] >= 200
            failed += not ok
            print(f"mc {form:<9} {kind:<10} {cls:<20} n {len(dump)}: max|ll - transformers| {d_hf:.2e}, max|ll - lm-eval| {d_lm:.2e}; "
                  f"acc {ours['acc']:.4f} / lm-eval {res['acc,none']:.4f}, acc_norm {ours['acc_norm']:.4f} / {res['acc_norm,none']:.4f}, "
                  f"acc_bytes {ours['acc_bytes']:.4f} / {res['acc_bytes,none']:.4f}{'' if text_ok else ', PREPROCESSING DIFFERS'}"
                  f"{f', {coll} requests share an lm-eval cache key' if coll else ''} "
                  f"{'ok' if ok else 'FAIL'}")
            rows.append((f"mc {form} ({len(dump)})", cls, None, None, None, max(d_hf, d_lm), "-",
                         f"acc {ours['acc']:.3f} acc_norm {ours['acc_norm']:.3f} = lm-eval" if same else "acc differs from lm-eval", ok))
    return rows, failed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--keep", default=None)
    ap.add_argument("--kinds", default="qwen3,qwen3_next")
    a = ap.parse_args()
    work = a.keep or tempfile.mkdtemp(prefix="interop_mc.")
    os.makedirs(work, exist_ok=True)
    rows, failed = mc_rows(work, a.build, [k for k in a.kinds.split(",") if k])
    print(f"interop_mc: {len(rows) - failed} of {len(rows)} ok (bound {TOL_LL:g} on log-likelihoods; acc, acc_norm, acc_bytes "
          f"and stderrs equal to lm-eval's); work dir {work}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
