// kernels/ops.h: the op interface the model calls. One signature per op; each backend
// (kernels/cpu; kernels/cuda, built with fp32 and with bf16 act_t; kernels/cpu_bf16, the CPU
// emulation of bf16 storage over the CPU kernels) implements all of them. model/ includes no
// backend header: only this one, its types (ops_types.h) and the backend-neutral definitions
// the kernels share (kernels/attn_gate.h).
//
// Conventions
// - Tensors live in the backend's memory (host memory for the CPU backend), row-major, and are
//   named with their shape in the comment: N = B*T tokens, C = channels.
// - Element types: `float` is fp32 always (master weights, weight gradients, the residual
//   stream, statistics); `act_t` is the activation storage type of the build (ops_types.h:
//   fp32, or bf16 under GATEDGPT_ACT_BF16). GEMMs read weights as act_t: the compute copy of
//   the master weights (ops_weights_to_act). Ops compute in fp32 whatever they store.
// - Linear weights follow PyTorch's nn.Linear: W[OC, C], y = x W^T.
// - "+=" in a comment means the op accumulates into that output (gradient accumulation over
//   micro-steps, residual streams); "=" means it overwrites.
// - Every op is deterministic for a fixed thread count: static schedules, fixed reduction order.
#pragma once
#include <stddef.h>
#include "ops_types.h"

// ---------------------------------------------------------------------------------------------
// backend lifetime and memory
void  ops_init(int threads);                 // threads <= 0: library default
const char* ops_backend_name(void);          // e.g. "cpu (oneDNN sgemm, 2 threads)"
int   ops_num_threads(void);
void* ops_malloc(size_t bytes);              // zero-filled; aborts with a message on failure
void  ops_free(void* p);
// The bytes ops_malloc holds now (each allocation counted as the backend holds it: rounded up
// to its granularity, kernels/scratch.h), and the most held at once since the start. The
// trainer reports its arenas from these; the planner (train/plan.h) predicts them.
size_t ops_allocated_bytes(void);
size_t ops_allocated_peak_bytes(void);
size_t ops_alloc_align(void);                // the granularity: SCRATCH_CPU/CUDA_ALLOC_ALIGN
// The backend's scratch for a training step of shape s (kernels/scratch.h), bytes: CPU, the
// largest temporaries one op mallocs (freed when it returns); CUDA, every scratch slot and the
// cuBLASLt workspace, held for the run. ops_scratch_reserve allocates them now (CUDA: at those
// sizes, so that no op of a step of this shape grows a slot; CPU: nothing to hold).
size_t ops_scratch_bytes(const OpsStepShape* s);
void  ops_scratch_reserve(const OpsStepShape* s);
void  ops_zero(float* x, size_t n);          // x[n] = 0
void  ops_copy(float* dst, const float* src, size_t n);              // device to device
void  ops_accumulate(act_t* y, const act_t* x, size_t n);            // y[n] += x[n]
void  ops_to_host(void* dst, const void* src, size_t bytes);         // backend -> host
void  ops_from_host(void* dst, const void* src, size_t bytes);       // host -> backend
// Host memory for copies of backend memory that outlive a step (the asynchronous checkpoint's
// snapshot, train/ckpt_async.h): CPU, malloc; CUDA, pinned (cudaMallocHost), so ops_to_host into
// it runs at the link's full speed. NULL when it cannot be had; not counted by
// ops_allocated_bytes (host memory: the planner lists it apart). ops_host_free(NULL) is a no-op.
void* ops_host_alloc(size_t bytes);
void  ops_host_free(void* p);
double ops_peak_flops(void);                 // peak FLOP/s of this device, for MFU (see below)
// Where ops_peak_flops's number comes from, one line for logs: "<kind>: <details>", kind one of
//   measured  on this machine (CPU: an FMA loop at the widest vector width, on all threads)
//   table     a data-sheet entry for the named device (CUDA: H100/H200/A100, the GEMM precision)
//   estimate  computed from the device's properties (CUDA: a GPU missing from the table)
//   nominal   a fixed stand-in (CPU without FMA): MFU against it means little
// e.g. "measured: AVX2 FMA loop on this CPU (8-wide x 12 chains), 2 threads, best of 3" or
// "table: H200 SXM bf16 dense 989.4 TFLOP/s, NVIDIA datasheet (device NVIDIA H200)".
const char* ops_peak_source(void);
// act[n] (=) x[n] rounded to act_t (nearest even); a copy for fp32 act_t, nothing when act
// aliases x (the model converts the fp32 residual gradient for the GEMMs that read it)
void  ops_act_from_float(act_t* act, const float* x, size_t n);
// x[n] (=) act[n] in fp32: the way back, for a GEMM's input gradient that an fp32 op consumes
// (the Gated DeltaNet's gated norm); a copy for fp32 act_t, nothing when x aliases act
void  ops_float_from_act(float* x, const act_t* act, size_t n);
// The compute copy of the master weights: act[i] (=) w[i] with stochastic rounding for bf16
// act_t, the random bits bf16_sr_bits(seed, i) (kernels/bf16.h); a copy for fp32 act_t,
// nothing when act aliases w.
void  ops_weights_to_act(act_t* act, const float* w, size_t n, unsigned long long seed);
// The same for the range [at, at + n) of the weights (ZeRO-1's master shard, train/dist.h):
// act[i] (=) w[i] rounded with the bits bf16_sr_bits(seed, at + i) of the GLOBAL index, so the
// shards' copies put together are ops_weights_to_act's over the whole arena, bit for bit,
// wherever the shards are cut. act and w point at the range's first element.
void  ops_weights_to_act_at(act_t* act, const float* w, size_t at, size_t n, unsigned long long seed);

