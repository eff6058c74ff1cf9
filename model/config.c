// model/config.c: the run configuration: INI files (libinih), `section.key=value` overrides,
// validation and derived fields. Every key lives in one table (KEYS below): its section, name,
// type, field and default. Defaults, parsing, writing and comparison all walk that table, so a
// new key is one line there plus its validation rule in config_finalize and a row in
// docs/config.md (and, when it only matters under another setting, a line in NO_EFFECT_RULES).
//
// Errors are one line on stderr:
//   config error: WHERE: [section] key = value: what is wrong (accepted: what would be)
// WHERE is "FILE:LINE", "command line", or, for a key left at its default, the config file
// passed to config_finalize. The functions return -1 and the caller exits non-zero.
#define _POSIX_C_SOURCE 200809L // strcasecmp
#include "config.h"

#include <ini.h>

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

// ----------------------------------------------------------------------------------------------
// the key table

typedef enum { KT_INT, KT_LONG, KT_U64, KT_FLOAT, KT_BOOL, KT_ENUM, KT_STR } KeyType;

typedef struct {
    const char* section;
    const char* name;
    KeyType type;
    size_t offset;             // of the field in Config
    size_t size;               // of the field (strings: buffer size incl. NUL)
    const char* const* enums;  // KT_ENUM: names indexed by value (values are 0..n_enum-1)
    int n_enum;
    const char* def;           // default, as it would be written in the INI
} KeyDef;

static const char* const POS_NAMES[] = {"rope", "learned"};
static const char* const NORM_NAMES[] = {"rmsnorm", "layernorm"};
static const char* const MLP_NAMES[] = {"swiglu", "gelu"};
static const char* const GATE_NAMES[] = {"none", "elementwise", "headwise"};
static const char* const GATEPOS_NAMES[] = {"sdpa", "value"};
static const char* const GATEACT_NAMES[] = {"sigmoid", "ns_sigmoid", "silu"};
static const char* const ROPE_SCALING_NAMES[] = {"none", "linear", "ntk", "yarn"};
static const char* const ATTN_IMPL_NAMES[] = {"fused", "cudnn", "flash"};
static const char* const SCHED_NAMES[] = {"cosine", "linear", "constant", "wsd"};
static const char* const ONERROR_NAMES[] = {"continue", "exit"};
static const char* const ROUTER_NAMES[] = {"softmax_topk", "sigmoid_topk"};
static const char* const RECOMPUTE_NAMES[] = {"none", "selective", "full"};
static const char* const DOCPOS_NAMES[] = {"continue", "restart"};
static const char* const PRECISION_NAMES[] = {"fp32", "bf16"};

#define NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define FIELD(f) offsetof(Config, f), sizeof(((Config*)0)->f)
#define K_INT(sec, name, f, def) {sec, name, KT_INT, FIELD(f), NULL, 0, def}
#define K_LONG(sec, name, f, def) {sec, name, KT_LONG, FIELD(f), NULL, 0, def}
#define K_U64(sec, name, f, def) {sec, name, KT_U64, FIELD(f), NULL, 0, def}
#define K_FLOAT(sec, name, f, def) {sec, name, KT_FLOAT, FIELD(f), NULL, 0, def}
#define K_BOOL(sec, name, f, def) {sec, name, KT_BOOL, FIELD(f), NULL, 0, def}
#define K_ENUM(sec, name, f, names, def) {sec, name, KT_ENUM, FIELD(f), names, NELEM(names), def}
#define K_STR(sec, name, f, def) {sec, name, KT_STR, FIELD(f), NULL, 0, def}

static const KeyDef KEYS[] = {
    K_INT("model", "vocab_size", model.vocab_size, "50257"),
    K_INT("model", "n_layer", model.n_layer, "12"),
    K_INT("model", "d_model", model.d_model, "768"),
    K_INT("model", "n_head", model.n_head, "12"),
    K_INT("model", "n_kv_head", model.n_kv_head, "0"),
    K_INT("model", "head_dim", model.head_dim, "0"),
    K_INT("model", "d_ff", model.d_ff, "0"),
    K_INT("model", "max_seq_len", model.max_seq_len, "1024"),
    K_ENUM("model", "pos", model.pos, POS_NAMES, "rope"),
    K_FLOAT("model", "rope_base", model.rope_base, "10000"),
    K_FLOAT("model", "rope_fraction", model.rope_fraction, "1"),
    K_ENUM("model", "rope_scaling", model.rope_scaling, ROPE_SCALING_NAMES, "none"),
    K_FLOAT("model", "rope_factor", model.rope_factor, "1"),
    K_INT("model", "rope_original_len", model.rope_original_len, "0"),
    K_FLOAT("model", "yarn_beta_fast", model.yarn_beta_fast, "32"),
    K_FLOAT("model", "yarn_beta_slow", model.yarn_beta_slow, "1"),
    K_FLOAT("model", "yarn_attn_factor", model.yarn_attn_factor, "0"),
    K_ENUM("model", "norm", model.norm, NORM_NAMES, "rmsnorm"),
    K_FLOAT("model", "norm_eps", model.norm_eps, "1e-5"),
    K_BOOL("model", "qk_norm", model.qk_norm, "false"),
    K_ENUM("model", "mlp", model.mlp, MLP_NAMES, "swiglu"),
    K_BOOL("model", "tie_embeddings", model.tie_embeddings, "true"),
    K_BOOL("model", "bias", model.bias, "false"),
    K_ENUM("model", "attn_gate", model.attn_gate, GATE_NAMES, "none"),
    K_ENUM("model", "gate_position", model.gate_position, GATEPOS_NAMES, "sdpa"),
    K_ENUM("model", "gate_act", model.gate_act, GATEACT_NAMES, "sigmoid"),
    K_FLOAT("model", "init_std", model.init_std, "0.02"),
    K_STR("model", "layer_pattern", model.layer_pattern, ""),
    K_INT("model", "linear_n_k_head", model.linear_n_k_head, "0"),
    K_INT("model", "linear_n_v_head", model.linear_n_v_head, "0"),
    K_INT("model", "linear_k_head_dim", model.linear_k_head_dim, "0"),
    K_INT("model", "linear_v_head_dim", model.linear_v_head_dim, "0"),
    K_INT("model", "linear_conv_kernel", model.linear_conv_kernel, "4"),
    K_ENUM("model", "linear_gate_act", model.linear_gate_act, GATEACT_NAMES, "silu"),
    K_INT("model", "linear_chunk", model.linear_chunk, "64"),

    K_INT("moe", "n_expert", model.moe.n_expert, "0"),
    K_INT("moe", "top_k", model.moe.top_k, "2"),
    K_INT("moe", "d_expert", model.moe.d_expert, "0"),
    K_INT("moe", "n_shared_expert", model.moe.n_shared_expert, "0"),
    K_INT("moe", "d_shared_expert", model.moe.d_shared_expert, "0"),
    K_BOOL("moe", "shared_expert_gate", model.moe.shared_expert_gate, "false"),
    K_INT("moe", "moe_every", model.moe.moe_every, "1"),
    K_ENUM("moe", "router", model.moe.router, ROUTER_NAMES, "softmax_topk"),
    K_FLOAT("moe", "aux_loss_coef", model.moe.aux_loss_coef, "0.01"),
    K_FLOAT("moe", "z_loss_coef", model.moe.z_loss_coef, "0.001"),
    K_FLOAT("moe", "capacity_factor", model.moe.capacity_factor, "0"),
    K_INT("moe", "expert_parallel", model.moe.expert_parallel, "1"),

    K_U64("train", "seed", train.seed, "1337"),
    K_INT("train", "batch_size", train.batch_size, "4"),
    K_INT("train", "seq_len", train.seq_len, "64"),
    K_LONG("train", "tokens_per_step", train.tokens_per_step, "0"),
    K_INT("train", "steps", train.steps, "100"),
    K_FLOAT("train", "lr", train.lr, "3e-4"),
    K_FLOAT("train", "min_lr_frac", train.min_lr_frac, "0.1"),
    K_INT("train", "warmup_steps", train.warmup_steps, "10"),
    K_ENUM("train", "schedule", train.schedule, SCHED_NAMES, "cosine"),
    K_FLOAT("train", "wsd_decay_frac", train.wsd_decay_frac, "0.2"),
    K_FLOAT("train", "weight_decay", train.weight_decay, "0.1"),
    K_FLOAT("train", "beta1", train.beta1, "0.9"),
    K_FLOAT("train", "beta2", train.beta2, "0.95"),
    K_FLOAT("train", "eps", train.eps, "1e-8"),
    K_FLOAT("train", "grad_clip", train.grad_clip, "1.0"),
    K_INT("train", "threads", train.threads, "0"),
    K_INT("train", "zero_stage", train.zero_stage, "0"),
    K_ENUM("train", "attn_impl", train.attn_impl, ATTN_IMPL_NAMES, "fused"),
    K_ENUM("train", "recompute", train.recompute, RECOMPUTE_NAMES, "none"),
    K_ENUM("train", "precision", train.precision, PRECISION_NAMES, "fp32"),
    K_FLOAT("train", "hang_timeout_s", train.hang_timeout_s, "1200"),
    K_FLOAT("train", "straggler_factor", train.straggler_factor, "1.2"),
    K_INT("train", "straggler_reports", train.straggler_reports, "3"),

    K_STR("data", "train_glob", data.train_glob, ""),
    K_STR("data", "val_glob", data.val_glob, ""),
    K_STR("data", "sources", data.sources, ""),
    K_STR("data", "val_sources", data.val_sources, ""),
    K_BOOL("data", "shuffle", data.shuffle, "true"),
    K_STR("data", "tokenizer", data.tokenizer, ""),
    K_BOOL("data", "bos", data.bos, "false"),
    K_INT("data", "bos_token", data.bos_token, "-1"),
    K_BOOL("data", "doc_mask", data.doc_mask, "false"),
    K_ENUM("data", "doc_positions", data.doc_positions, DOCPOS_NAMES, "continue"),

    K_STR("log", "run_dir", log.run_dir, "runs/run"),
    K_INT("log", "log_every", log.log_every, "1"),
    K_INT("log", "val_every", log.val_every, "50"),
    K_INT("log", "val_batches", log.val_batches, "8"),
    K_INT("log", "sample_every", log.sample_every, "0"),
    K_INT("log", "sample_tokens", log.sample_tokens, "128"),
    K_FLOAT("log", "sample_temperature", log.sample_temperature, "1.0"),
    K_INT("log", "sample_top_k", log.sample_top_k, "40"),
    K_STR("log", "sample_prompt", log.sample_prompt, ""),
    K_BOOL("log", "tensorboard", log.tensorboard, "false"),

    K_INT("checkpoint", "checkpoint_every", ckpt.checkpoint_every, "0"),
    K_INT("checkpoint", "keep_last", ckpt.keep_last, "2"),
    K_INT("checkpoint", "keep_every", ckpt.keep_every, "0"),
    K_STR("checkpoint", "dir", ckpt.dir, ""),
    K_ENUM("checkpoint", "on_write_error", ckpt.on_write_error, ONERROR_NAMES, "continue"),
    K_BOOL("checkpoint", "async", ckpt.async, "false"),

    K_INT("metrics", "probe_every", metrics.probe_every, "50"),
    K_INT("metrics", "spike_window", metrics.spike_window, "100"),
    K_FLOAT("metrics", "spike_z", metrics.spike_z, "5"),
    K_FLOAT("metrics", "skip_loss_z", metrics.skip_loss_z, "0"),
    K_FLOAT("metrics", "skip_grad_z", metrics.skip_grad_z, "0"),
    K_INT("metrics", "max_nonfinite", metrics.max_nonfinite, "5"),

    K_STR("eval", "tasks", eval.tasks, ""),
    K_INT("eval", "task_every", eval.task_every, "100"),
    K_INT("eval", "task_limit", eval.task_limit, "0"),
};
#define N_KEYS NELEM(KEYS)
_Static_assert(sizeof(KEYS) / sizeof(KEYS[0]) <= CONFIG_MAX_KEYS, "raise CONFIG_MAX_KEYS");
// enum fields are read and written through int*
_Static_assert(sizeof(PosKind) == sizeof(int) && sizeof(NormKind) == sizeof(int) &&
               sizeof(MlpKind) == sizeof(int) && sizeof(GateKind) == sizeof(int) &&
               sizeof(GatePos) == sizeof(int) && sizeof(GateAct) == sizeof(int) &&
               sizeof(SchedKind) == sizeof(int) && sizeof(AttnImpl) == sizeof(int) && sizeof(RecomputeKind) == sizeof(int) && sizeof(PrecisionKind) == sizeof(int) && sizeof(CkptOnError) == sizeof(int) && sizeof(RouterKind) == sizeof(int), "enums must be int-sized");

