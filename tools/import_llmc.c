// tools/import_llmc.c: llm.c's model file -> gatedgpt checkpoint (tools/import_llmc.h).
//
// The file (llm.c's train_gpt2.c, written by its train_gpt2.py; docs/formats.md): a header of
// 256 int32 (little-endian)
//   [0] 20240326   [1] version: 3 = fp32 parameters, 5 = bf16   [2] maxT   [3] V   [4] L   [5] NH
//   [6] C          [7] Vp (V padded, e.g. 50304)                 the rest 0
// then the parameters, contiguous, in this order (weights [out, in] row-major, as nn.Linear):
//   wte [Vp, C]  wpe [maxT, C]  ln1w [L, C]  ln1b [L, C]  qkvw [L, 3C, C]  qkvb [L, 3C]
//   attprojw [L, C, C]  attprojb [L, C]  ln2w [L, C]  ln2b [L, C]  fcw [L, 4C, C]  fcb [L, 4C]
//   fcprojw [L, C, 4C]  fcprojb [L, C]  lnfw [C]  lnfb [C]
// GPT-2: learned positions, LayerNorm (eps 1e-5), tanh GELU, MLP width 4C, the LM head tied to
// wte. Rows V .. Vp-1 of wte are padding: dropped (gatedgpt pads to its own multiple of 128 with
// zeros). qkvw's rows are [q | k | v], each head-major: gatedgpt's wqkv rows without a gate.
#include "import_llmc.h"
#include "kernels/ops.h"
#include "model/gpt.h"
#include "model/optim.h"
#include "train/checkpoint.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define LLMC_MAGIC 20240326
#define LLMC_HEADER_INTS 256

int import_llmc_is_model(const char* path) {
    FILE* f = fopen(path, "rb");
    if (!f) return 0;
    int32_t magic = 0;
    int ok = fread(&magic, sizeof magic, 1, f) == 1 && magic == LLMC_MAGIC;
    fclose(f);
    return ok;
}

// The next n parameters of the file as fp32 (bf16: the top half of a float, exact), into x (or
// skipped when x is NULL); -1 after an error naming the tensor.
static int read_params(FILE* f, const char* path, const char* what, int es, float* x, size_t n) {
    unsigned char buf[1 << 16];
    size_t done = 0;
    while (done < n) {
        size_t k = n - done < sizeof buf / (size_t)es ? n - done : sizeof buf / (size_t)es;
        if (fread(buf, (size_t)es, k, f) != k) {
            fprintf(stderr, "error: import: %s: the file ends inside %s (a truncated download or copy?)\n", path, what);
            return -1;
        }
        for (size_t i = 0; i < k; i++) {
            uint32_t u;
            if (es == 4) memcpy(&u, buf + 4 * i, 4);
            else { uint16_t h; memcpy(&h, buf + 2 * i, 2); u = (uint32_t)h << 16; }
            if ((u & 0x7F800000u) == 0x7F800000u) {   // on the bits: -ffast-math could fold isfinite() away
                fprintf(stderr, "error: import: %s: %s element %zu is not finite: a weight that is not finite cannot be "
                        "trained (the file is damaged)\n", path, what, done + i);
                return -1;
            }
            if (x) memcpy(&x[done + i], &u, 4);
        }
        done += k;
    }
    return 0;
}

// the gatedgpt tensor `fmt` (of layer l) in the host arena
static float* at(const ParamTable* t, float* x, const char* fmt, int l) {
    char nm[64];
    snprintf(nm, sizeof nm, fmt, l);
    const ParamInfo* p = param_find(t, nm);
    if (!p) { fprintf(stderr, "error: import: parameter '%s' missing from the table\n", nm); exit(1); }
    return x + p->offset;
}

