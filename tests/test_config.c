// tests/test_config.c: model/config.c: defaults, INI parsing, overrides, derived fields, the
// write -> load round trip, and every error (returns -1, prints one line naming the key).
//
//   test_config [REPO_ROOT]     (default "."; needs REPO_ROOT/configs, tests/config_errors, docs)
//
// Plain C, no framework: CHECK counts, the summary line is "test_config: N passed, M failed",
// the exit status is 0 only when nothing failed. Error messages are captured by pointing
// stderr (fd 2) at a temp file around the call.
#define _POSIX_C_SOURCE 200809L // mkdtemp, dup, fileno
#include "../model/config.h"
#include "../model/gpt.h"

#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int n_pass = 0, n_fail = 0;
static const char* g_test = "";

#define CHECK(cond) check_((cond), #cond, __FILE__, __LINE__, NULL)
#define CHECKM(cond, ...) check_msg_((cond), #cond, __FILE__, __LINE__, __VA_ARGS__)

static int check_(int ok, const char* expr, const char* file, int line, const char* extra) {
    if (ok) {
        n_pass++;
    } else {
        n_fail++;
        printf("FAIL [%s] %s:%d: %s%s%s\n", g_test, file, line, expr, extra ? ": " : "", extra ? extra : "");
    }
    return ok;
}

static int check_msg_(int ok, const char* expr, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int check_msg_(int ok, const char* expr, const char* file, int line, const char* fmt, ...) {
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return check_(ok, expr, file, line, buf);
}

// ---- temp files and stderr capture

static char g_tmpdir[256];
static const char* g_root = ".";

static const char* tmp_path(const char* name) {
    static char buf[64][512]; // a few calls' results stay valid at once
    static int k = 0;
    k = (k + 1) % 64;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_tmpdir, name);
    return buf[k];
}

static const char* write_tmp(const char* name, const char* text) {
    const char* p = tmp_path(name);
    FILE* f = fopen(p, "w");
    if (!f) { perror(p); exit(1); }
    fputs(text, f);
    fclose(f);
    return p;
}

static char* read_all(const char* path) {
    FILE* f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char* s = malloc((size_t)n + 1);
    size_t got = fread(s, 1, (size_t)n, f);
    s[got] = '\0';
    fclose(f);
    return s;
}

static int g_saved_fd = -1;
static char g_captured[8192];

static void capture_begin(void) {
    fflush(stderr);
    g_saved_fd = dup(2);
    FILE* f = fopen(tmp_path("stderr.txt"), "w");
    if (!f) { perror("capture"); exit(1); }
    dup2(fileno(f), 2);
    fclose(f);
}

static const char* capture_end(void) {
    fflush(stderr);
    dup2(g_saved_fd, 2);
    close(g_saved_fd);
    char* s = read_all(tmp_path("stderr.txt"));
    snprintf(g_captured, sizeof g_captured, "%s", s ? s : "");
    free(s);
    return g_captured;
}