static const char* const SECTIONS[] = {"model", "moe", "train", "data", "log", "checkpoint", "metrics", "eval"};
#define SECTIONS_ACCEPTED "model, moe, train, data, log, checkpoint, metrics, eval"

static void* field_ptr(Config* c, const KeyDef* k) { return (char*)c + k->offset; }
static const void* field_cptr(const Config* c, const KeyDef* k) { return (const char*)c + k->offset; }

static int find_key(const char* section, const char* name) {
    for (int i = 0; i < N_KEYS; i++)
        if (strcmp(KEYS[i].section, section) == 0 && strcmp(KEYS[i].name, name) == 0) return i;
    return -1;
}

static int is_section(const char* s) {
    for (int i = 0; i < NELEM(SECTIONS); i++)
        if (strcmp(SECTIONS[i], s) == 0) return 1;
    return 0;
}

// ----------------------------------------------------------------------------------------------
// "did you mean": edit distance to the known names

static int edit_distance(const char* a, const char* b) {
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > 63 || lb > 63) return 1000;
    int d[64][64];
    for (int i = 0; i <= la; i++) d[i][0] = i;
    for (int j = 0; j <= lb; j++) d[0][j] = j;
    for (int i = 1; i <= la; i++)
        for (int j = 1; j <= lb; j++) {
            int cost = tolower((unsigned char)a[i - 1]) == tolower((unsigned char)b[j - 1]) ? 0 : 1;
            int best = d[i - 1][j - 1] + cost;
            if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            // adjacent transposition ("haed_dim")
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[la][lb];
}

// How far a typo may be from the real name to be suggested.
static int near_enough(const char* typed, const char* known) {
    int len = (int)strlen(typed);
    int limit = len <= 4 ? 1 : len <= 8 ? 2 : 3;
    if (edit_distance(typed, known) <= limit) return 1;
    // "warmup" for "warmup_steps", "n_kv" for "n_kv_head"
    size_t lt = strlen(typed), lk = strlen(known);
    if (lt >= 4 && lt < lk && strncmp(typed, known, lt) == 0) return 1;
    return 0;
}

// Writes " (did you mean ...?)" into buf, or "" when nothing is close.
static void suggest_key(const char* section, const char* name, char* buf, size_t n) {
    buf[0] = '\0';
    // the exact name in another section: a key put under the wrong header
    for (int i = 0; i < N_KEYS; i++)
        if (strcmp(KEYS[i].name, name) == 0) {
            snprintf(buf, n, " (did you mean [%s] %s? it belongs to section [%s])", KEYS[i].section,
                     KEYS[i].name, KEYS[i].section);
            return;
        }
    int best = -1, best_d = 1000;
    for (int pass = 0; pass < 2 && best < 0; pass++)  // same section first, then any section
        for (int i = 0; i < N_KEYS; i++) {
            if (pass == 0 && strcmp(KEYS[i].section, section) != 0) continue;
            if (!near_enough(name, KEYS[i].name)) continue;
            int d = edit_distance(name, KEYS[i].name);
            if (d < best_d) best_d = d, best = i;
        }
    if (best < 0) return;
    if (strcmp(KEYS[best].section, section) == 0)
        snprintf(buf, n, " (did you mean %s?)", KEYS[best].name);
    else
        snprintf(buf, n, " (did you mean [%s] %s?)", KEYS[best].section, KEYS[best].name);
}

static void suggest_section(const char* section, char* buf, size_t n) {
    buf[0] = '\0';
    int best = -1, best_d = 1000;
    for (int i = 0; i < NELEM(SECTIONS); i++) {
        if (!near_enough(section, SECTIONS[i])) continue;
        int d = edit_distance(section, SECTIONS[i]);
        if (d < best_d) best_d = d, best = i;
    }
    if (best >= 0) snprintf(buf, n, " (did you mean [%s]?)", SECTIONS[best]);
}

// ----------------------------------------------------------------------------------------------
// values: parse one string into a field, format a field back

static const char* accepted_for(const KeyDef* k, char* buf, size_t n) {
    switch (k->type) {
    case KT_INT: return "an integer such as 12";
    case KT_LONG: return "an integer such as 524288";
    case KT_U64: return "an integer from 0 to 18446744073709551615";
    case KT_FLOAT: return "a number such as 0.1 or 3e-4";
    case KT_BOOL: return "true, false, 1, 0, yes, no, on, off";
    case KT_ENUM: {
        size_t used = 0;
        buf[0] = '\0';
        for (int i = 0; i < k->n_enum && used < n; i++)
            used += (size_t)snprintf(buf + used, n - used, "%s%s", i ? ", " : "", k->enums[i]);
        return buf;
    }
    case KT_STR: return "a string";
    }
    return "?";
}

// Is s a number written with a fraction or exponent ("768.5", "1e3")? For a better message.
static int looks_like_float(const char* s) {
    if (!strpbrk(s, ".eE") || !strpbrk(s, "0123456789")) return 0;
    char* end;
    double v = strtod(s, &end);
    (void)v;
    return end != s && *end == '\0';
}

// Parse `value` into key k of c. Returns 0, or -1 with the reason (no location) in msg.
static int set_value(Config* c, const KeyDef* k, const char* value, char* msg, size_t n) {
    char acc[256];
    void* p = field_ptr(c, k);
    if (k->type != KT_STR && value[0] == '\0') {
        snprintf(msg, n, "empty value (accepted: %s)", accepted_for(k, acc, sizeof acc));
        return -1;
    }
    switch (k->type) {
    case KT_INT:
    case KT_LONG:
    case KT_U64: {
        char* end;
        errno = 0;
        long long v = 0;
        unsigned long long u = 0;
        int neg_u64 = 0;
        if (k->type == KT_U64) {
            const char* q = value;
            while (isspace((unsigned char)*q)) q++;
            neg_u64 = *q == '-';
            u = strtoull(value, &end, 10);
        } else {
            v = strtoll(value, &end, 10);
        }
        if (end == value || *end != '\0' || neg_u64) {
            if (!neg_u64 && looks_like_float(value))
                snprintf(msg, n, "not an integer: a fraction or exponent is not accepted for an integer key "
                         "(accepted: %s)", accepted_for(k, acc, sizeof acc));
            else
                snprintf(msg, n, "not an integer (accepted: %s)", accepted_for(k, acc, sizeof acc));
            return -1;
        }
        long long lo = k->type == KT_INT ? INT_MIN : LONG_MIN;
        long long hi = k->type == KT_INT ? INT_MAX : LONG_MAX;
        if (errno == ERANGE || (k->type != KT_U64 && (v < lo || v > hi))) {
            if (k->type == KT_U64)
                snprintf(msg, n, "out of range (accepted: %s)", accepted_for(k, acc, sizeof acc));
            else
                snprintf(msg, n, "out of range (accepted: an integer from %lld to %lld)", lo, hi);
            return -1;
        }
        if (k->type == KT_INT) *(int*)p = (int)v;
        else if (k->type == KT_LONG) *(long*)p = (long)v;
        else *(unsigned long long*)p = u;
        return 0;
    }
    case KT_FLOAT: {
        char* end;
        errno = 0;
        double v = strtod(value, &end);
        if (end == value || *end != '\0') {
            snprintf(msg, n, "not a number (accepted: %s)", accepted_for(k, acc, sizeof acc));
            return -1;
        }
        if (isnan(v) || (isinf(v) && errno != ERANGE)) {
            snprintf(msg, n, "not a finite number (accepted: %s)", accepted_for(k, acc, sizeof acc));
            return -1;
        }
        if (errno == ERANGE && fabs(v) > 1.0) {
            snprintf(msg, n, "out of range (accepted: a finite number of magnitude up to %.3g)", (double)FLT_MAX);
            return -1;
        }
        if (errno == ERANGE || (v != 0.0 && (float)v == 0.0f)) {
            snprintf(msg, n, "too small for float32, it would become 0 (accepted: 0 or a magnitude of "
                     "at least %.3g)", (double)FLT_TRUE_MIN);
            return -1;
        }
        if (fabs(v) > FLT_MAX) {
            snprintf(msg, n, "out of range for float32 (accepted: a finite number of magnitude up to %.3g)",
                     (double)FLT_MAX);
            return -1;
        }
        *(float*)p = (float)v;
        return 0;
    }
    case KT_BOOL: {
        static const char* const T[] = {"true", "1", "yes", "on"};
        static const char* const F[] = {"false", "0", "no", "off"};
        for (int i = 0; i < 4; i++) {
            if (strcasecmp(value, T[i]) == 0) { *(int*)p = 1; return 0; }
            if (strcasecmp(value, F[i]) == 0) { *(int*)p = 0; return 0; }
        }
        snprintf(msg, n, "not a boolean (accepted: %s)", accepted_for(k, acc, sizeof acc));
        return -1;
    }
    case KT_ENUM:
        for (int i = 0; i < k->n_enum; i++)
            if (strcasecmp(value, k->enums[i]) == 0) { *(int*)p = i; return 0; }
        snprintf(msg, n, "unknown value (accepted: %s)", accepted_for(k, acc, sizeof acc));
        return -1;
    case KT_STR: {
        size_t len = strlen(value);
        if (len >= k->size) {
            snprintf(msg, n, "longer than %zu characters (accepted: a shorter string)", k->size - 1);
            return -1;
        }
        for (size_t i = 0; i < len; i++) {
            unsigned char ch = (unsigned char)value[i];
            if (ch < 0x20 || ch == 0x7f) {
                snprintf(msg, n, "contains a control character (accepted: printable text)");
                return -1;
            }
            if ((ch == ';' || ch == '#') && (i == 0 || isspace((unsigned char)value[i - 1]))) {
                snprintf(msg, n, "'%c' at the start or after a space, which an INI file reads as a comment "
                         "(accepted: text without a leading ';'/'#' or \" ;\" / \" #\")", ch);
                return -1;
            }
        }
        if (len > 0 && (isspace((unsigned char)value[0]) || isspace((unsigned char)value[len - 1]))) {
            snprintf(msg, n, "leading or trailing whitespace (accepted: trimmed text)");
            return -1;
        }
        memcpy(p, value, len + 1);
        return 0;
    }
    }
    return -1;
}