int import_llmc(const char* path, Config* c, const char* out_dir, FILE* log) {
    FILE* f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "error: import: cannot open '%s'\n", path); return -1; }
    int32_t h[LLMC_HEADER_INTS];
    if (fread(h, sizeof(int32_t), LLMC_HEADER_INTS, f) != LLMC_HEADER_INTS) {
        fprintf(stderr, "error: import: %s: shorter than llm.c's 1024-byte header\n", path);
        fclose(f);
        return -1;
    }
    static const char* const FIELD[8] = {"magic", "version", "maxT", "V", "L", "NH", "C", "Vp"};
    const int version = h[1], maxT = h[2], V = h[3], L = h[4], NH = h[5], C = h[6], Vp = h[7];
    int bad = -1;
    const char* why = "";
    if (h[0] != LLMC_MAGIC) { bad = 0; why = "not llm.c's model magic 20240326 (a token shard or another file?)"; }
    else if (version != 3 && version != 5) { bad = 1; why = "llm.c writes 3 (fp32 parameters) or 5 (bf16) (accepted: 3, 5)"; }
    else for (int i = 2; i < 8 && bad < 0; i++) if (h[i] <= 0) { bad = i; why = "must be positive"; }
    if (bad < 0 && C % NH != 0) { bad = 5; why = "does not divide C (GPT-2's heads split the channels)"; }
    if (bad < 0 && Vp < V) { bad = 7; why = "smaller than V (Vp is V padded up)"; }
    if (bad < 0 && ((long long)Vp * C > (1LL << 40) || (long long)L * 12 * C * C > (1LL << 40))) { bad = 6; why = "implausibly large"; }
    if (bad >= 0) {
        fprintf(stderr, "error: import: %s: header[%d] %s = %d: %s\n", path, bad, FIELD[bad], h[bad], why);
        fclose(f);
        return -1;
    }
    const int es = version == 3 ? 4 : 2;
    const size_t Ls = (size_t)L, Cs = (size_t)C;
    const size_t n_params = (size_t)Vp * Cs + (size_t)maxT * Cs + Ls * (12 * Cs * Cs + 13 * Cs) + 2 * Cs;
    if (fseek(f, 0, SEEK_END) != 0 || (size_t)ftell(f) != 1024 + n_params * es) {
        fprintf(stderr, "error: import: %s: %ld bytes, but the header (version %d, maxT %d, V %d, L %d, NH %d, C %d, Vp %d) "
                "says 1024 + %zu parameters x %d bytes = %zu\n", path, ftell(f), version, maxT, V, L, NH, C, Vp, n_params, es,
                1024 + n_params * es);
        fclose(f);
        return -1;
    }
    fseek(f, 1024, SEEK_SET);
    // the config: GPT-2 with its biases; every value through config_apply_override, so that
    // config_finalize's errors name the key
    char kv[8][64];
    snprintf(kv[0], 64, "model.vocab_size=%d", V); snprintf(kv[1], 64, "model.n_layer=%d", L);
    snprintf(kv[2], 64, "model.d_model=%d", C); snprintf(kv[3], 64, "model.n_head=%d", NH);
    snprintf(kv[4], 64, "model.n_kv_head=%d", NH); snprintf(kv[5], 64, "model.head_dim=%d", C / NH);
    snprintf(kv[6], 64, "model.d_ff=%d", 4 * C); snprintf(kv[7], 64, "model.max_seq_len=%d", maxT);
    static const char* const FIXED[] = {"model.pos=learned", "model.norm=layernorm", "model.norm_eps=1e-5", "model.mlp=gelu",
                                        "model.tie_embeddings=true", "model.bias=true", "model.qk_norm=false",
                                        "model.attn_gate=none"};
    for (int i = 0; i < 16; i++)
        if (config_apply_override(c, i < 8 ? kv[i] : FIXED[i - 8]) != 0) { fclose(f); return -1; }
    if (c->train.seq_len > maxT) {   // the default training length may not fit a short model
        snprintf(kv[0], 64, "train.seq_len=%d", maxT);
        if (config_apply_override(c, kv[0]) != 0) { fclose(f); return -1; }
    }
    if (config_finalize(c, path)) { fclose(f); return -1; }

    GPT m;
    gpt_build(&m, &c->model, c->train.seed);
    const ParamTable* t = &m.table;
    float* x = calloc(t->total, sizeof(float));   // gatedgpt's padding rows of wte stay zero
    if (!x) { fprintf(stderr, "error: import: out of memory\n"); fclose(f); gpt_free(&m); return -1; }
    // llm.c's tensors in file order: wte (the first V rows; its padding rows skipped), wpe, then
    // each per-layer tensor for all L layers, then lnf
    int rc = read_params(f, path, "wte", es, at(t, x, "wte", 0), (size_t)V * Cs) ||
             read_params(f, path, "wte's padding rows", es, NULL, (size_t)(Vp - V) * Cs) ||
             read_params(f, path, "wpe", es, at(t, x, "wpe", 0), (size_t)maxT * Cs);
    static const struct { const char* llmc; const char* ours; int rows, cols; } T[] = {   // rows, cols in units of C
        {"ln1w", "h.%d.ln1.w", 1, 0}, {"ln1b", "h.%d.ln1.b", 1, 0}, {"qkvw", "h.%d.attn.wqkv", 3, 1},
        {"qkvb", "h.%d.attn.bqkv", 3, 0}, {"attprojw", "h.%d.attn.wo", 1, 1}, {"attprojb", "h.%d.attn.bo", 1, 0},
        {"ln2w", "h.%d.ln2.w", 1, 0}, {"ln2b", "h.%d.ln2.b", 1, 0}, {"fcw", "h.%d.mlp.w_in", 4, 1},
        {"fcb", "h.%d.mlp.b_in", 4, 0}, {"fcprojw", "h.%d.mlp.w_out", 1, 4}, {"fcprojb", "h.%d.mlp.b_out", 1, 0}};
    for (size_t i = 0; i < sizeof T / sizeof T[0] && !rc; i++)
        for (int l = 0; l < L && !rc; l++) {
            char what[64];
            snprintf(what, sizeof what, "%s of layer %d", T[i].llmc, l);
            size_t n = T[i].rows * Cs * (T[i].cols ? T[i].cols * Cs : 1);
            rc = read_params(f, path, what, es, at(t, x, T[i].ours, l), n);
        }
    rc = rc || read_params(f, path, "lnfw", es, at(t, x, "lnf.w", 0), Cs) ||
         read_params(f, path, "lnfb", es, at(t, x, "lnf.b", 0), Cs);
    fclose(f);
    if (rc) { free(x); gpt_free(&m); return -1; }
    ops_from_host(m.params, x, t->total * sizeof(float));
    free(x);
    gpt_params_changed(&m, 0);
    rc = checkpoint_save_fresh(out_dir, c, &m);   // AdamW state zero, the data at its beginning
    if (rc == 0 && log) {
        char ck[CKPT_PATH_MAX];
        checkpoint_path(ck, sizeof ck, out_dir, 0);
        fprintf(log, "import: %s (llm.c model file, version %d: %s parameters, %zu of them) -> %s: resume with train_gpt "
                "--resume %s\n", path, version, es == 4 ? "fp32" : "bf16", n_params, ck, ck);
    }
    gpt_free(&m);
    return rc;
}
