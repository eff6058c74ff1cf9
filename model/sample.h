// model/sample.h: autoregressive sampling from the model (temperature, top-k, seeded; greedy).
#pragma once
#include "gpt.h"

// Generates n_new tokens continuing prompt[n_prompt] (n_prompt >= 1) into out[n_new], over a
// KV cache. The context is the last min(T, ...) tokens, T = the training seq_len the model was
// sized for. The model's activations are switched to batch 1 while sampling and restored after.
// temperature > 0 samples (top_k = 0: from all vocab_size tokens, padding never); temperature
// = 0 is greedy decoding (the largest logit, the lowest id on a tie).
void sample_generate(GPT* m, const int* prompt, int n_prompt, int n_new, float temperature,
                     int top_k, unsigned long long seed, int* out);