// ---------------------------------------------------------------------------------------------
// GEMM
// out[N,OC] (=) inp[N,C] @ w[OC,C]^T   (fp32 accumulation, rounded to act_t once)
void ops_matmul_forward(act_t* out, const act_t* inp, const act_t* w, int N, int C, int OC);
// the same product into fp32: out[N,OC] (= or +=) inp @ w^T. For the residual stream (+=)
// and the router's logits (=), which stay fp32.
void ops_matmul_forward_f32(float* out, const act_t* inp, const act_t* w, int N, int C, int OC,
                            int accumulate);
// dinp[N,C] = dout[N,OC] @ w[OC,C]   (skipped when dinp is NULL)
// dw[OC,C] += dout^T @ inp            (fp32: the weight gradients)
void ops_matmul_backward(act_t* dinp, float* dw, const act_t* dout, const act_t* inp,
                         const act_t* w, int N, int C, int OC);

// The GPT-2 MLP's GEMMs with the GELU (tanh approximation) fused where the backend can (CUDA:
// cuBLASLt epilogues), so the activation costs no extra pass over memory:
// pre[N,OC] (=) inp[N,C] @ w[OC,C]^T,  act[N,OC] (=) gelu(pre)
//   (the same values as ops_matmul_forward + ops_gelu_forward)
void ops_matmul_gelu_forward(act_t* pre, act_t* act, const act_t* inp, const act_t* w, int N, int C,
                             int OC);
// the backward of the GEMM that reads act (inp = act[N,C], C = the MLP width) through the GELU:
// dpre[N,C] (=) (dout[N,OC] @ w[OC,C]) * gelu'(pre[N,C]);  dw[OC,C] += dout^T @ inp
//   (the same values as ops_matmul_backward into dact + ops_gelu_backward)
void ops_matmul_backward_gelu(act_t* dpre, float* dw, const act_t* dout, const act_t* inp,
                              const act_t* w, const act_t* pre, int N, int C, int OC);

// Linear biases ([model] bias: GPT-2's attention and MLP projections). bias[OC] is read from the
// weights' compute copy (act_t, like w); its gradient db[OC] is fp32, like dw.
// out[N,OC] (=) inp[N,C] @ w[OC,C]^T + bias: the bias added to the fp32 product before the one
// rounding to act_t. bias NULL: the same as ops_matmul_forward.
void ops_matmul_bias_forward(act_t* out, const act_t* inp, const act_t* w, const act_t* bias, int N, int C,
                             int OC);
