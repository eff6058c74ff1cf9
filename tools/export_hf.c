// tools/export_hf.c: checkpoint weights -> Hugging Face safetensors + config.json.
//
// safetensors: u64 N (little-endian), N bytes of JSON header {name: {"dtype", "shape",
// "data_offsets": [begin, end]}, "__metadata__": {...}} padded with spaces to a multiple of 8,
// then the tensors' bytes (offsets relative to the end of the header). All tensors are F32.
//
// Names follow Qwen3 (transformers' Qwen3ForCausalLM); what Qwen3 lacks gets a documented
// name of its own (docs/formats.md, "Export"):
//   wte                 -> model.embed_tokens.weight      [vocab_size, d] (padding rows dropped)
//   wpe                 -> model.embed_positions.weight   [max_seq_len, d]
//   h.L.ln1.w / .b      -> model.layers.L.input_layernorm.weight / .bias
//   h.L.attn.wqkv       -> model.layers.L.self_attn.{q,k,v}_proj.weight, and the gate:
//       elementwise sigmoid gate at sdpa: inside q_proj, Qwen3-Next's layout [q_h | g_h] per
//       head ([2*H*hd, d]); any other gate: model.layers.L.self_attn.gate_proj.weight [G, d]
//   h.L.attn.q_norm.w   -> model.layers.L.self_attn.q_norm.weight (k_norm alike)
//   h.L.attn.wo         -> model.layers.L.self_attn.o_proj.weight
//   h.L.ln2.w / .b      -> model.layers.L.post_attention_layernorm.weight / .bias
//   h.L.mlp.w_in        -> swiglu: model.layers.L.mlp.gate_proj.weight (rows [0,F)) and
//                          up_proj.weight (rows [F,2F)); gelu: model.layers.L.mlp.up_proj.weight
//   h.L.mlp.w_out       -> model.layers.L.mlp.down_proj.weight
//   lnf.w / lnf.b       -> model.norm.weight / .bias
//   lm_head             -> lm_head.weight                 [vocab_size, d] (absent when tied)
//   any other tensor    -> gatedgpt.<its name>, as it is in the arena (noted on the log)
#define _GNU_SOURCE
#include "export_hf.h"

#include <errno.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    char name[128];
    int ndim;
    int shape[4];
    size_t numel;
    float* data;             // owned, numel floats
} OutTensor;

typedef struct {
    OutTensor* t;
    int n, cap;
} OutList;

static float* out_add(OutList* l, const char* name, int rows, int cols) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->t = realloc(l->t, (size_t)l->cap * sizeof(OutTensor));
        if (!l->t) { fprintf(stderr, "error: export: out of memory\n"); exit(1); }
    }
    OutTensor* o = &l->t[l->n++];
    memset(o, 0, sizeof *o);
    snprintf(o->name, sizeof o->name, "%s", name);
    o->ndim = cols > 0 ? 2 : 1;
    o->shape[0] = rows;
    o->shape[1] = cols;
    o->numel = (size_t)rows * (size_t)(cols > 0 ? cols : 1);
    o->data = malloc(o->numel * sizeof(float));
    if (!o->data) { fprintf(stderr, "error: export: out of memory\n"); exit(1); }
    return o->data;
}

// rows [r0, r0 + n) of a [*, cols] matrix into dst
static void copy_rows(float* dst, const float* src, int r0, int n, int cols) {
    memcpy(dst, src + (size_t)r0 * cols, (size_t)n * cols * sizeof(float));
}

static void add_copy(OutList* l, const char* name, const float* src, int rows, int cols) {
    copy_rows(out_add(l, name, rows, cols), src, 0, rows, cols > 0 ? cols : 1);
}