static int count_lines(const char* s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

// ---- error helpers: the call must return -1 and print exactly one line containing `expect`

typedef enum { STAGE_LOAD, STAGE_FINALIZE } Stage;

// Load INI text (written to NAME.ini) and finalize; expect failure at `stage`.
static void expect_ini_error(const char* name, const char* ini, Stage stage, const char* expect) {
    char fname[128];
    snprintf(fname, sizeof fname, "%s.ini", name);
    const char* path = write_tmp(fname, ini);
    Config c;
    config_defaults(&c);
    capture_begin();
    int rl = config_load_file(&c, path);
    int rf = rl == 0 ? config_finalize(&c, path) : 0;
    const char* err = capture_end();
    if (stage == STAGE_LOAD) {
        CHECKM(rl == -1, "%s: config_load_file returned %d, expected -1", name, rl);
    } else {
        CHECKM(rl == 0, "%s: config_load_file failed: %s", name, err);
        CHECKM(rf == -1, "%s: config_finalize returned %d, expected -1", name, rf);
    }
    CHECKM(strstr(err, expect) != NULL, "%s: stderr lacks \"%s\": %s", name, expect, err);
    CHECKM(count_lines(err) == 1 && strncmp(err, "config error: ", 14) == 0,
           "%s: expected one 'config error:' line, got: %s", name, err);
}

static void expect_override_error(const char* arg, const char* expect) {
    Config c;
    config_defaults(&c);
    Config before = c;
    capture_begin();
    int r = config_apply_override(&c, arg);
    const char* err = capture_end();
    CHECKM(r == -1, "override %s returned %d", arg, r);
    CHECKM(strstr(err, expect) != NULL, "override %s: stderr lacks \"%s\": %s", arg, expect, err);
    CHECKM(count_lines(err) == 1, "override %s: expected one line: %s", arg, err);
    CHECKM(config_equal(&c, &before), "override %s: a failed override changed the config", arg);
}

static int load_ok(Config* c, const char* path) {
    capture_begin();
    int r = config_load_file(c, path);
    const char* err = capture_end();
    CHECKM(r == 0, "load %s: %s", path, err);
    return r;
}

static int finalize_ok(Config* c, const char* origin) {
    capture_begin();
    int r = config_finalize(c, origin);
    const char* err = capture_end();
    CHECKM(r == 0, "finalize %s: %s", origin ? origin : "", err);
    return r;
}

static int override_ok(Config* c, const char* arg) {
    capture_begin();
    int r = config_apply_override(c, arg);
    const char* err = capture_end();
    CHECKM(r == 0, "override %s: %s", arg, err);
    return r;
}

// Write c, load it into fresh defaults, compare. Returns the text written (static buffer).
static const char* roundtrip(const Config* c, const char* name) {
    static char text[32768];
    const char* path = tmp_path(name);
    FILE* f = fopen(path, "w");
    config_write(c, f);
    fclose(f);
    char* s = read_all(path);
    snprintf(text, sizeof text, "%s", s);
    free(s);
    Config back;
    config_defaults(&back);
    if (load_ok(&back, path) == 0) {
        back.model.padded_vocab = c->model.padded_vocab; // not a key: set by finalize
        CHECKM(config_equal(c, &back), "%s: written config does not load back equal", name);
    }
    return text;
}

// ---- tests

static void test_defaults(void) {
    g_test = "defaults";
    Config c;
    memset(&c, 0x5a, sizeof c);
    config_defaults(&c);
    ModelConfig* m = &c.model;
    TrainConfig* t = &c.train;
    CHECK(m->vocab_size == 50257 && m->n_layer == 12 && m->d_model == 768 && m->n_head == 12);
    CHECK(m->n_kv_head == 0 && m->head_dim == 0 && m->d_ff == 0 && m->max_seq_len == 1024);
    CHECK(m->pos == POS_ROPE && m->rope_base == 10000.0f && m->norm == NORM_RMSNORM && m->norm_eps == 1e-5f);
    CHECK(m->qk_norm == 0 && m->mlp == MLP_SWIGLU && m->tie_embeddings == 1);
    CHECK(m->attn_gate == GATE_NONE && m->gate_position == GATEPOS_SDPA && m->gate_act == GATEACT_SIGMOID);
    CHECK(m->init_std == 0.02f);
    const MoeConfig* e = &m->moe;
    CHECK(e->n_expert == 0 && e->top_k == 2 && e->d_expert == 0 && e->n_shared_expert == 0);
    CHECK(e->d_shared_expert == 0 && e->shared_expert_gate == 0 && e->moe_every == 1);
    CHECK(e->router == ROUTER_SOFTMAX_TOPK && e->aux_loss_coef == 0.01f && e->z_loss_coef == 0.001f);
    CHECK(e->capacity_factor == 0.0f);
    CHECK(t->seed == 1337ULL && t->batch_size == 4 && t->seq_len == 64 && t->tokens_per_step == 0 && t->steps == 100);
    CHECK(t->lr == 3e-4f && t->min_lr_frac == 0.1f && t->warmup_steps == 10 && t->schedule == SCHED_COSINE);
    CHECK(t->wsd_decay_frac == 0.2f && t->weight_decay == 0.1f && t->beta1 == 0.9f && t->beta2 == 0.95f);
    CHECK(t->eps == 1e-8f && t->grad_clip == 1.0f && t->threads == 0);
    CHECK(strcmp(c.data.train_glob, "") == 0 && strcmp(c.data.val_glob, "") == 0);
    CHECK(strcmp(c.log.run_dir, "runs/run") == 0 && c.log.log_every == 1 && c.log.val_every == 50 &&
          c.log.val_batches == 8);
    CHECK(c.ckpt.checkpoint_every == 0 && c.ckpt.keep_last == 2 && strcmp(c.ckpt.dir, "") == 0);
    CHECK(c.ckpt.keep_every == 0 && c.ckpt.on_write_error == CKPT_ON_ERROR_CONTINUE);
    CHECK(strcmp(config_origin(&c, "model", "n_layer"), "default") == 0);
    CHECK(config_origin(&c, "model", "nope") == NULL);
    // the defaults are a valid config
    CHECK(finalize_ok(&c, NULL) == 0);
    CHECK(m->n_kv_head == 12 && m->head_dim == 64 && m->d_ff == 3072 && m->padded_vocab == 50304);
    CHECK(t->tokens_per_step == 256);
}

static void test_enum_names_and_keys(void) {
    g_test = "enum names, key table";
    CHECK(strcmp(config_enum_name("pos", POS_LEARNED), "learned") == 0);
    CHECK(strcmp(config_enum_name("norm", NORM_LAYERNORM), "layernorm") == 0);
    CHECK(strcmp(config_enum_name("mlp", MLP_GELU), "gelu") == 0);
    CHECK(strcmp(config_enum_name("attn_gate", GATE_HEADWISE), "headwise") == 0);
    CHECK(strcmp(config_enum_name("gate_position", GATEPOS_VALUE), "value") == 0);
    CHECK(strcmp(config_enum_name("gate_act", GATEACT_NS_SIGMOID), "ns_sigmoid") == 0);
    CHECK(strcmp(config_enum_name("schedule", SCHED_WSD), "wsd") == 0);
    CHECK(strcmp(config_enum_name("router", ROUTER_SIGMOID_TOPK), "sigmoid_topk") == 0);
    CHECK(strcmp(config_enum_name("recompute", RECOMPUTE_SELECTIVE), "selective") == 0);
    CHECK(config_enum_name("schedule", 4) == NULL);
    CHECK(config_enum_name("n_layer", 0) == NULL);
    int n = config_key_count();
    CHECK(n == 99 + 2 + 1 + 2 + 1 && n <= CONFIG_MAX_KEYS);   // + [data] sources, val_sources; + [checkpoint] async; + [data] doc_mask, doc_positions; + [train] precision
    const char* sec = NULL;
    CHECK(strcmp(config_key(0, &sec), "vocab_size") == 0 && strcmp(sec, "model") == 0);
    CHECK(strcmp(config_key(n - 1, &sec), "task_limit") == 0 && strcmp(sec, "eval") == 0);
    CHECK(config_key(n, &sec) == NULL);
}

static void test_parse(void) {
    g_test = "parse";
    const char* path = write_tmp("parse.ini",
        "; a comment\n"
        "# another comment\n"
        "\n"
        "[model]\n"
        "vocab_size = 256\n"                       // line 5
        "  n_layer=3   ; indented, inline comment\n"
        "d_model = 96 # hash inline comment\n"
        "n_head = 3\n"
        "pos = ROPE\n"
        "norm = layernorm\n"                       // line 10
        "qk_norm = Yes\n"
        "tie_embeddings = off\n"
        "mlp = gelu\n"
        "attn_gate = headwise\n"
        "gate_position = value\n"                  // line 15
        "gate_act = ns_sigmoid\n"
        "rope_base = 1e6\n"
        "norm_eps = 1e-6\n"
        "init_std = .01\n"
        "\n"                                       // line 20
        "[train]\n"
        "seed = 18446744073709551615\n"
        "batch_size = 2\n"
        "seq_len = 32\n"
        "tokens_per_step = 4294967296\n"           // line 25: > 2^31, a multiple of 64
        "steps = 7\n"
        "warmup_steps = 7\n"
        "lr = 3e-4\n"
        "schedule = wsd\n"
        "wsd_decay_frac = 1\n"
        "threads = 3\n"
        "[data]\n"
        "train_glob = data/some dir/train_*.bin\n"
        "val_glob =\n"
        "[log]\n"
        "run_dir = runs/x;y#z\n"                   // no space before ';' '#': part of the value
        "[checkpoint]\n"
        "dir = /tmp/ck\n"
        "keep_last = 0\n"
        "[model]\n"                                // a section may appear again
        "max_seq_len = 32\n");                     // line 41
    Config c;
    config_defaults(&c);
    if (load_ok(&c, path) != 0) return;
    ModelConfig* m = &c.model;
    CHECK(m->vocab_size == 256 && m->n_layer == 3 && m->d_model == 96 && m->n_head == 3);
    CHECK(m->pos == POS_ROPE && m->norm == NORM_LAYERNORM && m->qk_norm == 1 && m->tie_embeddings == 0);
    CHECK(m->mlp == MLP_GELU && m->attn_gate == GATE_HEADWISE && m->gate_position == GATEPOS_VALUE);
    CHECK(m->gate_act == GATEACT_NS_SIGMOID && m->rope_base == 1e6f && m->norm_eps == 1e-6f && m->init_std == 0.01f);
    CHECK(m->max_seq_len == 32);
    CHECK(c.train.seed == 18446744073709551615ULL);
    CHECK(c.train.batch_size == 2 && c.train.seq_len == 32 && c.train.tokens_per_step == 4294967296L);
    CHECK(c.train.steps == 7 && c.train.lr == 3e-4f && c.train.schedule == SCHED_WSD && c.train.wsd_decay_frac == 1.0f);
    CHECK(c.train.threads == 3);
    CHECK(strcmp(c.data.train_glob, "data/some dir/train_*.bin") == 0);
    CHECK(strcmp(c.data.val_glob, "") == 0);
    CHECK(strcmp(c.log.run_dir, "runs/x;y#z") == 0);
    CHECK(strcmp(c.ckpt.dir, "/tmp/ck") == 0 && c.ckpt.keep_last == 0);
    // untouched keys keep their defaults
    CHECK(c.train.beta2 == 0.95f && c.log.val_every == 50);
    // origins: FILE:LINE for what the file set, "default" for the rest
    char want[600];
    snprintf(want, sizeof want, "%s:5", path);
    CHECKM(strcmp(config_origin(&c, "model", "vocab_size"), want) == 0, "got %s", config_origin(&c, "model", "vocab_size"));
    snprintf(want, sizeof want, "%s:6", path);
    CHECK(strcmp(config_origin(&c, "model", "n_layer"), want) == 0);
    snprintf(want, sizeof want, "%s:25", path);
    CHECK(strcmp(config_origin(&c, "train", "tokens_per_step"), want) == 0);
    snprintf(want, sizeof want, "%s:41", path);
    CHECK(strcmp(config_origin(&c, "model", "max_seq_len"), want) == 0);
    CHECK(strcmp(config_origin(&c, "train", "beta2"), "default") == 0);
    CHECK(finalize_ok(&c, path) == 0);
    CHECK(c.train.tokens_per_step == 4294967296L);

    // every bool spelling, case-insensitive
    const char* trues[] = {"true", "1", "yes", "on", "TRUE", "On"};
    const char* falses[] = {"false", "0", "no", "off", "False", "NO"};
    for (int i = 0; i < 6; i++) {
        char arg[64];
        config_defaults(&c);
        snprintf(arg, sizeof arg, "model.qk_norm=%s", trues[i]);
        override_ok(&c, arg);
        CHECKM(c.model.qk_norm == 1, "%s", arg);
        snprintf(arg, sizeof arg, "model.tie_embeddings=%s", falses[i]);
        override_ok(&c, arg);
        CHECKM(c.model.tie_embeddings == 0, "%s", arg);
    }

    // a UTF-8 BOM and CRLF line endings are fine
    path = write_tmp("crlf.ini", "\xEF\xBB\xBF[model]\r\nn_layer = 5\r\n\r\n[train]\r\nlr = 0.5\r\n");
    config_defaults(&c);
    if (load_ok(&c, path) == 0) CHECK(c.model.n_layer == 5 && c.train.lr == 0.5f);

    // loading a second file layers on top of the first
    const char* base = write_tmp("base.ini", "[model]\nn_layer = 2\nd_model = 64\n");
    const char* over = write_tmp("over.ini", "[model]\nn_layer = 6\n");
    config_defaults(&c);
    load_ok(&c, base);
    load_ok(&c, over);
    CHECK(c.model.n_layer == 6 && c.model.d_model == 64);
    snprintf(want, sizeof want, "%s:2", over);
    CHECK(strcmp(config_origin(&c, "model", "n_layer"), want) == 0);
}

static void test_overrides(void) {
    g_test = "overrides";
    const char* path = write_tmp("ov.ini", "[model]\nn_layer = 2\n[train]\nsteps = 0\n");
    Config c;
    config_defaults(&c);
    load_ok(&c, path);
    override_ok(&c, "model.n_layer=9");
    override_ok(&c, "train.steps = 50");          // spaces around '=' are trimmed
    override_ok(&c, "train.lr=2e-3");
    override_ok(&c, "model.attn_gate=elementwise");
    override_ok(&c, "data.train_glob=a=b/*.bin"); // the first '=' splits
    override_ok(&c, "checkpoint.dir=");           // empty string
    override_ok(&c, "train.seed=42");
    override_ok(&c, "train.tokens_per_step=1024");
    CHECK(c.model.n_layer == 9 && c.train.steps == 50 && c.train.lr == 2e-3f);
    CHECK(c.model.attn_gate == GATE_ELEMENTWISE);
    CHECK(strcmp(c.data.train_glob, "a=b/*.bin") == 0 && c.ckpt.dir[0] == '\0');
    CHECK(c.train.seed == 42 && c.train.tokens_per_step == 1024);
    CHECK(strcmp(config_origin(&c, "model", "n_layer"), "command line") == 0);
    CHECK(strcmp(config_origin(&c, "train", "steps"), "command line") == 0);
    // the file's steps = 0 is overridden, so the config is valid
    CHECK(finalize_ok(&c, path) == 0);
}

static void test_derivations(void) {
    g_test = "derivations";
    Config c;
    config_defaults(&c);
    override_ok(&c, "model.d_model=256");
    override_ok(&c, "model.n_head=8");
    CHECK(finalize_ok(&c, NULL) == 0);
    CHECK(c.model.n_kv_head == 8 && c.model.head_dim == 32 && c.model.d_ff == 1024);
    CHECK(c.train.tokens_per_step == (long)c.train.batch_size * c.train.seq_len);
    // derived keys say so; explicitly set ones keep their origin
    CHECK(strcmp(config_origin(&c, "model", "n_kv_head"), "derived: n_head") == 0);
    CHECK(strcmp(config_origin(&c, "model", "head_dim"), "derived: d_model/n_head") == 0);
    CHECK(strcmp(config_origin(&c, "model", "d_ff"), "derived: 4*d_model") == 0);
    CHECK(strcmp(config_origin(&c, "train", "tokens_per_step"), "derived: batch_size*seq_len") == 0);
    CHECK(strcmp(config_origin(&c, "model", "n_head"), "command line") == 0);
    config_defaults(&c);
    override_ok(&c, "model.d_ff=0");
    CHECK(finalize_ok(&c, NULL) == 0);
    CHECK(strcmp(config_origin(&c, "model", "d_ff"), "derived: 4*d_model (0 at command line)") == 0);
    // explicit values are kept
    config_defaults(&c);
    override_ok(&c, "model.n_kv_head=4");
    override_ok(&c, "model.head_dim=128");   // 12*128 != 768: Qwen3-style, accepted
    override_ok(&c, "model.d_ff=2000");
    override_ok(&c, "train.tokens_per_step=2560");
    CHECK(finalize_ok(&c, NULL) == 0);
    CHECK(c.model.n_kv_head == 4 && c.model.head_dim == 128 && c.model.d_ff == 2000);
    CHECK(c.train.tokens_per_step == 2560);
    // explicit head_dim also allows d_model not divisible by n_head
    config_defaults(&c);
    override_ok(&c, "model.d_model=100");
    override_ok(&c, "model.head_dim=64");
    CHECK(finalize_ok(&c, NULL) == 0);
    // odd head_dim is fine with learned positions
    config_defaults(&c);
    override_ok(&c, "model.d_model=100");
    override_ok(&c, "model.n_head=4");
    override_ok(&c, "model.pos=learned");
    CHECK(finalize_ok(&c, NULL) == 0 && c.model.head_dim == 25);
    // padded_vocab
    const int vocab[][2] = {{1, 128}, {127, 128}, {128, 128}, {129, 256}, {256, 256}, {50257, 50304},
                            {151936, 151936}, {65537, 65664}};
    for (int i = 0; i < 8; i++) {
        char arg[64];
        config_defaults(&c);
        snprintf(arg, sizeof arg, "model.vocab_size=%d", vocab[i][0]);
        override_ok(&c, arg);
        CHECK(finalize_ok(&c, NULL) == 0);
        CHECKM(c.model.padded_vocab == vocab[i][1], "vocab %d -> %d", vocab[i][0], c.model.padded_vocab);
    }
    // finalize is idempotent
    config_defaults(&c);
    finalize_ok(&c, NULL);
    Config once = c;
    CHECK(finalize_ok(&c, NULL) == 0 && config_equal(&c, &once));
    // [moe]: d_expert 0 -> d_ff, d_shared_expert 0 -> d_expert (only with experts), idempotent
    config_defaults(&c);
    override_ok(&c, "moe.n_expert=8");
    override_ok(&c, "moe.n_shared_expert=1");
    CHECK(finalize_ok(&c, NULL) == 0);
    CHECK(c.model.moe.d_expert == 3072 && c.model.moe.d_shared_expert == 3072);
    CHECK(strcmp(config_origin(&c, "moe", "d_expert"), "derived: d_ff") == 0);
    CHECK(strcmp(config_origin(&c, "moe", "d_shared_expert"), "derived: d_expert") == 0);
    once = c;
    CHECK(finalize_ok(&c, NULL) == 0 && config_equal(&c, &once));
    config_defaults(&c);
    override_ok(&c, "moe.n_expert=8");
    override_ok(&c, "moe.d_expert=96");
    CHECK(finalize_ok(&c, NULL) == 0 && c.model.moe.d_expert == 96 && c.model.moe.d_shared_expert == 0);
    // which layers are MoE layers: (l + 1) % moe_every == 0
    config_defaults(&c);
    override_ok(&c, "model.n_layer=6");
    override_ok(&c, "moe.n_expert=4");
    override_ok(&c, "moe.moe_every=2");
    CHECK(finalize_ok(&c, NULL) == 0);
    CHECK(!config_layer_is_moe(&c.model, 0) && config_layer_is_moe(&c.model, 1) && !config_layer_is_moe(&c.model, 2) &&
          config_layer_is_moe(&c.model, 5));
    config_defaults(&c);
    CHECK(finalize_ok(&c, NULL) == 0 && !config_layer_is_moe(&c.model, 0)); // dense by default
    // hybrid layers: the pattern repeats over n_layer; the Gated DeltaNet's sizes derive from
    // the attention's (Qwen3-Next's ratio: half as many key heads as value heads)
    CHECK(!config_any_linear(&c.model) && !config_layer_is_linear(&c.model, 3));   // all attention by default
    config_defaults(&c);
    override_ok(&c, "model.n_layer=8");
    override_ok(&c, "model.layer_pattern=LLLA");
    CHECK(finalize_ok(&c, NULL) == 0 && config_any_linear(&c.model));
    CHECK(config_layer_is_linear(&c.model, 0) && config_layer_is_linear(&c.model, 2) && !config_layer_is_linear(&c.model, 3) &&
          config_layer_is_linear(&c.model, 4) && !config_layer_is_linear(&c.model, 7));
    CHECK(c.model.linear_n_v_head == 12 && c.model.linear_n_k_head == 6 && c.model.linear_k_head_dim == 64 &&
          c.model.linear_v_head_dim == 64 && c.model.linear_conv_kernel == 4 && c.model.linear_chunk == 64 &&
          c.model.linear_gate_act == GATEACT_SILU);
    CHECK(strcmp(config_origin(&c, "model", "linear_n_k_head"), "derived: max(1, linear_n_v_head / 2)") == 0);
    once = c;
    CHECK(finalize_ok(&c, NULL) == 0 && config_equal(&c, &once));
    config_defaults(&c);
    override_ok(&c, "model.n_head=1");
    override_ok(&c, "model.layer_pattern=L");
    CHECK(finalize_ok(&c, NULL) == 0 && c.model.linear_n_k_head == 1 && c.model.linear_n_v_head == 1);
    // warmup_steps == steps and min_lr_frac at the ends of [0,1] are allowed
    config_defaults(&c);
    override_ok(&c, "train.warmup_steps=100");
    override_ok(&c, "train.min_lr_frac=0");
    override_ok(&c, "train.beta1=0");
    override_ok(&c, "train.grad_clip=0");
    override_ok(&c, "train.weight_decay=0");
    CHECK(finalize_ok(&c, NULL) == 0);
    override_ok(&c, "train.min_lr_frac=1");
    CHECK(finalize_ok(&c, NULL) == 0);
}

static void test_roundtrip(void) {
    g_test = "round trip";
    Config c;
    // defaults, before and after finalize
    config_defaults(&c);
    roundtrip(&c, "rt_defaults.ini");
    finalize_ok(&c, NULL);
    roundtrip(&c, "rt_defaults_final.ini");
    // every key away from its default (but pos and schedule, below: pos = learned leaves the rope
    // keys without effect, and the wsd schedule uses both min_lr_frac and wsd_decay_frac),
    // awkward floats and strings
    config_defaults(&c);
    const char* args[] = {
        "model.vocab_size=1000", "model.n_layer=3", "model.d_model=120", "model.n_head=6", "model.n_kv_head=2",
        "model.head_dim=22", "model.d_ff=333", "model.max_seq_len=77", "model.pos=rope", "model.rope_base=500000",
        "model.rope_fraction=0.18181818",   // 4 of head_dim 22 (within the float's rounding)
        "model.norm=layernorm", "model.norm_eps=1.2345678e-7", "model.qk_norm=true", "model.mlp=gelu",
        "model.tie_embeddings=false", "model.bias=true", "model.attn_gate=headwise", "model.gate_position=value",
        "model.gate_act=silu", "model.init_std=0.0123456789",
        "model.rope_scaling=yarn", "model.rope_factor=3.5", "model.rope_original_len=5", "model.yarn_beta_fast=16",
        "model.yarn_beta_slow=2", "model.yarn_attn_factor=1.25",
        "model.layer_pattern=LAL", "model.linear_n_k_head=1", "model.linear_n_v_head=3", "model.linear_k_head_dim=5",
        "model.linear_v_head_dim=7", "model.linear_conv_kernel=3", "model.linear_gate_act=sigmoid",
        "model.linear_chunk=32",
        "moe.n_expert=5", "moe.top_k=3", "moe.d_expert=17", "moe.n_shared_expert=1", "moe.d_shared_expert=19",
        "moe.shared_expert_gate=true", "moe.moe_every=3", "moe.router=sigmoid_topk", "moe.aux_loss_coef=0.0123",
        "moe.z_loss_coef=2e-4", "moe.capacity_factor=1.25", "moe.expert_parallel=5",
        "train.seed=9876543210123", "train.batch_size=3", "train.seq_len=7", "train.tokens_per_step=84",
        "train.steps=1234", "train.lr=0.1", "train.min_lr_frac=0.3333333", "train.warmup_steps=17",
        "train.schedule=wsd", "train.wsd_decay_frac=0.7", "train.weight_decay=0.05", "train.beta1=0.85",
        "train.beta2=0.999", "train.eps=1.2345678e-15", "train.grad_clip=2.5", "train.threads=5", "train.zero_stage=1",
        "train.attn_impl=cudnn", "train.recompute=full", "train.precision=bf16",
        "train.hang_timeout_s=7.5", "train.straggler_factor=1.5", "train.straggler_reports=4",
        "data.train_glob=some dir/with spaces/tr_*.bin", "data.val_glob=v;#=x", "data.shuffle=false", "data.tokenizer=tok/t.bin",
        "data.bos=true", "data.bos_token=999",
        "data.sources=", "data.val_sources=",   // empty: each excludes train_glob / val_glob (set above)
        "data.doc_mask=false", "data.doc_positions=continue",   // (true needs attention layers only, no cudnn)
        "log.run_dir=runs/rt", "log.log_every=3", "log.val_every=0", "log.val_batches=2",
        "log.sample_every=25", "log.sample_tokens=64", "log.sample_temperature=0.8", "log.sample_top_k=5",
        "log.sample_prompt=And God said", "log.tensorboard=true",
        "checkpoint.checkpoint_every=9", "checkpoint.keep_last=5", "checkpoint.keep_every=1000",
        "checkpoint.dir=ck/dir", "checkpoint.on_write_error=exit",
        "checkpoint.async=true",
        "metrics.probe_every=7", "metrics.spike_window=20", "metrics.spike_z=3.5", "metrics.skip_loss_z=8",
        "metrics.skip_grad_z=9", "metrics.max_nonfinite=2",
        "eval.tasks=a.jsonl, b dir/c.jsonl", "eval.task_every=3", "eval.task_limit=40",
    };
    int n = (int)(sizeof args / sizeof args[0]);
    CHECK(n == config_key_count()); // one override per key
    for (int i = 0; i < n; i++) override_ok(&c, args[i]);
    for (int i = 0; i < config_key_count(); i++) {
        const char* sec;
        const char* key = config_key(i, &sec);
        CHECKM(strcmp(config_origin(&c, sec, key), "command line") == 0, "[%s] %s not overridden", sec, key);
    }
    CHECK(finalize_ok(&c, NULL) == 0);
    const char* text = roundtrip(&c, "rt_all.ini");
    // canonical spelling: every key once, enums and bools in their canonical words
    for (int i = 0; i < config_key_count(); i++) {
        const char* sec;
        const char* key = config_key(i, &sec);
        char pat[128];
        snprintf(pat, sizeof pat, "\n%s = ", key);
        CHECKM(strstr(text, pat) != NULL, "written config lacks %s", key);
    }
    CHECK(strstr(text, "\nrope_scaling = yarn") && strstr(text, "\nqk_norm = true") &&
          strstr(text, "\ntie_embeddings = false") && strstr(text, "\nschedule = wsd"));
    CHECK(strstr(text, "\n[model]\n") || strncmp(text, "[model]\n", 8) == 0);
    CHECK(strstr(text, "\n[moe]\n") && strstr(text, "\nrouter = sigmoid_topk") && strstr(text, "\nshared_expert_gate = true"));
    CHECK(strstr(text, "\n[train]\n") && strstr(text, "\n[data]\n") && strstr(text, "\n[log]\n") &&
          strstr(text, "\n[checkpoint]\n"));
    // the two values the config above leaves at (or near) their defaults: pos = learned, schedule = linear
    config_defaults(&c);
    override_ok(&c, "model.pos=learned");
    override_ok(&c, "train.schedule=linear");
    override_ok(&c, "train.min_lr_frac=0.25");
    CHECK(finalize_ok(&c, NULL) == 0);
    text = roundtrip(&c, "rt_learned.ini");
    CHECK(strstr(text, "\npos = learned") && strstr(text, "\nschedule = linear"));
    // short float spellings, whole numbers without an exponent
    config_defaults(&c);
    text = roundtrip(&c, "rt_floats.ini");
    CHECK(strstr(text, "\nlr = 0.0003\n") != NULL);
    CHECK(strstr(text, "\nrope_base = 10000\n") != NULL);
    CHECK(strstr(text, "\nbeta2 = 0.95\n") != NULL);
    // awkward float values survive bit for bit
    const float vals[] = {3e-4f, 1e-8f, 0.1f, 1.0f / 3.0f, 6.02e23f, 1.17549435e-38f, 1e-45f, 16777217.0f, 0.0f};
    for (int i = 0; i < 9; i++) {
        config_defaults(&c);
        c.train.lr = vals[i];
        roundtrip(&c, "rt_float_one.ini");
    }
    // the shipped configs
    const char* shipped[] = {"tiny_gated.ini", "tiny_baseline.ini", "gpt2_124m.ini", "qwen_small.ini",
                             "tiny_moe_gated.ini", "tiny_moe_baseline.ini", "paper/moe_15b_a2b_gated.ini"};
    for (int i = 0; i < 7; i++) {
        char p[1024];
        snprintf(p, sizeof p, "%s/configs/%s", g_root, shipped[i]);
        config_defaults(&c);
        if (load_ok(&c, p) != 0) continue;
        if (finalize_ok(&c, p) != 0) continue;
        roundtrip(&c, "rt_shipped.ini");
        // writing the reloaded config reproduces the same config again (a fixed point)
        Config again;
        config_defaults(&again);
        load_ok(&again, tmp_path("rt_shipped.ini"));
        finalize_ok(&again, NULL);
        CHECKM(config_equal(&c, &again), "%s: write/load/finalize is not a fixed point", shipped[i]);
    }
}

static void test_shipped_configs(void) {
    g_test = "shipped configs";
    char p[1024];
    Config c;
    snprintf(p, sizeof p, "%s/configs/tiny_gated.ini", g_root);
    config_defaults(&c);
    if (load_ok(&c, p) != 0 || finalize_ok(&c, p) != 0) {
        printf("  (run as: test_config REPO_ROOT)\n");
        return;
    }
    ModelConfig* m = &c.model;
    CHECK(m->vocab_size == 8192 && m->padded_vocab == 8192 && m->n_layer == 4 && m->d_model == 128);
    CHECK(m->n_head == 4 && m->n_kv_head == 2 && m->head_dim == 32 && m->d_ff == 384);
    CHECK(m->qk_norm == 1 && m->attn_gate == GATE_ELEMENTWISE && m->pos == POS_ROPE && m->mlp == MLP_SWIGLU);
    CHECK(c.train.seq_len == 128 && c.train.batch_size == 8 && c.train.steps == 200 && c.train.lr == 1e-3f);
    CHECK(c.train.warmup_steps == 20);
    CHECK(strcmp(c.data.train_glob, "data/kjv/train_*.bin") == 0);
    CHECK(strcmp(c.data.val_glob, "data/kjv/val_*.bin") == 0);
    CHECK(strcmp(c.log.run_dir, "runs/tiny_gated") == 0);

    // the baseline differs from the gated config only in attn_gate and run_dir
    Config b;
    snprintf(p, sizeof p, "%s/configs/tiny_baseline.ini", g_root);
    config_defaults(&b);
    if (load_ok(&b, p) == 0 && finalize_ok(&b, p) == 0) {
        CHECK(b.model.attn_gate == GATE_NONE && strcmp(b.log.run_dir, "runs/tiny_baseline") == 0);
        b.model.attn_gate = GATE_ELEMENTWISE;
        strcpy(b.log.run_dir, "runs/tiny_gated");
        CHECK(config_equal(&b, &c));
    }

    snprintf(p, sizeof p, "%s/configs/gpt2_124m.ini", g_root);
    config_defaults(&c);
    if (load_ok(&c, p) == 0 && finalize_ok(&c, p) == 0) {
        CHECK(m->vocab_size == 50257 && m->padded_vocab == 50304 && m->n_layer == 12 && m->d_model == 768);
        CHECK(m->n_head == 12 && m->n_kv_head == 12 && m->head_dim == 64 && m->d_ff == 3072);
        CHECK(m->norm == NORM_LAYERNORM && m->pos == POS_LEARNED && m->mlp == MLP_GELU && m->tie_embeddings == 1);
        CHECK(m->max_seq_len == 1024 && m->attn_gate == GATE_NONE && m->qk_norm == 0);
    }

    snprintf(p, sizeof p, "%s/configs/qwen_small.ini", g_root);
    config_defaults(&c);
    if (load_ok(&c, p) == 0 && finalize_ok(&c, p) == 0) {
        // parameter count of the dense model (spec's parameter table), tied embeddings
        long long d = m->d_model, hd = m->head_dim, F = m->d_ff;
        long long per_layer = (m->n_head * hd + 2 * m->n_kv_head * hd) * d + d * m->n_head * hd + 3 * d * F +
                              2 * d + (m->qk_norm ? 2 * hd : 0);
        long long total = (long long)m->padded_vocab * d + m->n_layer * per_layer + d;
        CHECKM(total >= 30000000LL && total <= 50000000LL, "qwen_small has %lld parameters", total);
        CHECK(m->pos == POS_ROPE && m->norm == NORM_RMSNORM && m->mlp == MLP_SWIGLU && m->qk_norm == 1);
        CHECK(m->n_kv_head < m->n_head);
    }

    // the ablation list names configs that exist
    snprintf(p, sizeof p, "%s/configs/ablations/tiny_gate.txt", g_root);
    char* list = read_all(p);
    CHECKM(list != NULL, "missing %s", p);
    if (list) {
        CHECK(strcmp(list, "tiny_baseline.ini\ntiny_gated.ini\n") == 0);
        free(list);
    }

    // the tiny MoE pair: the tiny pair with 8 experts of width d_ff/2, top-2 (equal active
    // FLOPs), differing only in attn_gate and run_dir; listed in ablations/tiny_moe.txt
    Config mg, mb;
    char pg[1024], pb[1024];
    snprintf(pg, sizeof pg, "%s/configs/tiny_moe_gated.ini", g_root);
    snprintf(pb, sizeof pb, "%s/configs/tiny_moe_baseline.ini", g_root);
    config_defaults(&mg);
    config_defaults(&mb);
    if (load_ok(&mg, pg) == 0 && finalize_ok(&mg, pg) == 0 && load_ok(&mb, pb) == 0 && finalize_ok(&mb, pb) == 0) {
        const MoeConfig* e = &mg.model.moe;
        CHECK(e->n_expert == 8 && e->top_k == 2 && e->top_k * e->d_expert == mg.model.d_ff && e->n_shared_expert == 0);
        CHECK(mg.model.attn_gate == GATE_ELEMENTWISE && mb.model.attn_gate == GATE_NONE);
        Config dense = mg, d0;   // apart from [moe], the gated tiny config
        config_defaults(&d0);
        dense.model.moe = d0.model.moe;
        snprintf(dense.log.run_dir, sizeof dense.log.run_dir, "runs/tiny_gated");
        Config tg;
        snprintf(p, sizeof p, "%s/configs/tiny_gated.ini", g_root);
        config_defaults(&tg);
        if (load_ok(&tg, p) == 0 && finalize_ok(&tg, p) == 0) CHECK(config_equal(&dense, &tg));
        mb.model.attn_gate = GATE_ELEMENTWISE;
        strcpy(mb.log.run_dir, "runs/tiny_moe_gated");
        CHECK(config_equal(&mb, &mg));
    }
    snprintf(p, sizeof p, "%s/configs/ablations/tiny_moe.txt", g_root);
    list = read_all(p);
    CHECKM(list != NULL, "missing %s", p);
    if (list) {
        CHECK(strcmp(list, "tiny_moe_baseline.ini\ntiny_moe_gated.ini\n") == 0);
        free(list);
    }
    // the paper's 15B-A2B MoE
    snprintf(p, sizeof p, "%s/configs/paper/moe_15b_a2b_gated.ini", g_root);
    config_defaults(&mg);
    if (load_ok(&mg, p) == 0 && finalize_ok(&mg, p) == 0) {
        const ModelConfig* q = &mg.model;
        CHECK(q->n_layer == 24 && q->d_model == 2048 && q->n_head == 32 && q->n_kv_head == 4 && q->head_dim == 128);
        CHECK(q->moe.n_expert == 128 && q->moe.d_expert == 768 && q->moe.top_k == 8 && q->moe.moe_every == 1);
        double active = gpt_matmul_params(q);
        CHECKM(active > 1.8e9 && active < 2.0e9, "15B-A2B: %.3gB active matmul parameters", active / 1e9);
    }
}

// Finalize defaults + overrides (NULL-terminated); returns finalize's result, stderr in *err.
static int finalize_with(const char* const* args, const char** err) {
    Config c;
    config_defaults(&c);
    for (int i = 0; args[i]; i++)
        if (override_ok(&c, args[i]) != 0) return -2;
    capture_begin();
    int r = config_finalize(&c, "nx.ini");
    *err = capture_end();
    return r;
}

// Keys without effect (docs/config.md "Keys without effect"), from the docs' list: each key set
// away from its default under a setting that does not use it is refused, naming the setting; the
// same key under a setting that uses it is accepted; at its default it is accepted either way.
static void test_no_effect(void) {
    g_test = "no effect";
    // key=value, settings that leave it without effect, expected message, settings that use it
    struct { const char* key; const char* off[3]; const char* expect; const char* on[3]; } cases[] = {
        {"model.rope_base=500000", {"model.pos=learned"}, "[model] rope_base = 500000: has no effect with pos = learned (command line)", {"model.pos=rope"}},
        {"model.rope_base=500000", {"model.n_layer=2", "model.layer_pattern=L"}, "[model] rope_base = 500000: has no effect with layer_pattern = 'L' (command line): no layer is full attention", {"model.n_layer=2", "model.layer_pattern=LA"}},
        {"model.rope_scaling=linear", {"model.pos=learned"}, "[model] rope_scaling = linear: has no effect with pos = learned", {"model.pos=rope"}},
        {"model.rope_fraction=0.25", {"model.pos=learned"}, "[model] rope_fraction = 0.25: has no effect with pos = learned", {"model.pos=rope"}},
        {"model.rope_factor=2", {"model.rope_scaling=none"}, "[model] rope_factor = 2: has no effect with rope_scaling = none (command line)", {"model.rope_scaling=ntk"}},
        {"model.rope_factor=2", {NULL}, "[model] rope_factor = 2: has no effect with rope_scaling = none (default)", {"model.rope_scaling=linear"}},
        {"model.yarn_beta_fast=16", {"model.rope_scaling=linear"}, "[model] yarn_beta_fast = 16: has no effect with rope_scaling = linear", {"model.rope_scaling=yarn"}},
        {"model.yarn_beta_slow=2", {"model.rope_scaling=ntk"}, "[model] yarn_beta_slow = 2: has no effect with rope_scaling = ntk", {"model.rope_scaling=yarn"}},
        {"model.yarn_attn_factor=1.5", {NULL}, "[model] yarn_attn_factor = 1.5: has no effect with rope_scaling = none (default)", {"model.rope_scaling=yarn"}},
        {"model.yarn_attn_factor=1.5", {"model.pos=learned"}, "[model] yarn_attn_factor = 1.5: has no effect with pos = learned", {"model.rope_scaling=yarn", "model.pos=rope"}},
        {"model.qk_norm=true", {"model.n_layer=2", "model.layer_pattern=LL"}, "[model] qk_norm = true: has no effect with layer_pattern = 'LL'", {"model.n_layer=2", "model.layer_pattern=AL"}},
        {"model.attn_gate=elementwise", {"model.n_layer=2", "model.layer_pattern=L"}, "[model] attn_gate = elementwise: has no effect with layer_pattern = 'L'", {"model.n_layer=2", "model.layer_pattern=LA"}},
        {"model.gate_position=value", {NULL}, "[model] gate_position = value: has no effect with attn_gate = none (default)", {"model.attn_gate=headwise"}},
        {"model.gate_act=ns_sigmoid", {"model.attn_gate=none"}, "[model] gate_act = ns_sigmoid: has no effect with attn_gate = none (command line)", {"model.attn_gate=elementwise"}},
        {"model.linear_n_k_head=2", {NULL}, "[model] linear_n_k_head = 2: has no effect with layer_pattern = '' (default)", {"model.n_layer=2", "model.layer_pattern=LA"}},
        {"model.linear_n_v_head=4", {"model.n_layer=2", "model.layer_pattern=AA"}, "[model] linear_n_v_head = 4: has no effect with layer_pattern = 'AA'", {"model.n_layer=2", "model.layer_pattern=LA"}},
        {"model.linear_k_head_dim=32", {NULL}, "[model] linear_k_head_dim = 32: has no effect", {"model.layer_pattern=L"}},
        {"model.linear_v_head_dim=32", {NULL}, "[model] linear_v_head_dim = 32: has no effect", {"model.layer_pattern=L"}},
        {"model.linear_conv_kernel=2", {NULL}, "[model] linear_conv_kernel = 2: has no effect", {"model.layer_pattern=L"}},
        {"model.linear_gate_act=sigmoid", {NULL}, "[model] linear_gate_act = sigmoid: has no effect", {"model.layer_pattern=L"}},
        {"model.linear_chunk=0", {NULL}, "[model] linear_chunk = 0: has no effect", {"model.layer_pattern=L"}},
        {"moe.top_k=1", {NULL}, "[moe] top_k = 1: has no effect with n_expert = 0 (default): a dense model", {"moe.n_expert=4"}},
        {"moe.d_expert=64", {"moe.n_expert=0"}, "[moe] d_expert = 64: has no effect with n_expert = 0 (command line)", {"moe.n_expert=4"}},
        {"moe.n_shared_expert=1", {NULL}, "[moe] n_shared_expert = 1: has no effect with n_expert = 0", {"moe.n_expert=4"}},
        {"moe.moe_every=2", {NULL}, "[moe] moe_every = 2: has no effect with n_expert = 0", {"moe.n_expert=4"}},
        {"moe.router=sigmoid_topk", {NULL}, "[moe] router = sigmoid_topk: has no effect with n_expert = 0", {"moe.n_expert=4"}},
        {"moe.aux_loss_coef=0.1", {NULL}, "[moe] aux_loss_coef = 0.1: has no effect with n_expert = 0", {"moe.n_expert=4"}},
        {"moe.z_loss_coef=0.01", {NULL}, "[moe] z_loss_coef = 0.01: has no effect with n_expert = 0", {"moe.n_expert=4"}},
        {"moe.capacity_factor=1", {NULL}, "[moe] capacity_factor = 1: has no effect with n_expert = 0", {"moe.n_expert=4"}},
        // the first condition that fails is named: no experts before no shared expert
        {"moe.d_shared_expert=64", {NULL}, "[moe] d_shared_expert = 64: has no effect with n_expert = 0 (default)", {"moe.n_expert=4", "moe.n_shared_expert=1"}},
        {"moe.d_shared_expert=64", {"moe.n_expert=4"}, "[moe] d_shared_expert = 64: has no effect with n_shared_expert = 0 (default): no shared expert", {"moe.n_expert=4", "moe.n_shared_expert=1"}},
        {"moe.shared_expert_gate=true", {"moe.n_expert=4"}, "[moe] shared_expert_gate = true: has no effect with n_shared_expert = 0", {"moe.n_expert=4", "moe.n_shared_expert=1"}},
        {"train.min_lr_frac=0.5", {"train.schedule=constant"}, "[train] min_lr_frac = 0.5: has no effect with schedule = constant (command line)", {"train.schedule=linear"}},
        {"train.min_lr_frac=0.5", {"train.schedule=constant"}, "has no effect with schedule = constant", {"train.schedule=wsd"}},
        {"train.wsd_decay_frac=0.5", {NULL}, "[train] wsd_decay_frac = 0.5: has no effect with schedule = cosine (default)", {"train.schedule=wsd"}},
        {"train.wsd_decay_frac=0.5", {"train.schedule=constant"}, "[train] wsd_decay_frac = 0.5: has no effect with schedule = constant", {"train.schedule=wsd"}},
        {"data.bos_token=5", {NULL}, "[data] bos_token = 5: has no effect with bos = false (default): no BOS token is inserted", {"data.bos=true"}},
    };
    int n = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; i++) {
        const char* args[8];
        int a = 0;
        for (int j = 0; j < 3 && cases[i].off[j]; j++) args[a++] = cases[i].off[j];
        args[a++] = cases[i].key;
        args[a] = NULL;
        const char* err = "";
        int r = finalize_with(args, &err);
        CHECKM(r == -1 && strstr(err, cases[i].expect) && count_lines(err) == 1 &&
               strncmp(err, "config error: command line: ", 28) == 0,
               "%s: expected \"%s\", got (%d): %s", cases[i].key, cases[i].expect, r, err);
        // the fix the message offers, a setting that uses the key, is accepted
        a = 0;
        for (int j = 0; j < 3 && cases[i].on[j]; j++) args[a++] = cases[i].on[j];
        args[a++] = cases[i].key;
        args[a] = NULL;
        r = finalize_with(args, &err);
        CHECKM(r == 0, "%s with %s: %s", cases[i].key, cases[i].on[0], err);
    }
    // at its default a key passes whatever the setting (a written config names every key)
    const char* at_default[][4] = {
        {"model.pos=learned", "model.rope_base=10000", "model.rope_scaling=none", "model.yarn_attn_factor=0"},
        {"model.attn_gate=none", "model.gate_act=sigmoid", "model.gate_position=sdpa", NULL},
        {"moe.n_expert=0", "moe.top_k=2", "moe.capacity_factor=0", "moe.aux_loss_coef=0.01"},
        {"train.schedule=constant", "train.min_lr_frac=0.1", "train.wsd_decay_frac=0.2", NULL},
        {"data.bos=false", "data.bos_token=-1", "model.linear_chunk=64", NULL},
    };
    for (int i = 0; i < 5; i++) {
        const char* args[5] = {at_default[i][0], at_default[i][1], at_default[i][2], at_default[i][3], NULL};
        const char* err = "";
        CHECKM(finalize_with(args, &err) == 0, "%s with its keys at their defaults: %s", args[0], err);
    }
    // finalized configs that derive values (MoE with a shared expert, hybrid, yarn) write, load
    // and finalize again to the same config: derived values only fill keys that are in use
    const char* variants[][5] = {
        {"moe.n_expert=4", "moe.n_shared_expert=1", "moe.shared_expert_gate=true", NULL, NULL},
        {"model.n_layer=4", "model.layer_pattern=LLLA", "model.attn_gate=elementwise", NULL, NULL},
        {"model.rope_scaling=yarn", "model.rope_factor=4", "model.yarn_beta_fast=16", "model.yarn_attn_factor=1.2", NULL},
        {"model.pos=learned", "train.schedule=constant", "data.bos=true", "data.bos_token=3", NULL},
    };
    for (int i = 0; i < 4; i++) {
        Config c, back;
        config_defaults(&c);
        for (int j = 0; variants[i][j]; j++) override_ok(&c, variants[i][j]);
        if (finalize_ok(&c, NULL) != 0) continue;
        roundtrip(&c, "rt_no_effect.ini");
        config_defaults(&back);
        if (load_ok(&back, tmp_path("rt_no_effect.ini")) != 0) continue;
        CHECKM(finalize_ok(&back, NULL) == 0 && config_equal(&c, &back), "%s: write/load/finalize", variants[i][0]);
    }
}

