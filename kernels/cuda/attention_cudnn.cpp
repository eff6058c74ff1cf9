// kernels/cuda/attention_cudnn.cpp: cuDNN's fused flash attention (SDPA), the second attention
// implementation of the CUDA backend (`[train] attn_impl = cudnn`): the baseline's speed
// reference that the fused gated kernel (attention.cu) is measured against, and a usable
// implementation for every variant (the sdpa gate is applied around it by attention.cu).
//
// Built with cuDNN's graph API through the cudnn-frontend headers (header-only C++, fetched by
// scripts/cudnn_frontend.sh; CMake defines GATEDGPT_CUDNN when it finds them and libcudnn).
// Without them this file only defines stubs that stop the run with a message. Host C++ only
// (compiled by the host compiler: the frontend's templates take nvcc minutes); the bf16
// conversion kernels it launches (fp32 build) are in attention.cu.
//
// Data flow (forward; the backward is the same with dy, y in and dq, dk, dv out), activations
// act_t [B, T, heads, hd] row-major:
//   bf16 build (GATEDGPT_ACT_BF16): q, k, v, y (and dy, dq, dk, dv) are bf16 already: cuDNN
//     reads and writes the model's buffers in place, no copies.
//   fp32 build: q[N, H*hd], k, v[N, Hkv*hd] fp32 --convert--> bf16 copies (same layout, in the
//     CUDA_SCRATCH_CUDNN slot); O bf16 --convert--> y fp32.
//   cuDNN SDPA, causal, scale 1/sqrt(hd), GQA by the head counts, fp32 softmax statistics;
//   Stats [B, H, T] fp32 = lse (natural log, of the scaled scores), written in place.
// cuDNN's flash attention takes bf16/fp16 inputs only, so in the fp32 build this path computes
// in bf16 while the rest of the backend is fp32: it agrees with the CPU to bf16 precision
// (~1e-2), not fp32, and the conversions are extra passes over q, k, v.
//
// Tensors are described to cuDNN as [B, heads, T, hd] with the strides of the row-major
// [B, T, heads, hd] buffers, so no transpose is needed. Graphs are built once per shape and
// cached; the backward asks for cuDNN's deterministic algorithm (the backend promises the same
// bits run to run), and falls back to the default one with a warning where cuDNN has none.
#include "cuda_common.h"

#ifdef GATEDGPT_CUDNN
#include <cudnn.h>
#include <cudnn_frontend.h>
#include <dlfcn.h>
#include <exception>
#include <stdlib.h>

#include <map>
#include <string>
#include <memory>
#include <tuple>
#include <unordered_map>

namespace fe = cudnn_frontend;
#ifndef GATEDGPT_ACT_BF16
typedef unsigned short bf16_t;   // storage of a bf16 value (the kernels in attention.cu convert)
static void to_bf16(bf16_t* out, const float* in, size_t n) { cuda_to_bf16(out, in, n); }
static void from_bf16(float* out, const bf16_t* in, size_t n) { cuda_from_bf16(out, in, n); }
#endif

// The frontend loads libcudnn at run time (NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING, set by
// CMakeLists.txt): nothing links against cuDNN, so the binaries start on machines without it
// (CI), and the library is found where it is installed (the toolkit, or the pip wheel through
// LD_LIBRARY_PATH or GATEDGPT_CUDNN_LIB=<path to libcudnn.so.9>).
namespace cudnn_frontend { void* cudnn_dlhandle = nullptr; }

// Loads libcudnn once; returns 0 (and leaves why[] filled) when it is not there.
static int cudnn_try_load(char* why, size_t len) {
    if (fe::cudnn_dlhandle) return 1;
    // the frontend loads the CUDA runtime too: the one this binary links (CUDA 13), not an older
    // one that happens to be on the library path
    char cudart[32];
    snprintf(cudart, sizeof cudart, "libcudart.so.%d", CUDART_VERSION / 1000);
    setenv("CUDNN_FRONTEND_CUDART_LIB_NAME", cudart, 0);
    const char* env = getenv("GATEDGPT_CUDNN_LIB");
    const char* names[] = {env, "libcudnn.so.9", "libcudnn.so"};
    for (const char* n : names) {
        if (!n || !*n) continue;
        fe::cudnn_dlhandle = dlopen(n, RTLD_NOW | RTLD_GLOBAL);
        if (fe::cudnn_dlhandle) return 1;
    }
    const char* e = dlerror();
    snprintf(why, len, "%s", e ? e : "libcudnn.so.9 not found");
    return 0;
}

static void cudnn_load(void) {
    char why[400];
    if (cudnn_try_load(why, sizeof why)) return;
    char msg[600];
    snprintf(msg, sizeof msg, "[train] attn_impl = cudnn: cannot load libcudnn.so.9 (%s)", why);
    cuda_fail(__FILE__, __LINE__, msg,
              "install cuDNN 9 (with the CUDA toolkit, or pip's nvidia-cudnn-cu13), put its lib folder on "
              "LD_LIBRARY_PATH or set GATEDGPT_CUDNN_LIB to the file; or use attn_impl = fused");
}

