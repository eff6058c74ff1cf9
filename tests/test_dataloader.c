// tests/test_dataloader.c: shards and the data loader, against shards written to a temp dir.
// Prints "N passed, M failed"; exits non-zero on any failure.
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../data/dataloader.h"
#include "../data/shard.h"

static int g_pass = 0, g_fail = 0;

#define CHECK(cond, ...)                                          \
    do {                                                          \
        if (cond) {                                               \
            g_pass++;                                             \
        } else {                                                  \
            g_fail++;                                             \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);  \
            fprintf(stderr, __VA_ARGS__);                         \
            fputc('\n', stderr);                                  \
        }                                                         \
    } while (0)

static char g_dir[256];

static const char* tmp_path(const char* name) {
    static char buf[8][512];
    static int k = 0;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof(buf[k]), "%s/%s", g_dir, name);
    return buf[k];
}

// ---- capturing stderr so error messages can be checked ----
static int g_saved_stderr = -1;
static const char* g_capture_file;

static void capture_begin(void) {
    fflush(stderr);
    g_capture_file = tmp_path("stderr.txt");
    int fd = open(g_capture_file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    g_saved_stderr = dup(2);
    dup2(fd, 2);
    close(fd);
}

// returns the captured text (static buffer)
static const char* capture_end(void) {
    static char text[4096];
    fflush(stderr);
    dup2(g_saved_stderr, 2);
    close(g_saved_stderr);
    FILE* f = fopen(g_capture_file, "r");
    size_t n = f ? fread(text, 1, sizeof(text) - 1, f) : 0;
    text[n] = '\0';
    if (f) fclose(f);
    return text;
}

// ---- writing test shards ----
// token i of shard s = base + i (mod modulus): every position in the test has a distinct value
static int* make_tokens(int64_t n, int base, int modulus) {
    int* t = malloc((size_t)n * sizeof(int));
    for (int64_t i = 0; i < n; i++) t[i] = (int)((base + i) % modulus);
    return t;
}

static void write_shard(const char* path, int64_t n, int base, int modulus) {
    int* t = make_tokens(n, base, modulus);
    if (shard_write(path, t, n) != 0) {
        fprintf(stderr, "could not write test shard %s\n", path);
        exit(2);
    }
    free(t);
}

static void write_raw(const char* path, const int32_t* header, const void* data, size_t data_bytes) {
    FILE* f = fopen(path, "wb");
    fwrite(header, 4, SHARD_HEADER_INTS, f);
    if (data_bytes) fwrite(data, 1, data_bytes, f);
    fclose(f);
}

// ---- tests ----

static void test_shard_roundtrip(void) {
    // uint16 when every token < 65536
    const char* p16 = tmp_path("rt16.bin");
    int t16[5] = {0, 1, 65535, 7, 300};
    CHECK(shard_write(p16, t16, 5) == 0, "write u16");
    ShardHeader h;
    CHECK(shard_read_header(p16, &h) == 0, "header u16");
    CHECK(h.magic == SHARD_MAGIC_U16 && h.version == 1 && h.token_bytes == 2 && h.num_tokens == 5,
          "u16 header fields magic=%d version=%d bytes=%d n=%lld", h.magic, h.version, h.token_bytes,
          (long long)h.num_tokens);
    CHECK(h.file_bytes == 1024 + 10, "u16 file size %lld", (long long)h.file_bytes);
    Shard s;
    CHECK(shard_open(&s, p16, 65536) == 0, "open u16");
    int got[5];
    shard_get(&s, 0, 5, got);
    CHECK(memcmp(got, t16, sizeof(got)) == 0, "u16 tokens round-trip");
    shard_close(&s);

    // uint32 variant as soon as one token needs it
    const char* p32 = tmp_path("rt32.bin");
    int t32[4] = {5, 65536, 127999, 0};
    CHECK(shard_write(p32, t32, 4) == 0, "write u32");
    CHECK(shard_read_header(p32, &h) == 0, "header u32");
    CHECK(h.magic == SHARD_MAGIC_U32 && h.version == 7 && h.token_bytes == 4 && h.num_tokens == 4,
          "u32 header fields magic=%d version=%d", h.magic, h.version);
    CHECK(h.file_bytes == 1024 + 16, "u32 file size %lld", (long long)h.file_bytes);
    CHECK(shard_open(&s, p32, 128000) == 0, "open u32");
    shard_get(&s, 1, 3, got);
    CHECK(got[0] == 65536 && got[1] == 127999 && got[2] == 0, "u32 tokens round-trip");
    shard_close(&s);
    CHECK(access(tmp_path("rt32.bin.tmp"), F_OK) != 0, "no temp file left behind");
}

// 1 process: exact tokens, batch after batch, across the shard boundary
static void test_single_process(void) {
    const int B = 2, T = 8, BT = 16, V = 50257;
    // shard 0: 100 tokens -> (100-1)/16 = 6 batches; shard 1: 40 tokens -> 2 batches
    write_shard(tmp_path("one_000.bin"), 100, 1000, V);
    write_shard(tmp_path("one_001.bin"), 40, 5000, V);
    DataLoader dl;
    CHECK(dataloader_init(&dl, tmp_path("one_*.bin"), B, T, 0, 1, V) == 0, "init");
    CHECK(dl.num_shards == 2 && dl.batches_per_epoch == 8, "shards=%d batches=%lld", dl.num_shards,
          (long long)dl.batches_per_epoch);
    int in[16], tg[16];
    int ok = 1;
    for (int b = 0; b < 8; b++) {
        CHECK(dataloader_next(&dl, in, tg) == 0, "next %d", b);
        int base = b < 6 ? 1000 + b * BT : 5000 + (b - 6) * BT;
        for (int i = 0; i < BT; i++) {
            if (in[i] != base + i || tg[i] != base + i + 1) ok = 0;
        }
    }
    CHECK(ok, "exact input/target tokens over 2 shards");
    CHECK(dl.epoch == 1 && dl.shard_idx == 0 && dl.batch_idx == 0, "wrapped after one epoch: epoch=%lld",
          (long long)dl.epoch);
    dataloader_free(&dl);
}

// nproc processes each get their slice; together they equal 1 process with batch nproc*B
static void test_multi_process(int nproc) {
    const int B = 2, T = 4, BT = 8, V = 50257;
    char pat[64];
    snprintf(pat, sizeof(pat), "mp%d_*.bin", nproc);
    char n0[64], n1[64];
    snprintf(n0, sizeof(n0), "mp%d_000.bin", nproc);
    snprintf(n1, sizeof(n1), "mp%d_001.bin", nproc);
    write_shard(tmp_path(n0), 203, 0, V);
    write_shard(tmp_path(n1), 77, 20000, V);

    DataLoader ref;
    CHECK(dataloader_init(&ref, tmp_path(pat), nproc * B, T, 0, 1, V) == 0, "init ref nproc=%d", nproc);
    DataLoader dl[3];
    for (int r = 0; r < nproc; r++)
        CHECK(dataloader_init(&dl[r], tmp_path(pat), B, T, r, nproc, V) == 0, "init rank %d/%d", r, nproc);
    CHECK(dl[0].batches_per_epoch == ref.batches_per_epoch, "same steps per epoch");

    int steps = (int)ref.batches_per_epoch + 3;  // past the end: the wrap must agree too
    int ref_in[3 * 8], ref_tg[3 * 8], in[3][8], tg[3][8];
    int equal = 1, disjoint = 1;
    for (int s = 0; s < steps; s++) {
        CHECK(dataloader_next(&ref, ref_in, ref_tg) == 0, "ref next");
        for (int r = 0; r < nproc; r++) CHECK(dataloader_next(&dl[r], in[r], tg[r]) == 0, "rank next");
        for (int r = 0; r < nproc; r++) {
            if (memcmp(in[r], ref_in + r * BT, sizeof(in[r])) != 0) equal = 0;
            if (memcmp(tg[r], ref_tg + r * BT, sizeof(tg[r])) != 0) equal = 0;
        }
        // tokens are distinct per position, so disjoint windows = no shared input value
        for (int r = 0; r < nproc; r++)
            for (int q = r + 1; q < nproc; q++)
                for (int i = 0; i < BT; i++)
                    for (int j = 0; j < BT; j++)
                        if (in[r][i] == in[q][j]) disjoint = 0;
    }
    CHECK(equal, "nproc=%d: rank slices concatenated == 1-process global batch", nproc);
    CHECK(disjoint, "nproc=%d: rank inputs are disjoint", nproc);
    CHECK(dl[nproc - 1].epoch == 1 && ref.epoch == 1, "nproc=%d: all wrapped once", nproc);
    dataloader_free(&ref);
    for (int r = 0; r < nproc; r++) dataloader_free(&dl[r]);
}

// wrap-around with one shard and with several; reset
static void test_wrap_and_reset(void) {
    const int B = 1, T = 10, V = 1000;
    write_shard(tmp_path("wrap_000.bin"), 31, 0, V);  // (31-1)/10 = 3 batches
    DataLoader dl;
    CHECK(dataloader_init(&dl, tmp_path("wrap_*.bin"), B, T, 0, 1, V) == 0, "init wrap");
    int in[10], tg[10], first_in[10], first_tg[10];
    dataloader_next(&dl, first_in, first_tg);
    dataloader_next(&dl, in, tg);
    dataloader_next(&dl, in, tg);
    CHECK(in[0] == 20 && tg[9] == 30, "last batch of the shard uses the final token");
    CHECK(dl.epoch == 1, "epoch counted at the wrap");
    dataloader_next(&dl, in, tg);
    CHECK(memcmp(in, first_in, sizeof(in)) == 0 && memcmp(tg, first_tg, sizeof(tg)) == 0,
          "after the wrap: the first batch again");
    dataloader_next(&dl, in, tg);
    dataloader_reset(&dl);
    CHECK(dl.epoch == 0 && dl.shard_idx == 0 && dl.batch_idx == 0, "reset position");
    dataloader_next(&dl, in, tg);
    CHECK(memcmp(in, first_in, sizeof(in)) == 0, "after reset: the first batch again");
    dataloader_free(&dl);

    // 3 shards, tail of each shard skipped, wrap goes back to shard 0
    write_shard(tmp_path("wrap3_000.bin"), 25, 0, V);    // 2 batches (tokens 0..20 used)
    write_shard(tmp_path("wrap3_001.bin"), 11, 100, V);  // 1 batch
    write_shard(tmp_path("wrap3_002.bin"), 15, 200, V);  // 1 batch
    CHECK(dataloader_init(&dl, tmp_path("wrap3_*.bin"), B, T, 0, 1, V) == 0, "init wrap3");
    int expect[] = {0, 10, 100, 200, 0, 10, 100, 200, 0};
    int ok = 1;
    for (int s = 0; s < 9; s++) {
        if (dataloader_next(&dl, in, tg) != 0 || in[0] != expect[s] || tg[9] != expect[s] + 10) ok = 0;
    }
    CHECK(ok, "3 shards: batch starts 0,10,100,200 repeating");
    CHECK(dl.epoch == 2, "two wraps, epoch=%lld", (long long)dl.epoch);
    dataloader_reset(&dl);
    CHECK(dataloader_next(&dl, in, tg) == 0 && in[0] == 0, "reset from another shard maps shard 0 again");
    dataloader_free(&dl);
}

static void test_uint32_loader(void) {
    const int B = 2, T = 3, V = 128256;  // a Llama-3 sized vocabulary
    write_shard(tmp_path("u32_000.bin"), 50, 100000, V);
    ShardHeader h;
    shard_read_header(tmp_path("u32_000.bin"), &h);
    CHECK(h.magic == SHARD_MAGIC_U32 && h.version == SHARD_VERSION_U32, "wrote the uint32 variant");
    DataLoader dl;
    CHECK(dataloader_init(&dl, tmp_path("u32_*.bin"), B, T, 1, 2, V) == 0, "init u32 rank 1 of 2");
    int in[6], tg[6];
    CHECK(dataloader_next(&dl, in, tg) == 0, "next u32");
    int ok = 1;
    for (int i = 0; i < 6; i++) ok &= in[i] == 100006 + i && tg[i] == 100007 + i;
    CHECK(ok, "u32 tokens, rank 1 window starts at B*T");
    dataloader_free(&dl);
}

// the call fails with -1 and its one-line message names `name` (and contains `what`)
#define CHECK_ERROR(call, name, what)                                                         \
    do {                                                                                      \
        capture_begin();                                                                      \
        int rc_ = (call);                                                                     \
        const char* msg_ = capture_end();                                                     \
        CHECK(rc_ == -1, "%s: expected -1, got %d", #call, rc_);                              \
        CHECK(strstr(msg_, name) != NULL, "%s: message does not name '%s': %s", #call, name, msg_); \
        CHECK(strstr(msg_, what) != NULL, "%s: message lacks '%s': %s", #call, what, msg_);  \
        printf("  error ok: %s", msg_);                                                       \
    } while (0)

static void test_errors(void) {
    DataLoader dl;
    Shard s;
    ShardHeader h;
    int32_t hdr[SHARD_HEADER_INTS];
    uint16_t data[64];
    for (int i = 0; i < 64; i++) data[i] = (uint16_t)i;

    // missing file
    const char* missing = tmp_path("does_not_exist.bin");
    CHECK_ERROR(shard_read_header(missing, &h), missing, "No such file");
    CHECK_ERROR(shard_open(&s, missing, 256), missing, "No such file");
    // empty glob names the pattern
    const char* pat = tmp_path("nothing_here_*.bin");
    CHECK_ERROR(dataloader_init(&dl, pat, 1, 4, 0, 1, 256), pat, "no files match");

    // wrong magic
    memset(hdr, 0, sizeof(hdr));
    hdr[0] = 12345; hdr[1] = 1; hdr[2] = 64;
    const char* bad_magic = tmp_path("badmagic_000.bin");
    write_raw(bad_magic, hdr, data, sizeof(data));
    CHECK_ERROR(dataloader_init(&dl, tmp_path("badmagic_*.bin"), 1, 4, 0, 1, 256), bad_magic, "magic");
    // wrong version (for each magic)
    hdr[0] = SHARD_MAGIC_U16; hdr[1] = 2;
    const char* bad_ver = tmp_path("badver.bin");
    write_raw(bad_ver, hdr, data, sizeof(data));
    CHECK_ERROR(shard_open(&s, bad_ver, 256), bad_ver, "version");
    hdr[0] = SHARD_MAGIC_U32; hdr[1] = 1; hdr[2] = 32;
    write_raw(bad_ver, hdr, data, sizeof(data));
    CHECK_ERROR(shard_read_header(bad_ver, &h), bad_ver, "version");
    // token count larger than the file
    hdr[0] = SHARD_MAGIC_U16; hdr[1] = 1; hdr[2] = 1000;
    const char* trunc = tmp_path("trunc_000.bin");
    write_raw(trunc, hdr, data, sizeof(data));
    CHECK_ERROR(dataloader_init(&dl, tmp_path("trunc_*.bin"), 1, 4, 0, 1, 256), trunc, "truncated");
    CHECK_ERROR(shard_open(&s, trunc, 256), trunc, "1000 tokens");
    // file shorter than the header
    const char* tiny = tmp_path("tiny.bin");
    FILE* f = fopen(tiny, "wb");
    fwrite(hdr, 4, 10, f);
    fclose(f);
    CHECK_ERROR(shard_read_header(tiny, &h), tiny, "too small");

    // token >= vocab_size, named with its offset: in the first shard (init) ...
    int toks[40];
    for (int i = 0; i < 40; i++) toks[i] = i;
    toks[17] = 300;
    const char* badtok = tmp_path("badtok_000.bin");
    shard_write(badtok, toks, 40);
    CHECK_ERROR(dataloader_init(&dl, tmp_path("badtok_*.bin"), 1, 4, 0, 1, 256), badtok, "offset 17");
    CHECK_ERROR(shard_open(&s, badtok, 256), badtok, ">= vocab_size 256");
    // ... and in a later shard, caught by dataloader_next when that shard loads
    toks[17] = 17;
    shard_write(tmp_path("latebad_000.bin"), toks, 40);
    toks[33] = 999;
    const char* latebad = tmp_path("latebad_001.bin");
    shard_write(latebad, toks, 40);
    CHECK(dataloader_init(&dl, tmp_path("latebad_*.bin"), 1, 4, 0, 1, 256) == 0, "init with a later bad shard");
    int in[4], tg[4];
    for (int i = 0; i < 9; i++) dataloader_next(&dl, in, tg);  // (40-1)/4 = 9 batches in shard 0
    CHECK_ERROR(dataloader_next(&dl, in, tg), latebad, "offset 33");
    dataloader_free(&dl);

    // shard shorter than one batch (B*T+1), and than one global batch with 2 processes
    write_shard(tmp_path("short_000.bin"), 8, 0, 256);
    const char* shortp = tmp_path("short_001.bin");
    write_shard(shortp, 8, 0, 256);
    CHECK(dataloader_init(&dl, tmp_path("short_000.bin"), 1, 7, 0, 1, 256) == 0, "8 tokens = B*T+1 is enough");
    dataloader_free(&dl);
    CHECK_ERROR(dataloader_init(&dl, tmp_path("short_*.bin"), 2, 4, 0, 1, 256), "short_000.bin", "fewer than one");
    CHECK_ERROR(dataloader_init(&dl, tmp_path("short_001.bin"), 1, 4, 1, 2, 256), shortp, "global batch");
    // bad arguments
    CHECK_ERROR(dataloader_init(&dl, tmp_path("short_*.bin"), 1, 4, 2, 2, 256), "rank=2", "bad arguments");
}

// Shuffled loading: each epoch visits every sample once, in an order that changes per epoch;
// N ranks together give the 1-process batch; save/restore continues exactly; bad states fail.
static void test_shuffle_and_state(void) {
    const int B = 2, T = 4;
    // 3 shards of 8 samples each (33 tokens); token values distinct across shards
    write_shard(tmp_path("sh_a.bin"), 33, 0, 60000);
    write_shard(tmp_path("sh_b.bin"), 33, 1000, 60000);
    write_shard(tmp_path("sh_c.bin"), 33, 2000, 60000);
    const char* pat = tmp_path("sh_*.bin");
    DataLoader dl;
    if (dataloader_init(&dl, pat, B, T, 0, 1, 60000) != 0) { CHECK(0, "init"); return; }
    dataloader_shuffle(&dl, 42);
    int in[8], tg[8];
    int per_epoch = (int)dl.batches_per_epoch;   // 3 shards x 8 samples / B = 12
    CHECK(per_epoch == 12, "batches per epoch %d", per_epoch);
    int first_epoch[12 * 8], second_epoch[12 * 8];
    for (int e = 0; e < 2; e++) {
        int seen[3 * 8] = {0};
        for (int k = 0; k < per_epoch; k++) {
            dataloader_next(&dl, in, tg);
            for (int j = 0; j < B; j++) {
                int v = in[j * T];   // first token of the sample identifies it: base + 4*s
                int shard = v / 1000, s = (v % 1000) / T;
                if (shard < 3 && s < 8) seen[shard * 8 + s]++;
                CHECK(tg[j * T] == v + 1 && in[j * T + T - 1] == v + T - 1, "sample is a contiguous window");
            }
            memcpy((e == 0 ? first_epoch : second_epoch) + k * 8, in, sizeof in);
        }
        int once = 1;
        for (int i = 0; i < 24; i++) if (seen[i] != 1) once = 0;
        CHECK(once, "epoch %d visits every sample exactly once", e);
    }
    CHECK(memcmp(first_epoch, second_epoch, sizeof first_epoch) != 0, "epochs 0 and 1 differ in order");
    int sequential = 1;
    for (int k = 0; k < 12 && sequential; k++) if (first_epoch[k * 8] != (k / 4) * 1000 + (k % 4) * 8) sequential = 0;
    CHECK(!sequential, "shuffled order is not the file order");

    // the same seed gives the same stream; ranks of 2 processes concatenate to the 1-process batch
    DataLoader ref, r0, r1;
    dataloader_init(&ref, pat, 2 * B, T, 0, 1, 60000);
    dataloader_init(&r0, pat, B, T, 0, 2, 60000);
    dataloader_init(&r1, pat, B, T, 1, 2, 60000);
    dataloader_shuffle(&ref, 7); dataloader_shuffle(&r0, 7); dataloader_shuffle(&r1, 7);
    int ok = 1;
    for (int k = 0; k < 15; k++) {
        int a[16], at[16], x[8], xt[8], y[8], yt[8];
        dataloader_next(&ref, a, at); dataloader_next(&r0, x, xt); dataloader_next(&r1, y, yt);
        if (memcmp(a, x, sizeof x) || memcmp(a + 8, y, sizeof y) || memcmp(at, xt, sizeof xt) || memcmp(at + 8, yt, sizeof yt)) ok = 0;
    }
    CHECK(ok, "2 shuffled ranks == 1 shuffled process with 2B, across an epoch boundary");
    dataloader_free(&ref); dataloader_free(&r0); dataloader_free(&r1);

    // save / restore: the next batches after a restore are the ones that would have come
    dataloader_reset(&dl);
    for (int k = 0; k < 17; k++) dataloader_next(&dl, in, tg);   // into epoch 1
    DataLoaderState st;
    dataloader_get_state(&dl, &st);
    int want[10][8];
    for (int k = 0; k < 10; k++) dataloader_next(&dl, want[k], tg);
    DataLoader d2;
    dataloader_init(&d2, pat, B, T, 0, 1, 60000);
    dataloader_shuffle(&d2, 42);
    CHECK(dataloader_set_state(&d2, &st) == 0, "restore");
    ok = 1;
    for (int k = 0; k < 10; k++) { dataloader_next(&d2, in, tg); if (memcmp(in, want[k], sizeof in)) ok = 0; }
    CHECK(ok, "restored loader continues with the same 10 batches (epoch %lld shard %lld batch %lld)",
          (long long)st.epoch, (long long)st.shard_idx, (long long)st.batch_idx);
    DataLoaderState bad = st;
    bad.shard_idx = 3;
    capture_begin();
    int rc = dataloader_set_state(&d2, &bad);
    const char* msg = capture_end();
    CHECK(rc == -1 && strstr(msg, "does not fit"), "bad shard position rejected: %s", msg);
    bad = st; bad.batch_idx = 99;
    capture_begin();
    rc = dataloader_set_state(&d2, &bad);
    msg = capture_end();
    CHECK(rc == -1 && strstr(msg, "sh_"), "bad batch position rejected naming the shard: %s", msg);
    dataloader_free(&d2);
    dataloader_free(&dl);
}

// bos: each sample's window of T stream tokens behind the BOS token; the same windows and
// order as without it (contiguous and shuffled), and the inputs/targets still shift by one.
static void test_bos(void) {
    const int B = 3, T = 5, BT = 15, V = 50257, BOS = 50256;
    write_shard(tmp_path("bos_000.bin"), 200, 100, V);
    for (int shuffled = 0; shuffled < 2; shuffled++) {
        DataLoader a, b;
        CHECK(dataloader_init(&a, tmp_path("bos_*.bin"), B, T, 0, 1, V) == 0, "init");
        CHECK(dataloader_init(&b, tmp_path("bos_*.bin"), B, T, 0, 1, V) == 0, "init");
        if (shuffled) { dataloader_shuffle(&a, 7); dataloader_shuffle(&b, 7); }
        dataloader_set_bos(&b, BOS);
        int ain[15], atg[15], bin[15], btg[15];
        int ok = 1;
        for (int step = 0; step < 20; step++) {
            CHECK(dataloader_next(&a, ain, atg) == 0 && dataloader_next(&b, bin, btg) == 0, "next");
            for (int j = 0; j < B; j++) {
                const int* w = ain + j * T;   // the sample's window w[0..T) without bos
                if (bin[j * T] != BOS) ok = 0;
                for (int i = 0; i < T; i++) if (btg[j * T + i] != w[i]) ok = 0;
                for (int i = 1; i < T; i++) if (bin[j * T + i] != w[i - 1]) ok = 0;
            }
        }
        (void)BT;
        CHECK(ok, "bos (%s): inputs = [BOS, w0..w(T-2)], targets = w0..w(T-1) for 20 batches", shuffled ? "shuffled" : "contiguous");
        dataloader_set_bos(&b, -1);
        dataloader_reset(&a); dataloader_reset(&b);
        CHECK(dataloader_next(&a, ain, atg) == 0 && dataloader_next(&b, bin, btg) == 0, "next");
        CHECK(memcmp(ain, bin, sizeof ain) == 0 && memcmp(atg, btg, sizeof atg) == 0, "bos -1 turns it off");
        dataloader_free(&a);
        dataloader_free(&b);
    }
}

// Shuffled shards of different sizes: the end of a shard is its own batch count, not that of
// the shard at the same position in file order (a checkpoint restores mid-shard positions).
static void test_shuffle_unequal_shards(void) {
    const int B = 1, T = 4;
    // 2, 6 and 3 samples (9, 25, 13 tokens); token values distinct across shards
    write_shard(tmp_path("uq_a.bin"), 9, 0, 60000);
    write_shard(tmp_path("uq_b.bin"), 25, 1000, 60000);
    write_shard(tmp_path("uq_c.bin"), 13, 2000, 60000);
    DataLoader dl;
    if (dataloader_init(&dl, tmp_path("uq_*.bin"), B, T, 0, 1, 60000) != 0) { CHECK(0, "init"); return; }
    int counts[3] = {2, 6, 3}, ok = 1, in[4], tg[4];
    for (int seed = 1; seed <= 20; seed++) {
        dataloader_shuffle(&dl, (uint64_t)seed);
        for (int e = 0; e < 2; e++) {
            int seen[3][8] = {{0}};
            for (int k = 0; k < 11; k++) {
                dataloader_next(&dl, in, tg);
                int shard = in[0] / 1000, smp = (in[0] % 1000) / T;
                if (shard < 3 && smp < counts[shard] && tg[0] == in[0] + 1) seen[shard][smp]++;
            }
            for (int sh = 0; sh < 3; sh++) for (int i = 0; i < counts[sh]; i++) if (seen[sh][i] != 1) ok = 0;
            if (dl.epoch != e + 1 || dl.shard_idx != 0 || dl.batch_idx != 0) ok = 0;
        }
    }
    CHECK(ok, "shards of 2, 6 and 3 samples, 20 seeds x 2 epochs: every sample once per epoch, epoch ends after 11 batches");
    dataloader_free(&dl);
}

// Whole optimizer steps per shard (dataloader_set_accum): with tokens_per_step fixed, every
// process count reads the same samples in each optimizer step, across shard ends and epochs, so
// a run can resume on another process count. Shards of 203, 150 and 97 tokens (50, 37 and 24
// samples of T = 4), B = 1, tokens_per_step = 48 (12 samples): 4, 3 and 2 steps (the tails
// skipped are 10, 5 and 0 samples, the same for every N); N = 1, 2, 3, 4, 6, 12 processes with
// 12/N micro-steps. Contiguous: step k of shard i is its samples 12k .. 12k+11 (arithmetic
// here); shuffled: each step's set of samples equals 1 process's. Two passes (18 steps).
static int cmp_int(const void* a, const void* b) { return *(const int*)a - *(const int*)b; }
static void test_steps_any_nproc(void) {
    const int B = 1, T = 4, V = 60000, SPS = 12;   // samples per optimizer step
    const int sizes[3] = {203, 150, 97}, steps_in[3] = {4, 3, 2};
    write_shard(tmp_path("st_a.bin"), sizes[0], 0, V);
    write_shard(tmp_path("st_b.bin"), sizes[1], 1000, V);
    write_shard(tmp_path("st_c.bin"), sizes[2], 2000, V);
    const int nps[6] = {1, 2, 3, 4, 6, 12}, nsteps = 18;
    for (int shuffled = 0; shuffled < 2; shuffled++) {
        static int got[6][18][12];   // [process count][step] the steps' sample first tokens, sorted
        int ok_init = 1;
        for (int c = 0; c < 6; c++) {
            const int N = nps[c], accum = SPS / N;
            DataLoader dl[12];
            for (int r = 0; r < N; r++) {
                if (dataloader_init(&dl[r], tmp_path("st_*.bin"), B, T, r, N, V) != 0 || dataloader_set_accum(&dl[r], accum) != 0)
                    ok_init = 0;
                if (shuffled) dataloader_shuffle(&dl[r], 5);
            }
            if (!ok_init) { CHECK(0, "init N=%d", N); return; }
            CHECK(dl[0].batches_per_epoch == 9 * accum, "N=%d: %lld global batches a pass, want 9 steps x %d", N,
                  (long long)dl[0].batches_per_epoch, accum);
            for (int k = 0; k < nsteps; k++) {
                int n = 0, in[4], tg[4];
                for (int micro = 0; micro < accum; micro++)
                    for (int r = 0; r < N; r++) {
                        dataloader_next(&dl[r], in, tg);
                        got[c][k][n++] = in[0];
                    }
                qsort(got[c][k], SPS, sizeof(int), cmp_int);
            }
            for (int r = 0; r < N; r++) dataloader_free(&dl[r]);
        }
        int same = 1, expected = 1;
        for (int c = 1; c < 6; c++)
            for (int k = 0; k < nsteps; k++)
                if (memcmp(got[c][k], got[0][k], sizeof got[0][k]) != 0) same = 0;
        for (int k = 0; k < nsteps && !shuffled; k++) {
            int q = k % 9, shard = 0;   // step q of the pass: shard and step within it
            while (q >= steps_in[shard]) q -= steps_in[shard++];
            for (int j = 0; j < SPS; j++) if (got[0][k][j] != shard * 1000 + (q * SPS + j) * T) expected = 0;
        }
        CHECK(same, "%s: every optimizer step reads the same samples under 1, 2, 3, 4, 6 and 12 processes (2 passes, 3 shard ends each)",
              shuffled ? "shuffled" : "contiguous");
        if (!shuffled) CHECK(expected, "contiguous: step k of shard i reads its samples 12k..12k+11 (4, 3, 2 steps a shard)");
    }
    // a shard shorter than one step is refused, naming it
    DataLoader dl;
    CHECK(dataloader_init(&dl, tmp_path("st_*.bin"), B, T, 0, 1, V) == 0, "init");
    capture_begin();
    int rc = dataloader_set_accum(&dl, 25);   // 100 tokens a step: st_c.bin (97) holds none
    const char* msg = capture_end();
    CHECK(rc == -1 && strstr(msg, "st_c.bin") && strstr(msg, "tokens_per_step"), "a shard shorter than a step is refused: %s", msg);
    dataloader_free(&dl);
}

int main(void) {
    const char* tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof(g_dir), "%s/test_dataloader_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 2;
    }
    test_shard_roundtrip();
    test_single_process();
    test_multi_process(2);
    test_multi_process(3);
    test_wrap_and_reset();
    test_uint32_loader();
    test_errors();
    test_shuffle_and_state();
    test_bos();
    test_shuffle_unequal_shards();
    test_steps_any_nproc();

    // clean up the temp dir
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
    if (g_fail == 0 && system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", g_dir);
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail == 0 ? 0 : 1;
}