// NaN, infinities and float32 overflow are refused for every key that is not a string (floats:
// "not a finite number" / "out of range"); the float keys, from the docs' tables.
static void test_nonfinite_values(void) {
    g_test = "nan and inf";
    static const char* const FLOATS[] = {
        "model.rope_base", "model.rope_fraction", "model.rope_factor", "model.yarn_beta_fast", "model.yarn_beta_slow",
        "model.yarn_attn_factor", "model.norm_eps", "model.init_std", "moe.aux_loss_coef", "moe.z_loss_coef",
        "moe.capacity_factor", "train.lr", "train.min_lr_frac", "train.wsd_decay_frac", "train.weight_decay",
        "train.beta1", "train.beta2", "train.eps", "train.grad_clip", "train.hang_timeout_s", "train.straggler_factor",
        "log.sample_temperature", "metrics.spike_z",
        "metrics.skip_loss_z", "metrics.skip_grad_z"};
    static const char* const STRINGS[] = {"layer_pattern", "train_glob", "val_glob", "tokenizer", "run_dir",
                                          "sample_prompt", "dir", "tasks", "sources", "val_sources"};
    const int nf = (int)(sizeof FLOATS / sizeof FLOATS[0]);
    const char* bad[] = {"nan", "NaN", "-nan", "inf", "-inf", "Infinity", "1e39", "-1e39"};
    int n_float = 0;
    for (int i = 0; i < config_key_count(); i++) {
        const char* sec;
        const char* key = config_key(i, &sec);
        int is_string = 0, is_float = 0;
        for (int j = 0; j < (int)(sizeof STRINGS / sizeof STRINGS[0]); j++) is_string |= strcmp(key, STRINGS[j]) == 0;
        char full[128];
        snprintf(full, sizeof full, "%s.%s", sec, key);
        for (int j = 0; j < nf; j++) is_float |= strcmp(full, FLOATS[j]) == 0;
        n_float += is_float;
        // the list is complete: a non-string key that takes "0.5" is a float key
        Config c;
        config_defaults(&c);
        char arg[160];
        snprintf(arg, sizeof arg, "%s=0.5", full);
        capture_begin();
        int r = config_apply_override(&c, arg);
        capture_end();
        CHECKM(is_string || (r == 0) == is_float, "%s: takes 0.5: %d, in the float list: %d", full, r == 0, is_float);
        if (is_string) continue;
        for (int b = 0; b < 8; b++) {
            snprintf(arg, sizeof arg, "%s=%s", full, bad[b]);
            config_defaults(&c);
            capture_begin();
            r = config_apply_override(&c, arg);
            const char* err = capture_end();
            int msg_ok = !is_float || strstr(err, b < 6 ? "not a finite number" : "out of range");
            CHECKM(r == -1 && msg_ok && count_lines(err) == 1, "%s accepted or unclear: %s", arg, err);
        }
    }
    CHECKM(n_float == nf, "%d of the %d float keys found", n_float, nf);
}

