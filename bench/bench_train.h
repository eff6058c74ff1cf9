// bench/bench_train.h: what the parts of bench_train share (bench/README.md). The benchmark is
// split by what it measures:
//   bench_train.c   the configs to run, the tables and the JSON file, main
//   bench_step.c    the step time: forked workers stepped in lockstep, each step's contamination
//                   by other processes, busy steps retaken
//   bench_torch.c   the PyTorch side (bench/bench_torch.py --serve)
//   bench_memory.c  memory: the analytic size (against the workers' peak RSS), admission of a
//                   rotation group
//   bench_gate.c    derived costs: the attention gates against their baseline, MoE against its
//                   dense twin
//   bench_util.c    small utilities (time, pipes, ending a worker, /proc/stat, JSON)
// bench_hybrid.c (hybrid layers against full attention over T) reuses the step, memory, torch
// and utility parts.
#pragma once
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../model/config.h"
#include "../model/gpt.h"
#include "../model/optim.h"
#include "../model/params.h"
#include "../model/rng.h"
#include "../kernels/ops.h"

#define MAX_SETS 64
#define MAX_CONFIGS 256
#define PATH_LEN 1024

// ---------------------------------------------------------------------------------------------
// what to run (bench_train.c)

typedef struct {
    char name[160];      // "gpt2_124m_b4t64/headwise"
    char shape[128];     // "gpt2_124m_b4t64" (INI stem)
    char ini[PATH_LEN];  // "" for the built-in smoke configs
    int smoke_moe;       // the built-in MoE smoke config (ini "")
    int gate;            // GateKind
    int recompute;       // RecomputeKind ([train] recompute, --recompute)
    Config cfg;          // resolved
    size_t table_total;  // floats in the parameter arena (with 64-byte padding)
    size_t n_params;     // real parameters (no padding)
    double flops_tok;    // gpt_flops_per_token
    double matmul_params;

    // results: ours
    int ok;
    char err[256];
    double* ms;          // every timed step (at most steps x max_tries)
    double* ms_others;   // other processes' share of the CPUs during each (NAN: too short to tell)
    int n_ms, n_clean, noisy;   // noisy: fewer than `steps` clean steps; the median is over all
    double med_ms;
    float loss0;
    size_t acts_floats;
    size_t acts_bytes;   // gpt_acts_bytes: the whole activation arena (every tensor type)
    long rss_kb;
    double build_s;
    // results: torch
    int torch_ran, torch_ok;
    char torch_err[256];
    double* tms;
    double* tms_others;
    int n_tms, n_tclean, torch_noisy;
    double torch_med_ms;
    float torch_loss0;
    long torch_rss_kb;
    double torch_init_s;
    char torch_skip[256];// why the torch side did not run for this config ("" = it ran, or torch is off)
    long rss_base_kb;    // the worker's resident memory after ops_init, before building the model
    double busy_before;  // share of the machine's CPU busy just before this config (other processes)
    int group_size;      // configs stepped in one rotation with this one (1: alone with its torch twin)
} Bench;

typedef struct {
    int steps, warmup, threads_req;
    int max_tries;           // timed steps are capped at steps x max_tries
    double busy_max;         // a step is clean if other processes used at most this share of the CPUs
    double wait_idle_s;      // before a config and after a busy step, wait up to this for idle
    int group_shape;         // rotate all gate variants of a shape together (when memory allows)
    int smoke, no_torch, list_only;
    int torch_hybrid;        // also run torch on configs with Gated DeltaNet layers (slow: off by default)
    int torch_bf16;          // the torch side under torch.autocast("cpu", dtype=torch.bfloat16) (bench_torch.py --bf16)
    const char* only;
    int gate_on[3];          // indexed by GateKind
    int rc_on[3];            // indexed by RecomputeKind (--recompute; none only by default)
    int rc_list;             // --recompute given: names carry the mode, the recompute table is printed
    char configs_dir[PATH_LEN];
    char json_path[PATH_LEN];
    char python[PATH_LEN];
    char torch_script[PATH_LEN];
    const char* sets[MAX_SETS];
    int n_sets;
} Opts;

void gate_overrides(int gate, char out[3][64]);   // the gate variant's --set keys (bench_util.c)

// ---------------------------------------------------------------------------------------------
// the step time (bench_step.c)

