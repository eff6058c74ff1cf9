// tools/long_context.c: gatedgpt_ckpt lengths / stream (tools/long_context.h).
#include "long_context.h"
#include "../data/shard.h"
#include "../model/kv_cache.h"
#include "../train/jsonl.h"
#include <glob.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char* const SCALING_NAMES[] = {"none", "linear", "ntk", "yarn"};
static const char* const POSITION_NAMES[] = {"original", "cache"};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

int lc_parse_list(const char* opt, const char* s, int kind, int* out, int max) {
    int n = 0;
    const char* p = s;
    while (*p) {
        const char* e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        char item[64];
        if (len == 0 || len >= sizeof item || n >= max) {
            fprintf(stderr, "error: %s '%s': expected a comma-separated list of at most %d items\n", opt, s, max);
            return -1;
        }
        memcpy(item, p, len);
        item[len] = 0;
        if (kind == 0) {
            char* end;
            long v = strtol(item, &end, 10);
            if (*end || v < 0 || v > 1 << 28) {
                fprintf(stderr, "error: %s: '%s' is not a count (accepted: integers >= 0, e.g. 0,4)\n", opt, item);
                return -1;
            }
            out[n++] = (int)v;
        } else {
            const char* const* names = kind == 1 ? SCALING_NAMES : POSITION_NAMES;
            int nn = kind == 1 ? 4 : 2, found = -1;
            for (int i = 0; i < nn; i++) if (strcmp(item, names[i]) == 0) found = i;
            if (found < 0) {
                fprintf(stderr, "error: %s: unknown %s '%s' (accepted: %s)\n", opt, kind == 1 ? "scaling" : "positions",
                        item, kind == 1 ? "none, linear, ntk, yarn" : "cache, original");
                return -1;
            }
            out[n++] = found;
        }
        p += len + (e ? 1 : 0);
        if (e && !*p) { fprintf(stderr, "error: %s '%s': empty item at the end\n", opt, s); return -1; }
    }
    if (n == 0) { fprintf(stderr, "error: %s: empty list\n", opt); return -1; }
    return n;
}

// The first `need` tokens of the shards matching glob (in name order) into *tok; returns the
// count read (< need when they hold fewer; *have = all they hold), or -1 after an error.
static long read_stream(const char* glob_pat, int vocab, long need, int** tok, long* have) {
    glob_t g;
    if (glob(glob_pat, 0, NULL, &g) != 0 || g.gl_pathc == 0) {
        fprintf(stderr, "error: no token shards match '%s' (pass --glob PATTERN; docs/formats.md)\n", glob_pat);
        return -1;
    }
    *tok = malloc((size_t)(need > 0 ? need : 1) * sizeof(int));
    if (!*tok) { globfree(&g); fprintf(stderr, "error: out of host memory for %ld tokens\n", need); return -1; }
    long got = 0;
    *have = 0;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        Shard sh;
        memset(&sh, 0, sizeof sh);
        if (shard_open(&sh, g.gl_pathv[i], vocab) != 0) { globfree(&g); return -1; }
        long n = (long)sh.header.num_tokens;
        *have += n;
        long take = need - got < n ? need - got : n;
        if (take > 0) { shard_get(&sh, 0, take, *tok + got); got += take; }
        shard_close(&sh);
    }
    globfree(&g);
    return got;
}

static double gb(size_t bytes) { return (double)bytes / 1e9; }

// Memory for a cache of cap slots plus activations for chunks of c tokens; an error before
// allocating when it cannot fit.
static int check_memory(const char* what, const ModelConfig* c, int cap, int n_sink, int chunk, int rolling,
                        KvPositions pos, int len) {
    size_t cache = kv_cache_bytes(c, 1, cap, n_sink, chunk, rolling, pos);
    size_t acts = gpt_acts_bytes(c, 1, chunk, RECOMPUTE_NONE);
    size_t avail = ops_mem_available();
    if (cache + acts > avail) {
        fprintf(stderr, "error: %s: a context of %d tokens needs %.3f GB (KV cache %.3f GB + activations %.3f GB), "
                "but %.3f GB are available: use a shorter length or window\n", what, len, gb(cache + acts), gb(cache),
                gb(acts), gb(avail));
        return -1;
    }
    return 0;
}