// The fused projection [q | k | v | gate] of layer L as q_proj, k_proj, v_proj (+ the gate).
static void split_wqkv(OutList* l, const ModelConfig* m, int L, const float* w, int rows) {
    const int d = m->d_model, hd = m->head_dim, H = m->n_head, Hkv = m->n_kv_head;
    const int Hq = H * hd, Hk = Hkv * hd, G = rows - Hq - 2 * Hk;
    char nm[128];
    int qnext = G > 0 && m->attn_gate == GATE_ELEMENTWISE && m->gate_position == GATEPOS_SDPA &&
                m->gate_act == GATEACT_SIGMOID;
    snprintf(nm, sizeof nm, "model.layers.%d.self_attn.q_proj.weight", L);
    if (qnext) {   // Qwen3-Next: per head h, rows [q_h (hd) | g_h (hd)]
        float* q = out_add(l, nm, 2 * Hq, d);
        for (int h = 0; h < H; h++) {
            copy_rows(q + (size_t)(2 * h) * hd * d, w, h * hd, hd, d);
            copy_rows(q + (size_t)(2 * h + 1) * hd * d, w, Hq + 2 * Hk + h * hd, hd, d);
        }
    } else {
        copy_rows(out_add(l, nm, Hq, d), w, 0, Hq, d);
    }
    snprintf(nm, sizeof nm, "model.layers.%d.self_attn.k_proj.weight", L);
    copy_rows(out_add(l, nm, Hk, d), w, Hq, Hk, d);
    snprintf(nm, sizeof nm, "model.layers.%d.self_attn.v_proj.weight", L);
    copy_rows(out_add(l, nm, Hk, d), w, Hq + Hk, Hk, d);
    if (G > 0 && !qnext) {
        snprintf(nm, sizeof nm, "model.layers.%d.self_attn.gate_proj.weight", L);
        copy_rows(out_add(l, nm, G, d), w, Hq + 2 * Hk, G, d);
    }
}

// The Qwen3 name of a tensor that is exported as it is (shape unchanged), or NULL.
static const char* plain_name(const char* rest) {
    static const char* const MAP[][2] = {
        {"ln1.w", "input_layernorm.weight"}, {"ln1.b", "input_layernorm.bias"},
        {"ln2.w", "post_attention_layernorm.weight"}, {"ln2.b", "post_attention_layernorm.bias"},
        {"attn.q_norm.w", "self_attn.q_norm.weight"}, {"attn.k_norm.w", "self_attn.k_norm.weight"},
        {"attn.wo", "self_attn.o_proj.weight"}, {"mlp.w_out", "mlp.down_proj.weight"},
    };
    for (size_t i = 0; i < sizeof MAP / sizeof MAP[0]; i++)
        if (strcmp(rest, MAP[i][0]) == 0) return MAP[i][1];
    return NULL;
}

// Adds the exported tensor(s) of one parameter; returns 0 when it has no Hugging Face name.
static int map_tensor(OutList* l, const ModelConfig* m, const ParamInfo* p, const float* x) {
    const int V = m->vocab_size, F = m->d_ff;
    const int rows = p->shape[0], cols = p->ndim > 1 ? p->shape[1] : 0;
    char nm[128], rest[64];
    int L;
    if (strcmp(p->name, "wte") == 0) { add_copy(l, "model.embed_tokens.weight", x, V, cols); return 1; }   // padding rows dropped
    if (strcmp(p->name, "wpe") == 0) { add_copy(l, "model.embed_positions.weight", x, rows, cols); return 1; }
    if (strcmp(p->name, "lnf.w") == 0) { add_copy(l, "model.norm.weight", x, rows, 0); return 1; }
    if (strcmp(p->name, "lnf.b") == 0) { add_copy(l, "model.norm.bias", x, rows, 0); return 1; }
    if (strcmp(p->name, "lm_head") == 0) { add_copy(l, "lm_head.weight", x, V, cols); return 1; }
    if (sscanf(p->name, "h.%d.%63s", &L, rest) != 2) return 0;
    const char* hf = plain_name(rest);
    if (hf) {
        snprintf(nm, sizeof nm, "model.layers.%d.%s", L, hf);
        add_copy(l, nm, x, rows, cols);
        return 1;
    }
    if (strcmp(rest, "attn.wqkv") == 0) { split_wqkv(l, m, L, x, rows); return 1; }
    if (strcmp(rest, "mlp.w_in") != 0) return 0;
    if (m->mlp == MLP_SWIGLU) {   // rows [gate (F) | up (F)]
        snprintf(nm, sizeof nm, "model.layers.%d.mlp.gate_proj.weight", L);
        copy_rows(out_add(l, nm, F, cols), x, 0, F, cols);
        snprintf(nm, sizeof nm, "model.layers.%d.mlp.up_proj.weight", L);
        copy_rows(out_add(l, nm, F, cols), x, F, F, cols);
    } else {
        snprintf(nm, sizeof nm, "model.layers.%d.mlp.up_proj.weight", L);
        add_copy(l, nm, x, rows, cols);
    }
    return 1;
}

