// tests/test_train_math.c: the pieces of a training step around the model: LR schedules
// against their closed forms, AdamW + clipping against a float64 re-computation, gradient
// accumulation (2 micro-batches of B = 1 batch of 2B), and the init's statistics.
#include <string.h>
#include "test_util.h"
#include "../model/config.h"
#include "../model/gpt.h"
#include "../model/optim.h"
#include "../train/progress.h"

// the largest relative error near() has seen since the last reset (printed by the callers)
static double near_worst;
static void near(double got, double want, double tol, const char* what) {
    double scale = fabs(want) > 1e-12 ? fabs(want) : 1.0;
    TU_CHECK(fabs(got - want) <= tol * scale, "%s: got %.9g want %.9g", what, got, want);
    if (fabs(got - want) / scale > near_worst) near_worst = fabs(got - want) / scale;
}

static void test_schedules(void) {
    TrainConfig tc;
    Config c;
    config_defaults(&c);
    tc = c.train;
    tc.steps = 100; tc.lr = 1e-3f; tc.min_lr_frac = 0.1f; tc.warmup_steps = 10;
    const double PI = 3.14159265358979323846;
    // derived: <= ~10 float32 roundings (cosf, the float pi, lo = lr * 0.1f): 10u = 6e-7 < 1e-6;
    // measured 5.1e-8 on all three ISAs (the ends and midpoints were at 1e-5: 200x, now 1e-6)
    near_worst = 0.0;
    // warmup: linear from lr/warmup at step 0 to lr at step warmup-1
    tc.schedule = SCHED_COSINE;
    near(lr_schedule(&tc, 0), 1e-4, 1e-6, "warmup step 0");
    near(lr_schedule(&tc, 4), 5e-4, 1e-6, "warmup step 4");
    near(lr_schedule(&tc, 9), 1e-3, 1e-6, "warmup step 9");
    // cosine: lr at the first decay step, min at the last, midpoint halfway
    near(lr_schedule(&tc, 10), 1e-3, 1e-6, "cosine start");
    near(lr_schedule(&tc, 99), 1e-4, 1e-6, "cosine end");
    double p = (50.0 - 10) / 89.0;
    near(lr_schedule(&tc, 50), 1e-4 + 0.5 * 9e-4 * (1 + cos(PI * p)), 1e-6, "cosine step 50");
    tc.schedule = SCHED_LINEAR;
    near(lr_schedule(&tc, 50), 1e-3 - 9e-4 * p, 1e-6, "linear step 50");
    near(lr_schedule(&tc, 99), 1e-4, 1e-6, "linear end");
    tc.schedule = SCHED_CONSTANT;
    near(lr_schedule(&tc, 77), 1e-3, 1e-6, "constant");
    // wsd: stable until the last 20 steps, then linear to min
    tc.schedule = SCHED_WSD; tc.wsd_decay_frac = 0.2f;
    near(lr_schedule(&tc, 79), 1e-3, 1e-6, "wsd stable");
    near(lr_schedule(&tc, 80), 1e-3, 1e-6, "wsd decay start");
    near(lr_schedule(&tc, 99), 1e-4, 1e-6, "wsd end");
    near(lr_schedule(&tc, 90), 1e-3 - 9e-4 * 10.0 / 19.0, 1e-6, "wsd middle");
    printf("  LR schedules vs closed forms: worst rel err %.2e (tol 1e-6)\n", near_worst);
}

static Config tiny(void) {
    Config c;
    config_defaults(&c);
    ModelConfig* m = &c.model;
    m->vocab_size = 60; m->n_layer = 2; m->d_model = 32; m->n_head = 4; m->n_kv_head = 2;
    m->head_dim = 8; m->d_ff = 48; m->max_seq_len = 16; m->attn_gate = GATE_ELEMENTWISE; m->qk_norm = 1;
    c.train.batch_size = 4; c.train.seq_len = 16;
    config_finalize(&c, "test");
    return c;
}