// out[n, :] += bias for every row n < N (fp32: a projection into the residual stream adds its
// bias there, beside ops_matmul_forward_f32's accumulation)
void ops_bias_add_f32(float* out, const act_t* bias, int N, int OC);
// db[OC] += sum over the rows n of dout[N,OC] (a column sum; fixed order: deterministic, no
// atomics, the same bits for any thread count)
void ops_bias_backward(float* db, const act_t* dout, int N, int OC);

// ---------------------------------------------------------------------------------------------
// embeddings (fp32: the residual stream, from the master weights):
// out[B*T, C] = wte[idx] (+ wpe[t] when wpe != NULL)
void ops_embedding_forward(float* out, const int* idx, const float* wte, const float* wpe,
                           int B, int T, int C);
// dwte[V,C] += scatter of dout by idx; dwpe[maxT,C] += sum over b (when dwpe != NULL)
void ops_embedding_backward(float* dwte, float* dwpe, const float* dout, const int* idx,
                            int B, int T, int C);

// ---------------------------------------------------------------------------------------------
// normalisation over the last dim of inp[N,C]
//   rmsnorm:   out = inp * rstd * w,                 rstd = 1/sqrt(mean(inp^2) + eps)
//   layernorm: out = (inp - mean) * rstd * w + b,    rstd = 1/sqrt(var(inp) + eps)
// mean[N] is written for layernorm only (may be NULL for rmsnorm), rstd[N] always; b NULL for rms.
// inp, w, b, mean, rstd fp32 (inp is the residual stream); out act_t.
void ops_norm_forward(act_t* out, float* mean, float* rstd, const float* inp, const float* w,
                      const float* b, int N, int C, float eps, OpsNormKind kind);
// dinp[N,C] += ..., dw[C] += ..., db[C] += ... (db NULL for rms)
void ops_norm_backward(float* dinp, float* dw, float* db, const act_t* dout, const float* inp,
                       const float* w, const float* mean, const float* rstd, int N, int C,
                       OpsNormKind kind);

// ---------------------------------------------------------------------------------------------
// attention (causal, GQA, with the optional output or value gate)
// columns of the fused projection qkv[N, QKVG] = [ q (H*hd) | k (Hkv*hd) | v (Hkv*hd) | z (G) ]
int ops_attn_gate_cols(const OpsAttnShape* s);   // G
int ops_attn_qkv_cols(const OpsAttnShape* s);    // QKVG

// prep: split qkv, qk-norm (saves qk_rstd[N, H+Hkv]), rope (token t of a sequence at position
// s->pos0 + t, with s->rope_scale: kernels/rope.h), value gate.
//   q[N, H*hd], k[N, Hkv*hd], v[N, Hkv*hd] (=)
void ops_attn_prep_forward(act_t* q, act_t* k, act_t* v, float* qk_rstd, const act_t* qkv,
                           const float* qnorm_w, const float* knorm_w, const OpsAttnShape* s);
// dqkv[N, QKVG] (=) for the q, k, v columns and (value gate) the z columns; the sdpa-gate z
// columns are written by ops_attention_backward. dqnorm_w[hd], dknorm_w[hd] (+=).
void ops_attn_prep_backward(act_t* dqkv, float* dqnorm_w, float* dknorm_w, const act_t* dq,
                            const act_t* dk, const act_t* dv, const act_t* qkv,
                            const float* qk_rstd, const float* qnorm_w, const float* knorm_w,
                            const OpsAttnShape* s);
// y[N, H*hd] = softmax(q k^T / sqrt(hd), causal) v (=), lse[B,H,T] its row logsumexp (=),
// yg[N, H*hd] = y * act(z) for the sdpa gate (z read from qkv's gate columns), else yg = y
// (yg may then alias y).
void ops_attention_forward(act_t* y, act_t* yg, float* lse, const act_t* q, const act_t* k,
                           const act_t* v, const act_t* qkv, const OpsAttnShape* s);
// from dyg[N, H*hd]: dq, dk, dv (=) and, for the sdpa gate, the z columns of dqkv (=).
// scratch: [N, H*hd] act_t (used for dy when gated)
void ops_attention_backward(act_t* dq, act_t* dk, act_t* dv, act_t* dqkv, act_t* scratch,
                            const act_t* dyg, const act_t* q, const act_t* k, const act_t* v,
                            const act_t* y, const float* lse, const act_t* qkv,
                            const OpsAttnShape* s);

