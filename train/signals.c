// train/signals.c: per-group gradient norms and update ratios (train/signals.h).
#include "signals.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../kernels/ops.h"
#include "progress.h"

static const char* const SIG_KIND_NAME[SIG_KINDS] = {"attn", "gate", "mlp", "router", "norm"};
static const char* const SIG_TOP_NAME[SIG_TOPS] = {"embed", "lnf"};

static void* sig_alloc(size_t n, size_t sz) {
    void* p = calloc(n ? n : 1, sz);
    if (!p) { fprintf(stderr, "error: out of host memory (instability signals, train/signals.c)\n"); exit(1); }
    return p;
}

static void sig_add(Signals* s, size_t off, size_t n, int group, int* cap) {
    if (n == 0) return;
    if (s->nr == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        s->r = realloc(s->r, (size_t)*cap * sizeof(SignalRange));
        if (!s->r) { fprintf(stderr, "error: out of host memory (instability signals, train/signals.c)\n"); exit(1); }
    }
    s->r[s->nr++] = (SignalRange){off, n, group};
    s->present[group] = 1;
}

// the kind of layer tensor `what` (the name after "h.<l>."); -1 for attn.wqkv / attn.bqkv,
// which split into attention and gate rows
static int sig_kind(const char* what) {
    if (!strcmp(what, "attn.wqkv") || !strcmp(what, "attn.bqkv")) return -1;
    if (!strncmp(what, "ln", 2) || strstr(what, "norm")) return SIG_NORM;   // ln1, ln2, q/k_norm, gdn.norm_w
    if (!strcmp(what, "gdn.w_z")) return SIG_GATE;
    if (!strncmp(what, "attn.", 5) || !strncmp(what, "gdn.", 4)) return SIG_ATTN;
    if (!strcmp(what, "moe.router")) return SIG_ROUTER;
    return SIG_MLP;   // mlp.*, moe.w_in, moe.w_out, moe.shared_*
}

void signals_init(Signals* s, const ParamTable* t, const ModelConfig* c, const Dist* d) {
    memset(s, 0, sizeof(*s));
    s->n_layer = c->n_layer;
    s->n_groups = c->n_layer * SIG_KINDS + SIG_TOPS;
    s->present = sig_alloc((size_t)s->n_groups, sizeof(int));
    s->g2 = sig_alloc((size_t)s->n_groups, sizeof(double));
    s->w2 = sig_alloc((size_t)s->n_groups, sizeof(double));
    s->d2 = sig_alloc((size_t)s->n_groups, sizeof(double));
    OpsAttnShape as = config_attn_shape(c, 0, 0, OPS_ATTN_FUSED);   // columns only
    const int QKVG = ops_attn_qkv_cols(&as), G = ops_attn_gate_cols(&as);
    int cap = 0;
    for (int i = 0; i < t->n; i++) {
        const ParamInfo* p = &t->p[i];
        int l;
        char what[48];
        if (sscanf(p->name, "h.%d.%47s", &l, what) != 2) {   // model-level: wte, wpe, lm_head, lnf.*
            int k = !strncmp(p->name, "lnf", 3) ? SIG_TOP_NORM : SIG_TOP_EMBED;
            sig_add(s, p->offset, p->numel, signals_group(s, -1, k), &cap);
            continue;
        }
        int k = sig_kind(what);
        if (k >= 0) { sig_add(s, p->offset, p->numel, signals_group(s, l, k), &cap); continue; }
        // attn.wqkv [QKVG, d] / attn.bqkv [QKVG]: rows [q | k | v | gate (G)]
        const size_t row = p->numel / (size_t)QKVG;
        sig_add(s, p->offset, (size_t)(QKVG - G) * row, signals_group(s, l, SIG_ATTN), &cap);
        sig_add(s, p->offset + (size_t)(QKVG - G) * row, (size_t)G * row, signals_group(s, l, SIG_GATE), &cap);
    }
    // the floats this process sums (signals.h): its shards under ZeRO-1; else rank 0 the dense
    // region and replica 0 of each expert-parallel member its experts
    const Comm* cm = d->comm;
    if (d->zero_stage == 1) {
        s->own[0][0] = d->lo; s->own[0][1] = d->hi;
        s->own[1][0] = d->xlo; s->own[1][1] = d->xhi;
    } else {
        s->own[0][0] = 0; s->own[0][1] = cm->rank == 0 ? d->dense : 0;
        s->own[1][0] = d->dense; s->own[1][1] = cm->rep_rank == 0 ? d->total : d->dense;
    }
    for (int q = 0; q < 2; q++) s->n_before += s->own[q][1] > s->own[q][0] ? s->own[q][1] - s->own[q][0] : 0;
    if (s->n_before) s->before = ops_malloc(signals_copy_bytes(s->n_before, 0));
}

