// tools/import_hf.c: Hugging Face directory -> gatedgpt checkpoint (tools/import_hf.h). The
// inverse of tools/export_hf.c's class mappings: GPT2LMHeadModel, LlamaForCausalLM,
// Qwen3ForCausalLM, Qwen3NextForCausalLM (full attention, or hybrid with Gated DeltaNet layers:
// layer_types -> layer_pattern), Qwen3MoeForCausalLM, Qwen2MoeForCausalLM.
#define _GNU_SOURCE
#include "import_hf.h"
#include "json_read.h"
#include "kernels/ops.h"
#include "model/gpt.h"
#include "model/optim.h"
#include "train/checkpoint.h"
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

// One safetensors file, mapped read-only (a Hub model's shards can be tens of GB: the pages are
// read as the tensors are converted, and the kernel may drop them again).
typedef struct {
    char path[1100];
    Jv hdr;                        // its JSON header: {name: {dtype, shape, data_offsets}, __metadata__?}
    unsigned char* map;            // the whole file (munmap'ed at the end)
    size_t map_len;
    const unsigned char* data;     // the bytes after the header: data_offsets count from here
    size_t data_len;
} StFile;

// One tensor of one of the files; Src.ent holds every tensor of every file, sorted by name.
typedef struct {
    const char* name;              // the key in its file's header
    const Jv* t;                   // its header entry
    int file;                      // index into Src.files
    int mapped;                    // sharded: the number of weight_map entries naming it (must be 1)
    int used;                      // consumed by fill()
} StTensor;

typedef struct {
    const char* dir;
    char cfg_path[1100];
    char st_path[1100];      // model.safetensors, or (sharded) model.safetensors.index.json
    Jv conf;                 // config.json
    Jv index;                // the index (sharded only)
    StFile* files;           // [n_files]: model.safetensors alone, or the shards the index names
    int n_files;
    StTensor* ent;           // [n_ent], sorted by name
    int n_ent;
} Src;

static int slurp(const char* path, char** buf, size_t* n) {
    FILE* f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "error: import: cannot open '%s'\n", path); return -1; }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    *buf = malloc((size_t)len + 1);
    if (!*buf || fread(*buf, 1, (size_t)len, f) != (size_t)len) {
        fclose(f);
        fprintf(stderr, "error: import: cannot read '%s'\n", path);
        return -1;
    }
    fclose(f);
    (*buf)[len] = 0;
    *n = (size_t)len;
    return 0;
}