// ---------------------------------------------------------------------------------------------
// KV cache (inference: sampling, scoring, long-context and streaming evaluation; model/kv_cache.h).
// A cache holds, per layer, kc and vc [B, Tc, Hkv*hd]: slot j of sequence b at row b*Tc + j; k
// as the prep op leaves it (after qk-norm and RoPE at its position), v after the value gate.
// The T new tokens of a forward are s->T tokens of each of s->B sequences.

// kc[b, slot0 + t, :] (=) k[b*T + t, :], vc likewise from v, for t < T (slot0 + T <= Tc)
void ops_kv_cache_write(act_t* kc, act_t* vc, const act_t* k, const act_t* v, int slot0, int Tc,
                        const OpsAttnShape* s);
// Attention of the T new queries q[N, H*hd] over the first n_ctx slots of the cache (the new
// tokens written already): query t sits at slot n_ctx - T + t and sees slots 0 .. n_ctx - T + t
// (with T = 1, all n_ctx: the order of the slots does not matter then, so a rolling window may
// keep them in any order). y, yg, lse[B, H, T] (=) as ops_attention_forward (the sdpa gate from
// qkv's z columns of the new tokens). sink[B, H, T] (=, skipped when NULL): the attention
// probability summed over slots 0 .. n_sink - 1 (F-Attn on a cache whose first slots hold the
// sequence's first tokens).
void ops_attention_cached_forward(act_t* y, act_t* yg, float* lse, float* sink, const act_t* q,
                                  const act_t* kc, const act_t* vc, const act_t* qkv, int n_ctx,
                                  int Tc, int n_sink, const OpsAttnShape* s);
// x[n_rows, n_heads*hd] (in place): row r rotated by RoPE at position pos0 + r with s's base and
// scaling (the rotation the prep op applies; kernels/rope.h); dir = -1: the inverse rotation
// (divided by the YaRN attention factor, so that it undoes dir = +1 exactly up to roundoff).
void ops_rope_rows(act_t* x, int n_rows, int n_heads, int pos0, int dir, const OpsAttnShape* s);
// Bytes the backend can still allocate, for errors before an allocation that cannot fit (CPU:
// the kernel's MemAvailable; CUDA: cudaMemGetInfo's free memory).
size_t ops_mem_available(void);

// ---------------------------------------------------------------------------------------------
// Gated delta rule (Gated DeltaNet, Yang et al. 2024; Qwen3-Next's linear attention), the
// token mixer of the hybrid model's linear-attention layers (model/gpt.c, "Gated DeltaNet").
// fp32 on every backend (like the router): the layer's tensors between its GEMMs are float.
// Per sequence b and value head h, a state S [dk, dv] starts at state_in (zeros when NULL) and
// for each token t (q, k of its key head h / (Hv/Hk); q, k L2-normalised by the caller):
//   S <- exp(g_t) S;  u = S^T k_t;  S <- S + k_t (beta_t (v_t - u))^T;  o_t = S^T q_t / sqrt(dk)
// (transformers' torch_recurrent_gated_delta_rule). Row n of q, k is at q + n*ld_qk (Hk*dk
// floats), of v at v + n*ld_v (Hv*dv floats) (OpsGdnShape: 0 = dense); g, beta [N, Hv]
// (g <= 0: the log of the decay), o [N, Hv*dv] (=, dense); state_out [B, Hv, dk, dv] (=, may
// be NULL): the state after the last token, which a decoder passes back as state_in. With
// s->doc_start the state is zeroed before each later document's first token (ops_types.h), in
// both forms and both directions.
// s->chunk > 0 computes the same by chunks of that many tokens (the WY / UT form of fla and
// transformers' torch_chunk_gated_delta_rule: per chunk a unit lower-triangular inverse and
// products of [C, dk], [C, dv], [C, C] and [dk, dv] operands, the recurrence only across
// chunks; kernels/cpu/deltanet_chunk.c has the math), equal to the recurrent form up to fp32
// roundoff (tests/test_deltanet.c).
// saved (may be NULL; cpu_gdn_chunk_saved_floats of kernels/scratch.h floats): what the forward
// keeps for ops_gdn_backward, written when s->chunk > 0 and ops_gdn_keeps_saved() says so: the
// chunked form's corrected values Vn = W - Kc S and the state at each chunk's start
// (kernels/cpu/deltanet_chunk.c), in the backend's own layout (the CPU's: Vn [B, Hv, T, dv],
// then S^T [B, Hv, ceil(T / C), dv, dk]). The backward then reads them instead of recomputing
// them in a forward pass over the chunks (the same bits either way).
void ops_gdn_forward(float* o, float* state_out, float* saved, const float* q, const float* k, const float* v,
                     const float* g, const float* beta, const float* state_in, const OpsGdnShape* s);
