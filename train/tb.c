// train/tb.c: TensorBoard event files (train/tb.h).
#include "tb.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

// ---- CRC-32C ---------------------------------------------------------------------------------

// The byte-at-a-time table of the reflected Castagnoli polynomial: table[b] = the CRC register
// after shifting b through 8 steps.
static uint32_t crc_table[256];

static void crc_init(void) {
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t c = b;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[b] = c;
    }
}

uint32_t tb_crc32c(const void* p, size_t n) {
    if (crc_table[1] == 0) crc_init();   // table[1] is never 0 once filled
    const unsigned char* s = p;
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) c = crc_table[(c ^ s[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

// TFRecord stores the CRC rotated and offset: a CRC of data that itself holds CRCs is then
// unlikely to be as weak as the CRC of a CRC.
uint32_t tb_mask_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

// ---- protocol-buffer encoding ----------------------------------------------------------------

static void buf_reserve(TbBuf* b, size_t more) {
    if (b->len + more <= b->cap) return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + more) cap *= 2;
    unsigned char* p = realloc(b->p, cap);
    if (!p) { fprintf(stderr, "error: out of memory (TensorBoard event)\n"); exit(1); }
    b->p = p;
    b->cap = cap;
}

static void put_bytes(TbBuf* b, const void* s, size_t n) {
    buf_reserve(b, n);
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void put_le(TbBuf* b, uint64_t v, int bytes) {
    buf_reserve(b, (size_t)bytes);
    for (int i = 0; i < bytes; i++) b->p[b->len++] = (unsigned char)(v >> (8 * i));
}

static void put_varint(TbBuf* b, uint64_t v) {
    buf_reserve(b, 10);
    while (v >= 0x80) { b->p[b->len++] = (unsigned char)(v | 0x80); v >>= 7; }
    b->p[b->len++] = (unsigned char)v;
}

static size_t varint_len(uint64_t v) {
    size_t n = 1;
    while (v >= 0x80) { v >>= 7; n++; }
    return n;
}

// a field's key: (field number << 3) | wire type
enum { WT_VARINT = 0, WT_FIXED64 = 1, WT_LEN = 2, WT_FIXED32 = 5 };
static void put_key(TbBuf* b, int field, int wire) { put_varint(b, (uint64_t)(field << 3 | wire)); }

// Event fields (tensorflow/core/util/event.proto): wall_time 1 (double), step 2 (int64),
// file_version 3 (string), summary 5 (Summary), session_log 7 (SessionLog; 6 is the deprecated
// log_message). Proto3 leaves out a field at its default (0): so does this, so the bytes equal
// the protobuf library's (tests/test_tb.c).
static void put_event_head(TbBuf* b, double wall_time, long long step) {
    uint64_t bits;
    memcpy(&bits, &wall_time, 8);
    if (bits != 0) {
        put_key(b, 1, WT_FIXED64);
        put_le(b, bits, 8);
    }
    if (step != 0) {
        put_key(b, 2, WT_VARINT);
        put_varint(b, (uint64_t)step);   // an int64: a negative step would take 10 bytes (never written)
    }
}

void tb_event_file_version(TbBuf* b, double wall_time) {
    static const char v[] = "brain.Event:2";
    put_event_head(b, wall_time, 0);
    put_key(b, 3, WT_LEN);
    put_varint(b, sizeof v - 1);
    put_bytes(b, v, sizeof v - 1);
}

// SessionLog (event.proto): status 1 (enum: START = 1), checkpoint_path 2, msg 3.
void tb_event_start(TbBuf* b, double wall_time, long long step) {
    put_event_head(b, wall_time, step);
    put_key(b, 7, WT_LEN);
    put_varint(b, 2);      // the SessionLog: its status field, 2 bytes
    put_key(b, 1, WT_VARINT);
    put_varint(b, 1);      // START
}

// Summary (tensorflow/core/framework/summary.proto): value 1 (repeated Value); Value: tag 1
// (string), simple_value 2 (float). Lengths are known before the bytes: a Value is
// key + len + tag, key + 4 bytes.
static size_t value_len(const char* tag) {
    const size_t t = strlen(tag);
    return 1 + varint_len(t) + t + 1 + 4;
}

void tb_event_scalars(TbBuf* b, double wall_time, long long step, int n, const char* const* tags, const float* v) {
    size_t summary = 0;
    for (int i = 0; i < n; i++) {
        const size_t vl = value_len(tags[i]);
        summary += 1 + varint_len(vl) + vl;
    }
    put_event_head(b, wall_time, step);
    put_key(b, 5, WT_LEN);
    put_varint(b, summary);
    for (int i = 0; i < n; i++) {
        const size_t t = strlen(tags[i]);
        put_key(b, 1, WT_LEN);
        put_varint(b, value_len(tags[i]));
        put_key(b, 1, WT_LEN);
        put_varint(b, t);
        put_bytes(b, tags[i], t);
        uint32_t bits;
        memcpy(&bits, &v[i], 4);
        put_key(b, 2, WT_FIXED32);
        put_le(b, bits, 4);
    }
}

void tb_frame(TbBuf* out, const unsigned char* data, size_t n) {
    unsigned char len[8];
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)((uint64_t)n >> (8 * i));
    put_bytes(out, len, 8);
    put_le(out, tb_mask_crc(tb_crc32c(len, 8)), 4);
    put_bytes(out, data, n);
    put_le(out, tb_mask_crc(tb_crc32c(data, n)), 4);
}

// ---- tags ------------------------------------------------------------------------------------

int tb_tag(char* out, size_t cap, const JsonlRecord* rec, const char* path) {
    char head[320];
    snprintf(head, sizeof head, "%s%s%s", rec->type, rec->name ? "/" : "", rec->name ? rec->name : "");
    // a per-layer value: layers/<i>/<rest> -> <rest>/layer_<i>
    if (strncmp(path, "layers/", 7) == 0) {
        char* end;
        const long layer = strtol(path + 7, &end, 10);
        if (end != path + 7 && *end == '/') {
            if (strcmp(end + 1, "layer") == 0) return 0;   // the index itself
            snprintf(out, cap, "%s/%s/layer_%ld", head, end + 1, layer);
            return 1;
        }
    }
    snprintf(out, cap, "%s/%s", head, path);
    return 1;
}

// ---- the writer ------------------------------------------------------------------------------

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// Frames w->ev into the file and flushes it (live viewing). A failed write warns once and ends
// the file: the run goes on (its log.jsonl has every record).
static void write_event(TbWriter* w) {
    w->rec.len = 0;
    tb_frame(&w->rec, w->ev.p, w->ev.len);
    w->ev.len = 0;
    if (w->failed || !w->f) return;
    if (fwrite(w->rec.p, 1, w->rec.len, w->f) != w->rec.len || fflush(w->f) != 0) {
        fprintf(stderr, "warning: cannot write %s: %s: no more TensorBoard events this run (log.jsonl has them)\n", w->path,
                strerror(errno));
        w->failed = 1;
    }
}

// The newest <time> of the event files in dir (0 if none).
static long long newest_event_time(const char* dir) {
    static const char prefix[] = "events.out.tfevents.";
    long long newest = 0;
    DIR* d = opendir(dir);
    if (!d) return 0;
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, prefix, sizeof prefix - 1) != 0) continue;
        const long long t = strtoll(e->d_name + sizeof prefix - 1, NULL, 10);
        if (t > newest) newest = t;
    }
    closedir(d);
    return newest;
}