// ---- config.json -> [model] / [moe] overrides
static int set(Config* c, const Src* s, const char* fmt, ...) {
    char kv[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(kv, sizeof kv, fmt, ap);
    va_end(ap);
    if (config_apply_override(c, kv) != 0) {
        fprintf(stderr, "error: import: %s: the value gives %s, which gatedgpt refuses (above)\n", s->cfg_path, kv);
        return -1;
    }
    // the value's origin is config.json (config_finalize's errors and config.ini's comments name it)
    for (int i = 0; i < config_key_count(); i++) {
        const char* sec;
        const char* key = config_key(i, &sec);
        size_t ns = strlen(sec), nk = strlen(key);
        if (strncmp(kv, sec, ns) == 0 && kv[ns] == '.' && strncmp(kv + ns + 1, key, nk) == 0 && kv[ns + 1 + nk] == '=')
            snprintf(c->origin[i], sizeof c->origin[i], "%.*s", (int)sizeof c->origin[i] - 1, s->cfg_path);
    }
    return 0;
}
static const Jv* need(const Src* s, const Jv* obj, const char* key, JvKind kind) {
    const Jv* v = jv_get(obj, key);
    if (!v || v->kind != kind) {
        fprintf(stderr, "error: import: %s: field \"%s\" %s\n", s->cfg_path, key, v ? "has the wrong type" : "is missing");
        return NULL;
    }
    return v;
}
#define NUM(obj, key) ({ const Jv* v_ = need(s, obj, key, JV_NUM); if (!v_) return -1; v_->num; })
static double num_or(const Jv* obj, const char* key, double dflt) {
    const Jv* v = jv_get(obj, key);
    return v && v->kind == JV_NUM ? v->num : dflt;
}
static int bool_or(const Jv* obj, const char* key, int dflt) {
    const Jv* v = jv_get(obj, key);
    return v && v->kind == JV_BOOL ? v->b : dflt;
}
static const char* str_or(const Jv* obj, const char* key, const char* dflt) {
    const Jv* v = jv_get(obj, key);
    return v && v->kind == JV_STR ? v->str : dflt;
}
static int refuse(const Src* s, const char* field, const char* why) {
    fprintf(stderr, "error: import: %s: %s: %s\n", s->cfg_path, field, why);
    return -1;
}

// A number config.json may hold under more than one name: transformers' attribute_map aliases
// (GPT-2's n_embd = hidden_size; Qwen3-MoE's num_experts, which transformers 5 writes as
// num_local_experts) or a name that changed between versions. names: NULL-terminated, the one
// transformers 5.25 writes first. Returns 1 with *v when one of them is there (two that disagree
// are refused: which one transformers takes depends on their order), 0 when none is (or null),
// -1 after a one-line error. `why`, when not NULL, makes absence an error too: the field decides
// the architecture, and guessing it would only move the error to a tensor it names wrongly.
static int num_alias(const Src* s, const Jv* obj, const char* const* names, const char* why, double* v) {
    const char* found = NULL;
    for (int i = 0; names[i]; i++) {
        const Jv* x = jv_get(obj, names[i]);
        if (!x || x->kind == JV_NULL) continue;
        if (x->kind != JV_NUM) {
            fprintf(stderr, "error: import: %s: field \"%s\" has the wrong type (accepted: a number)\n", s->cfg_path, names[i]);
            return -1;
        }
        if (found && x->num != *v) {
            fprintf(stderr, "error: import: %s: fields \"%s\" (%.17g) and \"%s\" (%.17g) are the same setting and disagree "
                    "(fix: keep one)\n", s->cfg_path, found, *v, names[i], x->num);
            return -1;
        }
        found = names[i];
        *v = x->num;
    }
    if (found || !why) return found != NULL;
    char looked[200] = "";
    for (int i = 0; names[i]; i++)
        snprintf(looked + strlen(looked), sizeof looked - strlen(looked), "%s\"%s\"", i == 0 ? "" : i == 1 ? " (or " : ", ", names[i]);
    fprintf(stderr, "error: import: %s: field %s%s is missing: %s\n", s->cfg_path, looked, names[1] ? ")" : "", why);
    return -1;
}
// num_alias for a field that must be there: `var` gets its value, or the caller returns -1
#define NEED_ALIAS(var, obj, names, why) do { double v_; if (num_alias(s, obj, names, why, &v_) < 0) return -1; var = v_; } while (0)
// ... and for one that may be absent: `var` keeps its default then
#define OPT_ALIAS(var, obj, names) do { double v_; int r_ = num_alias(s, obj, names, NULL, &v_); if (r_ < 0) return -1; if (r_) var = v_; } while (0)

// RoPE: transformers 5's rope_parameters, or 4's rope_scaling + top-level rope_theta (and
// Qwen3-Next's top-level partial_rotary_factor), with transformers 5's precedence
// (configuration_utils.py, modeling_rope_utils.py): rope_scaling when it is there, else
// rope_parameters; a value inside that object before the top-level one. qwen3_next: the class
// honours partial_rotary_factor (absent: 0.25, its config class's default), the others rotate
// every channel of a head of hd.
static int read_rope(Config* c, const Src* s, int qwen3_next, int hd) {
    const Jv* sc = jv_get(&s->conf, "rope_scaling");
    if (!sc || sc->kind != JV_OBJ) sc = jv_get(&s->conf, "rope_parameters");
    if (sc && sc->kind != JV_OBJ && sc->kind != JV_NULL) return refuse(s, "rope_parameters", "not an object");
    for (int i = 0; sc && sc->kind == JV_OBJ && i < sc->n; i++)
        if (sc->items[i].kind == JV_OBJ)
            return refuse(s, sc->keys[i], "RoPE parameters per layer type are not mapped (accepted: one flat rope_parameters)");
    double theta = num_or(sc, "rope_theta", num_or(&s->conf, "rope_theta", 10000.0));
    if (set(c, s, "model.rope_base=%.17g", theta)) return -1;
    double partial = num_or(sc, "partial_rotary_factor", num_or(&s->conf, "partial_rotary_factor", qwen3_next ? 0.25 : 1.0));
    if (!qwen3_next && partial != 1.0)
        return refuse(s, "partial_rotary_factor", "this model_type's transformers class rotates every channel of a head "
                      "(only qwen3_next honours the factor) (accepted: 1.0, or absent)");
    if (qwen3_next) {
        // the rotary dim as transformers takes it: int(head_dim * partial_rotary_factor), in double;
        // [model] rope_fraction = rot / head_dim gives the same rot back (model/config.c)
        double x = hd * partial;
        int rot = x >= 0.0 && x <= hd ? (int)x : -1;
        if (rot < 2 || rot % 2) {
            char why[240];
            snprintf(why, sizeof why, "int(head_dim x partial_rotary_factor) = int(%d x %.9g) = %d rotated channels, not "
                     "an even number in 2 .. head_dim (accepted: e.g. 0.25 or 0.5 where head_dim is a multiple of 8 or 4)",
                     hd, partial, rot);
            return refuse(s, "partial_rotary_factor", why);
        }
        if (rot < hd && set(c, s, "model.rope_fraction=%.9g", (double)rot / hd)) return -1;
    }
    const char* type = str_or(sc, "rope_type", str_or(sc, "type", "default"));
    if (strcmp(type, "default") == 0) return 0;
    if (strcmp(type, "linear") && strcmp(type, "yarn"))
        return refuse(s, "rope_type", "only default, linear and yarn have a gatedgpt equivalent (ntk: a larger rope_theta)");
    if (strcmp(type, "linear") == 0)
        return set(c, s, "model.rope_scaling=linear") || set(c, s, "model.rope_factor=%.9g", num_or(sc, "factor", 1.0)) ? -1 : 0;
    // yarn, as transformers 5 reads it (modeling_rope_utils.py): the training length defaults to
    // max_position_embeddings, the factor to max_position_embeddings over it; DeepSeek's mscale /
    // mscale_all_dim (another attention factor) and truncate = false (an unrounded ramp) have no
    // gatedgpt equivalent
    double max_pos = num_or(&s->conf, "max_position_embeddings", 0);
    double orig = num_or(sc, "original_max_position_embeddings", max_pos);
    double factor = num_or(sc, "factor", orig > 0 ? max_pos / orig : 1.0);
    double attn = num_or(sc, "attention_factor", 0);   // 0: gatedgpt's "0.1 ln(factor) + 1", as transformers' None
    if (attn == 0 && num_or(sc, "mscale", 0) != 0 && num_or(sc, "mscale_all_dim", 0) != 0)
        return refuse(s, "rope_parameters.mscale", "DeepSeek's attention factor from mscale / mscale_all_dim has no gatedgpt "
                      "equivalent (accepted: attention_factor, or neither: 0.1 ln(factor) + 1)");
    if (!bool_or(sc, "truncate", 1))
        return refuse(s, "rope_parameters.truncate", "gatedgpt rounds YaRN's correction range as transformers' default does (accepted: true)");
    // transformers reads a beta of 0 (or null) as its default, 32 and 1
    double bf = num_or(sc, "beta_fast", 0), bs = num_or(sc, "beta_slow", 0);
    if (set(c, s, "model.rope_scaling=yarn") || set(c, s, "model.rope_factor=%.9g", factor) ||
        set(c, s, "model.rope_original_len=%d", (int)orig) || set(c, s, "model.yarn_beta_fast=%.9g", bf != 0 ? bf : 32) ||
        set(c, s, "model.yarn_beta_slow=%.9g", bs != 0 ? bs : 1))
        return -1;
    return attn != 0 && set(c, s, "model.yarn_attn_factor=%.9g", attn) ? -1 : 0;
}

// Qwen3-Next's layer_types (or, without it, full_attention_interval as its config class reads it:
// layer i is linear unless (i + 1) % interval == 0) -> [model] layer_pattern, the shortest period
// that repeats over the layers (at most 63 letters: the field), and the linear_* sizes
// (transformers' defaults when absent).
static int read_layer_types(Config* c, const Src* s, int L) {
    const Jv* J = &s->conf;
    const Jv* lt = jv_get(J, "layer_types");
    if (L < 1) return 0;   // config_finalize refuses num_hidden_layers
    char* pat = calloc((size_t)L + 1, 1);
    if (!pat) { fprintf(stderr, "error: import: out of memory\n"); return -1; }
    if (lt && (lt->kind != JV_ARR || lt->n != L)) {
        free(pat);
        return refuse(s, "layer_types", "not a list of num_hidden_layers entries (accepted: one of full_attention, linear_attention per layer)");
    }
    int interval = (int)num_or(J, "full_attention_interval", 4), any_linear = 0;
    if (!lt && interval < 1) { free(pat); return refuse(s, "full_attention_interval", "must be at least 1"); }
    for (int i = 0; i < L; i++) {
        int lin;
        if (!lt) lin = (i + 1) % interval != 0;
        else if (lt->items[i].kind == JV_STR && strcmp(lt->items[i].str, "full_attention") == 0) lin = 0;
        else if (lt->items[i].kind == JV_STR && strcmp(lt->items[i].str, "linear_attention") == 0) lin = 1;
        else { free(pat); return refuse(s, "layer_types", "an entry other than full_attention or linear_attention"); }
        pat[i] = lin ? 'L' : 'A';
        any_linear |= lin;
    }
    if (!any_linear) { free(pat); return 0; }   // all full attention: layer_pattern stays ""
    int p = 1;
    for (; p < L; p++) {
        if (L % p) continue;
        int i = p;
        while (i < L && pat[i] == pat[i % p]) i++;
        if (i == L) break;
    }
    if (p >= (int)sizeof c->model.layer_pattern) {
        char why[200];
        snprintf(why, sizeof why, "the layer types repeat with no period shorter than %d layers, and gatedgpt's "
                 "layer_pattern holds at most %d letters (accepted: a period of at most %d that divides num_hidden_layers)",
                 p, (int)sizeof c->model.layer_pattern - 1, (int)sizeof c->model.layer_pattern - 1);
        free(pat);
        return refuse(s, "layer_types", why);
    }
    pat[p] = 0;
    int rc = set(c, s, "model.layer_pattern=%s", pat) ||
             set(c, s, "model.linear_n_k_head=%d", (int)num_or(J, "linear_num_key_heads", 16)) ||
             set(c, s, "model.linear_n_v_head=%d", (int)num_or(J, "linear_num_value_heads", 32)) ||
             set(c, s, "model.linear_k_head_dim=%d", (int)num_or(J, "linear_key_head_dim", 128)) ||
             set(c, s, "model.linear_v_head_dim=%d", (int)num_or(J, "linear_value_head_dim", 128)) ||
             set(c, s, "model.linear_conv_kernel=%d", (int)num_or(J, "linear_conv_kernel_dim", 4)) ||
             set(c, s, "model.linear_gate_act=silu") ? -1 : 0;
    free(pat);
    return rc;
}

// The names transformers has written each aliased field under (num_alias): GPT-2's attribute_map,
// and Qwen3-MoE's expert count (transformers 4 wrote num_experts; 5 maps it to num_local_experts
// and writes that). Qwen2-MoE and Qwen3-Next have no alias: num_experts only.
static const char* const GPT2_D[] = {"n_embd", "hidden_size", NULL};
static const char* const GPT2_L[] = {"n_layer", "num_hidden_layers", NULL};
static const char* const GPT2_H[] = {"n_head", "num_attention_heads", NULL};
static const char* const GPT2_P[] = {"n_positions", "max_position_embeddings", NULL};
static const char* const QWEN3_MOE_EXPERTS[] = {"num_local_experts", "num_experts", NULL};
static const char* const EXPERTS[] = {"num_experts", NULL};
static const char* const HEAD_DIM[] = {"head_dim", NULL};
static const char* const KV_HEADS[] = {"num_key_value_heads", NULL};

static int read_config(Config* c, const Src* s, int* cls) {
    const Jv* J = &s->conf;
    const Jv* mt = need(s, J, "model_type", JV_STR);
    if (!mt) return -1;
    static const char* const TYPES[] = {"gpt2", "llama", "qwen3", "qwen3_next", "qwen3_moe", "qwen2_moe"};
    *cls = -1;
    for (int i = 0; i < 6; i++) if (strcmp(mt->str, TYPES[i]) == 0) *cls = i;
    if (*cls < 0) return refuse(s, "model_type", "import reads gpt2, llama, qwen3, qwen3_next, qwen3_moe and qwen2_moe (tools/export_hf.c's classes)");
    if (*cls == 5 && bool_or(J, "qkv_bias", 1)) return refuse(s, "qkv_bias", "gatedgpt has no attention biases (accepted: false)");
    if (set(c, s, "model.vocab_size=%d", (int)NUM(J, "vocab_size")) ||
        set(c, s, "model.tie_embeddings=%s", bool_or(J, "tie_word_embeddings", *cls == 0) ? "true" : "false"))
        return -1;
    if (*cls == 0) {   // GPT-2
        int d, H, L, P;
        NEED_ALIAS(d, J, GPT2_D, "the model width");
        NEED_ALIAS(H, J, GPT2_H, "the number of attention heads");
        NEED_ALIAS(L, J, GPT2_L, "the number of layers");
        NEED_ALIAS(P, J, GPT2_P, "the number of learned positions");
        const char* act = str_or(J, "activation_function", "gelu_new");
        if (strcmp(act, "gelu_new") && strcmp(act, "gelu_pytorch_tanh"))
            return refuse(s, "activation_function", "gatedgpt's GELU is the tanh approximation (accepted: gelu_new)");
        if (bool_or(J, "scale_attn_by_inverse_layer_idx", 0) || !bool_or(J, "scale_attn_weights", 1))
            return refuse(s, "scale_attn_weights", "attention is scaled by 1/sqrt(head_dim) only");
        return set(c, s, "model.n_layer=%d", L) || set(c, s, "model.d_model=%d", d) ||
               set(c, s, "model.n_head=%d", H) || set(c, s, "model.n_kv_head=%d", H) || set(c, s, "model.head_dim=%d", d / H) ||
               set(c, s, "model.d_ff=%d", (int)num_or(J, "n_inner", 4.0 * d)) ||
               set(c, s, "model.max_seq_len=%d", P) || set(c, s, "model.pos=learned") ||
               set(c, s, "model.norm=layernorm") || set(c, s, "model.norm_eps=%.9g", num_or(J, "layer_norm_epsilon", 1e-5)) ||
               set(c, s, "model.mlp=gelu") || set(c, s, "model.qk_norm=false") || set(c, s, "model.attn_gate=none") ? -1 : 0;
    }
    int d = (int)NUM(J, "hidden_size"), H = (int)NUM(J, "num_attention_heads"), L = (int)NUM(J, "num_hidden_layers");
    if (strcmp(str_or(J, "hidden_act", "silu"), "silu")) return refuse(s, "hidden_act", "gatedgpt's SwiGLU uses silu");
    if (bool_or(J, "attention_bias", 0)) return refuse(s, "attention_bias", "gatedgpt has no attention biases (accepted: false)");
    if (bool_or(J, "mlp_bias", 0)) return refuse(s, "mlp_bias", "gatedgpt has no MLP biases (accepted: false)");
    if (bool_or(J, "use_sliding_window", 0)) return refuse(s, "use_sliding_window", "gatedgpt attends over the whole context");
    // key-value heads and head width when absent: transformers' Llama takes the query heads and
    // hidden_size / heads, Qwen3-MoE and Qwen2-MoE hidden_size / heads; the other defaults
    // (Qwen3 32 kv heads of 128, Qwen3-Next 2 of 256, Qwen3-MoE 4, Qwen2-MoE 16) are one model
    // size's: refused, naming the field
    int Hkv = H, hd = H > 0 ? d / H : 0;
    if (*cls == 1) OPT_ALIAS(Hkv, J, KV_HEADS);
    else NEED_ALIAS(Hkv, J, KV_HEADS, "transformers' default for this class is one model size's; the tensors' shapes follow "
                    "from it (fix: add it)");
    if (*cls == 2 || *cls == 3) NEED_ALIAS(hd, J, HEAD_DIM, "transformers' default for this class is one model size's (Qwen3 128, "
                                           "Qwen3-Next 256); the tensors' shapes follow from it (fix: add it)");
    else OPT_ALIAS(hd, J, HEAD_DIM);
    if (set(c, s, "model.n_layer=%d", L) || set(c, s, "model.d_model=%d", d) || set(c, s, "model.n_head=%d", H) ||
        set(c, s, "model.n_kv_head=%d", Hkv) || set(c, s, "model.head_dim=%d", hd) ||
        set(c, s, "model.d_ff=%d", (int)NUM(J, "intermediate_size")) ||
        set(c, s, "model.max_seq_len=%d", (int)NUM(J, "max_position_embeddings")) || set(c, s, "model.pos=rope") ||
        set(c, s, "model.norm=rmsnorm") || set(c, s, "model.norm_eps=%.9g", num_or(J, "rms_norm_eps", 1e-6)) ||
        set(c, s, "model.mlp=swiglu") || set(c, s, "model.qk_norm=%s", *cls >= 2 && *cls <= 4 ? "true" : "false") ||
        set(c, s, "model.attn_gate=%s", *cls == 3 ? "elementwise" : "none") ||
        read_rope(c, s, *cls == 3, hd))
        return -1;
    if (*cls == 3 && read_layer_types(c, s, L)) return -1;   // Qwen3-Next: which layers are Gated DeltaNets
    // no full-attention layer: RoPE is unused, and a rope_fraction away from 1 would be refused as
    // a key without effect (the class's default 0.25 included)
    if (*cls == 3 && c->model.layer_pattern[0] && !strchr(c->model.layer_pattern, 'A') && set(c, s, "model.rope_fraction=1"))
        return -1;
    if (*cls < 3) return 0;
    // Qwen3-Next, Qwen3-MoE, Qwen2-MoE: layer l's MLP is MoE unless l is in mlp_only_layers or the
    // expert count is 0 or (l + 1) % decoder_sparse_step != 0 (transformers' decoder layers).
    // mlp_only_layers: the layers 0 .. L-1 it lists (each once), all or none of them.
    const Jv* only = jv_get(J, "mlp_only_layers");
    if (only && only->kind != JV_ARR && only->kind != JV_NULL) return refuse(s, "mlp_only_layers", "not a list of layer indices");
    int n_only = 0;
    for (int l = 0; l < L && only && only->kind == JV_ARR; l++)
        for (int i = 0; i < only->n; i++)
            if (only->items[i].kind == JV_NUM && only->items[i].num == l) { n_only++; break; }
    if (n_only == L) return *cls == 5 ? refuse(s, "mlp_only_layers", "a Qwen2-MoE without MoE layers is not mapped (export writes "
                                              "a dense model as LlamaForCausalLM or Qwen3ForCausalLM)") : 0;
    // the expert count decides which layers are MoE: absent, transformers would take its class
    // default (Qwen3-MoE 128, Qwen2-MoE 60, Qwen3-Next 512), so it is required here
    int E;
    NEED_ALIAS(E, J, *cls == 4 ? QWEN3_MOE_EXPERTS : EXPERTS, "the expert count decides which layers are MoE (fix: add it; 0 "
               "for a dense model)");
    if (*cls == 5 && E == 0) return refuse(s, "num_experts", "a Qwen2-MoE without MoE layers is not mapped (export writes a dense "
                                           "model as LlamaForCausalLM or Qwen3ForCausalLM)");
    if (E > 0) {
        if (n_only > 0) return refuse(s, "mlp_only_layers", "gatedgpt places MoE layers by decoder_sparse_step only (accepted: [] or every layer)");
        // transformers' default: false for Qwen3-MoE and Qwen2-MoE, true for Qwen3-Next
        if (!bool_or(J, "norm_topk_prob", *cls == 3)) return refuse(s, "norm_topk_prob", "gatedgpt renormalises the top-k weights (accepted: true)");
        if (set(c, s, "moe.n_expert=%d", E) || set(c, s, "moe.top_k=%d", (int)NUM(J, "num_experts_per_tok")) ||
            set(c, s, "moe.d_expert=%d", (int)NUM(J, "moe_intermediate_size")) ||
            set(c, s, "moe.moe_every=%d", (int)num_or(J, "decoder_sparse_step", 1)) || set(c, s, "moe.router=softmax_topk") ||
            set(c, s, "moe.capacity_factor=0"))
            return -1;
        if ((*cls == 3 || *cls == 5) && (set(c, s, "moe.n_shared_expert=1") || set(c, s, "moe.d_shared_expert=%d", (int)NUM(J, "shared_expert_intermediate_size")) ||
                          set(c, s, "moe.shared_expert_gate=true")))
            return -1;
    }
    return 0;
}

// ---- safetensors files: model.safetensors, or the shards that model.safetensors.index.json names
// (transformers' save_pretrained above max_shard_size: model-0000K-of-0000N.safetensors and an
// index {"metadata": {...}, "weight_map": {tensor name: shard file}}).

// Maps `path` and parses its header into f. -1 after a one-line error naming the file.
static int st_open(StFile* f, const char* path) {
    snprintf(f->path, sizeof f->path, "%s", path);
    int fd = open(path, O_RDONLY);
    if (fd < 0) { fprintf(stderr, "error: import: cannot open '%s': %s\n", path, strerror(errno)); return -1; }
    struct stat sb;
    memset(&sb, 0, sizeof sb);
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size < 8) {
        close(fd);
        fprintf(stderr, "error: import: %s: not a safetensors file (%s)\n", path,
                !S_ISREG(sb.st_mode) ? "not a regular file" : "shorter than its 8-byte header length");
        return -1;
    }
    void* m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) { fprintf(stderr, "error: import: cannot map '%s': %s\n", path, strerror(errno)); return -1; }
    f->map = m;
    f->map_len = (size_t)sb.st_size;
    uint64_t hn;   // u64 little-endian header length, then that many bytes of JSON
    memcpy(&hn, f->map, 8);
    char err[256] = "";
    if (hn > f->map_len - 8) {
        fprintf(stderr, "error: import: %s: not a safetensors file (header length %llu, file %zu bytes)\n", path, (unsigned long long)hn, f->map_len);
        return -1;
    }
    if (jv_parse((const char*)f->map + 8, (size_t)hn, &f->hdr, err, sizeof err) || f->hdr.kind != JV_OBJ) {
        fprintf(stderr, "error: import: %s: not a safetensors file (header: %s)\n", path, f->hdr.kind != JV_OBJ && !err[0] ? "not a JSON object" : err);
        return -1;
    }
    f->data = f->map + 8 + hn;
    f->data_len = f->map_len - 8 - hn;
    return 0;
}

