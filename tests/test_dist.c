// tests/test_dist.c: the communication layer and ZeRO-1 sharding (train/comm.h, train/dist.h),
// run under mpirun with 2 and 3 processes (and alone: every collective is then the identity).
//   - all-reduce sums (float, double), max, broadcast: exact values;
//   - shards: contiguous, in rank order, whole norm chunks, covering the arena;
//   - zero_stage 0's reduced gradients equal zero_stage 1's shard bit for bit, and the direct
//     sum (double) to float rounding, on an arena that is not a multiple of the chunk size;
//   - the global grad norm has the same bits under zero_stage 0 and 1.
// Only rank 0 prints the summary; every rank's failures are printed with its rank.
#include <string.h>
#include "../kernels/ops.h"
#include "../train/comm.h"
#include "../train/dist.h"
#include "test_util.h"

static Comm g_comm;
#define CHECK(cond, ...) TU_CHECK(cond, __VA_ARGS__)

// rank r's contribution to element i: values whose float sums are exact in any order would hide
// order bugs, so use arbitrary floats; equality is then between two collectives' results.
static float contrib(int r, size_t i) {
    uint64_t s = (uint64_t)(r + 1) * 0x9E3779B97F4A7C15ULL ^ (uint64_t)i * 0xD1B54A32D192ED03ULL;
    s ^= s >> 29; s *= 0xBF58476D1CE4E5B9ULL; s ^= s >> 32;
    return (float)((double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void test_basic(void) {
    Comm* c = &g_comm;
    int n = c->size;
    double d[3] = {c->rank + 1.0, 0.5, -1.0 * c->rank};
    comm_allreduce_sum_f64(c, d, 3);
    CHECK(d[0] == n * (n + 1) / 2.0 && d[1] == 0.5 * n && d[2] == -(n - 1) * n / 2.0,
          "rank %d: allreduce f64 sums %g %g %g", c->rank, d[0], d[1], d[2]);
    float f[2] = {(float)c->rank, 2.0f};
    comm_allreduce_sum_f32(c, f, 2);
    CHECK(f[0] == (float)((n - 1) * n / 2) && f[1] == 2.0f * n, "rank %d: allreduce f32 sums", c->rank);
    double mx = 10.0 * c->rank;
    comm_allreduce_max_f64(c, &mx, 1);
    CHECK(mx == 10.0 * (n - 1), "rank %d: allreduce max %g", c->rank, mx);
    char buf[16];
    snprintf(buf, sizeof buf, "from rank %d", c->rank);
    comm_broadcast(c, buf, sizeof buf);
    CHECK(strcmp(buf, "from rank 0") == 0, "rank %d: broadcast gave '%s'", c->rank, buf);
}

static void test_zero1(size_t total) {
    Comm* c = &g_comm;
    Dist d0, d1;
    TU_CHECK(dist_init(&d0, c, 0, total) == 0 && dist_init(&d1, c, 1, total) == 0, "dist_init");
    // shards: rank order, contiguous, chunk-aligned starts, covering [0, total)
    int ok = d1.off[0] == 0;
    for (int r = 0; r < c->size; r++) {
        if (d1.off[r] % OPS_SUMSQ_CHUNK != 0 && d1.cnt[r] > 0) ok = 0;
        if (r + 1 < c->size && d1.off[r] + d1.cnt[r] != d1.off[r + 1]) ok = 0;
    }
    ok = ok && d1.off[c->size - 1] + d1.cnt[c->size - 1] == total;
    CHECK(ok, "rank %d: %zu floats: shards contiguous, chunk-aligned, covering", c->rank, total);
    CHECK(d0.lo == 0 && d0.hi == total && d1.lo == d1.off[c->rank] && d1.hi == d1.lo + d1.cnt[c->rank],
          "rank %d: update ranges", c->rank);

    float* a = malloc(total * sizeof(float));
    float* b = malloc(total * sizeof(float));
    for (size_t i = 0; i < total; i++) a[i] = b[i] = contrib(c->rank, i);
    dist_reduce_grads(&d0, a);          // all-reduce
    float n0 = dist_grad_norm(&d0, a);
    dist_reduce_grads(&d1, b);          // reduce-scatter: only b[lo, hi) valid
    float n1 = dist_grad_norm(&d1, b);
    CHECK(memcmp(a + d1.lo, b + d1.lo, (d1.hi - d1.lo) * sizeof(float)) == 0,
          "rank %d: zero 1 shard == zero 0 gradients, bitwise (%zu floats)", c->rank, d1.hi - d1.lo);
    double worst = 0.0;
    for (size_t i = 0; i < total; i++) {
        double want = 0.0;
        for (int r = 0; r < c->size; r++) want += contrib(r, i);
        double e = fabs(a[i] - want);
        if (e > worst) worst = e;
    }
    // derived: p floats in [-1, 1] summed in float: <= (p - 1) u p (1.2e-7 at p = 2, 3.6e-7 at p = 3),
    // 0 at p = 1; 4e-7 p leaves >= 3.3x over that; measured 0, 6.0e-8, 1.8e-7 at p = 1, 2, 3 (any ISA)
    CHECK(worst <= 4e-7 * c->size, "rank %d: reduced gradients vs the double sum: max abs err %.2g", c->rank, worst);
    CHECK(memcmp(&n0, &n1, sizeof n0) == 0, "rank %d: grad norm zero 0 %.9g == zero 1 %.9g bitwise", c->rank, n0, n1);
    // the norm of the summed gradients, recomputed here in double
    double s = 0.0;
    for (size_t i = 0; i < total; i++) s += (double)a[i] * a[i];
    // derived: double partial sums, one float rounding of the sqrt: u = 6e-8 < 1e-6; measured 5.5e-8
    CHECK(fabs(sqrt(s) - n0) <= 1e-6 * sqrt(s), "rank %d: norm %.9g vs direct %.9g", c->rank, n0, sqrt(s));
    if (c->rank == 0)
        printf("  %zu floats, %d ranks: reduced gradients vs the double sum max abs err %.2e (tol %.1e), norm rel err "
               "%.2e (tol 1e-6)\n", total, c->size, worst, 4e-7 * c->size, fabs(sqrt(s) - n0) / sqrt(s));
    // all-gather after "updating" each shard: every rank ends with every shard
    for (size_t i = d1.lo; i < d1.hi; i++) b[i] = b[i] * 0.5f + 1.0f;
    dist_gather_params(&d1, b);
    int same = 1;
    for (size_t i = 0; i < total; i++) if (b[i] != a[i] * 0.5f + 1.0f) { same = 0; break; }
    CHECK(same, "rank %d: all-gather of updated shards", c->rank);
    free(a); free(b);
    dist_free(&d0); dist_free(&d1);
}

// Overlap: some ranges reduced early (out of order, one crossing shard boundaries, one empty),
// the rest by dist_reduce_grads: the same gradients and norm as the one-shot reduction, under
// ZeRO-0 and ZeRO-1.
static void test_overlap(size_t total) {
    Comm* c = &g_comm;
    for (int stage = 0; stage <= 1; stage++) {
        Dist ref, ov;
        TU_CHECK(dist_init(&ref, c, stage, total) == 0 && dist_init(&ov, c, stage, total) == 0, "dist_init");
        ov.overlap = 1;   // as NCCL (or GATEDGPT_DIST_OVERLAP=1) sets it
        float* a = malloc(total * sizeof(float));
        float* b = malloc(total * sizeof(float));
        for (size_t i = 0; i < total; i++) a[i] = b[i] = contrib(c->rank, i);
        dist_reduce_grads(&ref, a);
        // ranges handed over as a backward pass would: late layers first
        size_t r0 = total * 3 / 4, r1 = total / 3, r2 = total / 10;
        dist_reduce_range(&ov, b, r0, total - total / 20);
        dist_reduce_range(&ov, b, r1, r0);     // crosses shard boundaries for 2+ ranks
        dist_reduce_range(&ov, b, r2, r2);     // empty: ignored
        dist_reduce_range(&ov, b, r2, r2 + 7);
        dist_reduce_grads(&ov, b);             // the gaps: [0, r2), [r2+7, r1), the tail
        size_t lo = stage ? ov.lo : 0, hi = stage ? ov.hi : total;
        CHECK(memcmp(a + lo, b + lo, (hi - lo) * sizeof(float)) == 0,
              "rank %d: zero %d, %zu floats: ranges reduced early + the rest == one reduction, bitwise", c->rank,
              stage, total);
        float na = dist_grad_norm(&ref, a), nb = dist_grad_norm(&ov, b);
        CHECK(memcmp(&na, &nb, sizeof na) == 0, "rank %d: zero %d: the same grad norm", c->rank, stage);
        CHECK(ov.ndone == 0, "rank %d: the reduced ranges are forgotten after the step", c->rank);
        free(a); free(b);
        dist_free(&ref); dist_free(&ov);
    }
}

int main(int argc, char** argv) {
    comm_init(&g_comm, &argc, &argv);
    ops_init(1);
    test_basic();
    test_zero1(3 * OPS_SUMSQ_CHUNK + 1234);   // not a whole number of chunks
    test_zero1(100);                          // fewer chunks than ranks: empty shards
    test_zero1(1000003);
    test_overlap(3 * OPS_SUMSQ_CHUNK + 1234);
    test_overlap(1000003);
    // one line per rank with failures; the summary from rank 0, with every rank's counts summed
    double counts[2] = {tu_passed, tu_failed};
    comm_allreduce_sum_f64(&g_comm, counts, 2);
    if (g_comm.rank == 0)
        printf("%d processes (%s): %.0f passed, %.0f failed\n", g_comm.size, comm_name(&g_comm), counts[0], counts[1]);
    int failed = counts[1] > 0;
    comm_finalize(&g_comm);
    return failed;
}