#define CUDNN_CHECK(call) cudnn_check((call), #call, __FILE__, __LINE__)
static void cudnn_check(cudnnStatus_t s, const char* what, const char* file, int line) {
    if (s == CUDNN_STATUS_SUCCESS) return;
    char msg[512];
    snprintf(msg, sizeof msg, "%s: %s", what, fe::detail::get_error_string(s));
    cuda_fail(file, line, msg, "check that libcudnn (9.x) matches the CUDA runtime and the GPU is sm_80 or newer");
}

static cudnnHandle_t cudnn_handle;

// tensor uids of the graphs' variant packs
enum { UID_Q = 1, UID_K, UID_V, UID_O, UID_STATS, UID_DO, UID_DQ, UID_DK, UID_DV };

typedef std::tuple<int, int, int, int, int, int> ShapeKey;   // B, T, H, Hkv, hd, backward?
static std::map<ShapeKey, std::shared_ptr<fe::graph::Graph>> graphs;

// [B, heads, T, hd] over the row-major [B, T, heads, hd] buffer
static std::shared_ptr<fe::graph::Tensor_attributes> bthd(fe::graph::Graph& g, const char* name, int uid, int B,
                                                          int heads, int T, int hd) {
    return g.tensor(fe::graph::Tensor_attributes()
                        .set_name(name)
                        .set_uid(uid)
                        .set_dim({B, heads, T, hd})
                        .set_stride({(int64_t)T * heads * hd, hd, (int64_t)heads * hd, 1}));
}

// One SDPA graph (forward, or backward with or without cuDNN's deterministic algorithm), built
// and planned; NULL with *err set when cuDNN cannot do it (the frontend reports some failures by
// error value and some by exception: both end here).
static std::shared_ptr<fe::graph::Graph> try_build(const OpsAttnShape* s, int backward, int deterministic,
                                                   std::string* err) {
    try {
        auto g = std::make_shared<fe::graph::Graph>();
        g->set_io_data_type(fe::DataType_t::BFLOAT16)
            .set_intermediate_data_type(fe::DataType_t::FLOAT)
            .set_compute_data_type(fe::DataType_t::FLOAT);
        const int B = s->B, T = s->T, H = s->H, Hkv = s->Hkv, hd = s->hd;
        const float scale = 1.0f / sqrtf((float)hd);
        auto Q = bthd(*g, "Q", UID_Q, B, H, T, hd);
        auto K = bthd(*g, "K", UID_K, B, Hkv, T, hd);
        auto V = bthd(*g, "V", UID_V, B, Hkv, T, hd);
        if (!backward) {
            auto opts = fe::graph::SDPA_attributes()
                            .set_name("sdpa")
                            .set_generate_stats(true)   // training: the lse for the backward and F-Attn
                            .set_causal_mask(true)
                            .set_attn_scale(scale);
            auto [O, Stats] = g->sdpa(Q, K, V, opts);
            O->set_output(true).set_uid(UID_O).set_dim({B, H, T, hd}).set_stride({(int64_t)T * H * hd, hd, (int64_t)H * hd, 1});
            Stats->set_output(true).set_uid(UID_STATS).set_data_type(fe::DataType_t::FLOAT)
                .set_dim({B, H, T, 1}).set_stride({(int64_t)H * T, T, 1, 1});
        } else {
            auto O = bthd(*g, "O", UID_O, B, H, T, hd);
            auto dO = bthd(*g, "dO", UID_DO, B, H, T, hd);
            auto Stats = g->tensor(fe::graph::Tensor_attributes()
                                       .set_name("Stats")
                                       .set_uid(UID_STATS)
                                       .set_dim({B, H, T, 1})
                                       .set_stride({(int64_t)H * T, T, 1, 1})
                                       .set_data_type(fe::DataType_t::FLOAT));
            auto opts = fe::graph::SDPA_backward_attributes()
                            .set_name("sdpa_backward")
                            .set_causal_mask(true)
                            .set_attn_scale(scale)
                            .set_deterministic_algorithm(deterministic != 0);
            auto [dQ, dK, dV] = g->sdpa_backward(Q, K, V, O, dO, Stats, opts);
            dQ->set_output(true).set_uid(UID_DQ).set_dim({B, H, T, hd}).set_stride({(int64_t)T * H * hd, hd, (int64_t)H * hd, 1});
            dK->set_output(true).set_uid(UID_DK).set_dim({B, Hkv, T, hd}).set_stride({(int64_t)T * Hkv * hd, hd, (int64_t)Hkv * hd, 1});
            dV->set_output(true).set_uid(UID_DV).set_dim({B, Hkv, T, hd}).set_stride({(int64_t)T * Hkv * hd, hd, (int64_t)Hkv * hd, 1});
        }
        const char* step = "validate";
        fe::error_t e = g->validate();
        if (e.is_good()) { step = "build_operation_graph"; e = g->build_operation_graph(cudnn_handle); }
        if (e.is_good()) { step = "create_execution_plans"; e = g->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}); }
        if (e.is_good()) { step = "check_support"; e = g->check_support(cudnn_handle); }
        if (e.is_good()) { step = "build_plans"; e = g->build_plans(cudnn_handle); }
        if (!e.is_good()) { *err = std::string(step) + ": " + e.get_message(); return nullptr; }
        return g;
    } catch (const std::exception& ex) {
        *err = ex.what();
        return nullptr;
    }
}

