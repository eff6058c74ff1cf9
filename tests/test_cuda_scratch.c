// tests/test_cuda_scratch.c: the CUDA backend's scratch reservation (kernels/cuda/setup.cu's
// ops_scratch_reserve) against the one piece of data kept in a scratch slot across calls: the
// RoPE cos/sin table of kernels/cuda/attention.cu. A reservation that grows the slot
// reallocates it (its old memory freed, the new one zeroed); the attention must notice
// (cuda_scratch_generation) and build its table again, or the rotation reads freed or zeroed
// memory. Linked against the emulator (cudaemu_scratch); ~0.1 s.
//
// q of ops_attn_prep_forward (no qk-norm, no gate: q is the rotated q columns of qkv) before and
// after a reservation, each against the rotation written out here from the RoPE definition
// (kernels/rope.h's header): pair i < hd/2 of a token at position p, channels i and i + hd/2,
// by the angle p * base^(-2i/hd), in double.
#include <string.h>
#include "../kernels/ops.h"
#include "../kernels/cuda/cuda_backend.h"
#include "test_util.h"

enum { B = 1, T = 4, H = 2, HKV = 1, HD = 8 };

// the largest |q - rotation(qkv's q columns)| over the N x H*hd outputs (float64 reference)
static double rope_err(const float* q, const float* qkv, int qkvg, float base) {
    const int half = HD / 2;
    double worst = 0.0;
    for (int n = 0; n < B * T; n++) {
        const int p = n % T;   // pos0 = 0
        for (int h = 0; h < H; h++)
            for (int i = 0; i < half; i++) {
                double ang = p * pow((double)base, -2.0 * i / HD);
                double a = qkv[(size_t)n * qkvg + h * HD + i], b = qkv[(size_t)n * qkvg + h * HD + i + half];
                double r0 = a * cos(ang) - b * sin(ang), r1 = b * cos(ang) + a * sin(ang);
                double e0 = fabs(q[(size_t)n * H * HD + h * HD + i] - r0);
                double e1 = fabs(q[(size_t)n * H * HD + h * HD + i + half] - r1);
                if (!(e0 <= worst)) worst = e0;   // NaN-safe: a NaN becomes the worst
                if (!(e1 <= worst)) worst = e1;
            }
    }
    return worst;
}

int main(void) {
    char why[256];
    if (!cuda_device_present(why, sizeof why)) { printf("skipped: no CUDA device (%s)\n", why); return 0; }
    if (!OPS_ACT_IS_FLOAT) { printf("skipped: fp32 act_t builds only\n"); return 0; }
    ops_init(0);

    OpsAttnShape s;
    memset(&s, 0, sizeof s);
    s.B = B; s.T = T; s.H = H; s.Hkv = HKV; s.hd = HD; s.rope = 1; s.rope_base = 10000.0f; s.eps = 1e-5f;
    const int N = B * T, QKVG = ops_attn_qkv_cols(&s);
    float* qkv = malloc((size_t)N * QKVG * sizeof(float));
    float* q = malloc((size_t)N * H * HD * sizeof(float));
    tu_fill(qkv, (size_t)N * QKVG, 1.0);
    act_t* d_qkv = ops_malloc((size_t)N * QKVG * sizeof(float));
    act_t* d_q = ops_malloc((size_t)N * H * HD * sizeof(float));
    act_t* d_k = ops_malloc((size_t)N * HKV * HD * sizeof(float));
    act_t* d_v = ops_malloc((size_t)N * HKV * HD * sizeof(float));
    float* d_rstd = ops_malloc((size_t)N * (H + HKV) * sizeof(float));
    ops_from_host(d_qkv, qkv, (size_t)N * QKVG * sizeof(float));

    // |a|, |b| < 1 and the table entries are cos, sin rounded to fp32 once (relative 2^-24);
    // a c - b s in fp32: two products and a difference, each rounded (2^-24 relative). The
    // error is below (2 + 3) * 2^-24 * (|a| + |b|) < 6e-7; 2e-6 leaves room for an FMA
    // contraction's different rounding and nothing for a wrong angle (the smallest angle
    // step, 1 * base^(-6/8) = 1e-3 rad, moves an output by ~1e-3 |a|)
    const double tol = 2e-6;
    ops_attn_prep_forward(d_q, d_k, d_v, d_rstd, d_qkv, NULL, NULL, &s);
    ops_to_host(q, d_q, (size_t)N * H * HD * sizeof(float));
    double e1 = rope_err(q, qkv, QKVG, s.rope_base);
    TU_CHECK(e1 <= tol, "q before the reservation: max error %.3g > %.3g", e1, tol);

    // a training step's reservation with T = 64: the RoPE slot (sized for 4 rows, 1.25x) grows
    OpsStepShape ss;
    memset(&ss, 0, sizeof ss);
    ss.B = 2; ss.T = 64; ss.d_model = H * HD; ss.n_attn = 1; ss.attn = s; ss.attn.B = 2; ss.attn.T = 64;
    ss.n_params = 1000;
    size_t held = cuda_allocated_bytes();
    ops_scratch_reserve(&ss);
    TU_CHECK(cuda_allocated_bytes() > held, "the reservation allocated nothing (%zu bytes held before and after)", held);

    ops_zero((float*)d_q, (size_t)N * H * HD);
    ops_attn_prep_forward(d_q, d_k, d_v, d_rstd, d_qkv, NULL, NULL, &s);
    ops_to_host(q, d_q, (size_t)N * H * HD * sizeof(float));
    double e2 = rope_err(q, qkv, QKVG, s.rope_base);
    TU_CHECK(e2 <= tol, "q after the reservation reallocated the RoPE slot: max error %.3g > %.3g", e2, tol);
    printf("RoPE q vs float64 rotation: max error %.3g before, %.3g after the reservation (tolerance %.0e)\n", e1, e2, tol);

    ops_free(d_qkv); ops_free(d_q); ops_free(d_k); ops_free(d_v); ops_free(d_rstd);
    free(qkv); free(q);
    return tu_finish();
}