// Shortest decimal that reads back to the same float; plain digits for whole numbers.
static void format_float(float f, char* buf, size_t n) {
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, n, "%.*g", prec, (double)f);
        if ((float)strtod(buf, NULL) == f) break;
    }
    if (strchr(buf, 'e') && f == floorf(f) && fabsf(f) < 1e9f) snprintf(buf, n, "%.0f", (double)f);
}

static void format_value(const Config* c, const KeyDef* k, char* buf, size_t n) {
    const void* p = field_cptr(c, k);
    switch (k->type) {
    case KT_INT: snprintf(buf, n, "%d", *(const int*)p); break;
    case KT_LONG: snprintf(buf, n, "%ld", *(const long*)p); break;
    case KT_U64: snprintf(buf, n, "%llu", *(const unsigned long long*)p); break;
    case KT_FLOAT: format_float(*(const float*)p, buf, n); break;
    case KT_BOOL: snprintf(buf, n, "%s", *(const int*)p ? "true" : "false"); break;
    case KT_ENUM: {
        int v = *(const int*)p;
        snprintf(buf, n, "%s", v >= 0 && v < k->n_enum ? k->enums[v] : "?");
        break;
    }
    case KT_STR: snprintf(buf, n, "%s", (const char*)p); break;
    }
}

// ----------------------------------------------------------------------------------------------
// errors

// "config error: WHERE: [section] key = value: MESSAGE"
static void print_key_error(const char* where, const char* section, const char* name, const char* value,
                            const char* message) {
    fprintf(stderr, "config error: %s: [%s] %s = %s: %s\n", where, section, name,
            value[0] ? value : "\"\"", message);
}

// ----------------------------------------------------------------------------------------------
// public: defaults, enum names, introspection

void config_defaults(Config* c) {
    memset(c, 0, sizeof *c);
    for (int i = 0; i < N_KEYS; i++) {
        char msg[512];
        if (set_value(c, &KEYS[i], KEYS[i].def, msg, sizeof msg) != 0) {
            // a bug in the table, not a user error
            fprintf(stderr, "config: bad default for [%s] %s: %s\n", KEYS[i].section, KEYS[i].name, msg);
            abort();
        }
    }
    c->model.padded_vocab = (c->model.vocab_size + 127) / 128 * 128;
}

const char* config_enum_name(const char* key, int value) {
    for (int i = 0; i < N_KEYS; i++)
        if (KEYS[i].type == KT_ENUM && strcmp(KEYS[i].name, key) == 0)
            return value >= 0 && value < KEYS[i].n_enum ? KEYS[i].enums[value] : NULL;
    return NULL;
}

int config_key_count(void) { return N_KEYS; }

const char* config_key(int i, const char** section) {
    if (i < 0 || i >= N_KEYS) return NULL;
    if (section) *section = KEYS[i].section;
    return KEYS[i].name;
}

void config_key_value(const Config* c, int i, char* buf, size_t n) {
    if (i < 0 || i >= N_KEYS) { if (n) buf[0] = '\0'; return; }
    format_value(c, &KEYS[i], buf, n);
}

const char* config_origin(const Config* c, const char* section, const char* key) {
    int i = find_key(section, key);
    if (i < 0) return NULL;
    return c->origin[i][0] ? c->origin[i] : "default";
}

int config_equal(const Config* a, const Config* b) {
    for (int i = 0; i < N_KEYS; i++) {
        const KeyDef* k = &KEYS[i];
        const void* pa = field_cptr(a, k);
        const void* pb = field_cptr(b, k);
        if (k->type == KT_STR) {
            if (strcmp((const char*)pa, (const char*)pb) != 0) return 0;
        } else if (memcmp(pa, pb, k->size) != 0) {
            return 0;
        }
    }
    return a->model.padded_vocab == b->model.padded_vocab;
}

// ----------------------------------------------------------------------------------------------
// public: INI file

typedef struct {
    Config* c;
    const char* path;
    FILE* f;
    int line;            // line number of the text most recently handed to inih
    int at_line_start;   // the previous chunk ended with '\n'
    int too_long_line;   // a line did not fit inih's buffer (0 = none)
    int failed;          // the handler printed an error
    int set_line[CONFIG_MAX_KEYS]; // line where this file set each key (0 = not set), for duplicates
} LoadCtx;

#define INI_LINE_MAX 4096 // longest line accepted (incl. newline); string values are < 1024

// fgets-style reader that counts lines, so errors name the right line whatever inih's build
// options are (the handler's lineno argument is a compile-time option of the library).
static char* load_reader(char* str, int num, void* stream) {
    LoadCtx* ctx = (LoadCtx*)stream;
    char* r = fgets(str, num, ctx->f);
    if (!r) return NULL;
    if (ctx->at_line_start) ctx->line++;
    size_t len = strlen(str);
    ctx->at_line_start = len > 0 && str[len - 1] == '\n';
    if (!ctx->at_line_start && !feof(ctx->f) && !ctx->too_long_line) ctx->too_long_line = ctx->line;
    return r;
}

static void trim_copy(char* dst, size_t n, const char* src) {
    while (isspace((unsigned char)*src)) src++;
    size_t len = strlen(src);
    while (len > 0 && isspace((unsigned char)src[len - 1])) len--;
    if (len >= n) len = n - 1;
    memcpy(dst, src, len);
    dst[len] = '\0';
}

static int load_handler(void* user, const char* section_raw, const char* name, const char* value) {
    LoadCtx* ctx = (LoadCtx*)user;
    char where[CONFIG_ORIGIN_LEN];
    snprintf(where, sizeof where, "%s:%d", ctx->path, ctx->line);
    if (ctx->too_long_line) return 0; // reported after parsing
    char section[64];
    trim_copy(section, sizeof section, section_raw);
    if (section[0] == '\0') {
        fprintf(stderr, "config error: %s: %s = %s: key outside any section (put it under one of [%s])\n",
                where, name, value, SECTIONS_ACCEPTED);
        ctx->failed = 1;
        return 0;
    }
    if (!is_section(section)) {
        char hint[128];
        suggest_section(section, hint, sizeof hint);
        fprintf(stderr, "config error: %s: unknown section [%s]%s (accepted: %s)\n", where, section, hint,
                SECTIONS_ACCEPTED);
        ctx->failed = 1;
        return 0;
    }
    int ki = find_key(section, name);
    if (ki < 0) {
        char hint[160], msg[256];
        suggest_key(section, name, hint, sizeof hint);
        snprintf(msg, sizeof msg, "unknown key in [%s]%s", section, hint);
        print_key_error(where, section, name, value, msg);
        ctx->failed = 1;
        return 0;
    }
    if (ctx->set_line[ki]) {
        char msg[256];
        snprintf(msg, sizeof msg, "duplicate key, already set at line %d (accepted: each key once per file)",
                 ctx->set_line[ki]);
        print_key_error(where, section, name, value, msg);
        ctx->failed = 1;
        return 0;
    }
    char msg[512];
    if (set_value(ctx->c, &KEYS[ki], value, msg, sizeof msg) != 0) {
        print_key_error(where, section, name, value, msg);
        ctx->failed = 1;
        return 0;
    }
    ctx->set_line[ki] = ctx->line;
    snprintf(ctx->c->origin[ki], CONFIG_ORIGIN_LEN, "%s", where);
    return 1;
}

