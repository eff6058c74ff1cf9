// tools/export_hf.h: a model as Hugging Face files: model.safetensors + config.json, as the
// transformers class that represents it exactly, or in gatedgpt's own layout (docs/formats.md,
// "Export").
#pragma once
#include "model/config.h"
#include "model/params.h"

// The transformers class that computes exactly what a model with this config computes, or
// HF_NONE with a one-line reason in why (naming the setting and the nearest exportable one).
typedef enum { HF_NONE = 0, HF_GPT2, HF_LLAMA, HF_QWEN3, HF_QWEN3_NEXT, HF_QWEN3_MOE, HF_QWEN2_MOE } HfClass;
HfClass export_hf_class(const ModelConfig* m, char* why, size_t n);
const char* export_hf_class_name(HfClass k);

// Writes out_dir/model.safetensors and out_dir/config.json (each as NAME.tmp, then renamed)
// for the parameters in the host arena `params` (layout of table t): as the model's transformers
// class (raw = 0; a model without one is refused with a one-line error before anything is
// written) or gatedgpt's own names (raw = 1). `step` goes into the metadata; eot >= 0: the
// tokenizer's end-of-text id (bos/eos_token_id). Prints what it wrote to `log` when not NULL.
// Returns 0 or -1 with a one-line error naming the file.
int export_hf(const char* out_dir, const Config* c, const ParamTable* t, const float* params, int step,
              int raw, int eot, FILE* log);
