// train/comm_single.c: the communication layer without MPI: one process, every collective is
// the identity (train/comm.h).
#include "comm.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void comm_init(Comm* c, int* argc, char*** argv) {
    (void)argc; (void)argv;
    memset(c, 0, sizeof(*c));
    c->size = 1;
}
void comm_finalize(Comm* c) { (void)c; }
void comm_abort(Comm* c, int code, const char* why) {
    (void)c;
    fprintf(stderr, "error: %s\n", why);
    exit(code ? code : 1);
}
const char* comm_name(const Comm* c) { (void)c; return "single process (built without MPI)"; }
void comm_barrier(Comm* c) { (void)c; }
void comm_allreduce_sum_f32(Comm* c, float* x, size_t n) { (void)c; (void)x; (void)n; }
void comm_allreduce_sum_f64(Comm* c, double* x, size_t n) { (void)c; (void)x; (void)n; }
void comm_allreduce_max_f64(Comm* c, double* x, size_t n) { (void)c; (void)x; (void)n; }
void comm_reduce_scatter_sum_f32(Comm* c, float* x, const size_t* off, const size_t* cnt) {
    (void)c; (void)x; (void)off; (void)cnt;
}
void comm_allgather_f32(Comm* c, float* x, const size_t* off, const size_t* cnt) {
    (void)c; (void)x; (void)off; (void)cnt;
}
void comm_broadcast(Comm* c, void* buf, size_t n) { (void)c; (void)buf; (void)n; }
// one process: nothing is exchanged, nothing allocated
void comm_reduce_scatter_bytes(int size, size_t floats, size_t shard, size_t* held, size_t* temp) {
    (void)size; (void)floats; (void)shard;
    *held = 0;
    *temp = 0;
}
