// tests/test_golden.c: the whole model against the independent PyTorch reference.
//
//   test_golden tests/golden/NAME.ini      (reads NAME.bin beside it; format: tests/reference)
//
// Loads the reference's initial parameters, runs forward + backward on its batch and compares
// logits, loss and every parameter's gradient; then runs 3 AdamW steps (constant lr, same
// batch) and compares the losses and the parameters after them; for an MoE model also each MoE
// layer's aux and z losses, expert counts and dropped slots. The reference computed in
// float64; we compute in float32.
//
// The same source is built twice: test_golden against the CPU backend, test_golden_cuda against
// the CUDA backend (GATEDGPT_CUDA_BACKEND; without a GPU it says it skipped and exits 0). Model
// memory is reached only through ops_from_host / ops_to_host, which are memcpy on the CPU.
#include <string.h>
#include "test_util.h"
#include "../model/config.h"
#include "../model/gpt.h"
#include "../model/optim.h"
#ifdef GATEDGPT_CUDA_BACKEND
#include "../kernels/cuda/cuda_backend.h"
#endif

// tolerances (max |ours - ref| / max |ref| per tensor; loss: relative)
#if defined(GATEDGPT_ACT_BF16)
// bf16 activation storage (the CPU emulation; the CUDA bf16 build): every activation and every
// gradient between ops rounded to 8 mantissa bits (2^-9 = 2e-3 relative each), the GEMMs' weights
// stochastically rounded to bf16. Measured with the CPU emulation over the 19 goldens (2026-11-29):
// loss <= 3.8e-4, logits <= 1.7e-2, gradients <= 4.3e-2 (a qk-norm weight: a sum over every
// token of bf16 products), losses of steps 2-3 <= 3.1e-3 (7.4e-3 where routing moved), aux/z
// <= 6.3e-3. Parameters after 3 AdamW steps <= 0.16: Adam's first steps move every weight by
// about lr whatever the size of its gradient, so a gradient element near 0 whose sign bf16
// flips lands 2 lr away; that check is weak here, and the step losses carry the weight.
// MoE: a token whose router logits nearly tie can pick another expert than the fp32 reference;
// at most BF16_MAX_MOVED slots per layer may move, and then the logits, gradients and
// parameters cannot be compared element by element (the losses still are).
// Measured again under oneDNN AVX2, AVX and SSE41 (2026-12-02): the same to 3 digits at every ISA
// (bf16's 2^-9 rounding dominates the GEMMs' order): loss <= 9.0e-4 (moe_sigmoid_none, one slot
// moved; the logits' rounding moves the loss by up to ~2^-9 max|logit| / loss ~ 2e-3), step
// losses <= 7.4e-3 (moved), aux/z <= 6.3e-3, parameters after 3 steps <= 0.16.
static double TOL_LOSS = 2e-3, TOL_LOGITS = 5e-2, TOL_GRAD = 1e-1, TOL_STEP3 = 0.3;
#define TOL_STEP_LOSS 1.5e-2
#define TOL_STEP3_MOE 0.3
#define TOL_MOE_LOSS 2e-2
#define BF16_MAX_MOVED 2
#elif !defined(GATEDGPT_CUDA_BACKEND)
// fp32 against the float64 reference. Each bound is the largest error measured over the 19
// goldens under three instruction sets (oneDNN at AVX2, AVX and SSE41 on an AVX2 EPYC, 2026-12-02;
// `make test` runs them at the host's ISA and one below, tests/isa.sh) times the margin given:
#define TOL_LOSS   1e-6   // measured <= 1.02e-7 (AVX2/SSE41): 9.8x
#define TOL_LOGITS 1e-5   // measured <= 6.6e-7: 15x
#define TOL_GRAD   1e-5   // measured <= 1.62e-6 (SSE41): 6.2x (the issue allowed 1e-4)
#define TOL_STEP3  2e-5   // measured <= 3.0e-6: 6.7x (the issue allowed 1e-4)
// (the partial-RoPE goldens, qwen_rope_partial*, 2026-12-05 at AVX-512 and AVX2: gradients
// <= 1.82e-6, step 3 <= 3.78e-6, logits <= 5.7e-7: within 5.5x, 5.3x and 18x of these bounds)
// MoE goldens: more, and smaller, gradient elements (experts that see few tokens) make AdamW's
// first step g/(|g|+eps) less well conditioned (an element with |g| < eps moves by lr dg/eps, so
// roundoff dg is amplified up to 1/eps; docs/distributed.md): the fp32 reference itself lands up
// to 1.6e-5 from float64 after 3 steps (tests/reference/README.md); ours measured <= 2.56e-5
// (AVX; 1.35e-5 AVX2, 1.95e-5 SSE41): 7.8x. A real defect is far outside: AdamW without bias
// correction moves the first step by 0.45 lr instead of lr, ~5e-3 of these tensors' max.
#define TOL_STEP3_MOE 2e-4
#define TOL_MOE_LOSS 1e-5 // aux and z of each MoE layer (relative): measured <= 6.8e-8 (AVX): 146x
#else
// CUDA fp32: other summation orders than the CPU's, so 10x the CPU's tolerances (the issue's
// 1e-4 for gradients and parameters); with GATEDGPT_CUDA_TF32=1 the GEMM inputs are rounded to
// 10 mantissa bits (~5e-4 relative each) and the bounds are those of TF32; with
// GATEDGPT_CUDA_BF16_GEMM=1 to 8 bits (~2e-3 each), bounds 4x looser; the same bounds for the
// cuDNN attention (bf16 inside). Not yet run on a GPU. The TF32 and bf16-GEMM modes' bounds for
// the losses of the 3 AdamW steps, the parameters after them and the MoE aux / z losses come from
// the CUDA emulator (tests/cudaemu, which rounds the GEMM inputs as the tensor cores do) over the
// 19 goldens (2026-11-29): TF32 step losses <= 1.7e-3, parameters <= 8.0e-2, aux/z <= 5.7e-5;
// bf16-GEMM step losses <= 4.5e-3, parameters <= 0.15, aux/z <= 6.1e-4, and one routed slot moved
// at a near-tie (moe_sigmoid_none). The parameters are weak checks there for the reason given
// for bf16 storage above (a gradient near 0 whose sign the rounding flips lands 2 lr away).
static double TOL_LOSS = 1e-5, TOL_LOGITS = 1e-4, TOL_GRAD = 1e-4, TOL_STEP3 = 1e-4, TOL_STEP_LOSS = 1e-5;
static double TOL_STEP3_MOE = 1e-3, TOL_MOE_LOSS = 1e-4;
static int BF16_MAX_MOVED = 0;   // routed slots that may pick another expert than the reference
#define GG_TOL_VARIABLES 1
#endif
#ifndef GG_TOL_VARIABLES
#ifndef TOL_STEP_LOSS
#define TOL_STEP_LOSS TOL_LOSS   // the losses of the 3 AdamW steps
#endif
#ifndef BF16_MAX_MOVED
#define BF16_MAX_MOVED 0         // routed slots that may pick another expert than the reference
#endif
#endif

