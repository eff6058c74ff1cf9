// tests/test_tb.c: TensorBoard event files (train/tb.h) and the run log's mirror (train/jsonl.h).
//   - CRC-32C against the check value of the CRC catalogue and RFC 3720's iSCSI vectors; the mask
//   - whole TFRecords byte for byte against what tensorboard's own writer (its protobuf classes
//     and RecordWriter, tensorboard 2.21.0) made of the same events: the file_version event, the
//     restart marker (SessionLog START), scalars, a tag of 200 bytes (a 2-byte length varint), a
//     step of 5e9 (a 5-byte varint), wall_time -0.0
//   - the mirror: each number of a record with its key path and the value the line says (its
//     printf format applied), the record's name, no strings, booleans or nulls
//   - tags: the per-layer rule, the name, the layer index left out
//   - tb_open: a new file each time, in name order, never an old one reopened; a path that
//     cannot be created is an error
#include "../train/jsonl.h"
#include "../train/tb.h"
#include "test_util.h"

#include <dirent.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int unhex(const char* h, unsigned char* out) {
    int n = 0;
    for (; h[0] && h[1]; h += 2) {
        unsigned v;
        sscanf(h, "%2x", &v);
        out[n++] = (unsigned char)v;
    }
    return n;
}

static void check_bytes(const char* what, const TbBuf* got, const char* want_hex) {
    static unsigned char want[1024];
    const int n = unhex(want_hex, want);
    int first = -1;
    for (int i = 0; i < n && i < (int)got->len; i++) if (got->p[i] != want[i]) { first = i; break; }
    TU_CHECK((int)got->len == n && first < 0, "%s: %zu bytes, want %d; first difference at byte %d", what, got->len, n, first);
}

// what tensorboard 2.21.0 wrote (tensorboard.compat.proto event_pb2 / summary_pb2, serialized and
// framed by tensorboard.summary.writer.record_writer.RecordWriter)
static const char TB_FILE_VERSION[] = "1800000000000000a37f4b2209000000000000f83f1a0d627261696e2e4576656e743a322a28646c";
static const char TB_START_7[] = "0f000000000000006d532b0909000000000000f83f10073a020801774771c7";
static const char TB_SCALARS[] =
    "3d000000000000006049f1ec0900001040fc54d94110ac022a2f0a100a09737465702f6c6f737315000020400a1b0a1470726f62652f665f"
    "6174746e2f6c617965725f3315cdcccc3ded750854";
// Event(wall_time=-0.0, step=5000000000, summary: tag "t" x 200, simple_value -1e-30): its head
// and tail (the tag is 200 't' bytes between)
static const char TB_LONG_HEAD[] = "e500000000000000e878a28c0900000000000000801080e497d0122ad3010ad0010ac801";
static const char TB_LONG_TAIL[] = "156042a28d82628e28";

static void frame_of(TbBuf* out, const TbBuf* ev) {
    out->len = 0;
    tb_frame(out, ev->p, ev->len);
}

static void test_crc(void) {
    TU_CHECK(tb_crc32c("123456789", 9) == 0xE3069283u, "crc32c(\"123456789\") = %08x, want e3069283", tb_crc32c("123456789", 9));
    unsigned char z[32], ff[32], up[32];
    for (int i = 0; i < 32; i++) { z[i] = 0; ff[i] = 0xFF; up[i] = (unsigned char)i; }
    TU_CHECK(tb_crc32c(z, 32) == 0x8A9136AAu, "crc32c(32 zeros) = %08x, want 8a9136aa", tb_crc32c(z, 32));
    TU_CHECK(tb_crc32c(ff, 32) == 0x62A8AB43u, "crc32c(32 x ff) = %08x, want 62a8ab43", tb_crc32c(ff, 32));
    TU_CHECK(tb_crc32c(up, 32) == 0x46DD794Eu, "crc32c(0..31) = %08x, want 46dd794e", tb_crc32c(up, 32));
    TU_CHECK(tb_crc32c("", 0) == 0, "crc32c of nothing = %08x", tb_crc32c("", 0));
    // ((0xe3069283 >> 15) | (0xe3069283 << 17)) + 0xa282ead8 mod 2^32 (Python int arithmetic)
    TU_CHECK(tb_mask_crc(0xE3069283u) == 0xC78AB0E5u, "mask(e3069283) = %08x, want c78ab0e5", tb_mask_crc(0xE3069283u));
    TU_CHECK(tb_mask_crc(0) == 0xa282ead8u, "mask(0) = %08x", tb_mask_crc(0));
}