static void test_adamw(void) {
    // two steps of the optimizer on the real parameter table against a float64 loop
    Config c = tiny();
    c.train.grad_clip = 0.5f; c.train.weight_decay = 0.1f;
    GPT m;
    gpt_build(&m, &c.model, 3);
    size_t n = m.table.total;
    double* p = malloc(n * sizeof(double));
    double* mo = calloc(n, sizeof(double));
    double* vo = calloc(n, sizeof(double));
    float* g = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) p[i] = m.params[i];
    Optim o;
    optim_init(&o, &m);
    for (int t = 1; t <= 2; t++) {
        tu_fill(g, n, 2.0);
        for (int k = 0; k < m.table.n; k++) {   // padding between tensors stays zero
            const ParamInfo* pi = &m.table.p[k];
            size_t end = pi->offset + pi->numel, next = k + 1 < m.table.n ? m.table.p[k + 1].offset : n;
            for (size_t i = end; i < next; i++) g[i] = 0.0f;
        }
        memcpy(m.grads, g, n * sizeof(float));
        float norm = optim_grad_norm(&m);
        double ref_norm = 0;
        for (size_t i = 0; i < n; i++) ref_norm += (double)g[i] * g[i];
        ref_norm = sqrt(ref_norm);
        // derived: double partial sums, then one float rounding of the sqrt: u = 6e-8 < 1e-6
        near_worst = 0.0;
        near(norm, ref_norm, 1e-6, "grad norm");
        printf("  grad norm step %d vs float64: rel err %.2e (tol 1e-6)\n", t, near_worst);
        double scale = ref_norm > c.train.grad_clip ? c.train.grad_clip / (ref_norm + 1e-6) : 1.0;
        double lr = 1e-2, b1 = c.train.beta1, b2 = c.train.beta2, eps = c.train.eps;
        optim_step(&o, &m, &c.train, (float)lr, norm);
        for (int k = 0; k < m.table.n; k++) {
            const ParamInfo* pi = &m.table.p[k];
            double wd = pi->decay ? c.train.weight_decay : 0.0;
            for (size_t i = pi->offset; i < pi->offset + pi->numel; i++) {
                double gi = g[i] * scale;
                mo[i] = b1 * mo[i] + (1 - b1) * gi;
                vo[i] = b2 * vo[i] + (1 - b2) * gi * gi;
                p[i] = p[i] * (1 - lr * wd) - lr * (mo[i] / (1 - pow(b1, t))) / (sqrt(vo[i] / (1 - pow(b2, t))) + eps);
            }
        }
    }
    double worst = 0;
    for (size_t i = 0; i < n; i++) { double e = fabs(p[i] - m.params[i]); if (e > worst) worst = e; }
    // derived: 2 steps x ~3 float roundings of |p| <= ~1.04 (the norm weights start at 1):
    // 6 u 1.04 = 3.7e-7 < 1e-6; measured 1.07e-7 on all three ISAs
    TU_CHECK(worst < 1e-6, "AdamW vs float64: max abs diff %.3e", worst);
    printf("  AdamW + clip, 2 steps vs float64: max abs diff %.2e\n", worst);
    // decay on 2-D tensors only: with a fresh optimizer and zero gradients the Adam update is
    // exactly 0, so matrices shrink by (1 - lr*wd) and norm weights stay as they are
    Optim fresh;
    optim_init(&fresh, &m);
    ops_zero(m.grads, n);
    const ParamInfo* ln = param_find(&m.table, "h.0.ln1.w");
    const ParamInfo* wq = param_find(&m.table, "h.0.attn.wqkv");
    float ln_before = m.params[ln->offset], wq_before = m.params[wq->offset + 5];
    optim_step(&fresh, &m, &c.train, 1e-2f, 0.0f);
    TU_CHECK(m.params[ln->offset] == ln_before, "norm weight decayed: %g -> %g", ln_before, m.params[ln->offset]);
    // derived: lr*wd, 1 - that, times p in float: 3 roundings, 3u = 1.8e-7 < 1e-6
    near_worst = 0.0;
    near(m.params[wq->offset + 5], wq_before * (1 - 1e-2 * 0.1), 1e-6, "wqkv decays by (1 - lr*wd)");
    printf("  decay of a matrix by (1 - lr wd): rel err %.2e (tol 1e-6)\n", near_worst);
    optim_free(&fresh);
    optim_free(&o);
    gpt_free(&m);
    free(p); free(mo); free(vo); free(g);
}

