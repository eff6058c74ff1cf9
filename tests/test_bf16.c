// tests/test_bf16.c: the bf16 roundings of kernels/bf16.h and the two conversion ops of the bf16
// build (built against the CPU emulation, gatedgpt_cpu_bf16: act_t = bf16).
//   - round to nearest even: exact values, ties to even, NaN, inf, overflow, subnormals
//   - stochastic rounding: only the two neighbours, P(up) = the dropped fraction, unbiased on
//     average, deterministic in (seed, index), different for another seed
//   - ops_act_from_float / ops_weights_to_act write exactly those roundings
#include <string.h>
#include "test_util.h"
#include "../kernels/ops.h"

static float f_of_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static void test_rne(void) {
    // exact bf16 values come back unchanged
    const float exact[] = {0.0f, -0.0f, 1.0f, -2.5f, 0.15625f, 65280.0f, 0x1p-126f, -0x1p100f};
    for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++)
        TU_CHECK(bf16_to_f32(bf16_from_f32(exact[i])) == exact[i], "rne of exact %g", exact[i]);
    // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to even (1.0, mantissa 0)
    TU_CHECK(bf16_from_f32(1.0f + 0x1p-8f) == 0x3f80, "tie 1+2^-8 -> 1 (even), got %04x", bf16_from_f32(1.0f + 0x1p-8f));
    // 1 + 3*2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): up
    TU_CHECK(bf16_from_f32(1.0f + 3 * 0x1p-8f) == 0x3f82, "tie 1+3*2^-8 -> 1+2^-6, got %04x", bf16_from_f32(1.0f + 3 * 0x1p-8f));
    // just above / below a tie
    TU_CHECK(bf16_from_f32(f_of_bits(0x3f808001u)) == 0x3f81, "above the tie rounds up");
    TU_CHECK(bf16_from_f32(f_of_bits(0x3f807fffu)) == 0x3f80, "below the tie rounds down");
    TU_CHECK(bf16_from_f32(-1.0f - 3 * 0x1p-8f) == 0xbf82, "negative ties: magnitude rounds the same way");
    // specials
    TU_CHECK(bf16_from_f32(INFINITY) == 0x7f80 && bf16_from_f32(-INFINITY) == 0xff80, "inf stays inf");
    uint16_t qn = bf16_from_f32(NAN);
    TU_CHECK((qn & 0x7f80) == 0x7f80 && (qn & 0x7f) != 0, "NaN stays NaN (%04x)", qn);
    uint16_t sn = bf16_from_f32(f_of_bits(0x7f800001u));   // a NaN whose payload is all below bit 16
    TU_CHECK((sn & 0x7f80) == 0x7f80 && (sn & 0x7f) != 0, "low-payload NaN does not become inf (%04x)", sn);
    TU_CHECK(bf16_from_f32(3.4e38f) == 0x7f80, "above the largest bf16 (3.39e38) rounds to inf");
    TU_CHECK(bf16_to_f32(bf16_from_f32(0x1p-130f)) == 0x1p-130f, "subnormals are kept when representable");
    // every bf16 pattern survives bf16 -> fp32 -> bf16
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = bf16_to_f32((uint16_t)h);
        if (isnan(f)) continue;
        if (bf16_from_f32(f) != h) bad++;
    }
    TU_CHECK(bad == 0, "%d bf16 patterns did not round-trip", bad);
}