// Builds the exported tensors from the parameter table, in table order.
static void build_tensors(OutList* l, const ModelConfig* m, const ParamTable* t, const float* params, FILE* log) {
    for (int i = 0; i < t->n; i++) {
        const ParamInfo* p = &t->p[i];
        const float* x = params + p->offset;
        if (map_tensor(l, m, p, x)) continue;
        // no Hugging Face name (yet): exported under its own name, whole
        char nm[128];
        if (log) fprintf(log, "export: note: '%s' has no Qwen3 name; exported as 'gatedgpt.%s'\n", p->name, p->name);
        snprintf(nm, sizeof nm, "gatedgpt.%s", p->name);
        float* dst = out_add(l, nm, (int)p->numel, 0);
        memcpy(dst, x, p->numel * sizeof(float));
        OutTensor* o = &l->t[l->n - 1];   // keep the table's shape (any number of dims)
        const int max_dims = (int)(sizeof p->shape / sizeof p->shape[0]);
        o->ndim = p->ndim <= max_dims && p->ndim <= 4 ? p->ndim : 1;
        for (int d = 0; d < o->ndim; d++) o->shape[d] = o->ndim == 1 ? (int)p->numel : p->shape[d];
    }
}

static int write_file_atomic(const char* path, const void* a, size_t na, const void* b, size_t nb, const void* c, size_t nc) {
    char tmp[1200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE* f = fopen(tmp, "wb");
    if (!f) { fprintf(stderr, "error: export: cannot create '%s': %s\n", tmp, strerror(errno)); return -1; }
    int ok = (na == 0 || fwrite(a, 1, na, f) == na) && (nb == 0 || fwrite(b, 1, nb, f) == nb) &&
             (nc == 0 || fwrite(c, 1, nc, f) == nc);
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (fclose(f) != 0) ok = 0;
    if (!ok || rename(tmp, path) != 0) {
        fprintf(stderr, "error: export: writing '%s' failed: %s\n", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

static int write_safetensors(const char* path, const OutList* l, int step) {
    char* hdr = NULL;
    size_t hlen = 0;
    FILE* f = open_memstream(&hdr, &hlen);
    fprintf(f, "{\"__metadata__\":{\"format\":\"pt\",\"source\":\"gatedgpt\",\"step\":\"%d\"}", step);
    size_t off = 0;
    for (int i = 0; i < l->n; i++) {
        const OutTensor* o = &l->t[i];
        size_t bytes = o->numel * sizeof(float);
        fprintf(f, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[", o->name);
        for (int d = 0; d < o->ndim; d++) fprintf(f, "%s%d", d ? "," : "", o->shape[d]);
        fprintf(f, "],\"data_offsets\":[%zu,%zu]}", off, off + bytes);
        off += bytes;
    }
    fputc('}', f);
    while ((ftell(f) % 8) != 0) fputc(' ', f);   // the data starts 8-byte aligned
    fclose(f);
    // the tensors, concatenated in header order
    unsigned char* data = malloc(off ? off : 1);
    if (!data) { free(hdr); fprintf(stderr, "error: export: out of memory\n"); return -1; }
    size_t pos = 0;
    for (int i = 0; i < l->n; i++) {
        const OutTensor* o = &l->t[i];
        size_t bytes = o->numel * sizeof(float);
        memcpy(data + pos, o->data, bytes);
        pos += bytes;
    }
    uint64_t n = hlen;
    int rc = write_file_atomic(path, &n, 8, hdr, hlen, data, off);
    free(hdr);
    free(data);
    return rc;
}

// A [model] value as config_write spells it: floats in their shortest round-trip form.
static const char* model_value(const Config* c, const char* key) {
    static char buf[1100];
    buf[0] = 0;
    for (int i = 0; i < config_key_count(); i++) {
        const char* sec;
        if (strcmp(config_key(i, &sec), key) == 0 && strcmp(sec, "model") == 0) config_key_value(c, i, buf, sizeof buf);
    }
    return buf;
}

static int write_config_json(const char* path, const Config* c, int step) {
    const ModelConfig* m = &c->model;
    // a Qwen3 model exactly when every feature is Qwen3's; otherwise gatedgpt's own type
    int qwen3 = m->pos == POS_ROPE && m->norm == NORM_RMSNORM && m->mlp == MLP_SWIGLU && m->qk_norm &&
                m->attn_gate == GATE_NONE;
    char* text = NULL;
    size_t len = 0;
    FILE* f = open_memstream(&text, &len);
    fprintf(f, "{\n");
    fprintf(f, "  \"architectures\": [\"%s\"],\n", qwen3 ? "Qwen3ForCausalLM" : "GatedGPTForCausalLM");
    fprintf(f, "  \"model_type\": \"%s\",\n", qwen3 ? "qwen3" : "gatedgpt");
    fprintf(f, "  \"vocab_size\": %d,\n", m->vocab_size);
    fprintf(f, "  \"hidden_size\": %d,\n", m->d_model);
    fprintf(f, "  \"intermediate_size\": %d,\n", m->d_ff);
    fprintf(f, "  \"num_hidden_layers\": %d,\n", m->n_layer);
    fprintf(f, "  \"num_attention_heads\": %d,\n", m->n_head);
    fprintf(f, "  \"num_key_value_heads\": %d,\n", m->n_kv_head);
    fprintf(f, "  \"head_dim\": %d,\n", m->head_dim);
    fprintf(f, "  \"max_position_embeddings\": %d,\n", m->max_seq_len);
    if (m->rope_scaling == ROPE_SCALING_NTK)
        fprintf(f, "  \"rope_theta\": %.17g,\n", (double)m->rope_base * pow((double)m->rope_factor, (double)m->head_dim / (m->head_dim - 2)));
    else
        fprintf(f, "  \"rope_theta\": %s,\n", model_value(c, "rope_base"));
    // RoPE scaling, in transformers' spelling (kernels/rope.h follows its definitions). "ntk" is a
    // larger base, exactly: rope_theta = rope_base * s^(hd/(hd-2)) above (transformers' "dynamic"
    // recomputes a base per length by another formula, so it is not used).
    if (m->rope_scaling == ROPE_SCALING_LINEAR || m->rope_scaling == ROPE_SCALING_YARN) {
        fprintf(f, "  \"rope_scaling\": {\"rope_type\": \"%s\", \"factor\": %s, \"original_max_position_embeddings\": %d",
                m->rope_scaling == ROPE_SCALING_LINEAR ? "linear" : "yarn", model_value(c, "rope_factor"), m->rope_original_len);
        if (m->rope_scaling == ROPE_SCALING_YARN) {
            fprintf(f, ", \"beta_fast\": %s, \"beta_slow\": %s", model_value(c, "yarn_beta_fast"), model_value(c, "yarn_beta_slow"));
            if (m->yarn_attn_factor > 0.0f) fprintf(f, ", \"attention_factor\": %s", model_value(c, "yarn_attn_factor"));
        }
        fprintf(f, "},\n");
    }
    fprintf(f, "  \"rms_norm_eps\": %s,\n", model_value(c, "norm_eps"));
    fprintf(f, "  \"hidden_act\": \"%s\",\n", m->mlp == MLP_SWIGLU ? "silu" : "gelu_pytorch_tanh");
    fprintf(f, "  \"tie_word_embeddings\": %s,\n", m->tie_embeddings ? "true" : "false");
    fprintf(f, "  \"attention_bias\": false,\n");
    fprintf(f, "  \"torch_dtype\": \"float32\",\n");
    // every [model] key as gatedgpt spells it, and the step: enough to rebuild the model
    fprintf(f, "  \"gatedgpt\": {\"step\": %d", step);
    for (int i = 0; i < config_key_count(); i++) {
        const char* sec;
        const char* key = config_key(i, &sec);
        if (strcmp(sec, "model") != 0) continue;
        char v[1100];
        config_key_value(c, i, v, sizeof v);
        fprintf(f, ", \"%s\": \"%s\"", key, v);
    }
    fprintf(f, "}\n}\n");
    fclose(f);
    int rc = write_file_atomic(path, text, len, NULL, 0, NULL, 0);
    free(text);
    return rc;
}

int export_hf(const char* out_dir, const Config* c, const ParamTable* t, const float* params, int step, FILE* log) {
    if (mkdir(out_dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "error: export: cannot create the output directory '%s': %s\n", out_dir, strerror(errno));
        return -1;
    }
    OutList l = {0};
    build_tensors(&l, &c->model, t, params, log);
    char path[1100];
    snprintf(path, sizeof path, "%s/model.safetensors", out_dir);
    int rc = write_safetensors(path, &l, step);
    if (rc == 0 && log) {
        size_t total = 0;
        for (int i = 0; i < l.n; i++) total += l.t[i].numel;
        fprintf(log, "export: %s: %d tensors, %zu floats\n", path, l.n, total);
    }
    snprintf(path, sizeof path, "%s/config.json", out_dir);
    if (rc == 0) rc = write_config_json(path, c, step);
    if (rc == 0 && log) fprintf(log, "export: %s\n", path);
    for (int i = 0; i < l.n; i++) free(l.t[i].data);
    free(l.t);
    return rc;
}