static int st_cmp(const void* a, const void* b) {   // by name, then file, then header order
    const StTensor *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    if (c) return c;
    if (x->file != y->file) return x->file < y->file ? -1 : 1;
    return x->t < y->t ? -1 : x->t > y->t;
}
static int st_name_cmp(const void* key, const void* e) { return strcmp(key, ((const StTensor*)e)->name); }
static StTensor* st_find(const Src* s, const char* name) {
    return s->n_ent ? bsearch(name, s->ent, (size_t)s->n_ent, sizeof(StTensor), st_name_cmp) : NULL;
}

// Every tensor of every file into s->ent, sorted; a name held twice (in two shards, or twice in
// one header) is refused: which copy is meant is unknowable.
static int st_collect(Src* s) {
    int n = 0;
    for (int k = 0; k < s->n_files; k++) n += s->files[k].hdr.n;
    s->ent = calloc((size_t)n + 1, sizeof(StTensor));
    if (!s->ent) { fprintf(stderr, "error: import: out of memory\n"); return -1; }
    for (int k = 0; k < s->n_files; k++)
        for (int i = 0; i < s->files[k].hdr.n; i++) {
            if (strcmp(s->files[k].hdr.keys[i], "__metadata__") == 0) continue;
            StTensor* e = &s->ent[s->n_ent++];
            e->name = s->files[k].hdr.keys[i];
            e->t = &s->files[k].hdr.items[i];
            e->file = k;
        }
    qsort(s->ent, (size_t)s->n_ent, sizeof(StTensor), st_cmp);
    for (int i = 1; i < s->n_ent; i++) {
        const StTensor *a = &s->ent[i - 1], *b = &s->ent[i];
        if (strcmp(a->name, b->name)) continue;
        if (a->file == b->file)
            fprintf(stderr, "error: import: %s: tensor '%s' appears twice in the header (which copy is meant is unknown)\n", s->files[a->file].path, a->name);
        else
            fprintf(stderr, "error: import: %s: tensor '%s' is in two shards, %s and %s (each tensor must be in exactly one)\n",
                    s->st_path, a->name, s->files[a->file].path, s->files[b->file].path);
        return -1;
    }
    return 0;
}