static void test_sr(void) {
    // x = 1 + 0.75 ulp (ulp of bf16 at 1 is 2^-7): rounds to 1 + 2^-7 with probability 0.75
    const float x = 1.0f + 0.75f * 0x1p-7f;
    const int n = 200000;
    long up = 0, other = 0;
    double mean = 0.0;
    for (int i = 0; i < n; i++) {
        uint16_t h = bf16_from_f32_sr(x, bf16_sr_bits(12345, (uint64_t)i));
        if (h == 0x3f81) up++;
        else if (h != 0x3f80) other++;
        mean += bf16_to_f32(h);
    }
    mean /= n;
    double p = (double)up / n, sd = sqrt(0.75 * 0.25 / n);
    TU_CHECK(other == 0, "SR produced %ld values other than the two neighbours", other);
    // statistical: binomial counts at 5 sigma (false alarm 6e-7 per check; the seeds are fixed);
    // measured 0.99, 0.99 and (negative) 1.38 sigma, the same on every ISA (no oneDNN here)
    TU_CHECK(fabs(p - 0.75) < 5 * sd, "P(up) = %.4f, expected 0.75 +- %.4f", p, 5 * sd);
    TU_CHECK(fabs(mean - x) < 5 * sd * 0x1p-7, "mean %.8f vs x %.8f (unbiased)", mean, (double)x);
    printf("  SR of 1 + 0.75 ulp: P(up) off by %.2f sigma, mean off by %.2f sigma (tol 5)\n", fabs(p - 0.75) / sd,
           fabs(mean - x) / (sd * 0x1p-7));
    // a negative value: the magnitude rounds up with the same probability
    long nup = 0;
    for (int i = 0; i < n; i++) nup += bf16_from_f32_sr(-x, bf16_sr_bits(777, (uint64_t)i)) == 0xbf81;
    TU_CHECK(fabs((double)nup / n - 0.75) < 5 * sd, "negative: P(|up|) = %.4f", (double)nup / n);
    printf("  SR of -(1 + 0.75 ulp): P(|up|) off by %.2f sigma (tol 5)\n", fabs((double)nup / n - 0.75) / sd);
    // exact values never move; inf and NaN are kept
    int moved = 0;
    for (int i = 0; i < 1000; i++) moved += bf16_from_f32_sr(1.5f, bf16_sr_bits(1, (uint64_t)i)) != 0x3fc0;
    TU_CHECK(moved == 0, "an exact bf16 value moved %d times", moved);
    TU_CHECK(bf16_from_f32_sr(INFINITY, 0xffffu) == 0x7f80, "SR keeps inf");
    TU_CHECK(isnan(bf16_to_f32(bf16_from_f32_sr(NAN, 0xffffu))), "SR keeps NaN");
    // the random bits: deterministic, and another seed gives other bits
    int same = 0, diff_seed = 0;
    for (uint64_t i = 0; i < 4096; i++) {
        same += bf16_sr_bits(42, i) == bf16_sr_bits(42, i);
        diff_seed += (bf16_sr_bits(42, i) & 0xffff) != (bf16_sr_bits(43, i) & 0xffff);
    }
    TU_CHECK(same == 4096, "bf16_sr_bits is not deterministic");
    // statistical: 16-bit values of two seeds coincide with P = 2^-16: expected 0.06 of 4096, so
    // 96 shared is out of reach of chance; measured 1 shared
    TU_CHECK(diff_seed > 4000, "seeds 42 and 43 share %d of 4096 random values", 4096 - diff_seed);
    // low 16 bits roughly uniform: each of 16 buckets gets 1/16 +- 5 sigma (statistical: binomial
    // sigma = sqrt(160000 / 16 x 15 / 16) = 97); measured at most 1.25 sigma
    long bucket[16] = {0};
    for (uint64_t i = 0; i < 160000; i++) bucket[(bf16_sr_bits(9, i) & 0xffff) >> 12]++;
    int uneven = 0;
    long bucket_dev = 0;
    for (int b = 0; b < 16; b++) {
        uneven += labs(bucket[b] - 10000) > 5 * 97;
        if (labs(bucket[b] - 10000) > bucket_dev) bucket_dev = labs(bucket[b] - 10000);
    }
    TU_CHECK(uneven == 0, "%d of 16 buckets of the random bits are uneven", uneven);
    printf("  random bits: seeds 42/43 share %d of 4096; buckets off by at most %.2f sigma (tol 5)\n",
           4096 - diff_seed, bucket_dev / 97.0);
}

