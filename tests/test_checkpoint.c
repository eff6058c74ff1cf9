// tests/test_checkpoint.c: the checkpoint format and directory rules (train/checkpoint.h,
// train/resume.h) on a tiny model: bitwise round trip of weights, AdamW state and trainer
// state; every damaged byte or truncation caught with an error naming the file; --resume auto
// falling back past a damaged checkpoint; retention (keep_last, keep_every); no overwrite of a
// complete checkpoint; an unwritable directory; the architecture check on resume; log trimming.
// The trainer-level tests (exact resume, SIGKILL during writes, full disk) are shell tests.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_util.h"
#include "kernels/ops.h"
#include "model/config.h"
#include "model/gpt.h"
#include "model/optim.h"
#include "train/checkpoint.h"
#include "train/dist.h"
#include "train/resume.h"

#define CHECK(cond, ...) TU_CHECK(cond, __VA_ARGS__)

static char g_root[512];   // a fresh temporary directory

static void tiny_config(Config* c) {
    config_defaults(c);
    const char* args[] = {"model.vocab_size=200", "model.n_layer=2", "model.d_model=32", "model.n_head=4",
                          "model.n_kv_head=2", "model.d_ff=48", "model.max_seq_len=16", "model.qk_norm=true",
                          "model.attn_gate=elementwise", "train.seq_len=16", "train.batch_size=2",
                          "metrics.spike_window=6"};
    for (size_t i = 0; i < sizeof args / sizeof args[0]; i++)
        if (config_apply_override(c, args[i]) != 0) exit(1);
    if (config_finalize(c, NULL) != 0) exit(1);
}

// A model, optimizer and trainer state filled with distinct values (seeded).
typedef struct {
    Config cfg;
    GPT m;
    Optim o;
    SpikeWindow lw, gw;
    CkptTrainState st;
} World;

