// train/comm_mpi.c: the communication layer over MPI (train/comm.h), on host buffers.
// Counts above INT_MAX are sent in pieces (MPI counts are int).
#include "comm.h"
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static void check(int err, const char* what) {
    if (err == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(err, msg, &len);
    int rank = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    fprintf(stderr, "error: rank %d: %s failed: %s\n", rank, what, msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

// The receive buffer of the reduce-scatter: one shard, kept between steps (allocating and
// first-touching a shard-sized buffer every step costs page faults on the hot path).
static float* g_recv;
static size_t g_recv_n;

static int g_inited;   // MPI_Init done and MPI_Finalize not yet: the exit hook aborts the job
static int g_size;
static void exit_hook(void) {
    // A rank that exits (error path, exit(1) anywhere) before comm_finalize would leave the
    // others blocked in a collective: take the whole job down instead. One process alone has
    // nobody to stop (and MPI_Abort's banner would bury its one-line error).
    if (g_inited && g_size > 1) MPI_Abort(MPI_COMM_WORLD, 1);
}

void comm_init(Comm* c, int* argc, char*** argv) {
    memset(c, 0, sizeof(*c));
    check(MPI_Init(argc, argv), "MPI_Init");
    g_inited = 1;
    atexit(exit_hook);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    c->mpi = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c->size);
    g_size = c->size;
    MPI_Comm node;
    check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node),
          "MPI_Comm_split_type");
    MPI_Comm_rank(node, &c->local_rank);
    MPI_Comm_free(&node);
}

void comm_finalize(Comm* c) {
    if (!c->mpi) return;
    MPI_Barrier(MPI_COMM_WORLD);
    g_inited = 0;
    MPI_Finalize();
    free(g_recv);
    g_recv = NULL;
    g_recv_n = 0;
    c->mpi = 0;
}

void comm_abort(Comm* c, int code, const char* why) {
    fprintf(stderr, "error: rank %d of %d: %s\n", c->rank, c->size, why);
    fflush(stderr);
    if (c->mpi) MPI_Abort(MPI_COMM_WORLD, code ? code : 1);
    exit(code ? code : 1);
}

const char* comm_name(const Comm* c) {
    static char name[MPI_MAX_LIBRARY_VERSION_STRING + 64];
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(lib, &len);
    char* nl = strchr(lib, ','); if (nl) *nl = 0;   // "Open MPI v4.1.4, package: ..." -> first part
    snprintf(name, sizeof name, "mpi (%s), %d rank%s", lib, c->size, c->size == 1 ? "" : "s");
    return name;
}

void comm_barrier(Comm* c) {
    if (c->size == 1) return;
    double t = now_s();
    check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    c->seconds += now_s() - t;
}

static void allreduce(Comm* c, void* x, size_t n, MPI_Datatype type, size_t elem, MPI_Op op, const char* what) {
    if (c->size == 1) return;
    double t = now_s();
    for (size_t i = 0; i < n; i += INT_MAX / 2) {
        size_t k = n - i < INT_MAX / 2 ? n - i : INT_MAX / 2;
        check(MPI_Allreduce(MPI_IN_PLACE, (char*)x + i * elem, (int)k, type, op, MPI_COMM_WORLD), what);
    }
    c->seconds += now_s() - t;
}
void comm_allreduce_sum_f32(Comm* c, float* x, size_t n) { allreduce(c, x, n, MPI_FLOAT, 4, MPI_SUM, "MPI_Allreduce(sum, float)"); }
void comm_allreduce_sum_f64(Comm* c, double* x, size_t n) { allreduce(c, x, n, MPI_DOUBLE, 8, MPI_SUM, "MPI_Allreduce(sum, double)"); }
void comm_allreduce_max_f64(Comm* c, double* x, size_t n) { allreduce(c, x, n, MPI_DOUBLE, 8, MPI_MAX, "MPI_Allreduce(max, double)"); }