static void test_grad_accum(void) {
    // gradient of one batch of 4 sequences == accumulated gradients of 2 micro-batches of 2
    Config c = tiny();
    GPT big, small;
    gpt_build(&big, &c.model, 5);
    gpt_build(&small, &c.model, 5);
    gpt_alloc_acts(&big, 4, 16);
    gpt_alloc_acts(&small, 2, 16);
    int in[64], tg[64];
    for (int i = 0; i < 64; i++) { in[i] = (i * 13 + 5) % 60; tg[i] = (i * 7 + 1) % 60; }
    gpt_zero_grad(&big);
    float lb = gpt_forward(&big, in, tg);
    gpt_backward(&big, 1.0f);
    gpt_zero_grad(&small);
    float l1 = gpt_forward(&small, in, tg);
    gpt_backward(&small, 0.5f);
    float l2 = gpt_forward(&small, in + 32, tg + 32);
    gpt_backward(&small, 0.5f);
    // loss: a float mean of 64 vs 2 x 32 token losses (~4.1): (log2 64 + 2) u = 4.8e-7 < 1e-6
    near_worst = 0.0;
    near(0.5 * (l1 + l2), lb, 1e-6, "accumulated loss");
    double e = tu_rel_err(small.grads, big.grads, big.table.total);
    // derived: the weight gradients' sums over 64 tokens split in 2, through 2 layers:
    // ~2 x 64 u = 7.7e-6 < 1e-5
    TU_CHECK(e < 1e-5, "accumulated gradients differ from the big batch: rel %.2e", e);
    printf("  grad accumulation 2 x B=2 vs B=4: loss rel err %.2e (tol 1e-6), gradient rel err %.2e (tol 1e-5)\n",
           near_worst, e);
    gpt_free(&big);
    gpt_free(&small);
}

static void test_init(void) {
    Config c;
    config_defaults(&c);
    c.model.vocab_size = 1000; c.model.n_layer = 6; c.model.d_model = 256; c.model.n_head = 4;
    c.model.norm = NORM_LAYERNORM;
    config_finalize(&c, "test");
    GPT m;
    gpt_build(&m, &c.model, 11);
    double worst_sd = 0.0, worst_mean = 0.0;
    size_t min_n = (size_t)-1;
    for (int k = 0; k < m.table.n; k++) {
        const ParamInfo* p = &m.table.p[k];
        const float* x = m.params + p->offset;
        double s = 0, s2 = 0;
        for (size_t i = 0; i < p->numel; i++) { s += x[i]; s2 += (double)x[i] * x[i]; }
        double mean = s / p->numel, sd = sqrt(s2 / p->numel - mean * mean);
        if (p->ndim == 2) {
            double want = p->residual_proj ? 0.02 / sqrt(12.0) : 0.02;
            // statistical: over n >= 65536 draws the sample std's sd is want / sqrt(2n) and the mean's
            // want / sqrt(n) (3.9e-3 want): 0.03 want is >= 7.7 sigma (false alarm < 1e-13)
            TU_CHECK(fabs(sd - want) < 0.03 * want && fabs(mean) < 0.03 * want, "%s: init std %.5f mean %.5f want std %.5f", p->name, sd, mean, want);
            worst_sd = fmax(worst_sd, fabs(sd - want) / want);
            worst_mean = fmax(worst_mean, fabs(mean) / want);
            if (p->numel < min_n) min_n = p->numel;
        } else {
            int bias = strstr(p->name, ".b") && p->name[strlen(p->name) - 1] == 'b';
            TU_CHECK(sd == 0.0 && mean == (bias ? 0.0 : 1.0), "%s: norm init mean %g", p->name, mean);
        }
    }
    const ParamInfo* wo = param_find(&m.table, "h.0.attn.wo");
    TU_CHECK(wo && wo->residual_proj, "attn.wo is a residual projection");
    printf("  init: matrices N(0, 0.02), residual projections N(0, 0.02/sqrt(2*n_layer)), norms 1/0; worst "
           "|std - want| %.2e want, |mean| %.2e want (tol 0.03; smallest matrix %zu values)\n", worst_sd, worst_mean, min_n);
    gpt_free(&m);
}