static void test_events(void) {
    TbBuf ev = {0}, rec = {0};
    tb_event_file_version(&ev, 1.5);
    frame_of(&rec, &ev);
    check_bytes("file_version event", &rec, TB_FILE_VERSION);
    ev.len = 0;
    tb_event_start(&ev, 1.5, 7);
    frame_of(&rec, &ev);
    check_bytes("SessionLog START at step 7", &rec, TB_START_7);
    ev.len = 0;
    const char* tags[2] = {"step/loss", "probe/f_attn/layer_3"};
    const float v[2] = {2.5f, 0.1f};
    tb_event_scalars(&ev, 1700000000.25, 300, 2, tags, v);
    frame_of(&rec, &ev);
    check_bytes("two scalars at step 300", &rec, TB_SCALARS);
    ev.len = 0;
    char longtag[201];
    memset(longtag, 't', 200);
    longtag[200] = '\0';
    const char* lt[1] = {longtag};
    const float lv[1] = {-1e-30f};
    tb_event_scalars(&ev, -0.0, 5000000000LL, 1, lt, lv);
    frame_of(&rec, &ev);
    TbBuf head = {rec.p, 36, 0}, tail = {rec.p + 236, rec.len - 236, 0};
    TU_CHECK(rec.len == 245, "long tag: %zu bytes, want 245", rec.len);
    if (rec.len == 245) {
        check_bytes("long tag, step 5e9: head", &head, TB_LONG_HEAD);
        check_bytes("long tag, step 5e9: tail", &tail, TB_LONG_TAIL);
        int ts = 1;
        for (int i = 36; i < 236; i++) ts &= rec.p[i] == 't';
        TU_CHECK(ts, "long tag: the tag's bytes");
    }
    free(ev.p);
    free(rec.p);
}

// the mirror's view of records, kept for the checks
static struct {
    int calls, n, step;
    char type[32], name[64];
    int has_name;
    char path[64][64];
    double v[64];
} got;

static void capture(void* ctx, const JsonlRecord* r) {
    (void)ctx;
    got.calls++;
    got.step = r->step;
    snprintf(got.type, sizeof got.type, "%s", r->type);
    got.has_name = r->name != NULL;
    snprintf(got.name, sizeof got.name, "%s", r->name ? r->name : "");
    got.n = r->n < 64 ? r->n : 64;
    for (int i = 0; i < got.n; i++) {
        snprintf(got.path[i], sizeof got.path[i], "%s", r->num[i].path);
        got.v[i] = r->num[i].v;
    }
}

static int find(const char* path, double* v) {
    for (int i = 0; i < got.n; i++) if (strcmp(got.path[i], path) == 0) { *v = got.v[i]; return 1; }
    return 0;
}

static void test_mirror(void) {
    FILE* f = tmpfile();
    FILE* other = tmpfile();
    jsonl_mirror(f, capture, NULL);
    Jsonl j;
    jsonl_begin(&j, f, "probe", 40);
    jsonl_str(&j, "note", "text");
    jsonl_str(&j, "kind", "loss");
    jsonl_str(&j, "name", "second name: not the record's");
    jsonl_fmt(&j, "ms", "%.3f", 1.23456);
    jsonl_num(&j, "loss", 2.0 / 3.0);
    jsonl_bool(&j, "skipped", 1);
    jsonl_null(&j, "none");
    jsonl_num(&j, "nan", NAN);
    jsonl_arr(&j, "layers");
    for (int l = 0; l < 2; l++) {
        jsonl_obj(&j, NULL);
        jsonl_int(&j, "layer", l);
        jsonl_fmt(&j, "f_attn", "%.6g", 0.1234567 + l);
        jsonl_str(&j, "kind", "attention");
        jsonl_arr(&j, "hist");
        jsonl_int(&j, NULL, 7);
        jsonl_int(&j, NULL, 8);
        jsonl_close(&j);
        jsonl_close(&j);
    }
    jsonl_close(&j);
    jsonl_end(&j);
    TU_CHECK(got.calls == 1 && got.step == 40 && strcmp(got.type, "probe") == 0, "one record, probe at step 40 (%d calls)", got.calls);
    TU_CHECK(got.has_name && strcmp(got.name, "loss") == 0, "the record's name is its first top-level kind/name/task: '%s'", got.name);
    TU_CHECK(got.n == 10, "10 numbers (ms, loss, 2 x (layer, f_attn, hist x 2)): %d", got.n);
    double v = 0;
    TU_CHECK(find("ms", &v) && v == 1.235, "ms as the line says (1.235): %.17g", v);
    TU_CHECK(find("loss", &v) && v == 2.0 / 3.0, "loss: the double (%%.17g round-trips): %.17g", v);
    TU_CHECK(find("layers/1/f_attn", &v) && v == 1.12346, "layers/1/f_attn as %%.6g says (1.12346): %.17g", v);
    TU_CHECK(find("layers/0/layer", &v) && v == 0, "layers/0/layer: %g", v);
    TU_CHECK(find("layers/1/hist/1", &v) && v == 8, "layers/1/hist/1 = 8: %g", v);
    TU_CHECK(!find("skipped", &v) && !find("none", &v) && !find("nan", &v) && !find("step", &v),
             "no booleans, nulls, non-finite numbers or the step among the numbers");
    // another stream: not mirrored; a record without numbers: mirrored with n = 0
    jsonl_begin(&j, other, "eval", 1);
    jsonl_num(&j, "val_loss", 1.0);
    jsonl_end(&j);
    TU_CHECK(got.calls == 1, "a record on another stream is not mirrored");
    jsonl_begin(&j, f, "resume", 3);
    jsonl_str(&j, "path", "x");
    jsonl_end(&j);
    TU_CHECK(got.calls == 2 && got.n == 0 && !got.has_name, "a record of no numbers: n = 0, no name");
    jsonl_mirror(f, NULL, NULL);
    jsonl_begin(&j, f, "eval", 1);
    jsonl_num(&j, "val_loss", 1.0);
    jsonl_end(&j);
    TU_CHECK(got.calls == 2, "jsonl_mirror(f, NULL): no more records");
    fclose(f);
    fclose(other);
}