static void fail_shape(const OpsAttnShape* s, const char* what, const std::string& why, const char* file, int line) {
    char msg[900];
    snprintf(msg, sizeof msg, "cuDNN SDPA %s for B=%d T=%d n_head=%d n_kv_head=%d head_dim=%d: %s", what, s->B, s->T,
             s->H, s->Hkv, s->hd, why.c_str());
    cuda_fail(file, line, msg,
              "cuDNN's flash attention needs sm_80+, head_dim a multiple of 8 and at most 128 (256 on Hopper "
              "with recent cuDNN); use [train] attn_impl = fused or flash for other shapes");
}

static std::shared_ptr<fe::graph::Graph> build_graph(const OpsAttnShape* s, int backward) {
    ShapeKey key{s->B, s->T, s->H, s->Hkv, s->hd, backward};
    auto it = graphs.find(key);
    if (it != graphs.end()) return it->second;
    if (!cudnn_handle) {
        cudnn_load();
        CUDNN_CHECK(fe::detail::create_handle(&cudnn_handle));
        CUDNN_CHECK(fe::detail::set_stream(cudnn_handle, cuda_stream));
    }
    std::string err;
    auto g = try_build(s, backward, 1, &err);
    if (!g && backward) {
        // cuDNN's deterministic backward is not available everywhere (GPU, cuDNN version): the
        // run goes on with the default one, and says so (repeat runs may then differ in the
        // last bits)
        fprintf(stderr, "warning: cuDNN SDPA: no deterministic backward here (%s): using the default one; "
                "runs with attn_impl = cudnn may differ bit for bit\n", err.c_str());
        g = try_build(s, backward, 0, &err);
    }
    if (!g) fail_shape(s, backward ? "backward" : "forward", err, __FILE__, __LINE__);
    graphs[key] = g;
    return g;
}

// runs a built graph; exceptions and error values both stop the run with the shape named
static void run_graph(const std::shared_ptr<fe::graph::Graph>& g, std::unordered_map<int64_t, void*>& pack,
                      void* workspace, const OpsAttnShape* s) {
    try {
        fe::error_t e = g->execute(cudnn_handle, pack, workspace);
        if (!e.is_good()) fail_shape(s, "execute", e.get_message(), __FILE__, __LINE__);
    } catch (const std::exception& ex) {
        fail_shape(s, "execute", ex.what(), __FILE__, __LINE__);
    }
}

static void* workspace_for(const std::shared_ptr<fe::graph::Graph>& g, const OpsAttnShape* s) {
    int64_t ws = 0;
    fe::error_t e = g->get_workspace_size(ws);
    if (!e.is_good()) fail_shape(s, "get_workspace_size", e.get_message(), __FILE__, __LINE__);
    return ws > 0 ? cuda_scratch(CUDA_SCRATCH_CUDNN_WS, (size_t)ws) : NULL;
}

#ifdef GATEDGPT_ACT_BF16
// The model's bf16 tensors go to cuDNN in place: its kernels load 16-byte vectors, so every
// buffer must start 16-byte aligned (the activation arena aligns each tensor to 64 bytes).
static void cudnn_check_aligned(const void* p, const char* name) {
    if (((uintptr_t)p & 15u) == 0) return;
    char msg[160];
    snprintf(msg, sizeof msg, "attn_impl = cudnn: %s at %p is not 16-byte aligned", name, p);
    cuda_fail(__FILE__, __LINE__, msg, "pass tensors that start 16-byte aligned (as ops_malloc and the activation arena give)");
}
#endif

