// tools/import_hf.h: a Hugging Face directory (config.json + model.safetensors, or its shards) of
// a class that tools/export_hf.c writes -> a gatedgpt checkpoint that train_gpt resumes from
// (continued pre-training of a model made elsewhere). docs/formats.md "Import".
#pragma once
#include <stdio.h>
#include "model/config.h"

// Reads in_dir, builds the model config from config.json (the non-model sections from `base`,
// a Config the caller loaded: defaults or a --config file), fills the weights from
// model.safetensors, or without it from the shards that model.safetensors.index.json maps
// (transformers' sharded save_pretrained; index and shards must agree exactly), converting F32,
// BF16 or F16 to float32 exactly, and writes the checkpoint out_dir/step_00000000 (fresh AdamW
// state, data at the start). Anything the class has that gatedgpt cannot represent (a nonzero
// bias, partial RoPE, another activation, an unknown tensor...), an inf or NaN weight, or an
// index that does not match its shards is refused with a one-line error naming the file and
// the field; nothing is written then. Returns 0 or -1.
int import_hf(const char* in_dir, Config* base, const char* out_dir, FILE* log);