static void test_tags(void) {
    JsonlRecord probe = {"probe", 3, NULL, 0, NULL}, task = {"task", 3, "hellaswag", 0, NULL};
    char t[128];
    TU_CHECK(tb_tag(t, sizeof t, &probe, "layers/3/f_attn") && strcmp(t, "probe/f_attn/layer_3") == 0, "%s", t);
    TU_CHECK(tb_tag(t, sizeof t, &probe, "layers/12/moe/max_load") && strcmp(t, "probe/moe/max_load/layer_12") == 0, "%s", t);
    TU_CHECK(tb_tag(t, sizeof t, &probe, "layers/0/gate_hist/9") && strcmp(t, "probe/gate_hist/9/layer_0") == 0, "%s", t);
    TU_CHECK(!tb_tag(t, sizeof t, &probe, "layers/0/layer"), "the layer index is not mirrored");
    TU_CHECK(tb_tag(t, sizeof t, &probe, "f_attn_mean") && strcmp(t, "probe/f_attn_mean") == 0, "%s", t);
    TU_CHECK(tb_tag(t, sizeof t, &task, "acc") && strcmp(t, "task/hellaswag/acc") == 0, "%s", t);
    TU_CHECK(tb_tag(t, sizeof t, &probe, "layersx/1/a") && strcmp(t, "probe/layersx/1/a") == 0, "%s", t);
}

static int count_files(const char* dir, char names[][256], int max) {
    DIR* d = opendir(dir);
    int n = 0;
    if (!d) return 0;
    struct dirent* e;
    while ((e = readdir(d)) != NULL)
        if (strncmp(e->d_name, "events.out.tfevents.", 20) == 0 && n < max) snprintf(names[n++], 256, "%s", e->d_name);
    closedir(d);
    return n;
}

static void test_open(void) {
    char dir[] = "/tmp/test_tb_XXXXXX";
    TU_CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    TbWriter w;
    char first[1200], second[1200];
    TU_CHECK(tb_open(&w, dir, 0) == 0, "tb_open");
    snprintf(first, sizeof first, "%s", w.path);
    tb_close(&w);
    TU_CHECK(tb_open(&w, dir, 5) == 0, "tb_open again (a resumed run)");
    snprintf(second, sizeof second, "%s", w.path);
    JsonlRecord r = {"step", 6, NULL, 1, &(JsonlNum){"loss", 1.5}};
    tb_mirror_record(&w, &r);
    JsonlRecord run = {"run", 5, NULL, 1, &(JsonlNum){"processes", 1}};
    tb_mirror_record(&w, &run);
    tb_close(&w);
    TU_CHECK(strcmp(first, second) < 0, "a later file sorts after: %s, %s", first, second);
    char tbdir[1100], names[4][256];
    snprintf(tbdir, sizeof tbdir, "%s/tb", dir);
    TU_CHECK(count_files(tbdir, names, 4) == 2, "two event files");
    // the second file: file_version, START at 5, the step record's scalar; not the run record
    struct stat st;
    TbBuf ev = {0}, rec = {0}, all = {0};
    const char* lt[1] = {"step/loss"};
    const float lv[1] = {1.5f};
    tb_event_file_version(&ev, 1.0); frame_of(&rec, &ev); size_t n1 = rec.len; ev.len = 0;
    tb_event_start(&ev, 1.0, 5); frame_of(&rec, &ev); size_t n2 = rec.len; ev.len = 0;
    tb_event_scalars(&ev, 1.0, 6, 1, lt, lv); frame_of(&rec, &ev); size_t n3 = rec.len;
    TU_CHECK(stat(second, &st) == 0 && (size_t)st.st_size == n1 + n2 + n3, "the second file: %lld bytes, want %zu",
             (long long)st.st_size, n1 + n2 + n3);
    free(ev.p); free(rec.p); free(all.p);
    // a run directory where tb/ cannot be made: an error
    char bad[1100];
    snprintf(bad, sizeof bad, "%s/file", dir);
    FILE* f = fopen(bad, "w");
    fclose(f);
    char bad_run[1200];
    snprintf(bad_run, sizeof bad_run, "%s/file", dir);
    TU_CHECK(tb_open(&w, bad_run, 0) != 0, "tb_open under a regular file fails");
    char cmd[1300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    TU_CHECK(system(cmd) == 0, "cleanup");
}

int main(void) {
    test_crc();
    test_events();
    test_mirror();
    test_tags();
    test_open();
    return tu_finish();
}