// The step line's ETA (train/progress.h) against sums worked by hand: the trailing mean of the
// last 20 step times times the steps left, plus each periodic task's runs still due (those of
// the step just reported included) times its last duration; and the duration format.
static void test_progress(void) {
    Progress p;
    progress_init(&p, 100.0);
    enum { EVAL, CKPT };
    progress_task_every(&p, EVAL, 10, 30);   // an eval every 10 steps and after step 30 (a multiple)
    progress_task_every(&p, CKPT, 15, 30);   // a checkpoint every 15 steps and after step 30
    TU_CHECK(progress_eta(&p, 0, 30) == 0.0, "no step yet: no estimate");
    for (int i = 0; i < 5; i++) progress_item(&p, 2.0);
    progress_task_took(&p, EVAL, 3.0);
    progress_task_took(&p, CKPT, 1.0);
    // after step 5: 25 steps x 2 s; evals after 10, 20, 30 (3 x 3 s); checkpoints after 15, 30 (2 x 1 s)
    near(progress_eta(&p, 5, 30), 25 * 2.0 + 3 * 3.0 + 2 * 1.0, 1e-12, "eta after step 5");
    for (int i = 0; i < 5; i++) progress_item(&p, 4.0);
    // after step 10 (its eval not yet run): mean (5 x 2 + 5 x 4) / 10 = 3 s; evals 10, 20, 30; checkpoints 15, 30
    near(progress_eta(&p, 10, 30), 20 * 3.0 + 3 * 3.0 + 2 * 1.0, 1e-12, "eta after step 10");
    // the window: 15 more steps of 1 s push the 2 s ones out and leave five of 4 s: mean (5 x 4 + 15) / 20
    for (int i = 0; i < 15; i++) progress_item(&p, 1.0);
    near(progress_eta(&p, 25, 30), 5 * (35.0 / 20.0) + 1 * 3.0 + 1 * 1.0, 1e-12, "eta after step 25 (window of 20)");
    // after the last step: no steps left, its eval and checkpoint still due
    near(progress_eta(&p, 30, 30), 3.0 + 1.0, 1e-12, "eta after the last step");
    // a final step that is no multiple of the interval: every 4 up to 30 -> 28 and 30 after step 25
    progress_task_every(&p, EVAL, 4, 30);
    near(progress_eta(&p, 25, 30), 5 * (35.0 / 20.0) + 2 * 3.0 + 1 * 1.0, 1e-12, "eta, final step not a multiple");
    near(progress_elapsed(&p, 142.5), 42.5, 1e-12, "elapsed");
    char b[32];
    TU_CHECK(strcmp(progress_fmt(42.4, b, sizeof b), "42s") == 0, "fmt 42.4 s: %s", b);
    TU_CHECK(strcmp(progress_fmt(59.6, b, sizeof b), "1:00") == 0, "fmt 59.6 s: %s", b);
    TU_CHECK(strcmp(progress_fmt(187.0, b, sizeof b), "3:07") == 0, "fmt 187 s: %s", b);
    TU_CHECK(strcmp(progress_fmt(3723.0, b, sizeof b), "1:02:03") == 0, "fmt 3723 s: %s", b);
    printf("  progress: ETA = steps left x trailing mean + periodic tasks due, 6 cases; durations formatted\n");
}

// the gradient norm's chunk sums (kernels/cpu/optim.c sums SUMSQ_SIDE chunks side by side) against
// one chunk at a time in index order: the same bits, for sizes around the groups' boundaries
static void test_sumsq_chunks(void) {
    const size_t C = OPS_SUMSQ_CHUNK;
    const size_t sizes[] = {1, C - 1, C, 8 * C, 8 * C + 1, 17 * C + 123, 40 * C, 41 * C - 7};
    const size_t nmax = 41 * C;
    float* x = malloc(nmax * sizeof(float));
    double* part = malloc((nmax / C + 1) * sizeof(double));
    unsigned long long r = 12345;
    for (size_t i = 0; i < nmax; i++) {   // values over many binades, so the order of the sums shows
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(r >> 11) / 9007199254740992.0 - 0.5) * (float)(1 << (r >> 60));
    }
    int mism = 0;
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        const size_t n = sizes[k], nc = (n + C - 1) / C;
        ops_sumsq_chunks(part, x, n);
        for (size_t c = 0; c < nc; c++) {
            double s = 0.0;
            for (size_t i = c * C; i < n && i < (c + 1) * C; i++) s += (double)x[i] * x[i];
            if (memcmp(&s, &part[c], sizeof s) != 0) mism++;
        }
    }
    TU_CHECK(mism == 0, "sumsq chunks: %d chunk sums differ from the in-order loop", mism);
    free(x); free(part);
}

int main(void) {
    ops_init(0);
    test_schedules();
    test_adamw();
    test_grad_accum();
    test_init();
    test_progress();
    test_sumsq_chunks();
    return tu_finish();
}