// gpt_alloc_acts(1, T) unless the model is already sized so
static void acts_for(GPT* m, int T) {
    if (m->B != 1 || m->T != T || !m->acts) gpt_alloc_acts(m, 1, T);
}

// ---------------------------------------------------------------------------------------------
int lc_lengths(GPT* m, const Config* cfg, const LcLengths* o, FILE* out) {
    const ModelConfig* c0 = &cfg->model;
    const int T = c0->rope_original_len > 0 ? c0->rope_original_len : cfg->train.seq_len;
    const int chunk = cfg->train.seq_len;
    int lengths[LC_MAX_LIST], nl = o->n_lengths, scal[LC_MAX_LIST], ns = o->n_scalings;
    if (nl == 0) { nl = 4; for (int i = 0; i < 4; i++) lengths[i] = T << i; }
    else memcpy(lengths, o->lengths, (size_t)nl * sizeof(int));
    if (ns == 0) {
        ns = c0->pos == POS_ROPE ? 4 : 1;
        for (int i = 0; i < ns; i++) scal[i] = i;
    } else memcpy(scal, o->scalings, (size_t)ns * sizeof(int));
    // every check before the first forward: bad settings cost nothing
    int maxL = 0;
    for (int i = 0; i < nl; i++) {
        int L = lengths[i];
        if (L < 1) { fprintf(stderr, "error: lengths: --lengths: %d is not a length (accepted: >= 1)\n", L); return 1; }
        if (c0->pos == POS_LEARNED && L > c0->max_seq_len) {
            fprintf(stderr, "error: lengths: length %d > [model] max_seq_len = %d of a learned-position model (pos = "
                    "learned has no embedding past it): pass --lengths of at most %d, or use a pos = rope model\n",
                    L, c0->max_seq_len, c0->max_seq_len);
            return 1;
        }
        if (check_memory("lengths", c0, L, 0, chunk < L ? chunk : L, 0, KV_POS_ORIGINAL, L) != 0) return 1;
        if (L > maxL) maxL = L;
    }
    for (int i = 0; i < ns; i++)
        if (scal[i] != ROPE_SCALING_NONE && c0->pos != POS_ROPE) {
            fprintf(stderr, "error: lengths: --scalings %s with [model] pos = learned: there is no rotary embedding to "
                    "scale (accepted: none)\n", SCALING_NAMES[scal[i]]);
            return 1;
        }
    long need_max = 0;
    for (int i = 0; i < nl; i++) {
        long w = o->tokens / lengths[i] > 0 ? o->tokens / lengths[i] : 1;
        if (w * lengths[i] + 1 > need_max) need_max = w * lengths[i] + 1;
    }
    int* tok = NULL;
    long have = 0, got = read_stream(o->glob, c0->vocab_size, need_max, &tok, &have);
    if (got < 0) return 1;
    if (have < (long)maxL + 1) {
        fprintf(stderr, "error: lengths: length %d needs %d tokens of text, but the shards '%s' hold %ld: pass "
                "shorter --lengths or more text (--glob)\n", maxL, maxL + 1, o->glob, have);
        free(tok);
        return 1;
    }
    const ModelConfig saved = m->cfg;
    int rc = 0;
    printf("lengths: %s (step %d), training length T = %d, chunks of %d tokens, %ld tokens of %s\n", o->ckpt, o->step,
           T, chunk, got, o->glob);
    printf("%-8s %8s %8s %8s %10s %9s  loss per position bucket of %d\n", "scaling", "factor", "length", "windows",
           "loss", "ppl", T);
    float* losses = malloc((size_t)chunk * sizeof(float));
    for (int li = 0; li < nl && rc == 0; li++) {
        const int L = lengths[li];
        // tokens / L windows (at least one), as many as the text read holds
        long windows = o->tokens / L > 0 ? o->tokens / L : 1;
        if (windows > (got - 1) / L) windows = (got - 1) / L;
        const int nb = (L + T - 1) / T;
        const int c = chunk < L ? chunk : L;
        KVCache kv;
        if (kv_cache_init(&kv, &m->cfg, 1, L, 0, c, 0, KV_POS_ORIGINAL, "lengths") != 0) { rc = 1; break; }
        for (int si = 0; si < ns; si++) {
            double t0 = now_s();
            m->cfg.rope_scaling = (RopeScalingKind)scal[si];
            m->cfg.rope_factor = L > T && scal[si] != ROPE_SCALING_NONE ? (float)L / T : 1.0f;
            m->T = 0;                       // the shape changed: size the activations again
            double* bsum = calloc((size_t)nb, sizeof(double));
            long* bcnt = calloc((size_t)nb, sizeof(long));
            double sum = 0.0;
            for (long w = 0; w < windows; w++) {
                const int* in = tok + w * L;
                kv_cache_reset(&kv);
                m->kv = &kv;
                for (int p = 0; p < L; p += c) {
                    int cs = L - p < c ? L - p : c;
                    acts_for(m, cs);
                    gpt_forward(m, in + p, in + p + 1);
                    gpt_losses_to_host(m, losses);
                    for (int t = 0; t < cs; t++) {
                        sum += losses[t];
                        bsum[(p + t) / T] += losses[t];
                        bcnt[(p + t) / T]++;
                    }
                }
                m->kv = NULL;
            }
            double loss = sum / ((double)windows * L);
            Jsonl j;
            jsonl_begin(&j, out, "length_eval", o->step);
            jsonl_str(&j, "ckpt", o->ckpt);
            jsonl_str(&j, "scaling", SCALING_NAMES[scal[si]]);
            jsonl_num(&j, "factor", m->cfg.rope_factor);
            jsonl_int(&j, "length", L);
            jsonl_int(&j, "train_len", T);
            jsonl_int(&j, "windows", windows);
            jsonl_int(&j, "tokens", windows * L);
            jsonl_num(&j, "loss", loss);
            jsonl_num(&j, "ppl", exp(loss));
            jsonl_arr(&j, "buckets");
            for (int b = 0; b < nb; b++) {
                jsonl_obj(&j, NULL);
                jsonl_int(&j, "lo", (long long)b * T);
                jsonl_int(&j, "hi", (long long)(b + 1) * T < L ? (long long)(b + 1) * T : L);
                jsonl_num(&j, "loss", bcnt[b] ? bsum[b] / bcnt[b] : NAN);
                jsonl_num(&j, "ppl", bcnt[b] ? exp(bsum[b] / bcnt[b]) : NAN);
                jsonl_close(&j);
            }
            jsonl_close(&j);
            jsonl_end(&j);
            fflush(out);
            printf("%-8s %8.3g %8d %8ld %10.5f %9.2f ", SCALING_NAMES[scal[si]], (double)m->cfg.rope_factor, L, windows,
                   loss, exp(loss));
            for (int b = 0; b < nb && b < 16; b++) printf(" %.3f", bsum[b] / bcnt[b]);
            printf("%s  (%.1f s)\n", nb > 16 ? " ..." : "", now_s() - t0);
            fflush(stdout);
            free(bsum); free(bcnt);
        }
        kv_cache_free(&kv);
    }
    m->cfg = saved;
    m->T = 0;
    free(losses);
    free(tok);
    return rc;
}

