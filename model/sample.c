// model/sample.c: autoregressive sampling over a KV cache (model/kv_cache.h): the prompt is fed
// once (in chunks of at most the context window), then one forward of one token per new token.
// The context window is T, the sequence length the model's activations were sized for (the
// trainer's seq_len): once the text outgrows it, each token is computed from the last T tokens
// again (the cache is refilled with them), as sampling without a cache did.
#include "sample.h"
#include "kv_cache.h"
#include "rng.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The k-th largest of x[0..n): the logits >= it are the top k (ties at the boundary are all
// kept). scratch[n] is overwritten.
static float topk_threshold(const float* x, int n, int k, float* scratch) {
    memcpy(scratch, x, (size_t)n * sizeof(float));
    // partial selection sort, O(n k): k is a top-k of tens, once per sampled token
    int lo = 0;
    for (int i = 0; i < k; i++) {
        int best = lo;
        for (int j = lo + 1; j < n; j++) if (scratch[j] > scratch[best]) best = j;
        float t = scratch[lo]; scratch[lo] = scratch[best]; scratch[best] = t;
        lo++;
    }
    return scratch[k - 1];
}

// the next token from the logits[V]: greedy (temperature 0: the largest, the lowest id on a
// tie) or sampled from softmax(logits / temperature) over the top k
static int sample_pick(const float* logits, int V, float temperature, int k, float* scratch, Rng* rng) {
    if (temperature == 0.0f) {
        int best = 0;
        for (int i = 1; i < V; i++) if (logits[i] > logits[best]) best = i;
        return best;
    }
    float thr = k < V ? topk_threshold(logits, V, k, scratch) : -INFINITY;
    float mx = -INFINITY;
    for (int i = 0; i < V; i++) if (logits[i] > mx) mx = logits[i];
    double sum = 0.0;
    for (int i = 0; i < V; i++) {
        double p = logits[i] >= thr ? exp((logits[i] - mx) / temperature) : 0.0;
        scratch[i] = (float)p;
        sum += p;
    }
    double u = rng_uniform(rng) * sum, c = 0.0;
    int tok = -1;
    for (int i = 0; i < V; i++) {
        if (scratch[i] <= 0.0f) continue;
        tok = i;                       // the last candidate, should rounding leave c < u
        c += scratch[i];
        if (c >= u) break;
    }
    return tok;
}

void sample_generate(GPT* m, const int* prompt, int n_prompt, int n_new, float temperature,
                     int top_k, unsigned long long seed, int* out) {
    const int B0 = m->B, T0 = m->T, V = m->cfg.vocab_size;
    const int total = n_prompt + n_new;
    const int T = total < T0 ? total : T0;      // the context window
    int* seq = malloc((size_t)total * sizeof(int));
    float* logits = malloc((size_t)V * sizeof(float));
    float* scratch = malloc((size_t)V * sizeof(float));
    if (!seq || !logits || !scratch) { fprintf(stderr, "error: sample: out of host memory\n"); exit(1); }
    memcpy(seq, prompt, (size_t)n_prompt * sizeof(int));
    Rng rng;
    rng_seed(&rng, seed);
    const int k = top_k > 0 && top_k < V ? top_k : V;
    KVCache kv;
    if (kv_cache_init(&kv, &m->cfg, 1, T, 0, T, 0, KV_POS_ORIGINAL, "sample") != 0) exit(1);
    m->kv = &kv;
    int fed = 0, acts_T = 0;    // tokens of seq in the cache (from seq + fed - kv.n); acts size
    for (int len = n_prompt; len < total; len++) {
        // the logits after seq[len - 1]: feed what the cache lacks, or refill it with the window
        int from = fed, count = len - fed;
        if (kv.n + count > T) {                  // outgrown: the last T tokens again
            kv_cache_reset(&kv);
            from = len - T;
            count = T;
        }
        while (count > 0) {
            int c = count;
            if (c != acts_T) { gpt_alloc_acts(m, 1, c); acts_T = c; }
            gpt_forward(m, seq + from, NULL);
            from += c;
            count -= c;
        }
        fed = len;
        gpt_logits_to_host(m, logits, acts_T - 1, V);
        seq[len] = sample_pick(logits, V, temperature, k, scratch, &rng);
    }
    memcpy(out, seq + n_prompt, (size_t)n_new * sizeof(int));
    m->kv = NULL;
    kv_cache_free(&kv);
    free(seq); free(logits); free(scratch);
    gpt_alloc_acts(m, B0, T0);
}