// The bounds of docs/config.md "Bounds of the float keys", at both sides of each edge (values
// chosen exact in binary where the bound is a product).
static void test_bounds(void) {
    g_test = "bounds";
    struct { const char* args[5]; int ok; } cases[] = {
        {{"model.rope_base=1"}, 0}, {{"model.rope_base=1.001"}, 1}, {{"model.rope_base=0.5"}, 0},
        {{"model.rope_scaling=linear", "model.rope_factor=1e6"}, 1},
        // rope_fraction in (0, 1], head_dim (64 by default) x it a whole even number >= 2
        {{"model.rope_fraction=1"}, 1}, {{"model.rope_fraction=0.25"}, 1}, {{"model.rope_fraction=0.03125"}, 1},
        {{"model.rope_fraction=0.015625"}, 0}, {{"model.rope_fraction=0"}, 0}, {{"model.rope_fraction=1.0001"}, 0},
        {{"model.rope_fraction=0.3"}, 0}, {{"model.rope_fraction=0.2501"}, 0}, {{"model.rope_fraction=0.25001"}, 1},
        {{"model.rope_fraction=0.03125", "model.rope_scaling=ntk"}, 0},
        {{"model.rope_fraction=0.0625", "model.rope_scaling=ntk"}, 1},
        {{"model.rope_scaling=linear", "model.rope_factor=1.0001e6"}, 0},
        {{"model.rope_scaling=linear", "model.rope_factor=0.999"}, 0},
        {{"model.rope_scaling=yarn", "model.yarn_attn_factor=4"}, 1},
        {{"model.rope_scaling=yarn", "model.yarn_attn_factor=4.001"}, 0},
        {{"model.rope_scaling=yarn", "model.yarn_attn_factor=0.25"}, 1},
        {{"model.rope_scaling=yarn", "model.yarn_attn_factor=0.2499"}, 0},
        {{"model.rope_scaling=yarn", "model.yarn_attn_factor=0"}, 1},
        {{"model.rope_scaling=yarn", "model.yarn_attn_factor=-1"}, 0},
        {{"model.rope_scaling=yarn", "model.yarn_attn_factor=1e30"}, 0},
        {{"model.rope_scaling=yarn", "model.yarn_attn_factor=2147483648"}, 0},
        {{"model.rope_scaling=yarn", "model.yarn_beta_fast=2", "model.yarn_beta_slow=2"}, 0},
        {{"model.rope_scaling=yarn", "model.yarn_beta_fast=2.001", "model.yarn_beta_slow=2"}, 1},
        // init_std <= 4/sqrt(d_model): d_model 64 -> 0.5
        {{"model.d_model=64", "model.n_head=2", "model.init_std=0.5", "model.norm_eps=1e-5"}, 1},
        {{"model.d_model=64", "model.n_head=2", "model.init_std=0.5001"}, 0},
        // FLT_MIN <= norm_eps <= init_std^2: init_std 0.125 -> 0.015625
        {{"model.init_std=0.125", "model.norm_eps=0.015625"}, 1},
        {{"model.init_std=0.125", "model.norm_eps=0.0157"}, 0},
        {{"model.norm_eps=1.1754944e-38"}, 1}, {{"model.norm_eps=1.1754942e-38"}, 0},
        // capacity_factor <= n_expert/top_k
        {{"moe.n_expert=8", "moe.top_k=2", "moe.capacity_factor=4"}, 1},
        {{"moe.n_expert=8", "moe.top_k=2", "moe.capacity_factor=4.001"}, 0},
        {{"moe.n_expert=8", "moe.aux_loss_coef=1", "moe.z_loss_coef=1"}, 1},
        {{"moe.n_expert=8", "moe.aux_loss_coef=1.001"}, 0}, {{"moe.n_expert=8", "moe.z_loss_coef=1.001"}, 0},
        // beta1 = 0 or beta1^2 < beta2
        {{"train.beta1=0.5", "train.beta2=0.25"}, 0}, {{"train.beta1=0.4999", "train.beta2=0.25"}, 1},
        {{"train.beta1=0", "train.beta2=0"}, 1}, {{"train.beta1=0.1", "train.beta2=0"}, 0},
        // AdamW eps >= 2^-63
        {{"train.eps=1.0842022e-19"}, 1}, {{"train.eps=1.0842e-19"}, 0},
    };
    int n = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; i++) {
        const char* args[6];
        int a = 0;
        for (int j = 0; j < 5 && cases[i].args[j]; j++) args[a++] = cases[i].args[j];
        args[a] = NULL;
        const char* err = "";
        int r = finalize_with(args, &err);
        if (cases[i].ok) CHECKM(r == 0, "%s ... should pass: %s", args[a - 1], err);
        else CHECKM(r == -1 && count_lines(err) == 1, "%s ... should be refused (%d): %s", args[a - 1], r, err);
    }
}