void signals_free(Signals* s) {
    if (s->before) ops_free(s->before);
    free(s->r); free(s->present); free(s->g2); free(s->w2); free(s->d2);
    memset(s, 0, sizeof(*s));
}


// Per group, the sum over this process's owned floats of x^2 (before NULL) or (x - before)^2,
// then over the processes. `before` is the copy of the owned floats: dense first, then experts.
// The pieces go to the backend in one call (ops_sumsq_ranges: one pass, not one per tensor).
static void sig_sums(Signals* s, Dist* d, double* out, const float* x, size_t xbase, const float* before) {
    const float** xs = sig_alloc((size_t)2 * s->nr, sizeof(float*));
    const float** ys = sig_alloc((size_t)2 * s->nr, sizeof(float*));
    size_t* ns = sig_alloc((size_t)2 * s->nr, sizeof(size_t));
    int* gs = sig_alloc((size_t)2 * s->nr, sizeof(int));
    int np = 0;
    size_t base = 0;   // where region q's owned floats start in `before`
    for (int q = 0; q < 2; q++) {
        const size_t lo = s->own[q][0], hi = s->own[q][1];
        for (int i = 0; i < s->nr && lo < hi; i++) {
            const SignalRange* r = &s->r[i];
            size_t a = r->off > lo ? r->off : lo, b = r->off + r->n < hi ? r->off + r->n : hi;
            if (a >= b) continue;
            xs[np] = x + (a - xbase);
            ys[np] = before ? before + base + (a - lo) : NULL;
            ns[np] = b - a;
            gs[np++] = r->group;
        }
        base += hi > lo ? hi - lo : 0;
    }
    double* part = sig_alloc((size_t)(np ? np : 1), sizeof(double));
    ops_sumsq_ranges(part, xs, before ? ys : NULL, ns, np);
    memset(out, 0, (size_t)s->n_groups * sizeof(double));
    for (int p = 0; p < np; p++) out[gs[p]] += part[p];
    if (d->comm->size > 1) comm_allreduce_sum_f64(d->comm, out, (size_t)s->n_groups);
    free(xs); free(ys); free(ns); free(gs); free(part);
}

void signals_grads(Signals* s, Dist* d, const float* grads, int step) {
    const double t0 = progress_now();
    sig_sums(s, d, s->g2, grads, 0, NULL);
    s->step = step;
    s->ms = (progress_now() - t0) * 1e3;
}

void signals_before_update(Signals* s, Dist* d, const float* params, size_t base) {
    const double t0 = progress_now();
    sig_sums(s, d, s->w2, params, base, NULL);
    size_t at = 0;
    for (int q = 0; q < 2; q++) {
        const size_t lo = s->own[q][0], hi = s->own[q][1];
        if (hi <= lo) continue;
        ops_copy(s->before + at, params + (lo - base), hi - lo);
        at += hi - lo;
    }
    s->ms += (progress_now() - t0) * 1e3;
}

void signals_after_update(Signals* s, Dist* d, const float* params, size_t base, int skipped) {
    s->skipped = skipped;
    if (skipped) { memset(s->d2, 0, (size_t)s->n_groups * sizeof(double)); return; }   // every process alike
    const double t0 = progress_now();
    sig_sums(s, d, s->d2, params, base, s->before);
    s->ms += (progress_now() - t0) * 1e3;
}

double signals_grad_norm(const Signals* s, int g) {
    return s->step > 0 && s->present[g] ? sqrt(s->g2[g]) : NAN;
}

double signals_update_ratio(const Signals* s, int g) {
    if (s->step <= 0 || !s->present[g] || !(s->w2[g] > 0.0)) return NAN;
    return sqrt(s->d2[g]) / sqrt(s->w2[g]);
}

void signals_write_json(const Signals* s, Jsonl* j, int l) {
    const int nk = l < 0 ? SIG_TOPS : SIG_KINDS;
    char key[48];
    for (int k = 0; k < nk; k++) {
        const char* name = l < 0 ? SIG_TOP_NAME[k] : SIG_KIND_NAME[k];
        const int g = s ? signals_group(s, l, k) : 0;
        snprintf(key, sizeof key, "grad_norm_%s", name);
        jsonl_fmt(j, key, "%.6g", s ? signals_grad_norm(s, g) : NAN);
        snprintf(key, sizeof key, "update_ratio_%s", name);
        jsonl_fmt(j, key, "%.6g", s ? signals_update_ratio(s, g) : NAN);
    }
}
