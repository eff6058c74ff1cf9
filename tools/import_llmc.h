// tools/import_llmc.h: llm.c's GPT-2 model file (gpt2_124M.bin and what its train_gpt2 writes) ->
// a gatedgpt checkpoint that train_gpt resumes from. docs/formats.md "llm.c's model file".
#pragma once
#include <stdio.h>
#include "model/config.h"

// 1 when the file at path starts with llm.c's model magic (20240326): gatedgpt_ckpt import then
// reads it with import_llmc rather than as a Hugging Face directory.
int import_llmc_is_model(const char* path);
// Reads the header (256 int32: magic 20240326, version 3 = fp32 or 5 = bf16 parameters, maxT, V,
// L, NH, C, Vp) and the parameters in llm.c's order, builds the GPT-2 config ([model] bias = true,
// learned positions, layernorm with eps 1e-5, tanh GELU, tied head; the other sections from
// `base`), and writes out_dir/step_00000000 (fresh AdamW state). A header or size that does not
// hold, or a weight that is not finite, is one line naming the file and the field; nothing is
// written then. Returns 0 or -1.
int import_llmc(const char* path, Config* base, const char* out_dir, FILE* log);