typedef struct { char name[96]; int dtype, ndim, dims[4]; size_t n; void* data; } GTensor;
typedef struct { GTensor* t; int n; } Golden;

static int rd(FILE* f, void* p, size_t sz) { return fread(p, 1, sz, f) == sz ? 0 : -1; }

static int golden_load(Golden* g, const char* path) {
    FILE* f = fopen(path, "rb");
    if (!f) { printf("cannot open %s (run `make golden` where python3-torch is installed)\n", path); return -1; }
    int32_t hdr[3];
    if (rd(f, hdr, sizeof hdr) || hdr[0] != 20261129 || hdr[1] != 1) { printf("%s: bad golden header\n", path); fclose(f); return -1; }
    g->n = hdr[2];
    g->t = calloc(g->n, sizeof(GTensor));
    for (int i = 0; i < g->n; i++) {
        GTensor* t = &g->t[i];
        int32_t len, dt, nd;
        if (rd(f, &len, 4) || len <= 0 || len >= (int)sizeof t->name || rd(f, t->name, len) ||
            rd(f, &dt, 4) || rd(f, &nd, 4) || nd < 1 || nd > 4) { printf("%s: truncated\n", path); fclose(f); return -1; }
        t->dtype = dt; t->ndim = nd; t->n = 1;
        for (int k = 0; k < nd; k++) { int32_t d; if (rd(f, &d, 4)) { fclose(f); return -1; } t->dims[k] = d; t->n *= d; }
        t->data = malloc(t->n * 4);
        if (rd(f, t->data, t->n * 4)) { printf("%s: truncated in %s\n", path, t->name); fclose(f); return -1; }
    }
    fclose(f);
    return 0;
}