// ---------------------------------------------------------------------------------------------
// One streaming run: W slots (rolling) keeping S sinks, or (dense) every token visible.
static int stream_one(GPT* m, const int* tok, long N, int W, int S, int P, int dense, const LcStream* o, int T,
                      int seq_len, FILE* out) {
    const int L = m->cfg.n_layer, nb = o->buckets;
    double t0 = now_s();
    KVCache kv;
    // the rolling window takes a token per forward; the dense reference (a growing cache, which
    // equals the full forward: tests/test_kv_cache.c) takes chunks of the training length
    const int cap = dense ? (int)N : W, chunk = dense ? seq_len : 1;
    if (kv_cache_init(&kv, &m->cfg, 1, cap, dense ? 0 : S, chunk, dense ? 0 : 1, (KvPositions)P, "stream") != 0) return 1;
    kv.stats = 1;
    m->kv = &kv;
    double sum = 0.0, after = 0.0;
    long n_after = 0;
    double* bsum = calloc((size_t)nb, sizeof(double));
    long* bcnt = calloc((size_t)nb, sizeof(long));
    float* losses = malloc((size_t)chunk * sizeof(float));
    long report = N / 10 > 0 ? N / 10 : 1, next_report = report;
    for (long p0 = 0; p0 < N; p0 += chunk) {
        int cs = N - p0 < chunk ? (int)(N - p0) : chunk;
        acts_for(m, cs);
        gpt_forward(m, tok + p0, tok + p0 + 1);
        gpt_losses_to_host(m, losses);
        for (int t = 0; t < cs; t++) {
            long p = p0 + t;
            sum += losses[t];
            if (p >= W) { after += losses[t]; n_after++; }
            int b = (int)(p * nb / N);
            bsum[b] += losses[t];
            bcnt[b]++;
        }
        if (p0 + cs >= next_report && N >= 5000) {
            fprintf(stderr, "  stream %s W=%d S=%d %s: %ld/%ld tokens, loss so far %.4f (%.0f s)\n",
                    dense ? "dense" : "window", cap, dense ? 0 : S, POSITION_NAMES[P], p0 + cs, N, sum / (p0 + cs),
                    now_s() - t0);
            next_report += report;
        }
    }
    free(losses);
    m->kv = NULL;
    Jsonl j;
    jsonl_begin(&j, out, "stream_eval", o->step);
    jsonl_str(&j, "ckpt", o->ckpt);
    jsonl_int(&j, "window", cap);
    jsonl_int(&j, "sinks", dense ? 0 : S);
    jsonl_str(&j, "positions", dense ? "original" : POSITION_NAMES[P]);
    jsonl_bool(&j, "dense", dense);
    jsonl_int(&j, "tokens", N);
    jsonl_int(&j, "train_len", T);
    jsonl_num(&j, "loss", sum / N);
    if (n_after) jsonl_num(&j, "loss_after_window", after / n_after);
    else jsonl_null(&j, "loss_after_window");
    jsonl_arr(&j, "buckets");
    for (int b = 0; b < nb; b++) {
        jsonl_obj(&j, NULL);
        jsonl_int(&j, "lo", (long long)((double)b * N / nb + 0.999999));
        jsonl_int(&j, "hi", (long long)((double)(b + 1) * N / nb + 0.999999));
        jsonl_num(&j, "loss", bcnt[b] ? bsum[b] / bcnt[b] : NAN);
        jsonl_close(&j);
    }
    jsonl_close(&j);
    // per layer; a hybrid's Gated DeltaNet layers attend over nothing (null), and the console
    // shows the last attention layer
    jsonl_arr(&j, "f_attn");
    int last_attn = -1;
    for (int l = 0; l < L; l++) {
        int attn = !config_layer_is_linear(&m->cfg, l);
        if (attn) last_attn = l;
        jsonl_num(&j, NULL, kv.fattn_count && attn ? kv.fattn_sum[l] / kv.fattn_count : NAN);
    }
    jsonl_close(&j);
    jsonl_end(&j);
    fflush(out);
    printf("%-6s %7d %5d %-9s %10.5f %12s  F-Attn last attention layer %.4f  (%.1f s)\n", dense ? "dense" : "window",
           cap, dense ? 0 : S, dense ? "original" : POSITION_NAMES[P], sum / N, "",
           kv.fattn_count && last_attn >= 0 ? kv.fattn_sum[last_attn] / kv.fattn_count : NAN, now_s() - t0);
    if (n_after) printf("%50s loss after the first %d tokens: %.5f\n", "", W, after / n_after);
    fflush(stdout);
    free(bsum); free(bcnt);
    kv_cache_free(&kv);
    return 0;
}