// 1 when this backend's chunked forward fills `saved` (the CPU), 0 when it ignores it and the
// backward recomputes (CUDA, for now): whether the model keeps that buffer.
int ops_gdn_keeps_saved(void);
// Backward from do [N, Hv*dv] (dense; state_in taken as zeros, as in training): dq, dk (=, the
// layout of q, k: stride ld_qk), dv (=, stride ld_v), dg, dbeta [N, Hv] (=). s->chunk > 0: the
// chunked form's backward (a reverse pass over the chunks on the chunks' states and Vn, from
// saved or recomputed first); 0: over the recurrence, with the states recomputed from
// checkpoints every 64 tokens (the reference). Both cost linear in T. saved: the forward's (NULL: recomputed).
void ops_gdn_backward(float* dq, float* dk, float* dv, float* dg, float* dbeta, const float* dout,
                      const float* q, const float* k, const float* v, const float* g,
                      const float* beta, const float* saved, const OpsGdnShape* s);
// The decay and the write strength from the projection ba [N, 2*Hv], row [b (Hv) | a (Hv)]:
//   beta[n,h] = sigmoid(b[n,h]);  g[n,h] = -exp(A_log[h]) * softplus(a[n,h] + dt_bias[h])
// (softplus as torch's: x for x > 20). g, beta [N, Hv] (=).
void ops_gdn_gates_forward(float* g, float* beta, const float* ba, const float* A_log, const float* dt_bias,
                           int N, int Hv);
// dba [N, 2*Hv] (=) from dg, dbeta [N, Hv]; dA_log, ddt_bias [Hv] (+=, summed over tokens in a
// fixed order).
void ops_gdn_gates_backward(float* dba, float* dA_log, float* ddt_bias, const float* dg, const float* dbeta,
                            const float* ba, const float* A_log, const float* dt_bias, int N, int Hv);
// Causal depthwise convolution over time with SiLU (Qwen3-Next's conv1d on [q | k | v]):
//   pre[b,t,c] = sum_{j<K} w[c, j] x[b, t-K+1+j, c]  (x before token 0: state_in[b, c, :], the
//   K-1 earlier inputs oldest first, or zeros when NULL);  out = silu(pre). x, pre, out [B*T, C]
//   (=; pre may be NULL); state_out [B, C, K-1] (=, may be NULL): the last K-1 inputs, for decoding.
//   state_out must not alias state_in (with T < K-1 the new state holds part of the old one, and
//   the CUDA kernel's threads would race; the KV cache double-buffers them).
void ops_conv1d_silu_forward(float* out, float* pre, float* state_out, const float* x, const float* w,
                             const float* state_in, const int* doc_start, int B, int T, int C, int K);
// doc_start (NULL, or [B*T] as OpsGdnShape's): a token's taps before its document's first token
// read zeros (from the second document on; the first reads state_in as without documents), and
// state_out holds the last document's inputs (zeros before its first token).
// From dout: dx [B*T, C] (=), dw [C, K] (+=; state_in taken as zeros, as in training; doc_start as
// the forward's).
void ops_conv1d_silu_backward(float* dx, float* dw, const float* dout, const float* x, const float* pre,
                              const float* w, const int* doc_start, int B, int T, int C, int K);