// The shard file named `name` (a weight_map value) in s->files, opened on first mention; its
// index, or -1 after a one-line error.
static int st_shard(Src* s, const char* name, const char* tensor_name) {
    char path[1100];
    snprintf(path, sizeof path, "%s/%s", s->dir, name);
    for (int k = 0; k < s->n_files; k++) if (strcmp(s->files[k].path, path) == 0) return k;
    struct stat sb;
    if (stat(path, &sb) != 0) {
        fprintf(stderr, "error: import: %s: weight_map names the shard '%s' (for tensor '%s'), which is not in %s (an incomplete download?)\n",
                s->st_path, name, tensor_name, s->dir);
        return -1;
    }
    if (st_open(&s->files[s->n_files], path)) return -1;
    return s->n_files++;
}

// model.safetensors if it exists (transformers prefers it too), else the sharded index.
static int st_load(Src* s) {
    char one[1100];
    struct stat sb;
    snprintf(one, sizeof one, "%s/model.safetensors", s->dir);
    if (stat(one, &sb) == 0) {
        snprintf(s->st_path, sizeof s->st_path, "%s", one);
        s->files = calloc(1, sizeof(StFile));
        if (!s->files) { fprintf(stderr, "error: import: out of memory\n"); return -1; }
        s->n_files = 1;
        return st_open(&s->files[0], one) || st_collect(s) ? -1 : 0;
    }
    snprintf(s->st_path, sizeof s->st_path, "%s/model.safetensors.index.json", s->dir);
    if (stat(s->st_path, &sb) != 0) {
        fprintf(stderr, "error: import: %s: no weights: neither model.safetensors nor model.safetensors.index.json "
                "(the index of a sharded checkpoint) is there\n", s->dir);
        return -1;
    }
    char* text = NULL;
    size_t len = 0;
    char err[256];
    if (slurp(s->st_path, &text, &len)) return -1;
    int bad = jv_parse(text, len, &s->index, err, sizeof err);
    free(text);
    if (bad) { fprintf(stderr, "error: import: %s: not JSON: %s\n", s->st_path, err); return -1; }
    const Jv* wm = jv_get(&s->index, "weight_map");
    if (!wm || wm->kind != JV_OBJ || wm->n == 0) {
        fprintf(stderr, "error: import: %s: field \"weight_map\" %s (expected {tensor name: shard file, ...})\n", s->st_path,
                !wm ? "is missing" : wm->kind != JV_OBJ ? "is not an object" : "is empty");
        return -1;
    }
    s->files = calloc((size_t)wm->n, sizeof(StFile));
    int* file_of = calloc((size_t)wm->n, sizeof(int));
    if (!s->files || !file_of) { free(file_of); fprintf(stderr, "error: import: out of memory\n"); return -1; }
    for (int i = 0; i < wm->n; i++) {   // the distinct shards, in order of first mention
        if (wm->items[i].kind != JV_STR || !wm->items[i].str[0]) {
            fprintf(stderr, "error: import: %s: weight_map: tensor '%s' maps to no file name (expected a shard's file name)\n", s->st_path, wm->keys[i]);
            free(file_of);
            return -1;
        }
        if ((file_of[i] = st_shard(s, wm->items[i].str, wm->keys[i])) < 0) { free(file_of); return -1; }
    }
    if (st_collect(s)) { free(file_of); return -1; }
    // the index and the shards must agree: each entry names the one shard that holds its tensor,
    // and each tensor of a shard has its entry
    for (int i = 0; i < wm->n; i++) {
        StTensor* e = st_find(s, wm->keys[i]);
        if (!e || e->file != file_of[i]) {
            fprintf(stderr, "error: import: %s: weight_map maps tensor '%s' to '%s', which does not hold it (%s%s)\n", s->st_path,
                    wm->keys[i], wm->items[i].str, e ? "it is in " : "no shard holds it", e ? s->files[e->file].path : "");
            free(file_of);
            return -1;
        }
        if (++e->mapped > 1) {
            fprintf(stderr, "error: import: %s: weight_map lists tensor '%s' twice\n", s->st_path, wm->keys[i]);
            free(file_of);
            return -1;
        }
    }
    free(file_of);
    for (int i = 0; i < s->n_ent; i++)
        if (!s->ent[i].mapped) {
            fprintf(stderr, "error: import: %s: the shard %s holds tensor '%s', which weight_map does not list (an index from another save?)\n",
                    s->st_path, s->files[s->ent[i].file].path, s->ent[i].name);
            return -1;
        }
    return 0;
}

