// tests/test_nccl.c: NCCL collectives on device buffers (train/comm_nccl.h) against host sums,
// alone or under mpirun (one process per GPU). Without a CUDA device it says so and exits 0.
#include <cuda_runtime.h>
#include <string.h>
#include "../train/comm.h"
#include "../train/comm_nccl.h"
#include "../train/dist.h"
#include "test_util.h"

static float contrib(int r, size_t i) { return (float)((r + 1) * 0.25 + (double)(i % 97) * 0.125); }

int main(int argc, char** argv) {
    Comm c;
    comm_init(&c, &argc, &argv);
    NcclComm n;
    if (nccl_init(&n, &c, 0) != 0) {
        if (c.rank == 0) printf("skipped: no CUDA device (the NCCL path builds here; it runs where a GPU is present)\n");
        comm_finalize(&c);
        return 0;
    }
    const size_t total = 3 * 4096 + 777;
    Dist d;
    if (dist_init(&d, &c, 1, total) != 0) return 1;   // for the shard layout only
    float* h = malloc(total * sizeof(float));
    float* want = malloc(total * sizeof(float));
    float* dev = NULL;
    if (cudaMalloc((void**)&dev, total * sizeof(float)) != cudaSuccess) { printf("FAIL: cudaMalloc\n"); return 1; }
    for (size_t i = 0; i < total; i++) {   // values whose sums are exact in float, in any order
        h[i] = contrib(c.rank, i);
        want[i] = 0.0f;
        for (int r = 0; r < c.size; r++) want[i] += contrib(r, i);
    }
    cudaMemcpy(dev, h, total * sizeof(float), cudaMemcpyHostToDevice);
    nccl_allreduce_sum_f32(&n, dev, total);
    nccl_sync(&n);
    cudaMemcpy(h, dev, total * sizeof(float), cudaMemcpyDeviceToHost);
    TU_CHECK(memcmp(h, want, total * sizeof(float)) == 0, "rank %d: all-reduce", c.rank);

    for (size_t i = 0; i < total; i++) h[i] = contrib(c.rank, i);
    cudaMemcpy(dev, h, total * sizeof(float), cudaMemcpyHostToDevice);
    nccl_reduce_scatter_sum_f32(&n, dev, d.off, d.cnt);
    nccl_allgather_f32(&n, dev, d.off, d.cnt);
    nccl_sync(&n);
    cudaMemcpy(h, dev, total * sizeof(float), cudaMemcpyDeviceToHost);
    TU_CHECK(memcmp(h, want, total * sizeof(float)) == 0, "rank %d: reduce-scatter + all-gather", c.rank);

    cudaFree(dev);
    free(h); free(want);
    dist_free(&d);
    nccl_free(&n);
    double counts[2] = {tu_passed, tu_failed};
    comm_allreduce_sum_f64(&c, counts, 2);
    if (c.rank == 0) printf("%d process(es), NCCL: %.0f passed, %.0f failed\n", c.size, counts[0], counts[1]);
    comm_finalize(&c);
    return counts[1] > 0;
}