static void test_docs(void) {
    g_test = "docs";
    char p[1024];
    snprintf(p, sizeof p, "%s/docs/config.md", g_root);
    char* doc = read_all(p);
    CHECKM(doc != NULL, "missing %s", p);
    if (!doc) return;
    // every key has a row "| `name` |" in the section's table
    for (int i = 0; i < config_key_count(); i++) {
        const char* sec;
        const char* key = config_key(i, &sec);
        char pat[128];
        snprintf(pat, sizeof pat, "| `%s` |", key);
        CHECKM(strstr(doc, pat) != NULL, "docs/config.md has no row for [%s] %s", sec, key);
    }
    free(doc);
}

static void test_errors(void) {
    g_test = "errors";
    // [name, ini text, stage, expected substring]; line 1 of each text is line 1 of the file
    struct { const char* name; const char* ini; Stage stage; const char* expect; } cases[] = {
        {"unknown_section", "[model]\nn_layer = 4\n[modle]\nd_model = 8\n", STAGE_LOAD,
         "unknown_section.ini:4: unknown section [modle] (did you mean [model]?) (accepted: model, moe, train, data, log, checkpoint, metrics, eval)"},
        {"unknown_section_far", "[optimizer]\nlr = 1\n", STAGE_LOAD, "unknown section [optimizer] (accepted:"},
        {"unknown_key", "[model]\nn_kv_heads = 2\n", STAGE_LOAD,
         "unknown_key.ini:2: [model] n_kv_heads = 2: unknown key in [model] (did you mean n_kv_head?)"},
        {"unknown_key_transposed", "[model]\nhaed_dim = 2\n", STAGE_LOAD, "(did you mean head_dim?)"},
        {"unknown_key_prefix", "[train]\nwarmup = 2\n", STAGE_LOAD, "(did you mean warmup_steps?)"},
        {"unknown_key_other_section", "[model]\nlr = 0.1\n", STAGE_LOAD, "(did you mean [train] lr? it belongs to section [train])"},
        {"unknown_key_no_hint", "[model]\nzzzzzz = 1\n", STAGE_LOAD, "[model] zzzzzz = 1: unknown key in [model]\n"},
        {"key_outside_section", "n_layer = 4\n", STAGE_LOAD, "key_outside_section.ini:1: n_layer = 4: key outside any section"},
        {"duplicate_key", "[train]\nlr = 1\n\nlr = 2\n", STAGE_LOAD, "duplicate_key.ini:4: [train] lr = 2: duplicate key, already set at line 2"},
        {"syntax_no_equals", "[model]\nn_layer = 4\nd_model\n", STAGE_LOAD, "syntax_no_equals.ini:3: syntax error"},
        {"syntax_section", "[model\nn_layer = 4\n", STAGE_LOAD, "syntax_section.ini:1: syntax error"},
        {"int_suffix", "[model]\nn_layer = 12x\n", STAGE_LOAD, "[model] n_layer = 12x: not an integer (accepted: an integer such as 12)"},
        {"int_empty", "[model]\nn_layer =\n", STAGE_LOAD, "[model] n_layer = \"\": empty value"},
        {"int_fraction", "[model]\nn_layer = 1.5\n", STAGE_LOAD, "[model] n_layer = 1.5: not an integer: a fraction"},
        {"int_exponent", "[model]\nn_layer = 1e3\n", STAGE_LOAD, "not an integer: a fraction or exponent"},
        {"int_hex", "[model]\nn_layer = 0x10\n", STAGE_LOAD, "not an integer"},
        {"int_overflow", "[model]\nd_model = 2147483648\n", STAGE_LOAD, "[model] d_model = 2147483648: out of range"},
        {"int_underflow", "[model]\nd_model = -2147483649\n", STAGE_LOAD, "out of range"},
        {"long_overflow", "[train]\ntokens_per_step = 99999999999999999999\n", STAGE_LOAD, "out of range"},
        {"u64_negative", "[train]\nseed = -1\n", STAGE_LOAD, "[train] seed = -1: not an integer"},
        {"u64_overflow", "[train]\nseed = 18446744073709551616\n", STAGE_LOAD, "[train] seed = 18446744073709551616: out of range"},
        {"float_overflow", "[train]\nlr = 1e999\n", STAGE_LOAD, "[train] lr = 1e999: out of range"},
        {"float_overflow_f32", "[train]\nlr = 1e39\n", STAGE_LOAD, "out of range for float32"},
        {"float_underflow", "[train]\neps = 1e-999\n", STAGE_LOAD, "too small for float32"},
        {"float_underflow_f32", "[train]\neps = 1e-50\n", STAGE_LOAD, "too small for float32"},
        {"float_suffix", "[train]\nlr = 0.1.2\n", STAGE_LOAD, "[train] lr = 0.1.2: not a number"},
        {"float_empty", "[train]\nlr =\n", STAGE_LOAD, "empty value"},
        {"float_inf", "[train]\ngrad_clip = inf\n", STAGE_LOAD, "not a finite number"},
        {"float_nan", "[train]\nlr = nan\n", STAGE_LOAD, "not a finite number"},
        {"bool_bad", "[model]\nqk_norm = maybe\n", STAGE_LOAD,
         "[model] qk_norm = maybe: not a boolean (accepted: true, false, 1, 0, yes, no, on, off)"},
        {"bool_empty", "[model]\ntie_embeddings =\n", STAGE_LOAD, "empty value (accepted: true, false"},
        {"enum_gate", "[model]\nattn_gate = gated\n", STAGE_LOAD,
         "[model] attn_gate = gated: unknown value (accepted: none, elementwise, headwise)"},
        {"enum_pos", "[model]\npos = alibi\n", STAGE_LOAD, "(accepted: rope, learned)"},
        {"enum_norm", "[model]\nnorm = batchnorm\n", STAGE_LOAD, "(accepted: rmsnorm, layernorm)"},
        {"enum_mlp", "[model]\nmlp = relu\n", STAGE_LOAD, "(accepted: swiglu, gelu)"},
        {"enum_gate_position", "[model]\ngate_position = output\n", STAGE_LOAD, "(accepted: sdpa, value)"},
        {"enum_gate_act", "[model]\ngate_act = tanh\n", STAGE_LOAD, "(accepted: sigmoid, ns_sigmoid, silu)"},
        {"enum_schedule", "[train]\nschedule = step\n", STAGE_LOAD, "(accepted: cosine, linear, constant, wsd)"},
        {"string_comment", "[log]\nrun_dir =#x\n", STAGE_LOAD, "[log] run_dir = #x: '#' at the start"},
        // zero or negative sizes (finalize)
        {"vocab_size_zero", "[model]\nvocab_size = 0\n", STAGE_FINALIZE,
         "vocab_size_zero.ini:2: [model] vocab_size = 0: must be positive (accepted: an integer >= 1)"},
        {"n_layer_zero", "[model]\nn_layer = 0\n", STAGE_FINALIZE, "[model] n_layer = 0: must be positive"},
        {"n_layer_negative", "[model]\nn_layer = -2\n", STAGE_FINALIZE, "[model] n_layer = -2: must be positive"},
        {"d_model_zero", "[model]\nd_model = 0\n", STAGE_FINALIZE, "[model] d_model = 0: must be positive"},
        {"n_head_zero", "[model]\nn_head = 0\n", STAGE_FINALIZE, "[model] n_head = 0: must be positive"},
        {"n_kv_head_negative", "[model]\nn_kv_head = -1\n", STAGE_FINALIZE,
         "[model] n_kv_head = -1: must not be negative (accepted: 0 = n_head, or an integer >= 1)"},
        {"head_dim_negative", "[model]\nhead_dim = -64\n", STAGE_FINALIZE, "[model] head_dim = -64: must not be negative"},
        {"d_ff_negative", "[model]\nd_ff = -1\n", STAGE_FINALIZE, "[model] d_ff = -1: must not be negative"},
        {"max_seq_len_zero", "[model]\nmax_seq_len = 0\n", STAGE_FINALIZE, "[model] max_seq_len = 0: must be positive"},
        {"batch_size_zero", "[train]\nbatch_size = 0\n", STAGE_FINALIZE, "[train] batch_size = 0: must be positive"},
        {"seq_len_negative", "[train]\nseq_len = -64\n", STAGE_FINALIZE, "[train] seq_len = -64: must be positive"},
        {"steps_zero", "[train]\nsteps = 0\n", STAGE_FINALIZE, "[train] steps = 0: must be positive"},
        // cross-field rules
        {"gqa", "[model]\nn_head = 12\nn_kv_head = 5\n", STAGE_FINALIZE,
         "gqa.ini:3: [model] n_kv_head = 5: n_head (12, set at "},
        {"gqa_more_kv", "[model]\nn_kv_head = 24\n", STAGE_FINALIZE,
         "[model] n_kv_head = 24: n_head (12, default) is not divisible by n_kv_head (24) (accepted: a divisor of n_head)"},
        {"rope_odd", "[model]\nd_model = 64\nn_head = 2\nhead_dim = 31\n", STAGE_FINALIZE,
         "rope_odd.ini:4: [model] head_dim = 31: odd head_dim with pos = rope"},
        {"rope_odd_derived", "[model]\nd_model = 60\nn_head = 4\n", STAGE_FINALIZE,
         "[model] pos = rope (default): rope needs an even head_dim, but head_dim = d_model/n_head = 60/4 = 15 is odd"},
        {"head_dim_underivable", "[model]\nd_model = 100\nn_head = 12\n", STAGE_FINALIZE,
         "head_dim_underivable.ini:3: [model] n_head = 12: d_model (100, set at "},
        {"seq_len_too_long", "[model]\nmax_seq_len = 128\n[train]\nseq_len = 256\n", STAGE_FINALIZE,
         "seq_len_too_long.ini:4: [train] seq_len = 256: seq_len (256) is larger than [model] max_seq_len (128, set at "},
        {"seq_len_too_long_default", "[train]\nseq_len = 2048\n", STAGE_FINALIZE,
         "max_seq_len (1024, default)"},
        {"tokens_per_step", "[train]\ntokens_per_step = 300\n", STAGE_FINALIZE,
         "[train] tokens_per_step = 300: not a multiple of batch_size*seq_len = 4*64 = 256 (accepted: a multiple of 256, e.g. 512)"},
        {"tokens_per_step_negative", "[train]\ntokens_per_step = -256\n", STAGE_FINALIZE, "must not be negative"},
        {"lr_zero", "[train]\nlr = 0\n", STAGE_FINALIZE, "[train] lr = 0: must be positive"},
        {"lr_negative", "[train]\nlr = -0.5\n", STAGE_FINALIZE, "[train] lr = -0.5: must be positive"},
        {"beta1_one", "[train]\nbeta1 = 1\n", STAGE_FINALIZE, "[train] beta1 = 1: outside [0, 1)"},
        {"beta1_negative", "[train]\nbeta1 = -0.5\n", STAGE_FINALIZE, "[train] beta1 = -0.5: outside [0, 1)"},
        {"beta2_one", "[train]\nbeta2 = 1.0\n", STAGE_FINALIZE, "[train] beta2 = 1: outside [0, 1)"},
        {"beta2_big", "[train]\nbeta2 = 2\n", STAGE_FINALIZE, "[train] beta2 = 2: outside [0, 1)"},
        {"eps_zero", "[train]\neps = 0\n", STAGE_FINALIZE, "[train] eps = 0: must be positive"},
        {"eps_negative", "[train]\neps = -1e-8\n", STAGE_FINALIZE, "[train] eps = -1e-08: must be positive"},
        {"weight_decay_negative", "[train]\nweight_decay = -0.1\n", STAGE_FINALIZE, "[train] weight_decay = -0.1: must not be negative"},
        {"grad_clip_negative", "[train]\ngrad_clip = -1\n", STAGE_FINALIZE, "[train] grad_clip = -1: must not be negative"},
        {"warmup_negative", "[train]\nwarmup_steps = -1\n", STAGE_FINALIZE, "[train] warmup_steps = -1: must not be negative"},
        {"warmup_too_long", "[train]\nsteps = 10\nwarmup_steps = 11\n", STAGE_FINALIZE,
         "warmup_too_long.ini:3: [train] warmup_steps = 11: warmup_steps (11) is larger than steps (10, set at "},
        {"min_lr_frac_big", "[train]\nmin_lr_frac = 1.01\n", STAGE_FINALIZE, "[train] min_lr_frac = 1.01: outside [0, 1]"},
        {"min_lr_frac_negative", "[train]\nmin_lr_frac = -0.01\n", STAGE_FINALIZE, "[train] min_lr_frac = -0.01: outside [0, 1]"},
        {"wsd_decay_frac_zero", "[train]\nschedule = wsd\nwsd_decay_frac = 0\n", STAGE_FINALIZE, "[train] wsd_decay_frac = 0: outside (0, 1]"},
        {"wsd_decay_frac_big", "[train]\nschedule = wsd\nwsd_decay_frac = 1.5\n", STAGE_FINALIZE, "[train] wsd_decay_frac = 1.5: outside (0, 1]"},
        {"threads_negative", "[train]\nthreads = -1\n", STAGE_FINALIZE, "[train] threads = -1: must not be negative"},
        {"rope_base_zero", "[model]\nrope_base = 0\n", STAGE_FINALIZE, "[model] rope_base = 0: must be > 1"},
        {"rope_factor_small", "[model]\nrope_scaling = linear\nrope_factor = 0.5\n", STAGE_FINALIZE, "[model] rope_factor = 0.5: outside 1 .. 1e6"},
        {"rope_fraction_odd", "[model]\nhead_dim = 16\nrope_fraction = 0.1875\n", STAGE_FINALIZE,
         "rope_fraction_odd.ini:3: [model] rope_fraction = 0.1875: head_dim (16) x rope_fraction = 3 rotated channels, not a whole even number >= 2"},
        {"rope_fraction_zero", "[model]\nrope_fraction = 0\n", STAGE_FINALIZE, "[model] rope_fraction = 0: outside (0, 1]"},
        {"rope_fraction_ntk2", "[model]\nhead_dim = 8\nrope_fraction = 0.25\nrope_scaling = ntk\n", STAGE_FINALIZE,
         "[model] rope_scaling = ntk: ntk with 2 rotated channels"},
        {"rope_scaling_learned", "[model]\npos = learned\nrope_scaling = yarn\n", STAGE_FINALIZE,
         "rope_scaling_learned.ini:3: [model] rope_scaling = yarn: has no effect with pos = learned (set at "},
        {"rope_scaling_unknown", "[model]\nrope_scaling = ntk-by-parts\n", STAGE_LOAD, "rope_scaling = ntk-by-parts"},
        {"yarn_betas_swapped", "[model]\nrope_scaling = yarn\nyarn_beta_fast = 1\nyarn_beta_slow = 32\n", STAGE_FINALIZE,
         "yarn_beta_fast = 1, yarn_beta_slow = 32 (accepted: 0 < yarn_beta_slow < yarn_beta_fast"},
        {"rope_original_len_negative", "[model]\nrope_original_len = -8\n", STAGE_FINALIZE, "[model] rope_original_len = -8: must not be negative"},
        {"norm_eps_zero", "[model]\nnorm_eps = 0\n", STAGE_FINALIZE, "[model] norm_eps = 0: below the smallest normal float"},
        {"init_std_zero", "[model]\ninit_std = 0\n", STAGE_FINALIZE, "[model] init_std = 0: outside (0, 4/sqrt(d_model)]"},
        {"d_model_huge", "[model]\nd_model = 1000000000\nn_head = 1\n", STAGE_FINALIZE, "too large"},
        {"vocab_huge", "[model]\nvocab_size = 2147483600\n", STAGE_FINALIZE, "[model] vocab_size = 2147483600: too large"},
        {"run_dir_empty", "[log]\nrun_dir =\n", STAGE_FINALIZE, "[log] run_dir = \"\": empty"},
        {"log_every_zero", "[log]\nlog_every = 0\n", STAGE_FINALIZE, "[log] log_every = 0: must be positive"},
        {"val_every_negative", "[log]\nval_every = -1\n", STAGE_FINALIZE, "[log] val_every = -1: must not be negative"},
        {"val_batches_zero", "[log]\nval_batches = 0\n", STAGE_FINALIZE, "[log] val_batches = 0: must be positive"},
        {"checkpoint_every_negative", "[checkpoint]\ncheckpoint_every = -5\n", STAGE_FINALIZE,
         "[checkpoint] checkpoint_every = -5: must not be negative"},
        {"keep_last_negative", "[checkpoint]\nkeep_last = -1\n", STAGE_FINALIZE, "[checkpoint] keep_last = -1: must not be negative"},
        // [moe]
        {"enum_router", "[moe]\nrouter = top1\n", STAGE_LOAD, "[moe] router = top1: unknown value (accepted: softmax_topk, sigmoid_topk)"},
        {"moe_key_wrong_section", "[model]\nn_expert = 8\n", STAGE_LOAD, "(did you mean [moe] n_expert? it belongs to section [moe])"},
        {"n_expert_negative", "[moe]\nn_expert = -8\n", STAGE_FINALIZE, "[moe] n_expert = -8: must not be negative"},
        {"n_expert_huge", "[moe]\nn_expert = 100000\ntop_k = 1\n", STAGE_FINALIZE, "[moe] n_expert = 100000: too large"},
        {"top_k_too_big", "[moe]\nn_expert = 8\ntop_k = 9\n", STAGE_FINALIZE,
         "top_k_too_big.ini:3: [moe] top_k = 9: each token goes to top_k of the n_expert = 8 experts (set at "},
        {"top_k_zero", "[moe]\nn_expert = 8\ntop_k = 0\n", STAGE_FINALIZE, "[moe] top_k = 0: each token goes to top_k"},
        {"moe_without_experts", "[moe]\ntop_k = 4\n", STAGE_FINALIZE,
         "moe_without_experts.ini:2: [moe] top_k = 4: has no effect with n_expert = 0 (default): a dense model "
         "(accepted: n_expert >= 1 for MoE layers, or leave top_k at its default 2)"},
        {"moe_coef_without_experts", "[moe]\nn_expert = 0\naux_loss_coef = 0.1\n", STAGE_FINALIZE,
         "[moe] aux_loss_coef = 0.1: has no effect with n_expert = 0 (set at "},
        {"d_expert_negative", "[moe]\nn_expert = 4\nd_expert = -1\n", STAGE_FINALIZE, "[moe] d_expert = -1: must not be negative"},
        {"n_shared_two", "[moe]\nn_expert = 4\nn_shared_expert = 2\n", STAGE_FINALIZE, "[moe] n_shared_expert = 2: outside {0, 1}"},
        {"shared_gate_alone", "[moe]\nn_expert = 4\nshared_expert_gate = true\n", STAGE_FINALIZE,
         "[moe] shared_expert_gate = true: has no effect with n_shared_expert = 0 (default): no shared expert"},
        {"d_shared_alone", "[moe]\nn_expert = 4\nd_shared_expert = 64\n", STAGE_FINALIZE,
         "[moe] d_shared_expert = 64: has no effect with n_shared_expert = 0 (default)"},
        {"moe_every_zero", "[moe]\nn_expert = 4\nmoe_every = 0\n", STAGE_FINALIZE, "[moe] moe_every = 0: no layer would be an MoE layer"},
        {"moe_every_too_big", "[model]\nn_layer = 4\n[moe]\nn_expert = 4\nmoe_every = 5\n", STAGE_FINALIZE,
         "[moe] moe_every = 5: no layer would be an MoE layer: layer l is one when (l + 1) % moe_every == 0, l < n_layer = 4 (set at "},
        {"aux_negative", "[moe]\nn_expert = 4\naux_loss_coef = -0.01\n", STAGE_FINALIZE, "[moe] aux_loss_coef = -0.01: outside [0, 1]"},
        {"z_negative", "[moe]\nn_expert = 4\nz_loss_coef = -1\n", STAGE_FINALIZE, "[moe] z_loss_coef = -1: outside [0, 1]"},
        // a key without effect under an invalid setting: the setting's own error, not "no effect"
        {"no_effect_bad_n_expert", "[moe]\nn_expert = -1\ntop_k = 4\n", STAGE_FINALIZE, "[moe] n_expert = -1: must not be negative"},
        {"no_effect_bad_pattern", "[model]\nlayer_pattern = AX\nlinear_chunk = 32\n", STAGE_FINALIZE,
         "[model] layer_pattern = AX: 'AX' has 'X' at 1"},
        {"no_effect_bad_shared", "[moe]\nn_expert = 4\nn_shared_expert = 2\nd_shared_expert = 8\n", STAGE_FINALIZE,
         "[moe] n_shared_expert = 2: outside {0, 1}"},
        {"capacity_negative", "[moe]\nn_expert = 4\ncapacity_factor = -1\n", STAGE_FINALIZE, "[moe] capacity_factor = -1: must not be negative"},
    };
    int n = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; i++) expect_ini_error(cases[i].name, cases[i].ini, cases[i].stage, cases[i].expect);

    // a key left at its default is located at the config file passed to finalize
    Config c;
    config_defaults(&c);
    override_ok(&c, "model.max_seq_len=32");
    capture_begin();
    int r = config_finalize(&c, "configs/x.ini");
    const char* err = capture_end();
    CHECK(r == -1);
    CHECKM(strstr(err, "config error: configs/x.ini: [train] seq_len = 64 (default): seq_len (64) is larger than "
                       "[model] max_seq_len (32, command line)") != NULL, "%s", err);

    // missing config file: named
    config_defaults(&c);
    const char* missing = tmp_path("no_such_config.ini");
    capture_begin();
    r = config_load_file(&c, missing);
    err = capture_end();
    CHECK(r == -1);
    char want[600];
    snprintf(want, sizeof want, "config error: %s: cannot open config file: No such file or directory", missing);
    CHECKM(strstr(err, want) != NULL, "%s", err);
    // a directory is not a config file
    capture_begin();
    r = config_load_file(&c, g_tmpdir);
    err = capture_end();
    CHECKM(r == -1 && strstr(err, "cannot read config file"), "%s", err);

    // a line too long for the parser is an error, not a silent truncation
    static char big[6000];
    int len = snprintf(big, sizeof big, "[data]\ntrain_glob = ");
    memset(big + len, 'a', 4500);
    strcpy(big + len + 4500, "\n");
    const char* p = write_tmp("long_line.ini", big);
    capture_begin();
    r = config_load_file(&c, p);
    err = capture_end();
    CHECKM(r == -1 && strstr(err, "long_line.ini:2: line longer than"), "%s", err);
    // a string longer than its field
    len = snprintf(big, sizeof big, "[data]\ntrain_glob = ");
    memset(big + len, 'a', 1100);
    strcpy(big + len + 1100, "\n");
    expect_ini_error("long_string", big, STAGE_LOAD, "longer than 1023 characters");

    // overrides
    expect_override_error("model.nope=1", "config error: command line: [model] nope = 1: unknown key in [model]");
    expect_override_error("model.n_layr=1", "(did you mean n_layer?)");
    expect_override_error("model.lr=1", "(did you mean [train] lr?");
    expect_override_error("modle.n_layer=1", "config error: command line: --modle.n_layer=1: unknown section [modle] (did you mean [model]?)");
    expect_override_error("n_layer=1", "expected --section.key=value");
    expect_override_error("model.n_layer", "expected --section.key=value");
    expect_override_error(".n_layer=1", "expected --section.key=value");
    expect_override_error("model.=1", "expected --section.key=value");
    expect_override_error("model.n_layer=four", "command line: [model] n_layer = four: not an integer");
    expect_override_error("train.lr=1e999", "command line: [train] lr = 1e999: out of range");
    expect_override_error("model.attn_gate=yes", "(accepted: none, elementwise, headwise)");
    expect_override_error("model.qk_norm=2", "not a boolean");
    expect_override_error("log.run_dir=a ;b", "reads as a comment");
    expect_override_error("log.run_dir=a\tb", "control character");

    // the shipped bad files load or finalize with an error that contains their "# expect:"
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tests/config_errors", g_root);
    DIR* d = opendir(dir);
    CHECKM(d != NULL, "cannot open %s", dir);
    int n_files = 0;
    for (struct dirent* e; d && (e = readdir(d));) {
        size_t l = strlen(e->d_name);
        if (l < 5 || strcmp(e->d_name + l - 4, ".ini") != 0) continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        char* text = read_all(path);
        if (!text) continue;
        n_files++;
        char expect[1024] = "";
        if (strncmp(text, "# expect: ", 10) == 0) {
            const char* nl = strchr(text, '\n');
            size_t el = nl ? (size_t)(nl - text - 10) : strlen(text + 10);
            if (el >= sizeof expect) el = sizeof expect - 1;
            memcpy(expect, text + 10, el);
            expect[el] = '\0';
        }
        free(text);
        CHECKM(expect[0] != '\0', "%s: first line is not '# expect: ...'", e->d_name);
        config_defaults(&c);
        capture_begin();
        r = config_load_file(&c, path);
        if (r == 0) r = config_finalize(&c, path);
        err = capture_end();
        CHECKM(r == -1 && strstr(err, expect) != NULL && count_lines(err) == 1, "%s: expected \"%s\", got: %s",
               e->d_name, expect, err);
    }
    if (d) closedir(d);
    CHECKM(n_files >= 40, "only %d files in %s", n_files, dir);
}