int config_load_file(Config* c, const char* path) {
    FILE* f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "config error: %s: cannot open config file: %s\n", path, strerror(errno));
        return -1;
    }
    // inih's run-time options (this Debian build exposes them as globals): plain INI, comments
    // start with ';' or '#' (inline ones after whitespace), no continuation lines (an indented
    // line is an ordinary line), stop at the first error. Restored afterwards.
    bool s_multi = ini_allow_multiline, s_inline = ini_allow_inline_comments, s_stop = ini_stop_on_first_error;
    bool s_noval = ini_allow_no_value, s_stack = ini_use_stack;
    char* s_prefix = ini_inline_comment_prefixes;
    int s_max = ini_max_line;
    ini_allow_multiline = false;
    ini_allow_inline_comments = true;
    ini_inline_comment_prefixes = (char*)";#";
    ini_stop_on_first_error = true;
    ini_allow_no_value = false;
    ini_use_stack = true;
    ini_max_line = INI_LINE_MAX;

    LoadCtx* ctx = calloc(1, sizeof *ctx);
    if (!ctx) {
        fclose(f);
        fprintf(stderr, "config error: %s: out of memory\n", path);
        return -1;
    }
    ctx->c = c;
    ctx->path = path;
    ctx->f = f;
    ctx->at_line_start = 1;
    int rc = ini_parse_stream(load_reader, ctx, load_handler, ctx);
    int read_error = ferror(f);
    int err_errno = errno;
    fclose(f);

    ini_allow_multiline = s_multi;
    ini_allow_inline_comments = s_inline;
    ini_inline_comment_prefixes = s_prefix;
    ini_stop_on_first_error = s_stop;
    ini_allow_no_value = s_noval;
    ini_use_stack = s_stack;
    ini_max_line = s_max;

    int result = 0;
    if (ctx->failed) {
        result = -1;
    } else if (ctx->too_long_line) {
        fprintf(stderr, "config error: %s:%d: line longer than %d characters (accepted: shorter lines)\n", path,
                ctx->too_long_line, INI_LINE_MAX - 2);
        result = -1;
    } else if (read_error) {
        fprintf(stderr, "config error: %s: cannot read config file: %s\n", path, strerror(err_errno));
        result = -1;
    } else if (rc != 0) {
        // inih's own syntax error: it stopped on the line it could not read, our ctx->line
        fprintf(stderr, "config error: %s:%d: syntax error (accepted: \"[section]\", \"key = value\", "
                "or a comment starting with ';' or '#')\n", path, rc > 0 ? ctx->line : 0);
        result = -1;
    }
    free(ctx);
    return result;
}

// ----------------------------------------------------------------------------------------------
// public: command-line override "section.key=value"

int config_apply_override(Config* c, const char* arg) {
    const char* where = "command line";
    const char* eq = strchr(arg, '=');
    const char* dot = strchr(arg, '.');
    if (!eq || !dot || dot > eq || dot == arg || dot + 1 == eq) {
        fprintf(stderr, "config error: %s: --%s: expected --section.key=value (e.g. --model.n_layer=4)\n",
                where, arg);
        return -1;
    }
    char section[64], name[128], value[2048];
    if ((size_t)(dot - arg) >= sizeof section || (size_t)(eq - dot - 1) >= sizeof name ||
        strlen(eq + 1) >= sizeof value) {
        fprintf(stderr, "config error: %s: --%.60s...: too long\n", where, arg);
        return -1;
    }
    char tmp[128];
    memcpy(tmp, arg, (size_t)(dot - arg));
    tmp[dot - arg] = '\0';
    trim_copy(section, sizeof section, tmp);
    memcpy(tmp, dot + 1, (size_t)(eq - dot - 1));
    tmp[eq - dot - 1] = '\0';
    trim_copy(name, sizeof name, tmp);
    trim_copy(value, sizeof value, eq + 1); // like a value in a file

    if (!is_section(section)) {
        char hint[128];
        suggest_section(section, hint, sizeof hint);
        fprintf(stderr, "config error: %s: --%s: unknown section [%s]%s (accepted: %s)\n", where, arg, section,
                hint, SECTIONS_ACCEPTED);
        return -1;
    }
    int ki = find_key(section, name);
    if (ki < 0) {
        char hint[160], msg[256];
        suggest_key(section, name, hint, sizeof hint);
        snprintf(msg, sizeof msg, "unknown key in [%s]%s", section, hint);
        print_key_error(where, section, name, value, msg);
        return -1;
    }
    char msg[512];
    if (set_value(c, &KEYS[ki], value, msg, sizeof msg) != 0) {
        print_key_error(where, section, name, value, msg);
        return -1;
    }
    snprintf(c->origin[ki], CONFIG_ORIGIN_LEN, "%s", where);
    return 0;
}

// ----------------------------------------------------------------------------------------------
// public: validation and derived fields

typedef struct {
    const Config* c;
    const char* origin; // config file, for keys left at their default
} FinCtx;

// Error about [section] name, located where that key was set. Always returns -1.
static int fin_error(const FinCtx* fc, const char* section, const char* name, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fin_error(const FinCtx* fc, const char* section, const char* name, const char* fmt, ...) {
    int ki = find_key(section, name);
    char value[1100], where[CONFIG_ORIGIN_LEN + 32], msg[1024];
    format_value(fc->c, &KEYS[ki], value, sizeof value);
    const char* o = fc->c->origin[ki];
    if (strncmp(o, "derived", 7) == 0) o = ""; // not a location (finalize never rejects what it derived)
    if (o[0]) snprintf(where, sizeof where, "%s", o);
    else snprintf(where, sizeof where, "%s", fc->origin && fc->origin[0] ? fc->origin : "config");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "config error: %s: [%s] %s = %s%s: %s\n", where, section, name, value[0] ? value : "\"\"",
            o[0] ? "" : " (default)", msg);
    return -1;
}

// " (set at FILE:LINE)" / " (command line)" / " (default)" for the other key of a cross-field rule
static const char* from(const Config* c, const char* section, const char* name, char* buf, size_t n) {
    const char* o = config_origin(c, section, name);
    if (strcmp(o, "default") == 0) snprintf(buf, n, "default");
    else if (strcmp(o, "command line") == 0 || strncmp(o, "derived", 7) == 0) snprintf(buf, n, "%s", o);
    else snprintf(buf, n, "set at %s", o);
    return buf;
}

// Record that finalize filled in key `name` by `rule`: its origin becomes "derived: RULE", plus
// where the 0 came from if a file or the command line set it.
static void mark_derived(Config* c, const char* section, const char* name, const char* rule) {
    int ki = find_key(section, name);
    char* o = c->origin[ki];
    char old[CONFIG_ORIGIN_LEN];
    snprintf(old, sizeof old, "%s", o);
    if (old[0]) snprintf(o, CONFIG_ORIGIN_LEN, "derived: %s (0 at %.200s)", rule, old);
    else snprintf(o, CONFIG_ORIGIN_LEN, "derived: %s", rule);
}

// Whether finalize filled in key `name` (mark_derived) rather than a default, file or override.
static int is_derived(const Config* c, const char* section, const char* name) {
    return strncmp(c->origin[find_key(section, name)], "derived", 7) == 0;
}

// Bounds of float keys (docs/config.md "Bounds of the float keys" derives each)
#define CONFIG_ROPE_FACTOR_MAX 1e6f     // rope_factor: s = L_new / L_train <= 1e6
#define CONFIG_YARN_ATTN_MIN 0.25f      // yarn_attn_factor m: the logits scale by m^2, 1/16 ..
#define CONFIG_YARN_ATTN_MAX 4.0f       // .. 16 (the formulas give 1 .. 2.38 for s <= 1e6)
#define CONFIG_INIT_STD_GAIN 4.0        // init_std <= 4 / sqrt(d_model): 4x the unit-gain init
#define CONFIG_ADAM_EPS_MIN 0x1p-63f    // AdamW eps >= sqrt(FLT_MIN) = 2^-63 = 1.08e-19

#define REQUIRE_POS(sec, key, v)                                                                      \
    if ((v) <= 0) return fin_error(fc, sec, key, "must be positive (accepted: an integer >= 1)")
#define REQUIRE_NONNEG(sec, key, v, zero_means)                                                       \
    if ((v) < 0) return fin_error(fc, sec, key, "must not be negative (accepted: 0 = %s, or an integer >= 1)", zero_means)

// ----------------------------------------------------------------------------------------------
// keys without effect: one rule for all of them
//
// A key that only matters under some setting (the YaRN keys under rope_scaling = yarn, the [moe]
// keys with experts, ...) is refused when it is away from its default while that setting says
// it is unused: it would silently do nothing. "Away from its default" rather than "present":
// config_write writes every key (the run directory's config.ini, a checkpoint's), and that file
// must load back. Each rule names its conditions; the error names the first one that fails, the
// setting behind it and where that was set, and the setting that would use the key.

// The conditions. Each test returns 1 (holds), 0 (does not: the key has no effect) or -1 (the
// deciding setting is itself invalid: its own rule reports that, so no verdict here).
typedef enum {
    NE_ATTN,    // some layer is full attention (layer_pattern has an A, or is empty)
    NE_ROPE,    // pos = rope
    NE_SCALED,  // rope_scaling != none
    NE_YARN,    // rope_scaling = yarn
    NE_GATED,   // attn_gate != none
    NE_LINEAR,  // some layer is a Gated DeltaNet (layer_pattern has an L)
    NE_MOE,     // n_expert >= 1
    NE_SHARED,  // n_shared_expert = 1
    NE_DECAY,   // the schedule decays (not constant)
    NE_WSD,     // schedule = wsd
    NE_BOS,     // [data] bos = true
    NE_DOCMASK, // [data] doc_mask = true
    NE_COUNT
} NoEffectCond;

// 1 if layer_pattern has letter `ch` among the n_layer layers, -1 if the pattern or n_layer is
// invalid (finalize_hybrid / finalize_model report that)
static int pattern_has(const ModelConfig* m, char ch) {
    const int plen = (int)strlen(m->layer_pattern);
    if (m->n_layer < 1) return -1;
    if (plen == 0) return ch == 'A';
    for (int i = 0; i < plen; i++)
        if (m->layer_pattern[i] != 'A' && m->layer_pattern[i] != 'L') return -1;
    if (m->n_layer % plen != 0) return -1;
    return strchr(m->layer_pattern, ch) != NULL;
}

static int ne_holds(const Config* c, NoEffectCond k) {
    const ModelConfig* m = &c->model;
    switch (k) {
    case NE_ATTN: return pattern_has(m, 'A');
    case NE_ROPE: return m->pos == POS_ROPE;
    case NE_SCALED: return m->rope_scaling != ROPE_SCALING_NONE;
    case NE_YARN: return m->rope_scaling == ROPE_SCALING_YARN;
    case NE_GATED: return m->attn_gate != GATE_NONE;
    case NE_LINEAR: return pattern_has(m, 'L');
    case NE_MOE: return m->moe.n_expert < 0 ? -1 : m->moe.n_expert > 0;
    case NE_SHARED: return m->moe.n_shared_expert == 1 ? 1 : m->moe.n_shared_expert == 0 ? 0 : -1;
    case NE_DECAY: return c->train.schedule != SCHED_CONSTANT;
    case NE_WSD: return c->train.schedule == SCHED_WSD;
    case NE_BOS: return c->data.bos != 0;
    case NE_DOCMASK: return c->data.doc_mask != 0;
    case NE_COUNT: break;
    }
    return -1;
}