// L2 normalisation of heads: for token t < N and head j < heads, the n floats at
// x + t*ldx + j*n:  y (at y + t*ldy + j*n) = x / sqrt(sum x^2 + eps) (q and k of the delta rule,
// eps 1e-6); rinv [N, heads] (=) saved for the backward. Backward: dx (=, x's layout; only
// those heads*n columns of each row are written) from dy (y's layout).
void ops_l2norm_forward(float* y, float* rinv, const float* x, int N, int heads, int n, int ldx, int ldy,
                        float eps);
void ops_l2norm_backward(float* dx, const float* dy, const float* x, const float* rinv, int N, int heads, int n,
                         int ldx, int ldy);
// Gated RMSNorm of the delta rule's output (Qwen3NextRMSNormGated): y = x rstd w act(z) per row
// of n (act: OPS_ACT_SILU as Qwen3-Next, or OPS_ACT_SIGMOID / OPS_ACT_NS_SIGMOID, attn_gate.h);
// rstd[rows] (=). x, z, y [rows, n] (dense). Backward: dx, dz (=), dw[n] (+=).
void ops_rmsnorm_gated_forward(float* y, float* rstd, const float* x, const float* z, const float* w, int rows,
                               int n, float eps, OpsGateAct act);
void ops_rmsnorm_gated_backward(float* dx, float* dz, float* dw, const float* dy, const float* x, const float* z,
                                const float* w, const float* rstd, int rows, int n, OpsGateAct act);

// ---------------------------------------------------------------------------------------------
// probe statistics (instrumented forward passes; not part of the training step). Outputs marked
// "host" are written to host memory.
// F-Attn: p_first[b,h,t] = exp(q_t . k_0 / sqrt(hd) - lse[b,h,t]), the attention probability
// on the sequence's first token. head_mean[H] (host) = its mean over b and queries t = 1..T-1.
// Under the document mask (s->doc_start) k_0 is the key of t's document's first token and the
// mean is over the queries that are not a document's first token (docs/metrics.md).
// (ops_attn_logit_max below likewise takes the keys of t's document only.)
void ops_attn_first_token(float* head_mean, const act_t* q, const act_t* k, const float* lse,
                          const OpsAttnShape* s);
// Gate scores act(z) of the gate columns of qkv[N, QKVG]: their sum and a 10-bin histogram
// over [0, 1] (scores outside are clamped into the end bins). sum, count, hist[10]: host.
void ops_gate_stats(const act_t* qkv, const OpsAttnShape* s, double* sum, long* count,
                    long* hist);
// max over x[N, C] (fp32: the residual stream) of |x| (or of |x - base| when base != NULL), and the token index n of the
// (first) max. host outputs.
void ops_absmax(const float* x, const float* base, int N, int C, float* max, int* pos);
// median of |x| (or |x - base|) over N*C values (host result; the lower median for even n)
float ops_abs_median(const float* x, const float* base, int N, int C);
// Attention-logit growth (docs/metrics.md): head_max[H] (host) = for each query head h, the max
// over sequences b, queries t and keys u <= t of q_t . k_u / sqrt(hd), the logit the softmax
// takes (q, k after qk-norm and RoPE, as the prep op leaves them: a YaRN attention factor m is
// inside them, so the logit carries m^2). A NaN logit makes its head's max NaN (a diverged run
// shows as null in the record, never as a finite max of the rest).
void ops_attn_logit_max(float* head_max, const act_t* q, const act_t* k, const OpsAttnShape* s);
// Output-logit divergence: the max of |logits[n, j]| over the N rows and the first V of Vp
// columns (padding excluded) (host result; NaN when any of them is NaN).
float ops_logits_absmax(const act_t* logits, int N, int V, int Vp);
// Sums of squares over nr ranges in one pass (the per-group norms of train/signals.h: a
// gradient or weight norm, or the update ||w_after - w_before||^2): out[r] (host) = sum over
// i < n[r] of (x[r][i] - y[r][i])^2, or of x[r][i]^2 when y is NULL; x[r], y[r] point into
// backend memory (fp32: master weights, gradients), the arrays x, y, n themselves are host.
// In double, in chunks of OPS_SUMSQ_CHUNK added in order: the same bits for any thread count.
void ops_sumsq_ranges(double* out, const float* const* x, const float* const* y, const size_t* n, int nr);