// The variant packs take void*: cuDNN only reads the inputs (q, k, v, and y, dy, lse backward).
void cuda_cudnn_attention_forward(act_t* y, float* lse, const act_t* q, const act_t* k, const act_t* v,
                                  const OpsAttnShape* s) {
    auto g = build_graph(s, 0);
#ifdef GATEDGPT_ACT_BF16
    cudnn_check_aligned(q, "q"); cudnn_check_aligned(k, "k"); cudnn_check_aligned(v, "v"); cudnn_check_aligned(y, "y");
    std::unordered_map<int64_t, void*> pack = {
        {UID_Q, (void*)q}, {UID_K, (void*)k}, {UID_V, (void*)v}, {UID_O, y}, {UID_STATS, lse}};
    run_graph(g, pack, workspace_for(g, s), s);
#else
    const size_t nq = (size_t)s->B * s->T * s->H * s->hd, nk = (size_t)s->B * s->T * s->Hkv * s->hd;
    // bf16 buffers: q, k, v, o
    bf16_t* buf = (bf16_t*)cuda_scratch(CUDA_SCRATCH_CUDNN, (2 * nq + 2 * nk) * sizeof(bf16_t));
    bf16_t *bq = buf, *bk = bq + nq, *bv = bk + nk, *bo = bv + nk;
    to_bf16(bq, q, nq);
    to_bf16(bk, k, nk);
    to_bf16(bv, v, nk);
    std::unordered_map<int64_t, void*> pack = {
        {UID_Q, bq}, {UID_K, bk}, {UID_V, bv}, {UID_O, bo}, {UID_STATS, lse}};
    run_graph(g, pack, workspace_for(g, s), s);
    from_bf16(y, bo, nq);
#endif
}

void cuda_cudnn_attention_backward(act_t* dq, act_t* dk, act_t* dv, const act_t* dy, const act_t* q,
                                   const act_t* k, const act_t* v, const act_t* y, const float* lse,
                                   const OpsAttnShape* s) {
    auto g = build_graph(s, 1);
#ifdef GATEDGPT_ACT_BF16
    const void* bufs[8] = {q, k, v, y, dy, dq, dk, dv};
    const char* names[8] = {"q", "k", "v", "y", "dy", "dq", "dk", "dv"};
    for (int i = 0; i < 8; i++) cudnn_check_aligned(bufs[i], names[i]);
    std::unordered_map<int64_t, void*> pack = {
        {UID_Q, (void*)q}, {UID_K, (void*)k}, {UID_V, (void*)v}, {UID_O, (void*)y}, {UID_DO, (void*)dy},
        {UID_STATS, (void*)lse}, {UID_DQ, dq}, {UID_DK, dk}, {UID_DV, dv}};
    run_graph(g, pack, workspace_for(g, s), s);
#else
    const size_t nq = (size_t)s->B * s->T * s->H * s->hd, nk = (size_t)s->B * s->T * s->Hkv * s->hd;
    // bf16 buffers: q, k, v, o, do, dq, dk, dv
    bf16_t* buf = (bf16_t*)cuda_scratch(CUDA_SCRATCH_CUDNN, (4 * nq + 4 * nk) * sizeof(bf16_t));
    bf16_t *bq = buf, *bk = bq + nq, *bv = bk + nk, *bo = bv + nk, *bdo = bo + nq, *bdq = bdo + nq,
                  *bdk = bdq + nq, *bdv = bdk + nk;
    to_bf16(bq, q, nq);
    to_bf16(bk, k, nk);
    to_bf16(bv, v, nk);
    to_bf16(bo, y, nq);   // y came from bf16: the round trip is exact
    to_bf16(bdo, dy, nq);
    std::unordered_map<int64_t, void*> pack = {
        {UID_Q, bq}, {UID_K, bk}, {UID_V, bv}, {UID_O, bo}, {UID_DO, bdo}, {UID_STATS, (void*)lse},
        {UID_DQ, bdq}, {UID_DK, bdk}, {UID_DV, bdv}};
    run_graph(g, pack, workspace_for(g, s), s);
    from_bf16(dq, bdq, nq);
    from_bf16(dk, bdk, nk);
    from_bf16(dv, bdv, nk);
#endif
}

// built in, and libcudnn loads
int cuda_cudnn_available(void) {
    char why[400];
    return cudnn_try_load(why, sizeof why);
}

#else   // built without the cudnn-frontend headers or libcudnn

static void cudnn_missing(void) {
    cuda_fail(__FILE__, __LINE__, "[train] attn_impl = cudnn, but this build has no cuDNN attention",
              "run scripts/cudnn_frontend.sh (fetches the cudnn-frontend headers), make sure libcudnn 9 is "
              "installed, reconfigure (cmake prints 'cuDNN attention: ON'), or use attn_impl = fused");
}
void cuda_cudnn_attention_forward(act_t*, float*, const act_t*, const act_t*, const act_t*, const OpsAttnShape*) {
    cudnn_missing();
}
void cuda_cudnn_attention_backward(act_t*, act_t*, act_t*, const act_t*, const act_t*, const act_t*,
                                   const act_t*, const act_t*, const float*, const OpsAttnShape*) {
    cudnn_missing();
}
int cuda_cudnn_available(void) { return 0; }

#endif