// For each condition: the setting that decides it, what its failing value means, and the
// setting that would make the key count.
static const struct {
    const char* section;
    const char* key;
    const char* means;  // after "with KEY = VALUE (ORIGIN)"
    const char* fix;    // first alternative of "(accepted: ...)"
} NE_CONDS[NE_COUNT] = {
    [NE_ATTN] = {"model", "layer_pattern", "no layer is full attention", "a layer_pattern with an A, e.g. LLLA"},
    [NE_ROPE] = {"model", "pos", "no rotary embedding", "pos = rope"},
    [NE_SCALED] = {"model", "rope_scaling", "the rotary embedding is not scaled", "rope_scaling = linear, ntk or yarn"},
    [NE_YARN] = {"model", "rope_scaling", "only yarn uses it", "rope_scaling = yarn"},
    [NE_GATED] = {"model", "attn_gate", "no attention gate", "attn_gate = elementwise or headwise"},
    [NE_LINEAR] = {"model", "layer_pattern", "no layer is a Gated DeltaNet", "a layer_pattern with L, e.g. LLLA"},
    [NE_MOE] = {"moe", "n_expert", "a dense model", "n_expert >= 1 for MoE layers"},
    [NE_SHARED] = {"moe", "n_shared_expert", "no shared expert", "n_shared_expert = 1"},
    [NE_DECAY] = {"train", "schedule", "the lr stays at its peak after warmup", "schedule = cosine, linear or wsd"},
    [NE_WSD] = {"train", "schedule", "only wsd has a final decay phase", "schedule = wsd"},
    [NE_BOS] = {"data", "bos", "no BOS token is inserted", "bos = true"},
    [NE_DOCMASK] = {"data", "doc_mask", "attention crosses documents", "doc_mask = true"},
};

// The rules: key K has an effect only when every listed condition holds (checked in order).
#define NE_MAX_CONDS 3
typedef struct {
    const char* section;
    const char* key;
    int n;
    NoEffectCond cond[NE_MAX_CONDS];
} NoEffectRule;

static const NoEffectRule NO_EFFECT_RULES[] = {
    {"model", "rope_base", 2, {NE_ATTN, NE_ROPE}},
    {"model", "rope_fraction", 2, {NE_ATTN, NE_ROPE}},
    {"model", "rope_scaling", 2, {NE_ATTN, NE_ROPE}},
    {"model", "rope_factor", 3, {NE_ATTN, NE_ROPE, NE_SCALED}},
    {"model", "yarn_beta_fast", 3, {NE_ATTN, NE_ROPE, NE_YARN}},
    {"model", "yarn_beta_slow", 3, {NE_ATTN, NE_ROPE, NE_YARN}},
    {"model", "yarn_attn_factor", 3, {NE_ATTN, NE_ROPE, NE_YARN}},
    {"model", "qk_norm", 1, {NE_ATTN}},
    {"model", "attn_gate", 1, {NE_ATTN}},
    {"model", "gate_position", 2, {NE_ATTN, NE_GATED}},
    {"model", "gate_act", 2, {NE_ATTN, NE_GATED}},
    {"model", "linear_n_k_head", 1, {NE_LINEAR}},
    {"model", "linear_n_v_head", 1, {NE_LINEAR}},
    {"model", "linear_k_head_dim", 1, {NE_LINEAR}},
    {"model", "linear_v_head_dim", 1, {NE_LINEAR}},
    {"model", "linear_conv_kernel", 1, {NE_LINEAR}},
    {"model", "linear_gate_act", 1, {NE_LINEAR}},
    {"model", "linear_chunk", 1, {NE_LINEAR}},
    {"moe", "top_k", 1, {NE_MOE}},
    {"moe", "d_expert", 1, {NE_MOE}},
    {"moe", "n_shared_expert", 1, {NE_MOE}},
    {"moe", "d_shared_expert", 2, {NE_MOE, NE_SHARED}},
    {"moe", "shared_expert_gate", 2, {NE_MOE, NE_SHARED}},
    {"moe", "moe_every", 1, {NE_MOE}},
    {"moe", "router", 1, {NE_MOE}},
    {"moe", "aux_loss_coef", 1, {NE_MOE}},
    {"moe", "z_loss_coef", 1, {NE_MOE}},
    {"moe", "capacity_factor", 1, {NE_MOE}},
    {"moe", "expert_parallel", 1, {NE_MOE}},
    {"train", "min_lr_frac", 1, {NE_DECAY}},
    {"train", "wsd_decay_frac", 1, {NE_WSD}},
    {"data", "bos_token", 1, {NE_BOS}},
    {"data", "doc_positions", 3, {NE_DOCMASK, NE_ATTN, NE_ROPE}},
};

// `value` of key k of c as an error message shows it: strings in quotes ('' for empty)
static void shown_value(const Config* c, const KeyDef* k, char* buf, size_t n) {
    char v[1100];   // buf: at least 1104 (a string value in quotes)
    format_value(c, k, v, sizeof v);
    if (k->type == KT_STR) snprintf(buf, n, "'%s'", v);
    else snprintf(buf, n, "%s", v);
}

// Every rule, on the values as set (before anything is derived: derived values only ever fill
// keys that are in use, so a finalized config passes again). Returns 0 or -1 after the error.
static int finalize_no_effect(const Config* c, const FinCtx* fc) {
    Config def;
    config_defaults(&def);
    for (int r = 0; r < NELEM(NO_EFFECT_RULES); r++) {
        const NoEffectRule* rule = &NO_EFFECT_RULES[r];
        const KeyDef* k = &KEYS[find_key(rule->section, rule->key)];
        if (memcmp(field_cptr(c, k), field_cptr(&def, k), k->size) == 0) continue;
        for (int i = 0; i < rule->n; i++) {
            NoEffectCond cond = rule->cond[i];
            int h = ne_holds(c, cond);
            if (h < 0) break;   // the deciding setting is invalid: reported by its own rule
            if (h) continue;
            const KeyDef* ck = &KEYS[find_key(NE_CONDS[cond].section, NE_CONDS[cond].key)];
            char cv[1104], dv[1104], b1[CONFIG_ORIGIN_LEN + 16], cname[80];
            shown_value(c, ck, cv, sizeof cv);
            shown_value(&def, k, dv, sizeof dv);
            if (strcmp(ck->section, k->section) == 0) snprintf(cname, sizeof cname, "%s", ck->name);
            else snprintf(cname, sizeof cname, "[%s] %s", ck->section, ck->name);
            return fin_error(fc, k->section, k->name, "has no effect with %s = %s (%s): %s (accepted: %s, or "
                             "leave %s at its default %s)", cname, cv, from(c, ck->section, ck->name, b1, sizeof b1),
                             NE_CONDS[cond].means, NE_CONDS[cond].fix, k->name, dv);
        }
    }
    return 0;
}

// [model] hybrid layers: the layer pattern, and the Gated DeltaNet's sizes derived from the
// attention's (Qwen3-Next's ratios: twice as many value heads as key heads). Without linear
// layers the linear_* keys stay at their defaults (finalize_no_effect).
static int finalize_hybrid(Config* c, const FinCtx* fc) {
    ModelConfig* m = &c->model;
    char b1[CONFIG_ORIGIN_LEN + 16];
    const int plen = (int)strlen(m->layer_pattern);
    for (int i = 0; i < plen; i++)
        if (m->layer_pattern[i] != 'A' && m->layer_pattern[i] != 'L')
            return fin_error(fc, "model", "layer_pattern", "'%s' has '%c' at %d (accepted: the letters A = full "
                             "attention and L = Gated DeltaNet, e.g. LLLA for Qwen3-Next's 3:1)",
                             m->layer_pattern, m->layer_pattern[i], i);
    if (plen > 0 && m->n_layer % plen != 0)
        return fin_error(fc, "model", "layer_pattern", "'%s' (%d layers) does not repeat evenly over n_layer = %d "
                         "(%s) (accepted: a pattern whose length divides n_layer, or one letter per layer)",
                         m->layer_pattern, plen, m->n_layer, from(c, "model", "n_layer", b1, sizeof b1));
    if (!config_any_linear(m)) return 0;
    REQUIRE_NONNEG("model", "linear_n_v_head", m->linear_n_v_head, "n_head");
    REQUIRE_NONNEG("model", "linear_n_k_head", m->linear_n_k_head, "max(1, linear_n_v_head / 2)");
    REQUIRE_NONNEG("model", "linear_k_head_dim", m->linear_k_head_dim, "head_dim");
    REQUIRE_NONNEG("model", "linear_v_head_dim", m->linear_v_head_dim, "head_dim");
    REQUIRE_NONNEG("model", "linear_chunk", m->linear_chunk, "the recurrent form");
    if (m->linear_n_v_head == 0) { m->linear_n_v_head = m->n_head; mark_derived(c, "model", "linear_n_v_head", "n_head"); }
    if (m->linear_n_k_head == 0) {
        m->linear_n_k_head = m->linear_n_v_head / 2 > 0 ? m->linear_n_v_head / 2 : 1;
        mark_derived(c, "model", "linear_n_k_head", "max(1, linear_n_v_head / 2)");
    }
    if (m->linear_k_head_dim == 0) { m->linear_k_head_dim = m->head_dim; mark_derived(c, "model", "linear_k_head_dim", "head_dim"); }
    if (m->linear_v_head_dim == 0) { m->linear_v_head_dim = m->head_dim; mark_derived(c, "model", "linear_v_head_dim", "head_dim"); }
    if (m->linear_n_v_head % m->linear_n_k_head != 0)
        return fin_error(fc, "model", "linear_n_k_head", "linear_n_v_head (%d, %s) is not divisible by "
                         "linear_n_k_head (%d) (accepted: a divisor of linear_n_v_head)", m->linear_n_v_head,
                         from(c, "model", "linear_n_v_head", b1, sizeof b1), m->linear_n_k_head);
    if ((long long)m->linear_n_v_head * m->linear_v_head_dim > INT_MAX / 8 ||
        (long long)m->linear_n_k_head * m->linear_k_head_dim > INT_MAX / 8 ||
        (long long)m->linear_k_head_dim * m->linear_v_head_dim > (1 << 20))
        return fin_error(fc, "model", "linear_v_head_dim", "the Gated DeltaNet is too large (accepted: heads x "
                         "head_dim at most %d, k_head_dim x v_head_dim at most 1048576)", INT_MAX / 8);
    if (m->linear_conv_kernel < 1 || m->linear_conv_kernel > 16)
        return fin_error(fc, "model", "linear_conv_kernel", "%d is outside 1 .. 16 (accepted: 1 .. 16; Qwen3-Next: 4)",
                         m->linear_conv_kernel);
    if (m->linear_chunk > 1024)
        return fin_error(fc, "model", "linear_chunk", "%d is larger than 1024 (accepted: 0 = recurrent, or 1 .. 1024; "
                         "64 as fla and transformers)", m->linear_chunk);
    return 0;
}

