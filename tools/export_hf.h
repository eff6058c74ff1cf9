// tools/export_hf.h: a model as Hugging Face files: model.safetensors + config.json, with
// Qwen3-style tensor names (the mapping: docs/formats.md, "Export").
#pragma once
#include "model/config.h"
#include "model/params.h"

// Writes out_dir/model.safetensors and out_dir/config.json (each as NAME.tmp, then renamed)
// for the parameters in the host arena `params` (layout of table t). `step` goes into the
// metadata. Prints one line per exported tensor to `log` when it is not NULL. Returns 0 or -1
// with a one-line error naming the file.
int export_hf(const char* out_dir, const Config* c, const ParamTable* t, const float* params, int step, FILE* log);