static void st_free(Src* s) {
    for (int k = 0; k < s->n_files; k++) {
        if (s->files[k].map) munmap(s->files[k].map, s->files[k].map_len);
        jv_free(&s->files[k].hdr);
    }
    free(s->files);
    free(s->ent);
    jv_free(&s->index);
}

// ---- tensors
// tensor `name` as n floats of shape [a, b(, c)] (F32, BF16 or F16, converted exactly: every
// F16 and BF16 value, subnormals included, is a float); NULL after an error. A weight that is
// not finite (inf, NaN) is refused: it cannot train, and it would only show as a NaN loss later.
static float* tensor(Src* s, const char* name, int a, int b, int c) {
    StTensor* e = st_find(s, name);
    if (!e) { fprintf(stderr, "error: import: %s: tensor '%s' is missing\n", s->st_path, name); return NULL; }
    const StFile* f = &s->files[e->file];
    const Jv* t = e->t;
    const Jv *dt = jv_get(t, "dtype"), *sh = jv_get(t, "shape"), *off = jv_get(t, "data_offsets");
    int want[3] = {a, b, c}, nd = c > 0 ? 3 : b > 0 ? 2 : 1;
    int ok = dt && dt->kind == JV_STR && sh && sh->kind == JV_ARR && sh->n == nd && off && off->kind == JV_ARR && off->n == 2;
    for (int i = 0; ok && i < nd; i++) ok = sh->items[i].kind == JV_NUM && (int)sh->items[i].num == want[i];
    if (!ok) {
        fprintf(stderr, "error: import: %s: tensor '%s' has another shape or no dtype/offsets (expected [%d%s%.0d%s%.0d] from config.json)\n",
                f->path, name, a, nd > 1 ? ", " : "", nd > 1 ? b : 0, nd > 2 ? ", " : "", nd > 2 ? c : 0);
        return NULL;
    }
    size_t n = (size_t)a * (b > 0 ? b : 1) * (c > 0 ? c : 1), b0 = (size_t)off->items[0].num, b1 = (size_t)off->items[1].num;
    int es = strcmp(dt->str, "F32") == 0 ? 4 : (strcmp(dt->str, "BF16") == 0 || strcmp(dt->str, "F16") == 0) ? 2 : 0;
    if (!es) { fprintf(stderr, "error: import: %s: tensor '%s' is %s (accepted: F32, BF16, F16)\n", f->path, name, dt->str); return NULL; }
    if (b1 > f->data_len || b0 > b1 || b1 - b0 != n * es) {
        fprintf(stderr, "error: import: %s: tensor '%s': data_offsets [%zu, %zu] do not hold %zu %s values\n", f->path, name, b0, b1, n, dt->str);
        return NULL;
    }
    float* x = malloc(n * sizeof(float));
    if (!x) { fprintf(stderr, "error: import: out of memory (tensor '%s', %zu values)\n", name, n); return NULL; }
    const unsigned char* p = f->data + b0;
    for (size_t i = 0; i < n; i++) {
        if (es == 4) { memcpy(&x[i], p + 4 * i, 4); continue; }
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        if (dt->str[0] == 'B') { uint32_t u = (uint32_t)h << 16; memcpy(&x[i], &u, 4); continue; }   // BF16: float's top half
        // F16: sign, 5 exponent bits (bias 15), 10 mantissa bits; exponent 0: subnormal m * 2^-24
        int e5 = h >> 10 & 31, m = h & 1023;
        float v = e5 == 0 ? ldexpf((float)m, -24) : e5 == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 1024), e5 - 25);
        x[i] = (h & 0x8000) ? -v : v;
    }
    for (size_t i = 0; i < n; i++) {   // on the bits: -ffast-math could fold isfinite() away
        uint32_t u;
        memcpy(&u, &x[i], 4);
        if ((u & 0x7F800000u) == 0x7F800000u) {
            fprintf(stderr, "error: import: %s: tensor '%s' element %zu is %s: a weight that is not finite cannot be trained "
                    "(the source model is damaged: fix or re-save it)\n", f->path, name, i, u & 0x007FFFFFu ? "NaN" : (u >> 31) ? "-inf" : "inf");
            free(x);
            return NULL;
        }
    }
    e->used = 1;
    return x;
}

