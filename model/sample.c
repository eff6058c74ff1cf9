// model/sample.c: autoregressive sampling. Each new token costs one forward pass over the
// context window (no KV cache: sampling is for reading progress, not for serving).
#include "sample.h"
#include "rng.h"
#include <math.h>
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

void sample_generate(GPT* m, const int* prompt, int n_prompt, int n_new, float temperature,
                     int top_k, unsigned long long seed, int* out) {
    const int B0 = m->B, T0 = m->T, V = m->cfg.vocab_size;
    int T = n_prompt + n_new < T0 ? n_prompt + n_new : T0;
    gpt_alloc_acts(m, 1, T);
    int total = n_prompt + n_new;
    int* seq = malloc((size_t)total * sizeof(int));
    int* idx = calloc((size_t)T, sizeof(int));
    float* logits = malloc((size_t)V * sizeof(float));
    float* scratch = malloc((size_t)V * sizeof(float));
    memcpy(seq, prompt, (size_t)n_prompt * sizeof(int));
    Rng rng;
    rng_seed(&rng, seed);
    int k = top_k > 0 && top_k < V ? top_k : V;
    for (int len = n_prompt; len < total; len++) {
        // the causal model's logits at position p see only tokens <= p: zero padding after
        // the context changes nothing we read
        int ctx = len < T ? len : T;
        memset(idx, 0, (size_t)T * sizeof(int));
        memcpy(idx, seq + len - ctx, (size_t)ctx * sizeof(int));
        gpt_forward(m, idx, NULL);
        gpt_logits_to_host(m, logits, ctx - 1, V);
        float thr = k < V ? topk_threshold(logits, V, k, scratch) : -INFINITY;
        float mx = -INFINITY;
        for (int i = 0; i < V; i++) if (logits[i] > mx) mx = logits[i];
        double sum = 0.0;
        for (int i = 0; i < V; i++) {
            double p = logits[i] >= thr ? exp((logits[i] - mx) / temperature) : 0.0;
            scratch[i] = (float)p;
            sum += p;
        }
        double u = rng_uniform(&rng) * sum, c = 0.0;
        int tok = -1;
        for (int i = 0; i < V; i++) {
            if (scratch[i] <= 0.0f) continue;
            tok = i;                       // the last candidate, should rounding leave c < u
            c += scratch[i];
            if (c >= u) break;
        }
        seq[len] = tok;
    }
    memcpy(out, seq + n_prompt, (size_t)n_new * sizeof(int));
    free(seq); free(idx); free(logits); free(scratch);
    gpt_alloc_acts(m, B0, T0);
}
