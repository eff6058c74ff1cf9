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
    c->ep_size = 1; c->rep_size = 1;
}
void comm_start_mpi(Comm* c, int* argc, char*** argv) { (void)c; (void)argc; (void)argv; }
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
void comm_allgather_bf16(Comm* c, void* x, const size_t* off, const size_t* cnt) {
    (void)c; (void)x; (void)off; (void)cnt;
}
void comm_broadcast(Comm* c, void* buf, size_t n) { (void)c; (void)buf; (void)n; }
// one process: nothing is exchanged, nothing allocated
void comm_reduce_scatter_bytes(int size, size_t floats, size_t shard, size_t* held, size_t* temp) {
    (void)size; (void)floats; (void)shard;
    *held = 0;
    *temp = 0;
}
// one process: expert parallelism has nobody to exchange with (train_gpt refuses P > 1 first)
int comm_ep_init(Comm* c, int P) {
    c->ep_size = 1; c->ep_rank = 0; c->ep_comm = NULL;
    c->rep_size = 1; c->rep_rank = 0; c->rep_comm = NULL;
    if (P == 1) return 0;
    fprintf(stderr, "error: [moe] expert_parallel = %d needs %d processes (mpirun), this build runs one: set expert_parallel = 1\n", P, P);
    return -1;
}
void comm_ep_alltoall_int(Comm* c, const int* send, int* recv, int n) {
    (void)c;
    memmove(recv, send, (size_t)n * sizeof(int));
}
void comm_ep_alltoallv(Comm* c, const void* send, const int* send_rows, void* recv, const int* recv_rows,
                       size_t row_bytes) {
    (void)c; (void)recv_rows;
    memmove(recv, send, (size_t)send_rows[0] * row_bytes);
}
void comm_ep_broadcast(Comm* c, void* buf, size_t n) { (void)c; (void)buf; (void)n; }
void comm_rep_reduce_scatter_sum_f32(Comm* c, float* x, const size_t* off, const size_t* cnt) {
    (void)c; (void)x; (void)off; (void)cnt;
}
void comm_rep_allgather_f32(Comm* c, float* x, const size_t* off, const size_t* cnt) {
    (void)c; (void)x; (void)off; (void)cnt;
}
void comm_gather_f32(Comm* c, const float* send, size_t n, float* recv) {
    (void)c;
    memmove(recv, send, n * sizeof(float));
}
void comm_ep_gather_f32(Comm* c, const float* send, size_t n, float* recv) {
    (void)c;
    memmove(recv, send, n * sizeof(float));
}
void comm_rep_broadcast(Comm* c, void* buf, size_t n) { (void)c; (void)buf; (void)n; }