int lc_stream(GPT* m, const Config* cfg, const LcStream* o, FILE* out) {
    const ModelConfig* c = &cfg->model;
    const int T = c->rope_original_len > 0 ? c->rope_original_len : cfg->train.seq_len;
    const int W = o->window > 0 ? o->window : 2 * T;
    int sinks[LC_MAX_LIST] = {0, 4}, ns = o->n_sinks ? o->n_sinks : 2;
    int pos[LC_MAX_LIST] = {KV_POS_CACHE, KV_POS_ORIGINAL}, np = o->n_positions ? o->n_positions : 2;
    if (o->n_sinks) memcpy(sinks, o->sinks, (size_t)ns * sizeof(int));
    if (o->n_positions) memcpy(pos, o->positions, (size_t)np * sizeof(int));
    if (c->pos != POS_ROPE) {
        fprintf(stderr, "error: stream: [model] pos = learned: a rolling KV window needs rope (a learned-position model "
                "has no position past max_seq_len = %d)\n", c->max_seq_len);
        return 1;
    }
    if (o->buckets < 1) { fprintf(stderr, "error: stream: --buckets must be >= 1\n"); return 1; }
    for (int i = 0; i < ns; i++)
        if (sinks[i] >= W) {
            fprintf(stderr, "error: stream: --sinks %d >= --window %d: the window must hold the sink tokens and at least "
                    "one more (accepted: 0 <= S < W)\n", sinks[i], W);
            return 1;
        }
    if (o->tokens < 1) { fprintf(stderr, "error: stream: --tokens must be >= 1\n"); return 1; }
    if (W > o->tokens) {
        fprintf(stderr, "error: stream: --window %d is larger than the stream (--tokens %ld): nothing would be evicted "
                "(accepted: W <= tokens)\n", W, o->tokens);
        return 1;
    }
    int max_s = 0;
    for (int i = 0; i < ns; i++) if (sinks[i] > max_s) max_s = sinks[i];
    if (check_memory("stream", c, W, max_s, 1, 1, KV_POS_CACHE, W) != 0) return 1;
    int* tok = NULL;
    long have = 0, got = read_stream(o->glob, c->vocab_size, o->tokens + 1, &tok, &have);
    if (got < 0) return 1;
    if (got < o->tokens + 1) {
        fprintf(stderr, "error: stream: --tokens %ld needs %ld tokens of text, but the shards '%s' hold %ld: pass "
                "--tokens %ld or fewer, or more text (--glob)\n", o->tokens, o->tokens + 1, o->glob, have, have - 1);
        free(tok);
        return 1;
    }
    const long N = o->tokens;
    int dense = o->dense;
    if (dense) {
        size_t need = kv_cache_bytes(c, 1, (int)N, 0, cfg->train.seq_len, 0, KV_POS_ORIGINAL) +
                      gpt_acts_bytes(c, 1, cfg->train.seq_len, RECOMPUTE_NONE);
        if (need > ops_mem_available()) {
            printf("stream: the dense reference over %ld tokens needs %.3f GB, more than the %.3f GB available: skipped\n",
                   N, gb(need), gb(ops_mem_available()));
            dense = 0;
        }
    }
    printf("stream: %s (step %d), %ld tokens of %s, training length %d, RoPE scaling %s\n", o->ckpt, o->step, N, o->glob,
           T, SCALING_NAMES[c->rope_scaling]);
    printf("%-6s %7s %5s %-9s %10s\n", "kind", "window", "sinks", "positions", "loss");
    int rc = 0;
    for (int i = 0; i < ns && rc == 0; i++)
        for (int p = 0; p < np && rc == 0; p++) {
            if (sinks[i] == 0 && pos[p] == KV_POS_ORIGINAL && np > 1 && pos[0] != KV_POS_ORIGINAL) continue;
            rc = stream_one(m, tok, N, W, sinks[i], pos[p], 0, o, T, cfg->train.seq_len, out);
        }
    if (rc == 0 && dense) rc = stream_one(m, tok, N, W, 0, KV_POS_ORIGINAL, 1, o, T, cfg->train.seq_len, out);
    m->T = 0;
    free(tok);
    return rc;
}