// Shard counts and displacements as MPI ints; a shard over INT_MAX floats is refused (a model
// of more than 2^31 * nproc parameters: shard in pieces when that day comes).
static void int_counts(const Comm* c, const size_t* off, const size_t* cnt, int* ioff, int* icnt) {
    for (int r = 0; r < c->size; r++) {
        if (cnt[r] > INT_MAX || off[r] > INT_MAX) {
            fprintf(stderr, "error: rank %d: ZeRO-1 shard of %zu floats at %zu is beyond MPI's int counts (use more processes or zero_stage = 0)\n",
                    c->rank, cnt[r], off[r]);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        ioff[r] = (int)off[r];
        icnt[r] = (int)cnt[r];
    }
}

// The receive buffer of this process's shard, and Open MPI's temporaries (comm.h)
#define COMM_MPI_RS_TEMP_FACTOR 2
void comm_reduce_scatter_bytes(int size, size_t floats, size_t shard, size_t* held, size_t* temp) {
    *held = size > 1 ? shard * sizeof(float) : 0;
    *temp = size > 1 ? COMM_MPI_RS_TEMP_FACTOR * floats * sizeof(float) : 0;
}

void comm_reduce_scatter_sum_f32(Comm* c, float* x, const size_t* off, const size_t* cnt) {
    if (c->size == 1) return;
    double t = now_s();
    int* ioff = malloc(2 * (size_t)c->size * sizeof(int));
    if (!ioff) { fprintf(stderr, "error: rank %d: out of memory in reduce-scatter\n", c->rank); MPI_Abort(MPI_COMM_WORLD, 1); }
    int* icnt = ioff + c->size;
    int_counts(c, off, cnt, ioff, icnt);
    // MPI_Reduce_scatter's in-place form takes the whole x and leaves rank r's block at the
    // start of x; reduce into a separate buffer and copy it to its place instead.
    if (cnt[c->rank] > g_recv_n) {
        free(g_recv);
        g_recv_n = cnt[c->rank];
        size_t held, temp;
        comm_reduce_scatter_bytes(c->size, 0, g_recv_n, &held, &temp);   // what the planner counts
        g_recv = malloc(held);
        if (!g_recv) { fprintf(stderr, "error: rank %d: out of memory in reduce-scatter\n", c->rank); MPI_Abort(MPI_COMM_WORLD, 1); }
    }
    float* mine = g_recv;
    // the shards are contiguous and in rank order (off[r+1] = off[r] + cnt[r]) from off[0]
    check(MPI_Reduce_scatter(x + off[0], mine, icnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "MPI_Reduce_scatter");
    if (cnt[c->rank]) memcpy(x + off[c->rank], mine, cnt[c->rank] * sizeof(float));
    free(ioff);
    c->seconds += now_s() - t;
}

void comm_allgather_f32(Comm* c, float* x, const size_t* off, const size_t* cnt) {
    if (c->size == 1) return;
    double t = now_s();
    int* ioff = malloc(2 * (size_t)c->size * sizeof(int));
    if (!ioff) { fprintf(stderr, "error: rank %d: out of memory in allgather\n", c->rank); MPI_Abort(MPI_COMM_WORLD, 1); }
    int* icnt = ioff + c->size;
    int_counts(c, off, cnt, ioff, icnt);
    check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, x, icnt, ioff, MPI_FLOAT, MPI_COMM_WORLD),
          "MPI_Allgatherv");
    free(ioff);
    c->seconds += now_s() - t;
}

void comm_broadcast(Comm* c, void* buf, size_t n) {
    if (c->size == 1) return;
    double t = now_s();
    for (size_t i = 0; i < n; i += INT_MAX / 2) {
        size_t k = n - i < INT_MAX / 2 ? n - i : INT_MAX / 2;
        check(MPI_Bcast((char*)buf + i, (int)k, MPI_BYTE, 0, MPI_COMM_WORLD), "MPI_Bcast");
    }
    c->seconds += now_s() - t;
}