static void world_init(World* w, unsigned seed, int fill) {
    tiny_config(&w->cfg);
    gpt_build(&w->m, &w->cfg.model, seed);
    optim_init(&w->o, &w->m);
    spike_init(&w->lw, w->cfg.metrics.spike_window);
    spike_init(&w->gw, w->cfg.metrics.spike_window);
    memset(&w->st, 0, sizeof w->st);
    w->st.loss_win = &w->lw;
    w->st.grad_win = &w->gw;
    if (!fill) return;
    size_t n = w->m.table.total;
    float* h = malloc(n * sizeof(float));
    tu_state = seed * 7919ULL + 1;
    tu_fill(h, n, 0.1);
    ops_from_host(w->o.m, h, n * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = h[i] * h[i];
    ops_from_host(w->o.v, h, n * sizeof(float));
    free(h);
    w->o.t = 17;
    // 8 pushes into a window of 6: the ring has wrapped, head is not 0
    for (int i = 0; i < 8; i++) { spike_push(&w->lw, 3.0 + 0.01 * i + 1e-9 * seed); spike_push(&w->gw, 0.5 + 0.1 * i); }
    w->st.step = 17;
    w->st.data.epoch = 2;
    w->st.data.shard_idx = 1;
    w->st.data.batch_idx = 5;
    w->st.data_seed = 1234567890123ULL;
    w->st.data_shuffle = 1;
    w->st.nonfinite_run = 2;
    w->st.lr = 3.25e-4f;
}

static void world_free(World* w) {
    spike_free(&w->lw);
    spike_free(&w->gw);
    optim_free(&w->o);
    gpt_free(&w->m);
}

static int arena_equal(const float* a_dev, const float* b_dev, size_t n) {
    float* a = malloc(n * sizeof(float));
    float* b = malloc(n * sizeof(float));
    ops_to_host(a, a_dev, n * sizeof(float));
    ops_to_host(b, b_dev, n * sizeof(float));
    int eq = memcmp(a, b, n * sizeof(float)) == 0;
    free(a);
    free(b);
    return eq;
}

// Runs f(arg) with stderr captured into buf; returns f's result.
static int captured(int (*f)(void*), void* arg, char* buf, size_t n) {
    char path[600];
    snprintf(path, sizeof path, "%s/stderr.txt", g_root);
    fflush(stderr);
    int saved = dup(2);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    close(fd);
    int rc = f(arg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    FILE* in = fopen(path, "r");
    size_t got = in ? fread(buf, 1, n - 1, in) : 0;
    buf[got] = 0;
    if (in) fclose(in);
    return rc;
}

static int run(const char* cmd) {
    int rc = system(cmd);
    if (rc != 0) printf("command failed (%d): %s\n", rc, cmd);
    return rc;
}

static int verify_fn(void* path) { return checkpoint_verify((const char*)path, NULL, NULL); }

typedef struct {
    const char* path;
    GPT* m;
} LoadArgs;

static int load_fn(void* p) {
    LoadArgs* a = p;
    return checkpoint_load(a->path, a->m, NULL, NULL, 0, 1);
}

// ---------------------------------------------------------------------------------------------

static void test_round_trip(void) {
    World a, b;
    world_init(&a, 1, 1);
    world_init(&b, 2, 0);          // other weights, zero moments, empty windows
    char dir[600], path[700];
    snprintf(dir, sizeof dir, "%s/rt", g_root);
    CHECK(checkpoint_save(dir, 17, &a.cfg, &a.m, &a.o, &a.st) == 0, "save");
    checkpoint_path(path, sizeof path, dir, 17);
    CkptInfo info;
    CHECK(checkpoint_verify(path, &info, NULL) == 0, "verify a fresh checkpoint");
    CHECK(info.step == 17 && info.nproc == 1 && info.n_files == 4, "info: step %d nproc %d files %d", info.step,
          info.nproc, info.n_files);
    char tmp[720];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK(access(tmp, F_OK) != 0, "no temporary directory left after a write");
    CHECK(!arena_equal(a.m.params, b.m.params, a.m.table.total), "the models differ before loading");
    CHECK(checkpoint_load(path, &b.m, &b.o, &b.st, 0, 1) == 0, "load");
    CHECK(arena_equal(a.m.params, b.m.params, a.m.table.total), "parameters bitwise equal after load");
    CHECK(arena_equal(a.o.m, b.o.m, a.m.table.total) && arena_equal(a.o.v, b.o.v, a.m.table.total),
          "AdamW m and v bitwise equal after load");
    CHECK(b.o.t == 17, "AdamW t %d", b.o.t);
    CHECK(b.st.step == 17 && b.st.data.epoch == 2 && b.st.data.shard_idx == 1 && b.st.data.batch_idx == 5 &&
          b.st.data_seed == 1234567890123ULL && b.st.data_shuffle == 1 && b.st.nonfinite_run == 2 && b.st.lr == 3.25e-4f,
          "trainer state restored");
    CHECK(b.lw.n == a.lw.n && b.lw.head == a.lw.head && memcmp(b.lw.buf, a.lw.buf, 6 * sizeof(double)) == 0 &&
          b.gw.n == a.gw.n && b.gw.head == a.gw.head && memcmp(b.gw.buf, a.gw.buf, 6 * sizeof(double)) == 0,
          "spike windows restored bit for bit (n %d head %d)", b.lw.n, b.lw.head);
    // a smaller spike window keeps the newest values, oldest first
    SpikeWindow small;
    spike_init(&small, 3);
    CkptTrainState st2 = {0};
    st2.loss_win = &small;
    st2.grad_win = NULL;
    CHECK(checkpoint_load(path, &b.m, &b.o, &st2, 0, 1) == 0, "load with another spike_window");
    CHECK(small.n == 3 && small.buf[0] == 3.0 + 0.05 + 1e-9 && small.buf[2] == 3.0 + 0.07 + 1e-9,
          "window of 3 holds the newest 3 values (%g %g %g)", small.buf[0], small.buf[1], small.buf[2]);
    spike_free(&small);
    // weights only (the tools' path)
    World c;
    world_init(&c, 3, 0);
    CHECK(checkpoint_load(path, &c.m, NULL, NULL, 0, 1) == 0, "load weights only");
    CHECK(arena_equal(a.m.params, c.m.params, a.m.table.total), "weights-only load is bitwise equal");
    world_free(&c);
    // the saved config
    Config saved;
    CHECK(checkpoint_load_config(path, &saved) == 0 && config_equal(&saved, &a.cfg), "config.ini loads back equal");
    // another process count re-cuts the AdamW state (elastic resume): rank 1 of 2's ZeRO-1 shard
    // of this 1-process checkpoint is the saved moments' floats [lo, hi)
    size_t lo, hi;
    dist_shard(a.m.table.total, 2, 1, &lo, &hi);
    Optim half;
    optim_init_range(&half, &b.m, lo, hi);
    CkptTrainState st3 = {0};
    CHECK(hi > lo && checkpoint_load(path, &b.m, &half, &st3, 1, 2) == 0 && arena_equal(a.o.m + lo, half.m, hi - lo) &&
          arena_equal(a.o.v + lo, half.v, hi - lo) && half.t == 17 && st3.step == 17 && st3.data.batch_idx == 5 &&
          st3.ckpt_nproc == 1 && st3.ckpt_zero_stage == 0,
          "rank 1 of 2 loads its ZeRO-1 shard [%zu, %zu) of a 1-process checkpoint, byte for byte", lo, hi);
    optim_free(&half);
    // a model of another shape is refused, naming model.bin
    Config other;
    tiny_config(&other);
    config_apply_override(&other, "model.d_ff=64");
    config_finalize(&other, NULL);
    GPT om;
    gpt_build(&om, &other.model, 1);
    LoadArgs la = {path, &om};
    char msg[2048];
    CHECK(captured(load_fn, &la, msg, sizeof msg) != 0 && strstr(msg, "model.bin") && strstr(msg, "config differs"),
          "a model with another d_ff is refused naming the file and tensor: %s", msg);
    gpt_free(&om);
    world_free(&a);
    world_free(&b);
}

typedef struct {
    const char* file;
    long offset;       // byte to flip; -1 = the last byte; -2 = truncate by 1 byte; -3 = truncate to half
} Damage;

static void test_damage(void) {
    World a;
    world_init(&a, 5, 1);
    char dir[600], good[700];
    snprintf(dir, sizeof dir, "%s/dmg", g_root);
    CHECK(checkpoint_save(dir, 3, &a.cfg, &a.m, &a.o, &a.st) == 0, "save");
    checkpoint_path(good, sizeof good, dir, 3);
    const Damage cases[] = {
        {"model.bin", 0}, {"model.bin", 17}, {"model.bin", 40}, {"model.bin", 5000}, {"model.bin", -1},
        {"model.bin", -2}, {"model.bin", -3},
        {"rank_00000.bin", 3}, {"rank_00000.bin", 12}, {"rank_00000.bin", 33}, {"rank_00000.bin", 60},
        {"rank_00000.bin", 9000}, {"rank_00000.bin", -1}, {"rank_00000.bin", -2}, {"rank_00000.bin", -3},
        {"config.ini", 2}, {"config.ini", 60}, {"config.ini", 300}, {"config.ini", -1}, {"config.ini", -2},
        {"DONE", 10}, {"DONE", 60}, {"DONE", -1}, {"DONE", -3},
    };
    int n = (int)(sizeof cases / sizeof cases[0]), caught = 0, named = 0;
    for (int i = 0; i < n; i++) {
        char bad[720], cmd[2200], file[800], msg[2048];
        snprintf(bad, sizeof bad, "%s/damaged_%02d", dir, i);
        snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", bad, good, bad);
        if (run(cmd) != 0) continue;
        snprintf(file, sizeof file, "%s/%s", bad, cases[i].file);
        struct stat st;
        stat(file, &st);
        if (cases[i].offset <= -2) {
            long len = cases[i].offset == -2 ? st.st_size - 1 : st.st_size / 2;
            if (truncate(file, len) != 0) continue;
        } else {
            long off = cases[i].offset == -1 ? st.st_size - 1 : cases[i].offset;
            FILE* f = fopen(file, "r+b");
            fseek(f, off, SEEK_SET);
            int ch = fgetc(f);
            fseek(f, off, SEEK_SET);
            fputc(ch ^ 0x01, f);   // one flipped bit
            fclose(f);
        }
        int rc = captured(verify_fn, bad, msg, sizeof msg);
        int has_name = strstr(msg, file) != NULL;
        caught += rc != 0;
        named += rc != 0 && has_name;
        CHECK(rc != 0 && has_name, "damage %s @ %ld: rc %d, message: %s", cases[i].file, cases[i].offset, rc, msg);
        if (i == 3 || i == 5 || i == 17) printf("  e.g. %s", msg);
    }
    printf("damaged copies: %d, caught: %d, error naming the file: %d\n", n, caught, named);
    // the good one still verifies (the damage was done to copies)
    CHECK(checkpoint_verify(good, NULL, NULL) == 0, "the original still verifies");
    // a file of another checkpoint put in place: each file is fine, DONE's record disagrees
    World b;
    world_init(&b, 6, 1);
    char dir2[600], other[700], cmd[2200], msg[2048];
    snprintf(dir2, sizeof dir2, "%s/dmg2", g_root);
    CHECK(checkpoint_save(dir2, 3, &b.cfg, &b.m, &b.o, &b.st) == 0, "save another");
    checkpoint_path(other, sizeof other, dir2, 3);
    snprintf(cmd, sizeof cmd, "cp '%s/model.bin' '%s/model.bin'", good, other);
    run(cmd);
    CHECK(captured(verify_fn, other, msg, sizeof msg) != 0 && strstr(msg, "DONE recorded"),
          "a swapped-in model.bin is caught by DONE's record: %s", msg);
    world_free(&b);
    world_free(&a);
}

typedef struct {
    const char* spec;
    const char* dir;
    char path[700];
    int rc;
} FindArgs;

static int find_fn(void* p) {
    FindArgs* a = p;
    a->rc = resume_find(a->spec, a->dir, a->path, sizeof a->path);
    return a->rc;
}

static int exists(const char* path) { return access(path, F_OK) == 0; }

static void test_auto_and_retention(void) {
    World a;
    world_init(&a, 7, 1);
    char dir[600], p[800], cmd[4000], msg[4096];
    snprintf(dir, sizeof dir, "%s/auto", g_root);
    FindArgs fa = {"auto", dir, "", 0};
    CHECK(captured(find_fn, &fa, msg, sizeof msg) == 0, "auto in a missing dir: start fresh (rc %d)", fa.rc);
    for (int s = 1; s <= 10; s++) CHECK(checkpoint_save(dir, s, &a.cfg, &a.m, &a.o, &a.st) == 0, "save %d", s);
    int steps[32];
    CHECK(checkpoint_list(dir, steps, 32) == 10 && steps[0] == 1 && steps[9] == 10, "10 listed, ascending");
    // auto: the newest; with the newest damaged, the one before with a warning naming the file
    CHECK(captured(find_fn, &fa, msg, sizeof msg) == 1 && strstr(fa.path, "step_00000010"), "auto picks step 10");
    snprintf(cmd, sizeof cmd, "printf 'X' | dd of='%s/step_00000010/model.bin' bs=1 seek=100 conv=notrunc 2>/dev/null", dir);
    run(cmd);
    CHECK(captured(find_fn, &fa, msg, sizeof msg) == 1 && strstr(fa.path, "step_00000009") &&
          strstr(msg, "step_00000010/model.bin") && strstr(msg, "warning: --resume auto: skipping"),
          "auto falls back to step 9 with a warning naming the damaged file: %s", msg);
    // an explicit damaged PATH is an error
    char bad[700];
    checkpoint_path(bad, sizeof bad, dir, 10);
    FindArgs fp = {bad, dir, "", 0};
    CHECK(captured(find_fn, &fp, msg, sizeof msg) == -1 && strstr(msg, "model.bin"), "explicit damaged PATH: error: %s", msg);
    // resuming from 9 in auto mode moves the damaged step 10 aside
    CHECK(resume_prepare_dir(dir, 9, 1, 1) == 0, "prepare dir for step 9");
    CHECK(!exists(bad), "damaged step 10 moved away");
    snprintf(p, sizeof p, "%s.corrupt", bad);
    CHECK(exists(p), "kept as step_00000010.corrupt");
    // a fresh (not resuming) run refuses a directory with checkpoints
    CHECK(resume_prepare_dir(dir, 0, 0, 0) != 0, "fresh start into a dir holding checkpoints refused");
    // an explicit older PATH with newer complete checkpoints is refused
    CHECK(resume_prepare_dir(dir, 5, 1, 0) != 0, "explicit PATH older than complete checkpoints refused");
    // begin refuses to overwrite a complete checkpoint; an incomplete one is replaced
    CHECK(checkpoint_begin(dir, 9) != 0, "begin refuses an existing complete step 9");
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/step_00000012' '%s/step_00000002.tmp' '%s/step_00000011.tmp' && rm '%s/step_00000008/DONE'",
             dir, dir, dir, dir);
    run(cmd);
    // retention after a checkpoint at 11: keep_last 3 + keep_every 4
    CHECK(checkpoint_save(dir, 11, &a.cfg, &a.m, &a.o, &a.st) == 0, "save 11 over a stale step_00000011.tmp");
    int removed = checkpoint_prune(dir, 3, 4, 11);
    int n = checkpoint_list(dir, steps, 32);
    char got[256] = "";
    for (int i = 0; i < n; i++) snprintf(got + strlen(got), sizeof got - strlen(got), "%d ", steps[i]);
    printf("retention keep_last=3 keep_every=4 after step 11: kept %s(removed %d)\n", got, removed);
    // complete: 1..7, 9, 11 (8 lost DONE, 10 moved aside) -> keep 4 (every 4), 7, 9, 11 (newest 3)
    CHECK(n == 4 && steps[0] == 4 && steps[1] == 7 && steps[2] == 9 && steps[3] == 11, "kept: %s", got);
    snprintf(p, sizeof p, "%s/step_00000008", dir);
    CHECK(!exists(p), "incomplete step 8 (no DONE) removed");
    snprintf(p, sizeof p, "%s/step_00000002.tmp", dir);
    CHECK(!exists(p), "stale step_00000002.tmp removed");
    snprintf(p, sizeof p, "%s/step_00000012", dir);
    CHECK(exists(p), "an incomplete directory newer than the current step is left alone");
    snprintf(p, sizeof p, "%s/step_00000010.corrupt", dir);
    CHECK(exists(p), "step_00000010.corrupt kept");
    // all complete checkpoints damaged: auto is an error, not a fresh start
    char dir3[600];
    snprintf(dir3, sizeof dir3, "%s/alldamaged", g_root);
    CHECK(checkpoint_save(dir3, 2, &a.cfg, &a.m, &a.o, &a.st) == 0, "save");
    snprintf(cmd, sizeof cmd, "truncate -s 100 '%s/step_00000002/rank_00000.bin'", dir3);
    run(cmd);
    FindArgs f3 = {"auto", dir3, "", 0};
    CHECK(captured(find_fn, &f3, msg, sizeof msg) == -1 && strstr(msg, "all 1 complete checkpoint(s)"),
          "every checkpoint damaged: error: %s", msg);
    world_free(&a);
}

typedef struct {
    World* w;
    const char* dir;
} SaveArgs;

static int save_fn(void* p) {
    SaveArgs* a = p;
    return checkpoint_save(a->dir, 4, &a->w->cfg, &a->w->m, &a->w->o, &a->w->st);
}

static void test_unwritable(void) {
    World a;
    world_init(&a, 8, 1);
    char file[600], dir[700], msg[2048];
    snprintf(file, sizeof file, "%s/a_file", g_root);
    FILE* f = fopen(file, "w");
    fputs("x", f);
    fclose(f);
    snprintf(dir, sizeof dir, "%s/ckpt", file);   // below a regular file: cannot be created
    SaveArgs sa = {&a, dir};
    CHECK(captured(save_fn, &sa, msg, sizeof msg) != 0 && strstr(msg, dir) && strstr(msg, "[checkpoint] dir"),
          "unwritable checkpoint dir: a clear error naming it: %s", msg);
    printf("  e.g. %s", msg);
    world_free(&a);
}

typedef struct {
    Config* saved;
    Config* now;
} CfgArgs;

static int cfg_fn(void* p) {
    CfgArgs* a = p;
    return resume_check_config(a->saved, a->now, "CKPT");
}

static void test_config_check(void) {
    Config saved, now;
    char msg[4096];
    tiny_config(&saved);
    now = saved;
    CfgArgs ca = {&saved, &now};
    CHECK(captured(cfg_fn, &ca, msg, sizeof msg) == 0 && msg[0] == 0, "same config: accepted silently");
    config_apply_override(&now, "train.steps=500");
    config_apply_override(&now, "log.val_every=7");
    config_apply_override(&now, "train.lr=0.01");
    CHECK(captured(cfg_fn, &ca, msg, sizeof msg) == 0 && strstr(msg, "[train] lr") && !strstr(msg, "[train] steps"),
          "steps, val_every accepted (stdout); lr accepted with a warning: %s", msg);
    config_apply_override(&now, "model.d_ff=64");
    config_apply_override(&now, "model.attn_gate=headwise");
    CHECK(captured(cfg_fn, &ca, msg, sizeof msg) == -1 && strstr(msg, "[model] d_ff = 64 (checkpoint: 48)") &&
          strstr(msg, "[model] attn_gate = headwise (checkpoint: elementwise)") && strstr(msg, "2 key(s)"),
          "architecture change refused, both keys listed: %s", msg);
    printf("  e.g. %s", msg);
    // every [model] key is covered: change each one alone
    int n_model = 0, refused = 0;
    for (int i = 0; i < config_key_count(); i++) {
        const char* sec;
        const char* key = config_key(i, &sec);
        if (strcmp(sec, "model") != 0) continue;
        n_model++;
        now = saved;
        char v[128], arg[256];
        config_key_value(&saved, i, v, sizeof v);
        // a different value of the same type
        const char* alt = strcmp(v, "true") == 0 ? "false" : strcmp(v, "false") == 0 ? "true" : NULL;
        if (!alt && config_enum_name(key, 1)) alt = strcmp(v, config_enum_name(key, 0)) == 0 ? config_enum_name(key, 1) : config_enum_name(key, 0);
        char num[160];
        if (!alt) { snprintf(num, sizeof num, "3%s", v); alt = num; }   // 32 -> 332, 0.02 -> 30.02, 1e-05 -> 31e-05
        snprintf(arg, sizeof arg, "model.%s=%s", key, alt);
        config_apply_override(&now, arg);
        if (captured(cfg_fn, &ca, msg, sizeof msg) == -1 && strstr(msg, key)) refused++;
        else printf("FAIL-detail: [model] %s changed (%s) was not refused: %s\n", key, arg, msg);
    }
    CHECK(refused == n_model, "each of the %d [model] keys changed alone is refused (%d were)", n_model, refused);
}

static void test_trim_log(void) {
    char path[600];
    snprintf(path, sizeof path, "%s/log.jsonl", g_root);
    FILE* f = fopen(path, "w");
    fprintf(f, "{\"type\":\"eval\",\"step\":0,\"val_loss\":9}\n{\"type\":\"step\",\"step\":1,\"loss\":8}\n"
               "{\"type\":\"step\",\"step\":2,\"loss\":7}\n{\"type\":\"checkpoint\",\"step\":2,\"ok\":true}\n"
               "{\"type\":\"step\",\"step\":3,\"loss\":6}\n{\"type\":\"step\",\"step\":4,\"lo");
    fclose(f);
    CHECK(resume_trim_log(path, 2) == 0, "trim");
    f = fopen(path, "r");
    char buf[1024];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    CHECK(strcmp(buf, "{\"type\":\"eval\",\"step\":0,\"val_loss\":9}\n{\"type\":\"step\",\"step\":1,\"loss\":8}\n"
                      "{\"type\":\"step\",\"step\":2,\"loss\":7}\n{\"type\":\"checkpoint\",\"step\":2,\"ok\":true}\n") == 0,
          "records after step 2 and the cut last line dropped: [%s]", buf);
}

int main(void) {
    snprintf(g_root, sizeof g_root, "/tmp/gg_test_ckpt_XXXXXX");
    if (!mkdtemp(g_root)) { perror("mkdtemp"); return 1; }
    ops_init(1);
    test_round_trip();
    test_damage();
    test_auto_and_retention();
    test_unwritable();
    test_config_check();
    test_trim_log();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_root);
    if (system(cmd) != 0) printf("note: could not remove %s\n", g_root);
    return tu_finish();
}