// [model]: sizes, and the derived n_kv_head, head_dim, d_ff, padded_vocab
static int finalize_model(Config* c, const FinCtx* fc) {
    ModelConfig* m = &c->model;
    char b1[CONFIG_ORIGIN_LEN + 16];
    REQUIRE_POS("model", "vocab_size", m->vocab_size);
    REQUIRE_POS("model", "n_layer", m->n_layer);
    REQUIRE_POS("model", "d_model", m->d_model);
    REQUIRE_POS("model", "n_head", m->n_head);
    REQUIRE_NONNEG("model", "n_kv_head", m->n_kv_head, "n_head");
    REQUIRE_NONNEG("model", "head_dim", m->head_dim, "d_model/n_head");
    REQUIRE_NONNEG("model", "d_ff", m->d_ff, "4*d_model");
    REQUIRE_POS("model", "max_seq_len", m->max_seq_len);
    if (m->vocab_size > INT_MAX - 127)
        return fin_error(fc, "model", "vocab_size", "too large (accepted: at most %d)", INT_MAX - 127);

    // GQA: every KV head serves n_head/n_kv_head query heads
    if (m->n_kv_head == 0) {
        m->n_kv_head = m->n_head;
        mark_derived(c, "model", "n_kv_head", "n_head");
    }
    if (m->n_head % m->n_kv_head != 0)
        return fin_error(fc, "model", "n_kv_head", "n_head (%d, %s) is not divisible by n_kv_head (%d) "
                         "(accepted: a divisor of n_head)", m->n_head, from(c, "model", "n_head", b1, sizeof b1),
                         m->n_kv_head);

    // head_dim: derived only when d_model splits evenly; an explicit head_dim may make
    // n_head*head_dim differ from d_model (Qwen3 style; wqkv and wo are sized by n_head*head_dim)
    int head_dim_derived = 0;
    if (m->head_dim == 0) {
        if (m->d_model % m->n_head != 0)
            return fin_error(fc, "model", "n_head", "d_model (%d, %s) is not divisible by n_head (%d), so "
                             "head_dim = 0 cannot be derived (accepted: a divisor of d_model, or set head_dim "
                             "explicitly)", m->d_model, from(c, "model", "d_model", b1, sizeof b1), m->n_head);
        m->head_dim = m->d_model / m->n_head;
        head_dim_derived = 1;
        mark_derived(c, "model", "head_dim", "d_model/n_head");
    }
    if (m->pos == POS_ROPE && m->head_dim % 2 != 0) {
        if (head_dim_derived)
            return fin_error(fc, "model", "pos", "rope needs an even head_dim, but head_dim = d_model/n_head = "
                             "%d/%d = %d is odd (accepted: an even head_dim, or pos = learned)",
                             m->d_model, m->n_head, m->head_dim);
        return fin_error(fc, "model", "head_dim", "odd head_dim with pos = rope (%s); rope rotates pairs of "
                         "channels (accepted: an even head_dim, or pos = learned)",
                         from(c, "model", "pos", b1, sizeof b1));
    }
    long long qdim = (long long)m->n_head * m->head_dim;
    if (qdim > INT_MAX / 4)
        return fin_error(fc, "model", "head_dim", "n_head*head_dim = %lld is too large (accepted: at most %d)",
                         qdim, INT_MAX / 4);
    if (m->d_ff == 0) {
        if (m->d_model > INT_MAX / 8)
            return fin_error(fc, "model", "d_model", "too large to derive d_ff = 4*d_model (accepted: at most %d)",
                             INT_MAX / 8);
        m->d_ff = 4 * m->d_model;
        mark_derived(c, "model", "d_ff", "4*d_model");
    }
    if (m->d_ff > INT_MAX / 2)
        return fin_error(fc, "model", "d_ff", "too large (accepted: at most %d)", INT_MAX / 2);
    // the float keys' bounds: docs/config.md "Bounds of the float keys" derives each one
    if (!(m->rope_base > 1.0f))
        return fin_error(fc, "model", "rope_base", "must be > 1: theta_i = rope_base^(-2i/head_dim) must fall with i "
                         "(at 1 every pair turns alike and YaRN divides by ln rope_base = 0) (accepted: a number > 1, "
                         "e.g. 10000)");
    // partial RoPE: the first rope_dim = head_dim * rope_fraction channels of a head turn, a whole
    // even number (pairs); the fraction is a float, so "whole" allows its rounding (head_dim *
    // 2^-24 <= 1e-3 for head_dim <= 16384)
    m->rope_dim = m->head_dim;
    if (!(m->rope_fraction > 0.0f && m->rope_fraction <= 1.0f))
        return fin_error(fc, "model", "rope_fraction", "outside (0, 1]: the fraction of each head's channels RoPE "
                         "rotates (accepted: 1 = every channel, or e.g. 0.25 as Qwen3-Next)");
    if (m->pos == POS_ROPE) {
        double x = (double)m->head_dim * m->rope_fraction;
        long rot = lround(x);
        if (fabs(x - (double)rot) > 1e-3 || rot < 2 || rot % 2 != 0)
            return fin_error(fc, "model", "rope_fraction", "head_dim (%d) x rope_fraction = %.6g rotated channels, not a "
                             "whole even number >= 2: RoPE turns pairs of channels (accepted: 2k / head_dim for a whole "
                             "k >= 1, e.g. 0.25 or 0.5 where head_dim is a multiple of 8 or 4)", m->head_dim, x);
        m->rope_dim = (int)rot;
        if (m->rope_scaling == ROPE_SCALING_NTK && rot == 2)
            return fin_error(fc, "model", "rope_scaling", "ntk with 2 rotated channels (head_dim x rope_fraction): its base' "
                             "= base * s^(rot/(rot-2)) is undefined at rot = 2 (accepted: linear or yarn, or a "
                             "rope_fraction that rotates at least 4 channels)");
    }
    if (!(m->rope_factor >= 1.0f && m->rope_factor <= CONFIG_ROPE_FACTOR_MAX))
        return fin_error(fc, "model", "rope_factor", "outside 1 .. 1e6 (accepted: 1 .. 1e6; s = the new context length / "
                         "the training length)");
    if (m->rope_original_len < 0)
        return fin_error(fc, "model", "rope_original_len", "must not be negative (accepted: 0 = [train] seq_len, or the training length)");
    if (!(m->yarn_beta_fast > 0.0f && m->yarn_beta_slow > 0.0f && m->yarn_beta_slow < m->yarn_beta_fast))
        return fin_error(fc, "model", m->yarn_beta_fast > 0.0f ? "yarn_beta_slow" : "yarn_beta_fast",
                         "yarn_beta_fast = %g, yarn_beta_slow = %g (accepted: 0 < yarn_beta_slow < yarn_beta_fast, e.g. 1 and 32)",
                         (double)m->yarn_beta_fast, (double)m->yarn_beta_slow);
    if (!(m->yarn_attn_factor == 0.0f ||
          (m->yarn_attn_factor >= CONFIG_YARN_ATTN_MIN && m->yarn_attn_factor <= CONFIG_YARN_ATTN_MAX)))
        return fin_error(fc, "model", "yarn_attn_factor", "outside 0.25 .. 4: it multiplies every attention logit by its "
                         "square (accepted: 0 = 0.1 ln(rope_factor) + 1, or 0.25 .. 4, logits x 1/16 .. 16)");
    if (!(m->init_std > 0.0f && (double)m->init_std * sqrt((double)m->d_model) <= CONFIG_INIT_STD_GAIN))
        return fin_error(fc, "model", "init_std", "outside (0, 4/sqrt(d_model)] = (0, %.4g] for d_model = %d (%s): "
                         "the initial LM-head logits have std init_std*sqrt(d_model) (accepted: 0 < init_std <= %.4g, "
                         "e.g. 0.02)", CONFIG_INIT_STD_GAIN / sqrt((double)m->d_model), m->d_model,
                         from(c, "model", "d_model", b1, sizeof b1), CONFIG_INIT_STD_GAIN / sqrt((double)m->d_model));
    if (!(m->norm_eps >= FLT_MIN))
        return fin_error(fc, "model", "norm_eps", "below the smallest normal float 1.18e-38 (a subnormal eps reads as 0 "
                         "under flush-to-zero) (accepted: 1.18e-38 <= norm_eps <= init_std^2, e.g. 1e-5)");
    if ((double)m->norm_eps > (double)m->init_std * (double)m->init_std)
        return fin_error(fc, "model", "norm_eps", "larger than init_std^2 = %.4g (init_std = %g, %s), the mean square of "
                         "the first norm's input at init: the norm would divide by sqrt(eps) rather than the RMS "
                         "(accepted: 1.18e-38 <= norm_eps <= %.4g, e.g. 1e-5)",
                         (double)m->init_std * m->init_std, (double)m->init_std,
                         from(c, "model", "init_std", b1, sizeof b1), (double)m->init_std * m->init_std);
    m->padded_vocab = (m->vocab_size + 127) / 128 * 128;
    return finalize_hybrid(c, fc);
}