// ---------------------------------------------------------------------------------------------
// MLP activations
// swiglu: gu[N, 2F] = [g | u] -> h[N,F] = silu(g) * u        (=)
void ops_swiglu_forward(act_t* h, const act_t* gu, int N, int F);
void ops_swiglu_backward(act_t* dgu, const act_t* dh, const act_t* gu, int N, int F);   // (=)
// gelu (tanh approximation), elementwise over n
void ops_gelu_forward(act_t* out, const act_t* inp, size_t n);
void ops_gelu_backward(act_t* dinp, const act_t* dout, const act_t* inp, size_t n);     // (=)

// ---------------------------------------------------------------------------------------------
// Mixture of Experts (model/moe.c calls them in this order; docs/architecture.md has the data
// flow). N tokens, E experts, k = top_k, S = N*k routed token slots: slot s = n*k + j is token
// n's j-th choice. R <= S kept slots (R = S when dropless). Integer tensors are int32 in
// backend memory. The router's tensors are fp32 on every backend (also under bf16 compute).

// Router, from logits[N, E] = x W_r^T (all outputs =):
//   probs[N, E]     the distribution the load-balancing loss averages: softmax(logits), or for
//                   the sigmoid router s / sum_i s_i with s = sigmoid(logits)
//   topk_idx[N, k]  the k largest logits, largest first; ties go to the lower expert index
//   topk_w[N, k]    their weights, renormalised to sum 1: softmax over the chosen logits
//                   (= p_e / sum of the chosen p), or s_e / sum of the chosen s
//   lse[N]          logsumexp(logits[n, :]) (the z-loss)
void ops_moe_router_forward(float* probs, int* topk_idx, float* topk_w, float* lse,
                            const float* logits, int N, int E, int k, OpsRouter kind);
// dlogits[N, E] (=): the gradient through the renormalised top-k weights (dtopk_w[N, k]; the
// indices get none), plus the load-balancing term dL/dprobs[n, i] = aux_grad[i] (E floats,
// the same for every token), plus the z-loss term dL/dlse[n] = z_grad * lse[n].
void ops_moe_router_backward(float* dlogits, const float* dtopk_w, const float* logits,
                             const float* probs, const int* topk_idx, const float* topk_w,
                             const float* lse, const float* aux_grad, float z_grad, int N, int E,
                             int k, OpsRouter kind);
// Routing statistics (host outputs, double, fixed summation order): p_sum[E] = sum over tokens
// of probs[n, i]; lse_sq = sum over tokens of lse[n]^2; entropy = sum over tokens of
// -sum_i probs[n, i] log probs[n, i].
void ops_moe_router_stats(double* p_sum, double* lse_sq, double* entropy, const float* probs,
                          const float* lse, int N, int E);
// Dispatch plan (all =): counts[E] slots that chose each expert; offsets[E + 1] the first row
// of each expert in the permuted buffers (offsets[E] = R); row_slot[R] the slot of each row;
// slot_row[S] the row of each slot, or -1 for a dropped slot. Each expert's rows are its kept
// slots in slot (= token) order. capacity <= 0: dropless; else an expert keeps the first
// `capacity` slots that chose it, in token order, and drops the rest.
void ops_moe_dispatch_plan(int* counts, int* offsets, int* row_slot, int* slot_row,
                           const int* topk_idx, int N, int E, int k, int capacity);
// Gather (permute): xp[r, :] = x[row_slot[r] / k, :] for r < R (=). x[N, C], xp[R, C].
void ops_moe_gather(act_t* xp, const act_t* x, const int* row_slot, int R, int k, int C);
// Its backward, a gather too (one writer per token, no atomics):
// dx[n, :] += sum over j = 0..k-1 (in order, kept slots) of dxp[slot_row[n*k + j], :]
void ops_moe_gather_backward(act_t* dx, const act_t* dxp, const int* slot_row, int N, int k,
                             int C);
// Combine (scale and scatter back): out[n, :] += sum over j (in order, kept slots) of
// topk_w[n, j] * yp[slot_row[n*k + j], :]. yp[R, C], out[N, C] (fp32: the residual stream).
// One writer per token.
void ops_moe_combine(float* out, const act_t* yp, const float* topk_w, const int* slot_row,
                     int N, int k, int C);