// [data] sources: config_parse_sources's entries, normalized weights and separators
static void test_sources(void) {
    ConfigSource s[CONFIG_MAX_SOURCES];
    char err[600];
    int n = config_parse_sources("web:0.7:data/web/train_*.bin, code:0.3:data/code/t?.bin", s, CONFIG_MAX_SOURCES, err, sizeof err);
    CHECK(n == 2 && strcmp(s[0].name, "web") == 0 && strcmp(s[1].glob, "data/code/t?.bin") == 0);
    CHECK(n == 2 && fabs(s[0].weight - 0.7) < 1e-12 && fabs(s[1].weight - 0.3) < 1e-12);
    n = config_parse_sources("  a_1:7:x\tb:3:y,,c:10:z ", s, CONFIG_MAX_SOURCES, err, sizeof err);   // normalized by the sum 20
    CHECK(n == 3 && fabs(s[0].weight - 0.35) < 1e-12 && fabs(s[1].weight - 0.15) < 1e-12 && fabs(s[2].weight - 0.5) < 1e-12);
    CHECK(n == 3 && strcmp(s[0].name, "a_1") == 0 && strcmp(s[2].glob, "z") == 0);
    CHECK(config_parse_sources(" , ", s, CONFIG_MAX_SOURCES, err, sizeof err) == -1 && strstr(err, "no entries"));
    CHECK(config_parse_sources("a:1:x b:1:y c:1:z", s, 2, err, sizeof err) == -1 && strstr(err, "more than 2 sources"));
    CHECK(config_parse_sources("a:1e400:x", s, CONFIG_MAX_SOURCES, err, sizeof err) == -1 && strstr(err, "not a positive number"));
    CHECK(config_parse_sources("a:nan:x", s, CONFIG_MAX_SOURCES, err, sizeof err) == -1 && strstr(err, "not a positive number"));
    CHECK(config_parse_sources("a:1:", s, CONFIG_MAX_SOURCES, err, sizeof err) == -1 && strstr(err, "the glob must have"));
    CHECK(config_parse_sources(":1:x", s, CONFIG_MAX_SOURCES, err, sizeof err) == -1 && strstr(err, "the name must have"));
}

int main(int argc, char** argv) {
    if (argc > 1) g_root = argv[1];
    const char* tmp = getenv("TMPDIR");
    snprintf(g_tmpdir, sizeof g_tmpdir, "%s/test_config.XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(g_tmpdir)) { perror("mkdtemp"); return 1; }

    test_defaults();
    test_enum_names_and_keys();
    test_parse();
    test_overrides();
    test_derivations();
    test_roundtrip();
    test_shipped_configs();
    test_no_effect();
    test_nonfinite_values();
    test_bounds();
    test_docs();
    test_errors();
    test_sources();

    // clean up the temp dir (only files this program wrote)
    DIR* d = opendir(g_tmpdir);
    for (struct dirent* e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", g_tmpdir, e->d_name);
        unlink(path);
    }
    if (d) closedir(d);
    rmdir(g_tmpdir);

    printf("test_config: %d passed, %d failed\n", n_pass, n_fail);
    return n_fail == 0 ? 0 : 1;
}
