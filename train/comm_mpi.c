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

// Whether a launcher (mpirun / mpiexec of Open MPI, MPICH, Intel MPI or MVAPICH; srun) started
// this process: each sets one of these in its processes' environment.
static int launched_by_mpi(void) {
    static const char* vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE",
                                 "MV2_COMM_WORLD_SIZE", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i])) return 1;
    return 0;
}

void comm_init(Comm* c, int* argc, char*** argv) {
    memset(c, 0, sizeof(*c));
    if (!launched_by_mpi()) {
        // Run without a launcher: one process, and MPI is not started. A singleton MPI_Init would
        // only make a world of 1, and Open MPI's spawns its daemon (orted) for it: 0.3-0.6 s per
        // run on the 2-core host (`train_gpt --check`: docs/distributed.md), paid by every
        // single-process run and tool call. Every collective below returns at size 1.
        c->size = 1;
        c->ep_size = 1; c->rep_size = 1;
        return;
    }
    comm_start_mpi(c, argc, argv);
}

void comm_start_mpi(Comm* c, int* argc, char*** argv) {
    if (c->mpi) return;
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
    c->ep_size = 1; c->rep_size = c->size; c->rep_rank = c->rank;   // until comm_ep_init
}

void comm_finalize(Comm* c) {
    if (!c->mpi) return;
    MPI_Barrier(MPI_COMM_WORLD);
    if (c->ep_comm) { MPI_Comm_free((MPI_Comm*)c->ep_comm); free(c->ep_comm); c->ep_comm = NULL; }
    if (c->rep_comm) { MPI_Comm_free((MPI_Comm*)c->rep_comm); free(c->rep_comm); c->rep_comm = NULL; }
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
    if (!c->mpi) return "one process (not started by an MPI launcher: MPI not initialised)";
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
static void int_counts(const Comm* c, int n, const size_t* off, const size_t* cnt, int* ioff, int* icnt) {
    for (int r = 0; r < n; r++) {
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

// reduce-scatter over communicator g of n members, this one `me` (the world, or a replica group)
static void reduce_scatter(Comm* c, MPI_Comm g, int n, int me, float* x, const size_t* off, const size_t* cnt) {
    if (n == 1) return;
    double t = now_s();
    int* ioff = malloc(2 * (size_t)n * sizeof(int));
    if (!ioff) { fprintf(stderr, "error: rank %d: out of memory in reduce-scatter\n", c->rank); MPI_Abort(MPI_COMM_WORLD, 1); }
    int* icnt = ioff + n;
    int_counts(c, n, off, cnt, ioff, icnt);
    // MPI_Reduce_scatter's in-place form takes the whole x and leaves rank r's block at the
    // start of x; reduce into a separate buffer and copy it to its place instead.
    if (cnt[me] > g_recv_n) {
        free(g_recv);
        g_recv_n = cnt[me];
        size_t held, temp;
        comm_reduce_scatter_bytes(n, 0, g_recv_n, &held, &temp);   // what the planner counts
        g_recv = malloc(held);
        if (!g_recv) { fprintf(stderr, "error: rank %d: out of memory in reduce-scatter\n", c->rank); MPI_Abort(MPI_COMM_WORLD, 1); }
    }
    float* mine = g_recv;
    // the shards are contiguous and in rank order (off[r+1] = off[r] + cnt[r]) from off[0]
    check(MPI_Reduce_scatter(x + off[0], mine, icnt, MPI_FLOAT, MPI_SUM, g), "MPI_Reduce_scatter");
    if (cnt[me]) memcpy(x + off[me], mine, cnt[me] * sizeof(float));
    free(ioff);
    c->seconds += now_s() - t;
}

static void allgather(Comm* c, MPI_Comm g, int n, void* x, const size_t* off, const size_t* cnt, MPI_Datatype type) {
    if (n == 1) return;
    double t = now_s();
    int* ioff = malloc(2 * (size_t)n * sizeof(int));
    if (!ioff) { fprintf(stderr, "error: rank %d: out of memory in allgather\n", c->rank); MPI_Abort(MPI_COMM_WORLD, 1); }
    int* icnt = ioff + n;
    int_counts(c, n, off, cnt, ioff, icnt);
    check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, x, icnt, ioff, type, g), "MPI_Allgatherv");
    free(ioff);
    c->seconds += now_s() - t;
}

void comm_reduce_scatter_sum_f32(Comm* c, float* x, const size_t* off, const size_t* cnt) {
    reduce_scatter(c, MPI_COMM_WORLD, c->size, c->rank, x, off, cnt);
}
void comm_allgather_f32(Comm* c, float* x, const size_t* off, const size_t* cnt) {
    allgather(c, MPI_COMM_WORLD, c->size, x, off, cnt, MPI_FLOAT);
}
void comm_allgather_bf16(Comm* c, void* x, const size_t* off, const size_t* cnt) {
    allgather(c, MPI_COMM_WORLD, c->size, x, off, cnt, MPI_UINT16_T);   // bits moved, not values
}
void comm_rep_reduce_scatter_sum_f32(Comm* c, float* x, const size_t* off, const size_t* cnt) {
    if (c->rep_size <= 1) return;
    reduce_scatter(c, *(MPI_Comm*)c->rep_comm, c->rep_size, c->rep_rank, x, off, cnt);
}
void comm_rep_allgather_f32(Comm* c, float* x, const size_t* off, const size_t* cnt) {
    if (c->rep_size <= 1) return;
    allgather(c, *(MPI_Comm*)c->rep_comm, c->rep_size, x, off, cnt, MPI_FLOAT);
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

// ---- expert parallelism ----
int comm_ep_init(Comm* c, int P) {
    c->ep_size = 1; c->ep_rank = 0; c->ep_comm = NULL;
    c->rep_size = c->size; c->rep_rank = c->rank; c->rep_comm = NULL;
    if (P == 1) return 0;
    if (P < 1 || c->size % P != 0) {
        fprintf(stderr, "error: rank %d: [moe] expert_parallel = %d does not divide the %d processes: each group of "
                "expert_parallel processes splits the experts (use a divisor of %d, or that many processes)\n",
                c->rank, P, c->size, c->size);
        return -1;
    }
    MPI_Comm* g = malloc(sizeof(MPI_Comm));
    if (!g) { fprintf(stderr, "error: rank %d: out of host memory (expert parallelism)\n", c->rank); return -1; }
    // color: the group (consecutive ranks, one node's GPUs on a GPU cluster); key: the rank
    check(MPI_Comm_split(MPI_COMM_WORLD, c->rank / P, c->rank, g), "MPI_Comm_split (expert parallelism)");
    MPI_Comm_set_errhandler(*g, MPI_ERRORS_RETURN);
    MPI_Comm_rank(*g, &c->ep_rank);
    c->ep_size = P;
    c->ep_comm = g;
    // the replica group: the members with this member index in every group (ranks q, q + P, ...),
    // which hold the same experts; key: the rank, so replica index = rank / P
    MPI_Comm* h = malloc(sizeof(MPI_Comm));
    if (!h) { fprintf(stderr, "error: rank %d: out of host memory (expert parallelism)\n", c->rank); return -1; }
    check(MPI_Comm_split(MPI_COMM_WORLD, c->rank % P, c->rank, h), "MPI_Comm_split (expert replicas)");
    MPI_Comm_set_errhandler(*h, MPI_ERRORS_RETURN);
    MPI_Comm_rank(*h, &c->rep_rank);
    MPI_Comm_size(*h, &c->rep_size);
    c->rep_comm = h;
    return 0;
}

void comm_ep_gather_f32(Comm* c, const float* send, size_t n, float* recv) {
    if (c->ep_size <= 1) { memmove(recv, send, n * sizeof(float)); return; }
    if (n > INT_MAX) { fprintf(stderr, "error: rank %d: comm_ep_gather_f32 of %zu floats\n", c->rank, n); MPI_Abort(MPI_COMM_WORLD, 1); }
    double t = now_s();
    check(MPI_Gather(send, (int)n, MPI_FLOAT, recv, (int)n, MPI_FLOAT, 0, *(MPI_Comm*)c->ep_comm), "MPI_Gather (expert shards)");
    c->seconds += now_s() - t;
}

void comm_gather_f32(Comm* c, const float* send, size_t n, float* recv) {
    if (c->size <= 1) { memmove(recv, send, n * sizeof(float)); return; }
    double t = now_s();
    unsigned long long mine = n, *all = c->rank == 0 ? malloc((size_t)c->size * sizeof(*all)) : NULL;
    if (c->rank == 0 && !all) { fprintf(stderr, "error: rank 0: out of memory in comm_gather_f32\n"); MPI_Abort(MPI_COMM_WORLD, 1); }
    check(MPI_Gather(&mine, 1, MPI_UNSIGNED_LONG_LONG, all, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD), "MPI_Gather (counts)");
    const size_t piece = (size_t)1 << 30;   // MPI counts are ints
    if (c->rank == 0) {
        memmove(recv, send, n * sizeof(float));
        size_t at = n;
        for (int r = 1; r < c->size; r++) {
            for (size_t done = 0; done < all[r]; done += piece) {
                const size_t k = all[r] - done < piece ? all[r] - done : piece;
                check(MPI_Recv(recv + at + done, (int)k, MPI_FLOAT, r, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv (gather)");
            }
            at += all[r];
        }
        free(all);
    } else {
        for (size_t done = 0; done < n; done += piece) {
            const size_t k = n - done < piece ? n - done : piece;
            check(MPI_Send(send + done, (int)k, MPI_FLOAT, 0, 7, MPI_COMM_WORLD), "MPI_Send (gather)");
        }
    }
    c->seconds += now_s() - t;
}

void comm_ep_alltoall_int(Comm* c, const int* send, int* recv, int n) {
    if (c->ep_size <= 1) { memmove(recv, send, (size_t)n * sizeof(int)); return; }
    double t = now_s();
    check(MPI_Alltoall(send, n, MPI_INT, recv, n, MPI_INT, *(MPI_Comm*)c->ep_comm), "MPI_Alltoall (expert counts)");
    double dt = now_s() - t;
    c->seconds += dt;
    c->ep_seconds += dt;
}

void comm_ep_alltoallv(Comm* c, const void* send, const int* send_rows, void* recv, const int* recv_rows,
                       size_t row_bytes) {
    const int P = c->ep_size;
    if (P <= 1) { memmove(recv, send, (size_t)send_rows[0] * row_bytes); return; }
    double t = now_s();
    // one row = one element of a contiguous type, so the counts are rows (int is enough)
    MPI_Datatype row;
    check(MPI_Type_contiguous((int)row_bytes, MPI_BYTE, &row), "MPI_Type_contiguous");
    check(MPI_Type_commit(&row), "MPI_Type_commit");
    int* sd = malloc(2 * (size_t)P * sizeof(int));
    if (!sd) { fprintf(stderr, "error: rank %d: out of host memory (all-to-all)\n", c->rank); MPI_Abort(MPI_COMM_WORLD, 1); }
    int* rd = sd + P;
    int so = 0, ro = 0;
    for (int p = 0; p < P; p++) {
        sd[p] = so; rd[p] = ro;
        so += send_rows[p]; ro += recv_rows[p];
        if (p != c->ep_rank) c->ep_bytes += (double)send_rows[p] * row_bytes;
    }
    check(MPI_Alltoallv(send, send_rows, sd, row, recv, recv_rows, rd, row, *(MPI_Comm*)c->ep_comm),
          "MPI_Alltoallv (expert rows)");
    free(sd);
    MPI_Type_free(&row);
    double dt = now_s() - t;
    c->seconds += dt;
    c->ep_seconds += dt;
}

void comm_ep_broadcast(Comm* c, void* buf, size_t n) {
    if (c->ep_size <= 1) return;
    if (n > INT_MAX) { fprintf(stderr, "error: rank %d: comm_ep_broadcast of %zu bytes\n", c->rank, n); MPI_Abort(MPI_COMM_WORLD, 1); }
    check(MPI_Bcast(buf, (int)n, MPI_BYTE, 0, *(MPI_Comm*)c->ep_comm), "MPI_Bcast (expert parallelism)");
}

void comm_rep_broadcast(Comm* c, void* buf, size_t n) {
    if (c->rep_size <= 1 || !c->rep_comm) return;
    if (n > INT_MAX) { fprintf(stderr, "error: rank %d: comm_rep_broadcast of %zu bytes\n", c->rank, n); MPI_Abort(MPI_COMM_WORLD, 1); }
    check(MPI_Bcast(buf, (int)n, MPI_BYTE, 0, *(MPI_Comm*)c->rep_comm), "MPI_Bcast (expert replicas)");
}