// dyp[R, C] (=): dyp[slot_row[s], :] = topk_w[s] * dout[n, :]; dtopk_w[N, k] (=):
// dout[n, :] . yp[slot_row[s], :], 0 for a dropped slot.
void ops_moe_combine_backward(act_t* dyp, float* dtopk_w, const float* dout, const act_t* yp,
                              const float* topk_w, const int* slot_row, int N, int k, int C);
// Grouped GEMM (the experts; one grouped GEMM on CUDA): for each group g, its rows
// [offsets[g], offsets[g+1]) of inp[R, C]: out[rows, OC] (=) inp[rows, :] @ w[g]^T, with
// w[G, OC, C] (group g's weight at w + g*OC*C). offsets[G + 1] in backend memory.
void ops_grouped_matmul_forward(act_t* out, const act_t* inp, const act_t* w, const int* offsets,
                                int G, int C, int OC);
// dinp[rows, C] (=) dout[rows, :] @ w[g] (skipped when dinp is NULL); dw[g] += dout[rows]^T @ inp[rows]
void ops_grouped_matmul_backward(act_t* dinp, float* dw, const act_t* dout, const act_t* inp,
                                 const act_t* w, const int* offsets, int G, int C, int OC);
// Sigmoid-gated add (the shared expert's gate): out[n, :] += sigmoid(z[n]) * y[n, :], z[N];
// out (the residual stream), z and dz fp32.
void ops_sigmoid_gate_add_forward(float* out, const act_t* y, const float* z, int N, int C);
// dy[N, C] (=) sigmoid(z) * dout; dz[N] (=) (dout[n] . y[n]) * sig * (1 - sig)
void ops_sigmoid_gate_add_backward(act_t* dy, float* dz, const float* dout, const act_t* y,
                                   const float* z, int N, int C);

// ---------------------------------------------------------------------------------------------
// fused softmax + cross-entropy over the first V of Vp columns (padding excluded), in fp32
// over act_t logits
// lse[N] (=) = logsumexp(logits[n, :V]); losses[N] (=) = lse[n] - logits[n, target[n]]
void ops_xent_forward(float* losses, float* lse, const act_t* logits, const int* targets, int N,
                      int V, int Vp);
// dlogits[N,Vp] (=) = (exp(logits[:, :V] - lse) - onehot(target)) * dloss, from the forward's
// lse; 0 in padded columns. dlogits may alias logits.
void ops_xent_backward(act_t* dlogits, const act_t* logits, const float* lse, const int* targets,
                       float dloss, int N, int V, int Vp);
// Both in one pass over each row, for training (the trainer knows dloss before the forward; the
// logits are read from memory once instead of twice, and each exp is taken once): losses and lse
// as ops_xent_forward (the same bits), dlogits as ops_xent_backward up to roundoff: exp(l - max)
// * (dloss / sum) instead of exp(l - lse) * dloss. dlogits may alias logits (the model's use).
void ops_xent_forward_backward(float* losses, float* lse, act_t* dlogits, const act_t* logits,
                               const int* targets, float dloss, int N, int V, int Vp);

// ---------------------------------------------------------------------------------------------
// optimizer (fp32: master weights, gradients, AdamW state)
double ops_sumsq(const float* x, size_t n);   // sum of squares, fixed-order reduction
// The partial sums behind ops_sumsq: part[c] (host) = sum of x[i]^2 (in double) over chunk c,
// i in [c*OPS_SUMSQ_CHUNK, (c+1)*OPS_SUMSQ_CHUNK) of x[n]; ops_sumsq adds them in order of c.
// Lets a ZeRO-1 shard aligned to chunks contribute exactly its chunks to the global norm.
#define OPS_SUMSQ_CHUNK 4096
void ops_sumsq_chunks(double* part, const float* x, size_t n);
// AdamW (PyTorch semantics) on n elements, with g = grad * grad_scale:
// p *= (1 - lr*wd); m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// p -= lr * (m / bc1) / (sqrt(v / bc2) + eps),  bc1 = 1 - b1^t, bc2 = 1 - b2^t
void ops_adamw(float* p, const float* grad, float* m, float* v, size_t n, float lr, float b1,
               float b2, float eps, float wd, float grad_scale, int t);