static void test_ops(void) {
    ops_init(1);
    const size_t n = 10007;
    float* w = ops_malloc(n * sizeof(float));
    act_t *a = ops_malloc(n * sizeof(act_t)), *b = ops_malloc(n * sizeof(act_t)), *c = ops_malloc(n * sizeof(act_t));
    tu_fill(w, n, 0.05);
    ops_act_from_float(a, w, n);
    int bad = 0;
    for (size_t i = 0; i < n; i++) bad += a[i] != bf16_from_f32(w[i]);
    TU_CHECK(bad == 0, "ops_act_from_float: %d elements differ from round-to-nearest-even", bad);
    ops_weights_to_act(a, w, n, 99);
    ops_weights_to_act(b, w, n, 99);
    ops_weights_to_act(c, w, n, 100);
    int det = 0, sr = 0, seeds = 0, near = 0;
    for (size_t i = 0; i < n; i++) {
        det += a[i] != b[i];
        sr += a[i] != bf16_from_f32_sr(w[i], bf16_sr_bits(99, i));
        seeds += a[i] != c[i];
        // the copy is one of the two bf16 neighbours of w: within one bf16 ulp (derived: <= 2^-7 |w|)
        near += fabsf(bf16_to_f32(a[i]) - w[i]) > fabsf(w[i]) * 0x1p-7f;
    }
    TU_CHECK(det == 0, "ops_weights_to_act is not deterministic (%d differ)", det);
    TU_CHECK(sr == 0, "ops_weights_to_act: %d elements differ from bf16_from_f32_sr", sr);
    // ZeRO-1's shards (ops_weights_to_act_at, train/dist.h): the copy made in three unequal
    // pieces, each rounded with its elements' global indices, is the whole copy bit for bit
    const size_t cut[4] = {0, 4096, 4096 + 1234, n};
    for (int k = 0; k < 3; k++) ops_weights_to_act_at(b + cut[k], w + cut[k], cut[k], cut[k + 1] - cut[k], 99);
    int shard = 0;
    for (size_t i = 0; i < n; i++) shard += a[i] != b[i];
    TU_CHECK(shard == 0, "ops_weights_to_act_at: %d elements of the copy made in 3 shards differ from the whole copy", shard);
    // statistical: w = 0.05 x uniform has a dropped fraction ~uniform, so another seed flips ~1/3 of
    // the roundings (E|U - U'| = 1/3); n / 10 is far below that; measured 3318 of 10007
    TU_CHECK(seeds > (int)n / 10, "another seed changed only %d of %zu roundings", seeds, n);
    TU_CHECK(near == 0, "%d elements are further than one ulp from the master weight", near);
    // the copy's mean error over many elements is ~0 (unbiased); round to nearest would also
    // pass this, so check the bias on a constant array where RNE is biased: w = 1 + 0.3 ulp
    for (size_t i = 0; i < n; i++) w[i] = 1.0f + 0.3f * 0x1p-7f;
    ops_weights_to_act(a, w, n, 5);
    double mean = 0;
    for (size_t i = 0; i < n; i++) mean += bf16_to_f32(a[i]);
    mean /= n;
    double sd = sqrt(0.3 * 0.7 / n) * 0x1p-7;
    TU_CHECK(fabs(mean - w[0]) < 5 * sd, "copy of a constant 1+0.3ulp: mean %.8f vs %.8f", mean, (double)w[0]);   // 5 sigma; measured 0.32
    printf("  ops_weights_to_act: another seed changed %d of %zu roundings (tol > %zu); copy of 1 + 0.3 ulp: mean off "
           "by %.2f sigma (tol 5)\n", seeds, n, n / 10, fabs(mean - w[0]) / sd);
    ops_free(w); ops_free(a); ops_free(b); ops_free(c);
}

int main(void) {
    test_rne();
    test_sr();
    test_ops();
    return tu_finish();
}