static int has_tensor(const Src* s, const char* name) { return st_find(s, name) != NULL; }
// the file that holds tensor `name` (for errors about its values)
static const char* tensor_path(const Src* s, const char* name) {
    const StTensor* e = st_find(s, name);
    return e ? s->files[e->file].path : s->st_path;
}

static int ends_with(const char* s, const char* suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static float* dst(const ParamTable* t, float* arena, const char* fmt, int l) {
    char nm[64];
    snprintf(nm, sizeof nm, fmt, l);
    const ParamInfo* p = param_find(t, nm);
    return p ? arena + p->offset : NULL;
}

#define GET(var, name, a, b, c) float* var = tensor(s, name, a, b, c); if (!var) return -1
static int put_rows(float* to, const float* from, size_t n) { memcpy(to, from, n * sizeof(float)); return 0; }

// Qwen3-Next's linear_attn of layer L -> h.L.gdn.* (the inverse of tools/export_hf.c's add_gdn:
// in_proj_qkvz and in_proj_ba grouped per key head, conv1d [C, 1, K], the rest as they are)
static int fill_gdn(Src* s, const ModelConfig* m, const ParamTable* t, float* x, int L) {
    const int d = m->d_model, Hk = m->linear_n_k_head, Hv = m->linear_n_v_head;
    const int dk = m->linear_k_head_dim, dv = m->linear_v_head_dim, K = m->linear_conv_kernel;
    const int Kd = Hk * dk, Vd = Hv * dv, rep = Hv / Hk, C = 2 * Kd + Vd;
    const size_t row = (size_t)d * sizeof(float);
    char nm[160];
#define NM(f) (snprintf(nm, sizeof nm, "model.layers.%d.linear_attn." f, L), nm)
    float *qkv = dst(t, x, "h.%d.gdn.w_qkv", L), *z = dst(t, x, "h.%d.gdn.w_z", L), *ba = dst(t, x, "h.%d.gdn.w_ba", L);
    {
        GET(w, NM("in_proj_qkvz.weight"), 2 * Kd + 2 * Vd, d, 0);
        for (int g = 0, r = 0; g < Hk; g++) {   // per key head: [q_g | k_g | v (rep heads) | z (rep heads)]
            memcpy(qkv + (size_t)(g * dk) * d, w + (size_t)r * d, dk * row); r += dk;
            memcpy(qkv + (size_t)(Kd + g * dk) * d, w + (size_t)r * d, dk * row); r += dk;
            memcpy(qkv + (size_t)(2 * Kd + g * rep * dv) * d, w + (size_t)r * d, (size_t)rep * dv * row); r += rep * dv;
            memcpy(z + (size_t)(g * rep * dv) * d, w + (size_t)r * d, (size_t)rep * dv * row); r += rep * dv;
        }
        free(w);
    }
    {
        GET(w, NM("in_proj_ba.weight"), 2 * Hv, d, 0);
        for (int g = 0; g < Hk; g++) {   // per key head: [b (rep) | a (rep)]
            memcpy(ba + (size_t)(g * rep) * d, w + (size_t)(2 * g * rep) * d, (size_t)rep * row);
            memcpy(ba + (size_t)(Hv + g * rep) * d, w + (size_t)(2 * g * rep + rep) * d, (size_t)rep * row);
        }
        free(w);
    }
    { GET(w, NM("conv1d.weight"), C, 1, K); put_rows(dst(t, x, "h.%d.gdn.conv_w", L), w, (size_t)C * K); free(w); }
    { GET(w, NM("dt_bias"), Hv, 0, 0); put_rows(dst(t, x, "h.%d.gdn.dt_bias", L), w, Hv); free(w); }
    { GET(w, NM("A_log"), Hv, 0, 0); put_rows(dst(t, x, "h.%d.gdn.A_log", L), w, Hv); free(w); }
    { GET(w, NM("norm.weight"), dv, 0, 0); put_rows(dst(t, x, "h.%d.gdn.norm_w", L), w, dv); free(w); }
    { GET(w, NM("out_proj.weight"), d, Vd, 0); put_rows(dst(t, x, "h.%d.gdn.w_out", L), w, (size_t)d * Vd); free(w); }
#undef NM
    return 0;
}

// GPT-2: [model] bias = true when any linear bias of the file is nonzero (a real GPT-2, llm.c's
// conversions); all zero (what a gatedgpt model without biases exports) keeps bias = false, the
// same model and table. Missing or misshapen tensors are left to fill()'s errors.
static int gpt2_bias(Src* s, Config* c) {
    const Jv* J = &s->conf;
    const int d = (int)num_or(J, "n_embd", 0), F = (int)num_or(J, "n_inner", 4.0 * d), L = (int)num_or(J, "n_layer", 0);
    static const char* const B[] = {"transformer.h.%d.attn.c_attn.bias", "transformer.h.%d.attn.c_proj.bias",
                                    "transformer.h.%d.mlp.c_fc.bias", "transformer.h.%d.mlp.c_proj.bias"};
    const int n[] = {3 * d, d, F, d};
    char nm[160];
    for (int l = 0; l < L; l++)
        for (int i = 0; i < 4; i++) {
            snprintf(nm, sizeof nm, B[i], l);
            if (!has_tensor(s, nm)) continue;
            float* w = tensor(s, nm, n[i], 0, 0);
            if (!w) return -1;
            int nonzero = 0;
            for (int j = 0; j < n[i] && !nonzero; j++) nonzero = w[j] != 0.0f;
            free(w);
            if (nonzero) return set(c, s, "model.bias=true");
        }
    return 0;
}

static int fill(Src* s, const ModelConfig* m, const ParamTable* t, float* x, int cls) {
    const int d = m->d_model, F = m->d_ff, V = m->vocab_size, hd = m->head_dim, H = m->n_head, Hkv = m->n_kv_head;
    char nm[160];
#define NM(f) (snprintf(nm, sizeof nm, f, L), nm)
    if (cls == 0) {
        { GET(w, "transformer.wte.weight", V, d, 0); put_rows(dst(t, x, "wte", 0), w, (size_t)V * d); free(w); }
        { GET(w, "transformer.wpe.weight", m->max_seq_len, d, 0); put_rows(dst(t, x, "wpe", 0), w, (size_t)m->max_seq_len * d); free(w); }
        for (int L = 0; L < m->n_layer; L++) {
            struct { const char* hf; const char* ours; int rows, cols, transpose; } M[] = {
                {"transformer.h.%d.ln_1.weight", "h.%d.ln1.w", d, 0, 0}, {"transformer.h.%d.ln_1.bias", "h.%d.ln1.b", d, 0, 0},
                {"transformer.h.%d.attn.c_attn.weight", "h.%d.attn.wqkv", d, 3 * d, 1},
                {"transformer.h.%d.attn.c_proj.weight", "h.%d.attn.wo", d, d, 1},
                {"transformer.h.%d.ln_2.weight", "h.%d.ln2.w", d, 0, 0}, {"transformer.h.%d.ln_2.bias", "h.%d.ln2.b", d, 0, 0},
                {"transformer.h.%d.mlp.c_fc.weight", "h.%d.mlp.w_in", d, F, 1},
                {"transformer.h.%d.mlp.c_proj.weight", "h.%d.mlp.w_out", F, d, 1}};
            for (size_t i = 0; i < sizeof M / sizeof M[0]; i++) {
                GET(w, NM(M[i].hf), M[i].rows, M[i].cols, 0);
                float* o = dst(t, x, M[i].ours, L);
                if (!M[i].transpose) put_rows(o, w, (size_t)M[i].rows * (M[i].cols ? M[i].cols : 1));
                else for (int r = 0; r < M[i].rows; r++) for (int k = 0; k < M[i].cols; k++) o[(size_t)k * M[i].rows + r] = w[(size_t)r * M[i].cols + k];
                free(w);
            }
            // GPT-2's linear biases: into the model's ([model] bias, set by gpt2_bias when one is
            // nonzero), else they must be zero
            struct { const char* hf; const char* ours; int n; } Bz[] = {
                {"transformer.h.%d.attn.c_attn.bias", "h.%d.attn.bqkv", 3 * d}, {"transformer.h.%d.attn.c_proj.bias", "h.%d.attn.bo", d},
                {"transformer.h.%d.mlp.c_fc.bias", "h.%d.mlp.b_in", F}, {"transformer.h.%d.mlp.c_proj.bias", "h.%d.mlp.b_out", d}};
            for (size_t i = 0; i < sizeof Bz / sizeof Bz[0]; i++) {
                GET(w, NM(Bz[i].hf), Bz[i].n, 0, 0);
                float* o = dst(t, x, Bz[i].ours, L);
                if (o) { put_rows(o, w, (size_t)Bz[i].n); free(w); continue; }
                for (int j = 0; j < Bz[i].n; j++)
                    if (w[j] != 0.0f) {
                        fprintf(stderr, "error: import: %s: '%s' is not zero (element %d = %g): gatedgpt's linear layers have no bias\n",
                                tensor_path(s, nm), nm, j, (double)w[j]);
                        free(w);
                        return -1;
                    }
                free(w);
            }
        }
        { GET(w, "transformer.ln_f.weight", d, 0, 0); put_rows(dst(t, x, "lnf.w", 0), w, d); free(w); }
        { GET(w, "transformer.ln_f.bias", d, 0, 0); put_rows(dst(t, x, "lnf.b", 0), w, d); free(w); }
    } else {
        const int next = cls == 3;
        const MoeConfig* e = &m->moe;
        { GET(w, "model.embed_tokens.weight", V, d, 0); put_rows(dst(t, x, "wte", 0), w, (size_t)V * d); free(w); }
        for (int L = 0; L < m->n_layer; L++) {
            struct { const char* hf; const char* ours; int n; } N[] = {
                {"model.layers.%d.input_layernorm.weight", "h.%d.ln1.w", d}, {"model.layers.%d.post_attention_layernorm.weight", "h.%d.ln2.w", d},
                {"model.layers.%d.self_attn.q_norm.weight", "h.%d.attn.q_norm.w", hd}, {"model.layers.%d.self_attn.k_norm.weight", "h.%d.attn.k_norm.w", hd}};
            const int lin = config_layer_is_linear(m, L);
            for (size_t i = 0; i < 4; i++) {
                if (i >= 2 && (!m->qk_norm || lin)) continue;
                GET(w, NM(N[i].hf), N[i].n, 0, 0);
                float* o = dst(t, x, N[i].ours, L);
                for (int j = 0; j < N[i].n; j++) o[j] = next ? w[j] + 1.0f : w[j];   // Qwen3-Next: x^ (1 + w)
                free(w);
            }
            if (lin) {
                if (fill_gdn(s, m, t, x, L)) return -1;
            } else {
                float* qkv = dst(t, x, "h.%d.attn.wqkv", L);
                const int Hq = H * hd, Hk = Hkv * hd;
                {
                    GET(q, NM("model.layers.%d.self_attn.q_proj.weight"), next ? 2 * Hq : Hq, d, 0);
                    for (int h = 0; h < H; h++) {   // Qwen3-Next: [q_h | g_h] per head
                        memcpy(qkv + (size_t)h * hd * d, q + (size_t)(next ? 2 * h : h) * hd * d, (size_t)hd * d * sizeof(float));
                        if (next) memcpy(qkv + (size_t)(Hq + 2 * Hk + h * hd) * d, q + (size_t)(2 * h + 1) * hd * d, (size_t)hd * d * sizeof(float));
                    }
                    free(q);
                }
                { GET(w, NM("model.layers.%d.self_attn.k_proj.weight"), Hk, d, 0); put_rows(qkv + (size_t)Hq * d, w, (size_t)Hk * d); free(w); }
                { GET(w, NM("model.layers.%d.self_attn.v_proj.weight"), Hk, d, 0); put_rows(qkv + (size_t)(Hq + Hk) * d, w, (size_t)Hk * d); free(w); }
                { GET(w, NM("model.layers.%d.self_attn.o_proj.weight"), d, Hq, 0); put_rows(dst(t, x, "h.%d.attn.wo", L), w, (size_t)d * Hq); free(w); }
            }
            if (!config_layer_is_moe(m, L)) {
                float* wi = dst(t, x, "h.%d.mlp.w_in", L);
                { GET(w, NM("model.layers.%d.mlp.gate_proj.weight"), F, d, 0); put_rows(wi, w, (size_t)F * d); free(w); }
                { GET(w, NM("model.layers.%d.mlp.up_proj.weight"), F, d, 0); put_rows(wi + (size_t)F * d, w, (size_t)F * d); free(w); }
                { GET(w, NM("model.layers.%d.mlp.down_proj.weight"), d, F, 0); put_rows(dst(t, x, "h.%d.mlp.w_out", L), w, (size_t)d * F); free(w); }
                continue;
            }
            const int E = e->n_expert, Fe = e->d_expert, Fs = e->d_shared_expert;
            { GET(w, NM("model.layers.%d.mlp.gate.weight"), E, d, 0); put_rows(dst(t, x, "h.%d.moe.router", L), w, (size_t)E * d); free(w); }
            if (has_tensor(s, NM("model.layers.%d.mlp.experts.gate_up_proj")) || !has_tensor(s, NM("model.layers.%d.mlp.experts.0.gate_proj.weight"))) {
                { GET(w, NM("model.layers.%d.mlp.experts.gate_up_proj"), E, 2 * Fe, d); put_rows(dst(t, x, "h.%d.moe.w_in", L), w, (size_t)E * 2 * Fe * d); free(w); }
                { GET(w, NM("model.layers.%d.mlp.experts.down_proj"), E, d, Fe); put_rows(dst(t, x, "h.%d.moe.w_out", L), w, (size_t)E * d * Fe); free(w); }
            } else {   // one tensor per expert, as the Hub's checkpoints (and transformers' save_pretrained) store them
                float *wi = dst(t, x, "h.%d.moe.w_in", L), *wo = dst(t, x, "h.%d.moe.w_out", L);
                for (int j = 0; j < E; j++) {
                    const size_t blk = (size_t)Fe * d;
                    char en[160];
#define EN(f) (snprintf(en, sizeof en, "model.layers.%d.mlp.experts.%d." f, L, j), en)
                    { GET(w, EN("gate_proj.weight"), Fe, d, 0); put_rows(wi + 2 * blk * j, w, blk); free(w); }
                    { GET(w, EN("up_proj.weight"), Fe, d, 0); put_rows(wi + 2 * blk * j + blk, w, blk); free(w); }
                    { GET(w, EN("down_proj.weight"), d, Fe, 0); put_rows(wo + blk * j, w, blk); free(w); }
#undef EN
                }
            }
            if (e->n_shared_expert) {
                float* si = dst(t, x, "h.%d.moe.shared_w_in", L);
                { GET(w, NM("model.layers.%d.mlp.shared_expert.gate_proj.weight"), Fs, d, 0); put_rows(si, w, (size_t)Fs * d); free(w); }
                { GET(w, NM("model.layers.%d.mlp.shared_expert.up_proj.weight"), Fs, d, 0); put_rows(si + (size_t)Fs * d, w, (size_t)Fs * d); free(w); }
                { GET(w, NM("model.layers.%d.mlp.shared_expert.down_proj.weight"), d, Fs, 0); put_rows(dst(t, x, "h.%d.moe.shared_w_out", L), w, (size_t)d * Fs); free(w); }
                { GET(w, NM("model.layers.%d.mlp.shared_expert_gate.weight"), 1, d, 0); put_rows(dst(t, x, "h.%d.moe.shared_gate", L), w, d); free(w); }
            }
        }
        GET(w, "model.norm.weight", d, 0, 0);
        float* o = dst(t, x, "lnf.w", 0);
        for (int j = 0; j < d; j++) o[j] = next ? w[j] + 1.0f : w[j];
        free(w);
    }
#undef NM
    if (!m->tie_embeddings) { GET(w, "lm_head.weight", V, d, 0); put_rows(dst(t, x, "lm_head", 0), w, (size_t)V * d); free(w); }
    // every tensor of the file must have found its place (GPT-2's causal-mask buffers aside)
    for (int i = 0; i < s->n_ent; i++) {
        const char* k = s->ent[i].name;
        if (s->ent[i].used) continue;
        if (cls == 0 && (ends_with(k, ".attn.bias") || ends_with(k, ".attn.masked_bias"))) continue;
        if (cls != 0 && m->tie_embeddings && strcmp(k, "lm_head.weight") == 0) continue;   // a tied head saved anyway
        fprintf(stderr, "error: import: %s: tensor '%s' has no place in gatedgpt's model (a part the class has and gatedgpt lacks)\n",
                s->files[s->ent[i].file].path, k);
        return -1;
    }
    return 0;
}

int import_hf(const char* in_dir, Config* c, const char* out_dir, FILE* log) {
    Src s;
    memset(&s, 0, sizeof s);
    s.dir = in_dir;
    snprintf(s.cfg_path, sizeof s.cfg_path, "%s/config.json", in_dir);
    char* text = NULL;
    size_t len = 0;
    char err[256];
    int rc = -1, cls;
    if (slurp(s.cfg_path, &text, &len)) return -1;
    if (jv_parse(text, len, &s.conf, err, sizeof err)) {
        fprintf(stderr, "error: import: %s: not JSON: %s\n", s.cfg_path, err);
        free(text);
        return -1;
    }
    free(text);
    GPT m;
    memset(&m, 0, sizeof m);
    if (read_config(c, &s, &cls)) goto out;
    // the default training length may not fit a short model: its longest length then
    if (c->train.seq_len > c->model.max_seq_len && set(c, &s, "train.seq_len=%d", c->model.max_seq_len)) goto out;
    if (st_load(&s)) goto out;
    if (cls == 0 && gpt2_bias(&s, c)) goto out;   // GPT-2's linear biases decide [model] bias
    if (config_finalize(c, s.cfg_path)) goto out;
    gpt_build(&m, &c->model, c->train.seed);
    float* host = calloc(m.table.total, sizeof(float));   // padding rows (vocab) stay zero
    if (!host) { fprintf(stderr, "error: import: out of memory\n"); goto out; }
    if (fill(&s, &c->model, &m.table, host, cls)) { free(host); goto out; }
    ops_from_host(m.params, host, m.table.total * sizeof(float));
    free(host);
    gpt_params_changed(&m, 0);
    rc = checkpoint_save_fresh(out_dir, c, &m);   // AdamW state zero, the data at its beginning
    if (rc == 0 && log) {
        char path[CKPT_PATH_MAX];
        checkpoint_path(path, sizeof path, out_dir, 0);
        char shards[64] = "";
        if (s.index.kind == JV_OBJ) snprintf(shards, sizeof shards, ", %d shards", s.n_files);
        fprintf(log, "import: %s (%s%s, %zu parameters) -> %s: resume with train_gpt --resume %s\n", in_dir,
                str_or(&s.conf, "model_type", "?"), shards, m.table.total, path, path);
    }
out:
    if (m.params) gpt_free(&m);
    st_free(&s);
    jv_free(&s.conf);
    return rc;
}