typedef struct { double peak; int threads; char backend[128], peak_source[256]; } ProbeMsg;

int run_probe(int threads, ProbeMsg* probe);     // peak FLOP/s and thread count, from a child
double wait_idle(const Opts* o, double max_s);
void run_group(Bench** g, int k, const Opts* o, int threads, int use_torch);
// other processes' share of the CPUs while process pid ran a timed piece of work: begin before
// it, end after it (NAN: too short to tell, under ~0.1 s of wall time on 2 CPUs)
typedef struct { unsigned long long busy, total; long long proc; } StepProbe;
void probe_begin(StepProbe* s, pid_t pid);
double probe_end(const StepProbe* s, pid_t pid);
// the median of the clean samples (others <= busy_max) if there are at least `want`, else of
// all of them and *noisy = 1
double select_median(const double* ms, const double* others, int n, int want, double busy_max,
                     int* n_clean, int* noisy);
long self_rss_kb(void);   // this process's resident memory now (VmRSS), -1 if unknown

// ---------------------------------------------------------------------------------------------
// the PyTorch side (bench_torch.c)

typedef struct { pid_t pid; int cmd_fd, out_fd; FILE* out; } TorchProc;

int torch_start(TorchProc* p, const Opts* o, const Bench* b, int threads, char* line, size_t cap);
int torch_step(TorchProc* p, double* ms, double* loss, char* line, size_t cap);
long torch_finish(TorchProc* p, int* exit_ok);
int torch_available(const Opts* o, char* version, size_t cap);

// ---------------------------------------------------------------------------------------------
// memory (bench_memory.c)

double analytic_bytes(const Bench* b);
size_t acts_probe(const Config* cfg);
double mem_available_bytes(void);
double est_ours_bytes(const Bench* b);
double est_torch_bytes(const Bench* b);
int n_linear_layers(const ModelConfig* c);   // Gated DeltaNet layers (layer_pattern's L)

// ---------------------------------------------------------------------------------------------
// derived costs (bench_gate.c)

typedef struct {
    char shape[128];
    int idx[3];          // Bench index per GateKind, -1 if not run
    double layer_share_ew, layer_share_hw;   // gate rows' share of one layer's matmul FLOPs
    double flops_ratio_ew, flops_ratio_hw;   // FLOPs/token gated / baseline (whole step)
    double ours_hw, ours_ew, torch_hw, torch_ew;   // measured step-time ratios
    int rotated;         // the variants stepped in one rotation (else: separate runs, noisier)
} GateCost;

// MoE dispatch cost: an MoE config against the dense config of its twin shape with the same gate
typedef struct {
    int moe, dense;      // Bench indices
    double flops_ratio;  // FLOPs/token MoE / dense (1 + the router, when the active FFNs match)
    double ours, torch;  // step time MoE / dense
} MoeCost;

int gate_costs(const Bench* bs, int n, GateCost* out);
int moe_costs(const Bench* bs, int n, MoeCost* out);

// ---------------------------------------------------------------------------------------------
// small utilities (bench_util.c)

__attribute__((format(printf, 3, 4))) int sfmt(char* buf, size_t cap, const char* fmt, ...);
double now_s(void);
int read_full(int fd, void* buf, size_t n);
int write_full(int fd, const void* buf, size_t n);
double median(const double* v, int n);
int is_dir(const char* p);
// flag's value v as an int >= lo into *out; 0, or -1 after an error line
int bench_parse_int(const char* flag, const char* v, int lo, int* out);
// the directory of this executable (/proc/self/exe), or "." when unknown
void bench_exe_dir(char* out, size_t cap);
int is_file(const char* p);
int make_parent_dirs(const char* path);
int read_cpu_times(unsigned long long* busy, unsigned long long* total);
double cpu_busy_fraction(double seconds);
int json_num(const char* line, const char* key, double* out);
int json_str(const char* line, const char* key, char* out, size_t cap);
void json_escape(FILE* f, const char* s);
void json_num_or_null(FILE* f, double v, const char* fmt);
// end a worker: its command pipe closed (after "Q"), its output pipe closed, waited for;
// returns its peak RSS in KiB, or -1
long proc_finish(pid_t pid, int* cmd_fd, int* out_fd, int* exit_ok);