int tb_open(TbWriter* w, const char* run_dir, int marker_step) {
    memset(w, 0, sizeof *w);
    char dir[1100];
    snprintf(dir, sizeof dir, "%s/tb", run_dir);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "error: cannot create %s ([log] tensorboard = true): %s\n", dir, strerror(errno));
        return 1;
    }
    char host[256] = "localhost";
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = '\0';
    for (char* c = host; *c; c++) if (*c == '/') *c = '_';
    long long t = (long long)time(NULL);
    const long long newest = newest_event_time(dir);
    if (t <= newest) t = newest + 1;   // after every file there, in name order
    int fd = -1;
    for (int tries = 0; tries < 100 && fd < 0; tries++, t++) {
        snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%010lld.%s", dir, t, host);
        fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL, 0644);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0 || !(w->f = fdopen(fd, "wb"))) {
        fprintf(stderr, "error: cannot create the TensorBoard event file %s ([log] tensorboard = true): %s\n", w->path,
                strerror(errno));
        if (fd >= 0) close(fd);
        return 1;
    }
    const double now = wall_now();
    tb_event_file_version(&w->ev, now);
    write_event(w);
    tb_event_start(&w->ev, now, marker_step);
    write_event(w);
    if (w->failed) { tb_close(w); return 1; }
    printf("tensorboard: %s (restart marker at step %d; view with tensorboard --logdir %s)\n", w->path, marker_step, dir);
    return 0;
}

void tb_mirror_record(void* ctx, const JsonlRecord* rec) {
    TbWriter* w = ctx;
    if (w->failed || rec->n == 0 || strcmp(rec->type, "run") == 0) return;
    enum { TAG_CAP = 384 };
    if (rec->n > w->cap) {
        w->cap = rec->n;
        w->tags = realloc(w->tags, (size_t)w->cap * TAG_CAP);
        w->tag_p = realloc(w->tag_p, (size_t)w->cap * sizeof *w->tag_p);
        w->val = realloc(w->val, (size_t)w->cap * sizeof *w->val);
        if (!w->tags || !w->tag_p || !w->val) { fprintf(stderr, "error: out of memory (TensorBoard event)\n"); exit(1); }
    }
    int n = 0;
    for (int i = 0; i < rec->n; i++) {
        char* tag = w->tags + (size_t)n * TAG_CAP;
        if (!tb_tag(tag, TAG_CAP, rec, rec->num[i].path)) continue;
        w->tag_p[n] = tag;
        // simple_value is a float: the double rounded to nearest (IEEE, C's Annex F: beyond
        // float's range, an infinity)
        w->val[n++] = (float)rec->num[i].v;
    }
    if (n == 0) return;
    tb_event_scalars(&w->ev, wall_now(), rec->step, n, w->tag_p, w->val);
    write_event(w);
}

void tb_close(TbWriter* w) {
    if (w->f) fclose(w->f);
    w->f = NULL;
    free(w->ev.p); free(w->rec.p); free(w->tags); free(w->tag_p); free(w->val);
    w->ev = (TbBuf){0};
    w->rec = (TbBuf){0};
    w->tags = NULL; w->tag_p = NULL; w->val = NULL; w->cap = 0;
}