// [moe]: a dense model's [moe] keys stay at their defaults; an MoE model's derive from [model]
static int finalize_moe(Config* c, const FinCtx* fc) {
    const ModelConfig* m = &c->model;
    char b1[CONFIG_ORIGIN_LEN + 16];
    MoeConfig* e = &c->model.moe;
    REQUIRE_NONNEG("moe", "n_expert", e->n_expert, "no MoE layers (a dense model)");
    if (e->n_expert > 0) {   // a dense model's [moe] keys stay at their defaults (finalize_no_effect)
        if (e->n_expert > 65536)
            return fin_error(fc, "moe", "n_expert", "too large (accepted: 0 .. 65536)");
        if (e->top_k < 1 || e->top_k > e->n_expert)
            return fin_error(fc, "moe", "top_k", "each token goes to top_k of the n_expert = %d experts (%s) "
                             "(accepted: 1 .. %d)", e->n_expert, from(c, "moe", "n_expert", b1, sizeof b1),
                             e->n_expert);
        REQUIRE_NONNEG("moe", "d_expert", e->d_expert, "d_ff");
        if (e->d_expert == 0) {
            e->d_expert = m->d_ff;
            mark_derived(c, "moe", "d_expert", "d_ff");
        }
        if (e->d_expert > INT_MAX / 2)
            return fin_error(fc, "moe", "d_expert", "too large (accepted: at most %d)", INT_MAX / 2);
        if (e->n_shared_expert != 0 && e->n_shared_expert != 1)
            return fin_error(fc, "moe", "n_shared_expert", "outside {0, 1} (accepted: 0 = none, 1 = one shared expert)");
        if (e->n_shared_expert == 1) {   // without one, d_shared_expert and the gate stay at their defaults
            REQUIRE_NONNEG("moe", "d_shared_expert", e->d_shared_expert, "d_expert");
            if (e->d_shared_expert == 0) {
                e->d_shared_expert = e->d_expert;
                mark_derived(c, "moe", "d_shared_expert", "d_expert");
            }
            if (e->d_shared_expert > INT_MAX / 2)
                return fin_error(fc, "moe", "d_shared_expert", "too large (accepted: at most %d)", INT_MAX / 2);
        }
        if (e->moe_every < 1 || e->moe_every > m->n_layer)
            return fin_error(fc, "moe", "moe_every", "no layer would be an MoE layer: layer l is one when "
                             "(l + 1) %% moe_every == 0, l < n_layer = %d (%s) (accepted: 1 .. %d)", m->n_layer,
                             from(c, "model", "n_layer", b1, sizeof b1), m->n_layer);
        if (!(e->aux_loss_coef >= 0.0f && e->aux_loss_coef <= 1.0f))
            return fin_error(fc, "moe", "aux_loss_coef", "outside [0, 1]: the balance term is aux_loss_coef * n_expert * "
                             "sum f_i P_i, 1x the coefficient at balance, and above 1 it outweighs the language-model "
                             "loss (accepted: 0 = off, or up to 1, e.g. 0.01)");
        if (!(e->z_loss_coef >= 0.0f && e->z_loss_coef <= 1.0f))
            return fin_error(fc, "moe", "z_loss_coef", "outside [0, 1]: the z-loss is z_loss_coef * logsumexp(router "
                             "logits)^2, (ln n_expert)^2 times the coefficient at init, and above 1 it outweighs the "
                             "language-model loss (accepted: 0 = off, or up to 1, e.g. 0.001)");
        if (!(e->capacity_factor >= 0.0f))
            return fin_error(fc, "moe", "capacity_factor", "must not be negative (accepted: 0 = dropless, or a "
                             "number > 0, e.g. 1.25)");
        if ((double)e->capacity_factor * e->top_k > (double)e->n_expert)
            return fin_error(fc, "moe", "capacity_factor", "above n_expert/top_k = %d/%d = %g (%s): every expert already "
                             "has a slot for every token at n_expert/top_k, which is dropless (accepted: 0 = dropless, "
                             "or 0 < capacity_factor <= %g)", e->n_expert, e->top_k, (double)e->n_expert / e->top_k,
                             from(c, "moe", "top_k", b1, sizeof b1), (double)e->n_expert / e->top_k);
        if (e->expert_parallel < 1 || e->n_expert % e->expert_parallel != 0)
            return fin_error(fc, "moe", "expert_parallel", "must divide n_expert = %d (%s): each of the expert_parallel "
                             "processes of a group holds n_expert / expert_parallel experts (accepted: 1 = off, or a "
                             "divisor of %d)", e->n_expert, from(c, "moe", "n_expert", b1, sizeof b1), e->n_expert);
    }
    return 0;
}

// [train]: the batch, the schedule and AdamW
static int finalize_train(Config* c, const FinCtx* fc) {
    const ModelConfig* m = &c->model;
    TrainConfig* t = &c->train;
    char b1[CONFIG_ORIGIN_LEN + 16];
    REQUIRE_POS("train", "batch_size", t->batch_size);
    REQUIRE_POS("train", "seq_len", t->seq_len);
    REQUIRE_POS("train", "steps", t->steps);
    if (t->seq_len > m->max_seq_len)
        return fin_error(fc, "train", "seq_len", "seq_len (%d) is larger than [model] max_seq_len (%d, %s) "
                         "(accepted: 1 .. max_seq_len)", t->seq_len, m->max_seq_len,
                         from(c, "model", "max_seq_len", b1, sizeof b1));
    if (c->model.rope_original_len == 0) {
        c->model.rope_original_len = t->seq_len;
        mark_derived(c, "model", "rope_original_len", "[train] seq_len");
    }
    long long bt = (long long)t->batch_size * t->seq_len;
    if (t->tokens_per_step < 0)
        return fin_error(fc, "train", "tokens_per_step", "must not be negative (accepted: 0 = batch_size*seq_len, "
                         "or a multiple of batch_size*seq_len)");
    if (t->tokens_per_step == 0) {
        t->tokens_per_step = (long)bt;
        mark_derived(c, "train", "tokens_per_step", "batch_size*seq_len");
    }
    if (t->tokens_per_step % bt != 0)
        return fin_error(fc, "train", "tokens_per_step", "not a multiple of batch_size*seq_len = %d*%d = %lld "
                         "(accepted: a multiple of %lld, e.g. %lld)", t->batch_size, t->seq_len, bt, bt,
                         (t->tokens_per_step / bt + 1) * bt);
    if (!(t->lr > 0.0f))
        return fin_error(fc, "train", "lr", "must be positive (accepted: a number > 0, e.g. 3e-4)");
    if (!(t->min_lr_frac >= 0.0f && t->min_lr_frac <= 1.0f))
        return fin_error(fc, "train", "min_lr_frac", "outside [0, 1] (accepted: 0 <= min_lr_frac <= 1)");
    if (t->warmup_steps < 0)
        return fin_error(fc, "train", "warmup_steps", "must not be negative (accepted: 0 .. steps)");
    if (t->warmup_steps > t->steps)
        return fin_error(fc, "train", "warmup_steps", "warmup_steps (%d) is larger than steps (%d, %s) "
                         "(accepted: 0 .. steps)", t->warmup_steps, t->steps,
                         from(c, "train", "steps", b1, sizeof b1));
    if (!(t->wsd_decay_frac > 0.0f && t->wsd_decay_frac <= 1.0f))
        return fin_error(fc, "train", "wsd_decay_frac", "outside (0, 1] (accepted: 0 < wsd_decay_frac <= 1)");
    if (t->weight_decay < 0.0f)
        return fin_error(fc, "train", "weight_decay", "must not be negative (accepted: a number >= 0)");
    if (!(t->beta1 >= 0.0f && t->beta1 < 1.0f))
        return fin_error(fc, "train", "beta1", "outside [0, 1) (accepted: 0 <= beta1 < 1, e.g. 0.9)");
    if (!(t->beta2 >= 0.0f && t->beta2 < 1.0f))
        return fin_error(fc, "train", "beta2", "outside [0, 1) (accepted: 0 <= beta2 < 1, e.g. 0.95)");
    if (!(t->beta1 == 0.0f || (double)t->beta1 * t->beta1 < (double)t->beta2))
        return fin_error(fc, "train", "beta1", "beta1^2 = %.4g is not below beta2 = %g (%s): AdamW's step m/sqrt(v) is "
                         "then unbounded (it grows as (beta1/sqrt(beta2))^t after a gradient burst) (accepted: beta1 = 0, "
                         "or beta1 < sqrt(beta2) = %.4g)", (double)t->beta1 * t->beta1, (double)t->beta2,
                         from(c, "train", "beta2", b1, sizeof b1), sqrt((double)t->beta2));
    if (!(t->eps > 0.0f))
        return fin_error(fc, "train", "eps", "must be positive (accepted: a number > 0, e.g. 1e-8)");
    if (!(t->eps >= CONFIG_ADAM_EPS_MIN))
        return fin_error(fc, "train", "eps", "below sqrt(FLT_MIN) = 1.08e-19: a gradient element whose square underflows "
                         "in float32 gets a step of lr*g/eps (accepted: eps >= 1.08e-19, e.g. 1e-8)");
    if (t->grad_clip < 0.0f)
        return fin_error(fc, "train", "grad_clip", "must not be negative (accepted: 0 = off, or a number > 0)");
    REQUIRE_NONNEG("train", "threads", t->threads, "the OpenMP default");
    if (t->zero_stage != 0 && t->zero_stage != 1)
        return fin_error(fc, "train", "zero_stage", "must be 0 or 1 (accepted: 0 = all-reduce, 1 = ZeRO-1 sharded optimizer state)");
    if (!(t->hang_timeout_s >= 0.0f) || !isfinite(t->hang_timeout_s))
        return fin_error(fc, "train", "hang_timeout_s", "must be a number of seconds >= 0 (accepted: 0 = no watchdog, or e.g. 1200)");
    if (!(t->straggler_factor > 1.0f) || !isfinite(t->straggler_factor))
        return fin_error(fc, "train", "straggler_factor", "must be a number > 1 (accepted: e.g. 1.2 = 20%% slower than the median)");
    REQUIRE_POS("train", "straggler_reports", t->straggler_reports);
    return 0;
}