static GTensor* golden_get(Golden* g, const char* name) {
    for (int i = 0; i < g->n; i++) if (strcmp(g->t[i].name, name) == 0) return &g->t[i];
    printf("golden file has no tensor '%s'\n", name);
    return NULL;
}

int main(int argc, char** argv) {
    // CUDA build: an optional second argument "cudnn" runs the model with attn_impl = cudnn
    // (bf16 attention) at bf16 bounds
    if (argc != 2 && argc != 3) { printf("usage: test_golden tests/golden/NAME.ini [cudnn]\n"); return 2; }
    const int use_cudnn = argc == 3 && strcmp(argv[2], "cudnn") == 0;
    (void)use_cudnn;   // the CPU build has one attention kernel
    const char* ini = argv[1];
    char bin[1024];
    snprintf(bin, sizeof bin, "%.*s.bin", (int)(strlen(ini) - 4), ini);
    Config cfg;
    config_defaults(&cfg);
    if (config_load_file(&cfg, ini) || config_finalize(&cfg, ini)) return 1;
    Golden g;
    if (golden_load(&g, bin)) return 1;
#ifdef GATEDGPT_CUDA_BACKEND
    char why[256];
    if (!cuda_device_present(why, sizeof why)) {
        printf("skipped: no CUDA device (%s)\n", why);
        return 0;
    }
#endif
    ops_init(0);
#ifdef GATEDGPT_CUDA_BACKEND
    // the GEMM modes and bf16 attention loosen the bounds (never tighten them: bf16 storage)
#define LOOSEN(t, v) do { if ((t) < (v)) (t) = (v); } while (0)
    if (cuda_tf32_enabled()) { LOOSEN(TOL_LOSS, 1e-3); LOOSEN(TOL_LOGITS, 5e-3); LOOSEN(TOL_GRAD, 2e-2); LOOSEN(TOL_STEP3, 2e-2); }
    if ((cuda_gemm_math() == CUDA_MATH_BF16 && OPS_ACT_IS_FLOAT) || use_cudnn) {
        LOOSEN(TOL_LOSS, 5e-3); LOOSEN(TOL_LOGITS, 3e-2); LOOSEN(TOL_GRAD, 8e-2); LOOSEN(TOL_STEP3, 8e-2);
    }
#ifdef GG_TOL_VARIABLES
    LOOSEN(TOL_STEP_LOSS, TOL_LOSS);
    if (cuda_tf32_enabled()) {
        LOOSEN(TOL_STEP_LOSS, 5e-3); LOOSEN(TOL_STEP3, 0.2); LOOSEN(TOL_STEP3_MOE, 0.2);
    }
    if (cuda_gemm_math() == CUDA_MATH_BF16) {   // (cuDNN's bounds stay as written: not yet measured)
        LOOSEN(TOL_STEP_LOSS, 1.5e-2); LOOSEN(TOL_STEP3, 0.3); LOOSEN(TOL_STEP3_MOE, 0.3);
        LOOSEN(TOL_MOE_LOSS, 2e-3);
        if (BF16_MAX_MOVED < 2) BF16_MAX_MOVED = 2;
    }
#endif
    if (use_cudnn && !cuda_cudnn_available()) {
        printf("skipped: no cuDNN attention in this build (or libcudnn does not load)\n");
        return 0;
    }
    printf("  backend: %s\n", ops_backend_name());
#endif

    const ModelConfig* mc = &cfg.model;
    const int B = cfg.train.batch_size, T = cfg.train.seq_len, N = B * T, V = mc->vocab_size;
    GPT m;
    gpt_build(&m, mc, 1);
#ifdef GATEDGPT_CUDA_BACKEND
    if (use_cudnn) m.attn_impl = OPS_ATTN_CUDNN;
#endif
    gpt_alloc_acts(&m, B, T);
    if (cfg.data.doc_mask) {   // attention within documents: the golden names its end-of-text id
        GTensor* e = golden_get(&g, "doc_eot");
        if (!e) return 1;
        gpt_set_doc_mask(&m, ((int*)e->data)[0], cfg.data.doc_positions == DOCPOS_RESTART);
    }

    // the reference's parameters, in table order, with matching shapes
    int nparam_golden = 0;
    for (int i = 0; i < g.n; i++) if (strncmp(g.t[i].name, "param/", 6) == 0) nparam_golden++;
    TU_CHECK(nparam_golden == m.table.n, "parameter count: golden %d, ours %d", nparam_golden, m.table.n);
    float* init = calloc(m.table.total, sizeof(float));
    for (int i = 0; i < m.table.n; i++) {
        const ParamInfo* p = &m.table.p[i];
        char nm[96];
        snprintf(nm, sizeof nm, "param/%s", p->name);
        GTensor* t = golden_get(&g, nm);
        if (!t) return 1;
        int shape_ok = t->n == p->numel && t->ndim == p->ndim;
        for (int k = 0; k < p->ndim && shape_ok; k++) shape_ok = t->dims[k] == p->shape[k];
        TU_CHECK(shape_ok, "%s: shape mismatch", p->name);
        if (!shape_ok) return tu_finish();
        memcpy(init + p->offset, t->data, p->numel * 4);
    }
    ops_from_host(m.params, init, m.table.total * sizeof(float));
    gpt_params_changed(&m, 0);
    float* host = malloc(m.table.total * sizeof(float));   // params or grads, read back

    int* in = golden_get(&g, "inputs")->data;
    int* tg = golden_get(&g, "targets")->data;
    gpt_zero_grad(&m);
    float loss = gpt_forward(&m, in, tg);
    float ref_loss = *(float*)golden_get(&g, "loss")->data;
    double lrel = fabs(loss - ref_loss) / fabs(ref_loss);
    TU_CHECK(lrel <= TOL_LOSS, "loss %.7f vs reference %.7f (rel %.2e > %.0e)", loss, ref_loss, lrel, TOL_LOSS);
    printf("  loss        %.7f ref %.7f  rel err %.2e\n", loss, ref_loss, lrel);

    // MoE routing against the reference first: where it differs (bf16 near-ties only), the
    // elementwise comparisons below do not apply
    int moved_any = 0;
    for (int l = 0; l < mc->n_layer; l++) {
        const MoeStats* st = &m.moe_stats[l];
        if (st->n_expert == 0) continue;
        char nm[96];
        snprintf(nm, sizeof nm, "moe/h.%d.counts", l);
        GTensor* tc = golden_get(&g, nm);
        if (!tc) return 1;
        long moved = 0;
        for (int i = 0; i < st->n_expert && (int)tc->n == st->n_expert; i++)
            moved += labs(((int32_t*)tc->data)[i] - st->counts[i]);
        moved /= 2;   // a slot that moves leaves one expert and joins another
        TU_CHECK((int)tc->n == st->n_expert && moved <= BF16_MAX_MOVED,
                 "h.%d expert counts differ from the reference (%ld slots moved, %d allowed)", l, moved, BF16_MAX_MOVED);
        if (moved) { moved_any = 1; printf("  moe h.%d     %ld routed slot(s) moved at a near-tie of the router logits\n", l, moved); }
    }
    if (moved_any) printf("  routing moved: logits, gradients and parameters not compared element by element\n");

    float* logits = malloc((size_t)N * V * sizeof(float));
    for (int n = 0; n < N; n++) gpt_logits_to_host(&m, logits + (size_t)n * V, n, V);
    double e = tu_rel_err(logits, golden_get(&g, "logits")->data, (size_t)N * V);
    TU_CHECK(moved_any || e <= TOL_LOGITS, "logits rel err %.2e > %.0e", e, TOL_LOGITS);
    printf("  logits      rel err %.2e\n", e);

    // MoE layers: the aux and z losses (without coefficients), expert counts, dropped slots
    for (int l = 0; l < mc->n_layer; l++) {
        if (!config_layer_is_moe(mc, l)) continue;
        const MoeStats* st = &m.moe_stats[l];
        char nm[96];
        snprintf(nm, sizeof nm, "moe/h.%d.aux", l);
        GTensor* ta = golden_get(&g, nm);
        snprintf(nm, sizeof nm, "moe/h.%d.z", l);
        GTensor* tz = golden_get(&g, nm);
        snprintf(nm, sizeof nm, "moe/h.%d.counts", l);
        GTensor* tc = golden_get(&g, nm);
        snprintf(nm, sizeof nm, "moe/h.%d.dropped", l);
        GTensor* td = golden_get(&g, nm);
        if (!ta || !tz || !tc || !td) return 1;
        double ra = *(float*)ta->data, rz = *(float*)tz->data;
        double ea = fabs(st->aux - ra) / fabs(ra), ez = fabs(st->z - rz) / fabs(rz);
        TU_CHECK(ea <= TOL_MOE_LOSS, "h.%d aux %.7f vs reference %.7f (rel %.2e)", l, st->aux, ra, ea);
        TU_CHECK(ez <= TOL_MOE_LOSS, "h.%d z %.7f vs reference %.7f (rel %.2e)", l, st->z, rz, ez);
        int same = (int)tc->n == st->n_expert;
        for (int i = 0; same && i < st->n_expert; i++) same = ((int32_t*)tc->data)[i] == st->counts[i];
        TU_CHECK(st->dropped == *(int32_t*)td->data, "h.%d dropped %ld vs reference %d", l, st->dropped, *(int32_t*)td->data);
        printf("  moe h.%d     aux %.7f rel err %.2e | z %.7f rel err %.2e | counts %s | dropped %ld\n", l, st->aux, ea,
               st->z, ez, same ? "equal" : "DIFFER", st->dropped);
    }

    gpt_backward(&m, 1.0f);
    ops_to_host(host, m.grads, m.table.total * sizeof(float));
    double worst = 0; const char* worst_name = "";
    for (int i = 0; i < m.table.n; i++) {
        const ParamInfo* p = &m.table.p[i];
        char nm[96];
        snprintf(nm, sizeof nm, "grad/%s", p->name);
        double r = tu_rel_err(host + p->offset, golden_get(&g, nm)->data, p->numel);
        TU_CHECK(moved_any || r <= TOL_GRAD, "grad %s rel err %.2e > %.0e", p->name, r, TOL_GRAD);
        if (r > worst) { worst = r; worst_name = p->name; }
    }
    printf("  gradients   worst rel err %.2e (%s) over %d tensors\n", worst, worst_name, m.table.n);

    // 3 AdamW steps on the same batch at constant lr
    ops_from_host(m.params, init, m.table.total * sizeof(float));
    gpt_params_changed(&m, 0);
    Optim opt;
    optim_init(&opt, &m);
    const float* ref_losses = golden_get(&g, "losses")->data;
    for (int s = 0; s < 3; s++) {
        gpt_zero_grad(&m);
        float l = gpt_forward(&m, in, tg);
        gpt_backward(&m, 1.0f);
        float norm = optim_grad_norm(&m);
        optim_step(&opt, &m, &cfg.train, lr_schedule(&cfg.train, s), norm);
        double r = fabs(l - ref_losses[s]) / fabs(ref_losses[s]);
        TU_CHECK(r <= TOL_STEP_LOSS, "step %d loss %.7f vs %.7f (rel %.2e)", s + 1, l, ref_losses[s], r);
        printf("  step %d      loss %.7f ref %.7f rel err %.2e grad norm %.4f\n", s + 1, l, ref_losses[s], r, norm);
    }
    worst = 0;
    const double tol_step3 = mc->moe.n_expert > 0 ? TOL_STEP3_MOE : TOL_STEP3;
    ops_to_host(host, m.params, m.table.total * sizeof(float));
    for (int i = 0; i < m.table.n; i++) {
        const ParamInfo* p = &m.table.p[i];
        char nm[96];
        snprintf(nm, sizeof nm, "step3/%s", p->name);
        double r = tu_rel_err(host + p->offset, golden_get(&g, nm)->data, p->numel);
        TU_CHECK(moved_any || r <= tol_step3, "after 3 steps %s rel err %.2e > %.0e", p->name, r, tol_step3);
        if (r > worst) { worst = r; worst_name = p->name; }
    }
    printf("  3 AdamW steps: params worst rel err %.2e (%s)\n", worst, worst_name);
    free(host);
    optim_free(&opt);
    gpt_free(&m);
    return tu_finish();
}