// [data]
static int finalize_data(const Config* c, const FinCtx* fc) {
    const ModelConfig* m = &c->model;
    ConfigSource src[CONFIG_MAX_SOURCES];
    char err[600], buf[CONFIG_ORIGIN_LEN + 64];
    if (c->data.sources[0] && config_parse_sources(c->data.sources, src, CONFIG_MAX_SOURCES, err, sizeof err) < 0)
        return fin_error(fc, "data", "sources", "%s", err);
    if (c->data.val_sources[0] && config_parse_sources(c->data.val_sources, src, CONFIG_MAX_SOURCES, err, sizeof err) < 0)
        return fin_error(fc, "data", "val_sources", "%s", err);
    if (c->data.sources[0] && c->data.train_glob[0])
        return fin_error(fc, "data", "sources", "and [data] train_glob (%s) are both set (fix: set one of them: sources for a weighted "
                         "mixture, train_glob for one set of shards)", from(c, "data", "train_glob", buf, sizeof buf));
    if (c->data.val_sources[0] && c->data.val_glob[0])
        return fin_error(fc, "data", "val_sources", "and [data] val_glob (%s) are both set (fix: set one of them: val_sources for a "
                         "loss per source, val_glob for one set of shards)", from(c, "data", "val_glob", buf, sizeof buf));
    if (c->data.bos_token < -1 || c->data.bos_token >= m->vocab_size)
        return fin_error(fc, "data", "bos_token", "%d is not a token id (accepted: -1 = the tokenizer's end-of-text, or 0 <= id < vocab_size %d)",
                         c->data.bos_token, m->vocab_size);
    if (c->data.bos && c->data.bos_token < 0 && c->data.tokenizer[0] == '\0')
        return fin_error(fc, "data", "bos_token", "-1 (the tokenizer's end-of-text) but [data] tokenizer is empty (fix: set bos_token to the id, or set tokenizer)");
    if (c->data.doc_mask) {   // attention within documents (model/doc_mask.h)
        if (c->data.tokenizer[0] == '\0')
            return fin_error(fc, "data", "doc_mask", "true but [data] tokenizer is empty: the tokenizer's end-of-text token closes each document (fix: set tokenizer, or doc_mask = false)");
        if (c->train.attn_impl == ATTN_IMPL_CUDNN)
            return fin_error(fc, "data", "doc_mask", "true with [train] attn_impl = cudnn: the cuDNN attention has no document mask here (fix: attn_impl = fused or flash, or doc_mask = false)");
    }
    return 0;
}

int config_parse_sources(const char* text, ConfigSource* out, int max, char* err, size_t errlen) {
    int n = 0;
    double sum = 0.0;
    const char* p = text;
    for (;;) {
        while (*p == ',' || isspace((unsigned char)*p)) p++;
        if (!*p) break;
        const char* e = p;
        while (*e && *e != ',' && !isspace((unsigned char)*e)) e++;
        const int len = (int)(e - p);
        const char* c1 = memchr(p, ':', (size_t)len);
        const char* c2 = c1 ? memchr(c1 + 1, ':', (size_t)(e - c1 - 1)) : NULL;
        if (!c2) {
            snprintf(err, errlen, "entry '%.*s' is not name:weight:glob (accepted: e.g. \"web:0.7:data/web/train_*.bin "
                     "code:0.3:data/code/train_*.bin\")", len, p);
            return -1;
        }
        if (n == max) {
            snprintf(err, errlen, "more than %d sources (accepted: 1 .. %d entries)", max, max);
            return -1;
        }
        ConfigSource* s = &out[n];
        const int nl = (int)(c1 - p);
        if (nl < 1 || nl >= (int)sizeof s->name) {
            snprintf(err, errlen, "entry '%.*s': the name must have 1 .. %d characters", len, p, (int)sizeof s->name - 1);
            return -1;
        }
        for (int i = 0; i < nl; i++)
            if (!isalnum((unsigned char)p[i]) && p[i] != '_') {
                snprintf(err, errlen, "entry '%.*s': the name '%.*s' has '%c' (accepted: letters, digits and _, as it names "
                         "log fields such as tokens_<name>)", len, p, nl, p, p[i]);
                return -1;
            }
        memcpy(s->name, p, (size_t)nl);
        s->name[nl] = 0;
        for (int j = 0; j < n; j++)
            if (strcmp(out[j].name, s->name) == 0) {
                snprintf(err, errlen, "the name '%s' is used twice (accepted: a different name per source)", s->name);
                return -1;
            }
        char num[64];
        const int wl = (int)(c2 - c1 - 1);
        snprintf(num, sizeof num, "%.*s", wl < 63 ? wl : 63, c1 + 1);
        char* end;
        errno = 0;
        double w = strtod(num, &end);
        if (wl < 1 || wl > 62 || *end || errno || !(w > 0.0) || !isfinite(w)) {
            snprintf(err, errlen, "entry '%.*s': the weight '%.*s' is not a positive number (accepted: e.g. 0.7 or 7)", len, p, wl, c1 + 1);
            return -1;
        }
        const int gl = (int)(e - c2 - 1);
        if (gl < 1 || gl >= (int)sizeof s->glob) {
            snprintf(err, errlen, "entry '%.*s': the glob must have 1 .. %d characters", len, p, (int)sizeof s->glob - 1);
            return -1;
        }
        memcpy(s->glob, c2 + 1, (size_t)gl);
        s->glob[gl] = 0;
        s->weight = w;
        sum += w;
        n++;
        p = e;
    }
    if (n == 0) {
        snprintf(err, errlen, "no entries (accepted: name:weight:glob, separated by commas or spaces)");
        return -1;
    }
    for (int i = 0; i < n; i++) out[i].weight /= sum;
    return n;
}

// [log], [checkpoint], [metrics]
static int finalize_log(const Config* c, const FinCtx* fc) {
    if (c->log.run_dir[0] == '\0')
        return fin_error(fc, "log", "run_dir", "empty (accepted: a directory path, e.g. runs/run)");
    REQUIRE_POS("log", "log_every", c->log.log_every);
    REQUIRE_NONNEG("log", "val_every", c->log.val_every, "off");
    REQUIRE_POS("log", "val_batches", c->log.val_batches);
    REQUIRE_NONNEG("log", "sample_every", c->log.sample_every, "off");
    REQUIRE_POS("log", "sample_tokens", c->log.sample_tokens);
    if (!(c->log.sample_temperature > 0.0f))
        return fin_error(fc, "log", "sample_temperature", "must be positive (accepted: a number > 0, e.g. 1.0)");
    REQUIRE_NONNEG("log", "sample_top_k", c->log.sample_top_k, "all tokens");
    REQUIRE_NONNEG("checkpoint", "checkpoint_every", c->ckpt.checkpoint_every, "off");
    REQUIRE_NONNEG("checkpoint", "keep_last", c->ckpt.keep_last, "keep all");
    REQUIRE_NONNEG("checkpoint", "keep_every", c->ckpt.keep_every, "none kept forever");
    REQUIRE_NONNEG("metrics", "probe_every", c->metrics.probe_every, "off");
    if (c->metrics.spike_window < 2)
        return fin_error(fc, "metrics", "spike_window", "must be at least 2 (accepted: an integer >= 2, e.g. 100)");
    if (!(c->metrics.spike_z > 0.0f))
        return fin_error(fc, "metrics", "spike_z", "must be positive (accepted: a number > 0, e.g. 5)");
    if (c->metrics.skip_loss_z < 0.0f)
        return fin_error(fc, "metrics", "skip_loss_z", "must not be negative (accepted: 0 = never skip, or a z-score > 0)");
    if (c->metrics.skip_grad_z < 0.0f)
        return fin_error(fc, "metrics", "skip_grad_z", "must not be negative (accepted: 0 = never skip, or a z-score > 0)");
    REQUIRE_POS("metrics", "max_nonfinite", c->metrics.max_nonfinite);
    REQUIRE_NONNEG("eval", "task_every", c->eval.task_every, "off");
    REQUIRE_NONNEG("eval", "task_limit", c->eval.task_limit, "every example");
    return 0;
}
#undef REQUIRE_POS
#undef REQUIRE_NONNEG

int config_finalize(Config* c, const char* origin) {
    FinCtx fc = {c, origin};
    if (finalize_no_effect(c, &fc) || finalize_model(c, &fc) || finalize_moe(c, &fc) || finalize_train(c, &fc) || finalize_data(c, &fc) ||
        finalize_log(c, &fc))
        return -1;
    return 0;
}

int config_finalize_processes(Config* c, const char* where, int nproc) {
    // [train] tokens_per_step is global: B x T tokens per process and micro-step, nproc processes
    TrainConfig* t = &c->train;
    const int B = t->batch_size, T = t->seq_len, P = nproc;
    long tps = t->tokens_per_step;
    if (is_derived(c, "train", "tokens_per_step")) tps = (long)B * T * P;   // 0 in the config
    if (tps % ((long)B * T * P) != 0) {
        fprintf(stderr, "error: %s: [train] tokens_per_step = %ld is not a multiple of batch_size x seq_len x processes = %d x %d x %d = %ld "
                "(fix: set tokens_per_step to a multiple of %ld, or change batch_size or the process count)\n",
                where, tps, B, T, P, (long)B * T * P, (long)B * T * P);
        return -1;
    }
    t->tokens_per_step = tps;   // saved resolved, so a resume reads the global value
    // [moe] expert_parallel: groups of P consecutive processes split the experts
    const int EP = c->model.moe.expert_parallel;
    if (c->model.moe.n_expert > 0 && EP > 1) {
        if (P == 1) {
            fprintf(stderr, "error: %s: [moe] expert_parallel = %d needs processes to split the experts over, this run has 1 "
                    "(fix: run under mpirun -np %d (or a multiple), or set expert_parallel = 1)\n", where, EP, EP);
            return -1;
        }
        if (P % EP != 0) {
            fprintf(stderr, "error: %s: [moe] expert_parallel = %d does not divide the %d processes (fix: set expert_parallel "
                    "to a divisor of both %d and n_expert = %d, or run a multiple of %d processes)\n", where, EP, P, P,
                    c->model.moe.n_expert, EP);
            return -1;
        }
    }
    return 0;
}

// ----------------------------------------------------------------------------------------------
// public: write

void config_write(const Config* c, FILE* f) {
    const char* section = NULL;
    for (int i = 0; i < N_KEYS; i++) {
        const KeyDef* k = &KEYS[i];
        if (!section || strcmp(section, k->section) != 0) {
            if (section) {
                if (strcmp(section, "model") == 0)
                    fprintf(f, "; padded_vocab = %d (derived: vocab_size rounded up to a multiple of 128)\n",
                            c->model.padded_vocab);
                fprintf(f, "\n");
            }
            section = k->section;
            fprintf(f, "[%s]\n", section);
        }
        char value[1100];
        format_value(c, k, value, sizeof value);
        if (c->origin[i][0]) {
            char line[1200];
            snprintf(line, sizeof line, "%s = %s", k->name, value);
            fprintf(f, "%-36s ; %s\n", line, c->origin[i]);
        } else {
            fprintf(f, "%s = %s\n", k->name, value);
        }
    }
}
