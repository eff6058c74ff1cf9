// train/checkpoint.c: checkpoint files: write (atomic), verify, load, list, prune.
// Format: docs/formats.md ("Checkpoints"); the API and the write protocol: checkpoint.h.
// Assumes a little-endian host, as the token shards do.
#define _GNU_SOURCE   // open_memstream, nanosleep
#include "checkpoint.h"
#include "watchdog.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "kernels/ops.h"

// ----------------------------------------------------------------------------------------------
// small helpers: errors, the testing pause, directories

// One line: "error: checkpoint 'PATH': message".
static int ck_error(const char* path, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static int ck_error(const char* path, const char* fmt, ...) {
    // one write of the whole line: under mpirun several ranks report at once on one stderr,
    // and separate writes of the pieces interleave into lines no one can read (or grep)
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(msg, sizeof msg, "error: checkpoint '%s': ", path);
    if (n >= 0 && n < (int)sizeof msg) vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", msg);
    return -1;
}

// GATEDGPT_CKPT_SLOW_MS: a pause at each stage of a write, so a test can kill the writer there.
// Each stage is also progress for the watchdog (train/watchdog.h): only a stage that does not
// end counts against [train] hang_timeout_s, not a long write of many files.
static void ck_pause(void) {
    watchdog_progress();
    static int ms = -1;
    if (ms < 0) {
        const char* s = getenv("GATEDGPT_CKPT_SLOW_MS");
        ms = s ? atoi(s) : 0;
        if (ms < 0) ms = 0;
    }
    if (ms == 0) return;
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static uint32_t crc_update(uint32_t crc, const void* p, size_t n) {
    return (uint32_t)crc32_z(crc, (const Bytef*)p, n);
}

// fsync a directory, so the names in it (a rename, a new file) are on disk.
static int fsync_dir(const char* path) {
    int fd = open(path, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

// mkdir -p
static int make_dirs(const char* path) {
    char buf[CKPT_PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    for (char* p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
    struct stat st;
    if (stat(buf, &st) != 0) return -1;
    if (!S_ISDIR(st.st_mode)) { errno = ENOTDIR; return -1; }
    return 0;
}

// Removes a checkpoint directory: DONE first (so an interrupted removal leaves an incomplete
// checkpoint, never a complete-looking one with files missing), then the other files (a
// checkpoint holds no subdirectories), then the directory.
static int remove_dir(const char* path) {
    DIR* d = opendir(path);
    if (!d) return errno == ENOENT ? 0 : -1;
    struct dirent* e;
    char f[CKPT_PATH_MAX + 300];
    snprintf(f, sizeof f, "%s/DONE", path);
    unlink(f);
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(f, sizeof f, "%s/%s", path, e->d_name);
        unlink(f);
    }
    closedir(d);
    return rmdir(path);
}

static int exists(const char* path) {
    struct stat st;
    return stat(path, &st) == 0;
}

void checkpoint_path(char* out, size_t n, const char* dir, int step) {
    snprintf(out, n, "%s/step_%08d", dir, step);
}

void checkpoint_dir_of(char* out, size_t n, const Config* c) {
    if (c->ckpt.dir[0]) snprintf(out, n, "%s", c->ckpt.dir);
    else snprintf(out, n, "%s/checkpoints", c->log.run_dir);
}

static void tmp_path(char* out, size_t n, const char* dir, int step) {
    snprintf(out, n, "%s/step_%08d.tmp", dir, step);
}

// ----------------------------------------------------------------------------------------------
// binary files: a 32-byte header, then the payload
//
//   u32 magic "GGCK" | u32 version | u32 kind | u32 crc32(payload) | u64 payload bytes |
//   u32 reserved (0) | u32 crc32(header bytes 0..27)

typedef struct {
    FILE* f;
    const char* path;
    uint32_t crc;
    uint64_t bytes;
    int err;           // errno of the first failure (0 = none)
} Writer;

static int w_open(Writer* w, const char* path) {
    memset(w, 0, sizeof *w);
    w->path = path;
    w->f = fopen(path, "wb");
    if (!w->f) return ck_error(path, "cannot create: %s (check that [checkpoint] dir is writable and the disk has room)", strerror(errno));
    unsigned char zero[CKPT_HEADER_BYTES] = {0};
    if (fwrite(zero, 1, sizeof zero, w->f) != sizeof zero) w->err = errno ? errno : EIO;
    return 0;
}

static void w_put(Writer* w, const void* p, size_t n) {
    if (w->err || n == 0) return;
    if (fwrite(p, 1, n, w->f) != n) { w->err = errno ? errno : EIO; return; }
    w->crc = crc_update(w->crc, p, n);
    w->bytes += n;
}

static void w_u32(Writer* w, uint32_t x) { w_put(w, &x, 4); }
static void w_i32(Writer* w, int32_t x) { w_put(w, &x, 4); }
static void w_u64(Writer* w, uint64_t x) { w_put(w, &x, 8); }
static void w_i64(Writer* w, int64_t x) { w_put(w, &x, 8); }

static void make_header(unsigned char* h, uint32_t kind, uint32_t crc, uint64_t bytes) {
    uint32_t magic = CKPT_MAGIC, version = CKPT_VERSION, zero = 0;
    memcpy(h + 0, &magic, 4);
    memcpy(h + 4, &version, 4);
    memcpy(h + 8, &kind, 4);
    memcpy(h + 12, &crc, 4);
    memcpy(h + 16, &bytes, 8);
    memcpy(h + 24, &zero, 4);
    uint32_t hcrc = crc_update(0, h, 28);
    memcpy(h + 28, &hcrc, 4);
}

// Writes the header, flushes and fsyncs. Returns 0 or -1 (the error printed, the file removed).
static int w_close(Writer* w, uint32_t kind) {
    unsigned char h[CKPT_HEADER_BYTES];
    make_header(h, kind, w->crc, w->bytes);
    if (!w->err && fseek(w->f, 0, SEEK_SET) != 0) w->err = errno;
    if (!w->err && fwrite(h, 1, sizeof h, w->f) != sizeof h) w->err = errno ? errno : EIO;
    if (!w->err && fflush(w->f) != 0) w->err = errno;
    if (!w->err && fsync(fileno(w->f)) != 0) w->err = errno;
    if (fclose(w->f) != 0 && !w->err) w->err = errno;
    w->f = NULL;
    if (w->err) {
        ck_error(w->path, "write failed: %s (check free disk space and that [checkpoint] dir is writable)", strerror(w->err));
        unlink(w->path);
        return -1;
    }
    return 0;
}

typedef struct {
    FILE* f;
    const char* path;
    uint32_t crc, want_crc;
    uint64_t left;     // payload bytes not yet read
    uint64_t payload;  // payload bytes in all
} Reader;

// Opens a binary checkpoint file and checks its header and size.
static int r_open(Reader* r, const char* path, uint32_t kind) {
    memset(r, 0, sizeof *r);
    r->path = path;
    r->f = fopen(path, "rb");
    if (!r->f) return ck_error(path, "cannot open: %s (an incomplete or damaged checkpoint?)", strerror(errno));
    unsigned char h[CKPT_HEADER_BYTES];
    struct stat st;
    if (fstat(fileno(r->f), &st) != 0) st.st_size = 0;
    if (fread(h, 1, sizeof h, r->f) != sizeof h) {
        fclose(r->f);
        return ck_error(path, "truncated: %lld bytes, shorter than the %d-byte header", (long long)st.st_size, CKPT_HEADER_BYTES);
    }
    uint32_t magic, version, k, crc, hcrc;
    uint64_t bytes;
    memcpy(&magic, h, 4); memcpy(&version, h + 4, 4); memcpy(&k, h + 8, 4); memcpy(&crc, h + 12, 4);
    memcpy(&bytes, h + 16, 8); memcpy(&hcrc, h + 28, 4);
    const char* what = NULL;
    char msg[200];
    if (magic != CKPT_MAGIC) what = "wrong magic (not a gatedgpt checkpoint file)";
    else if (hcrc != crc_update(0, h, 28)) what = "header checksum mismatch (the file is damaged)";
    else if (version != CKPT_VERSION) {
        snprintf(msg, sizeof msg, "version %u, this build reads version %d (written by a newer gatedgpt?)", version, CKPT_VERSION);
        what = msg;
    } else if (k != kind) {
        snprintf(msg, sizeof msg, "kind %u, expected %u (%s)", k, kind, kind == CKPT_KIND_MODEL ? "model" : kind == CKPT_KIND_DATA ? "mixture position" : "rank state");
        what = msg;
    } else if ((uint64_t)st.st_size != CKPT_HEADER_BYTES + bytes) {
        snprintf(msg, sizeof msg, "%s: %lld bytes, the header says %llu", (uint64_t)st.st_size < CKPT_HEADER_BYTES + bytes ?
                 "truncated" : "wrong size", (long long)st.st_size, (unsigned long long)(CKPT_HEADER_BYTES + bytes));
        what = msg;
    }
    if (what) {
        fclose(r->f);
        return ck_error(path, "%s", what);
    }
    r->want_crc = crc;
    r->left = r->payload = bytes;
    return 0;
}

static int r_get(Reader* r, void* p, size_t n) {
    if (n > r->left) return ck_error(r->path, "payload ends early: field of %zu bytes at offset %llu (damaged file)",
                                     n, (unsigned long long)(CKPT_HEADER_BYTES + r->payload - r->left));
    if (fread(p, 1, n, r->f) != n) return ck_error(r->path, "read failed: %s", ferror(r->f) ? strerror(errno) : "unexpected end of file");
    r->crc = crc_update(r->crc, p, n);
    r->left -= n;
    return 0;
}

// Reads whatever is left (to check the checksum without keeping the data).
static int r_skip_rest(Reader* r) {
    char buf[1 << 16];
    while (r->left > 0) {
        size_t n = r->left < sizeof buf ? (size_t)r->left : sizeof buf;
        if (r_get(r, buf, n) != 0) return -1;
    }
    return 0;
}

// Checks that the payload was read exactly and its checksum; closes.
static int r_close(Reader* r) {
    int rc = 0;
    if (r->left != 0) rc = ck_error(r->path, "%llu unexpected bytes after the payload (damaged file)", (unsigned long long)r->left);
    else if (r->crc != r->want_crc)
        rc = ck_error(r->path, "checksum mismatch: crc32 %08x, the header says %08x (the file is damaged)", r->crc, r->want_crc);
    fclose(r->f);
    r->f = NULL;
    return rc;
}

// ----------------------------------------------------------------------------------------------
// text files (config.ini, DONE): a first line "# gatedgpt-checkpoint KIND v1 bytes=N crc32=X",
// then N bytes whose crc32 is X. '#' starts a comment in INI, so config.ini loads as it is.

static int write_text(const char* path, const char* kind, const char* body, size_t len) {
    FILE* f = fopen(path, "wb");
    if (!f) return ck_error(path, "cannot create: %s (check that [checkpoint] dir is writable and the disk has room)", strerror(errno));
    int err = 0;
    if (fprintf(f, "# gatedgpt-checkpoint %s v%d bytes=%zu crc32=%08x\n", kind, CKPT_VERSION, len, crc_update(0, body, len)) < 0) err = errno ? errno : EIO;
    if (!err && fwrite(body, 1, len, f) != len) err = errno ? errno : EIO;
    if (!err && fflush(f) != 0) err = errno;
    if (!err && fsync(fileno(f)) != 0) err = errno;
    if (fclose(f) != 0 && !err) err = errno;
    if (err) {
        ck_error(path, "write failed: %s (check free disk space and that [checkpoint] dir is writable)", strerror(err));
        unlink(path);
        return -1;
    }
    return 0;
}

// Reads a text file, checks its first line and checksum. *body (malloc'd, NUL-terminated) is
// the text after the first line; *file_size the whole file's size; *crc the body's crc32.
static int read_text(const char* path, const char* kind, char** body, uint64_t* file_size, uint32_t* crc) {
    FILE* f = fopen(path, "rb");
    if (!f) return ck_error(path, "cannot open: %s (an incomplete or damaged checkpoint?)", strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || st.st_size > (64 << 20)) {
        fclose(f);
        return ck_error(path, "cannot read its size, or larger than 64 MiB (not a checkpoint text file)");
    }
    size_t size = (size_t)st.st_size;
    char* buf = malloc(size + 1);
    if (!buf || fread(buf, 1, size, f) != size) {
        fclose(f);
        free(buf);
        return ck_error(path, "read failed");
    }
    fclose(f);
    buf[size] = 0;
    char want[64];
    snprintf(want, sizeof want, "# gatedgpt-checkpoint %s v", kind);
    char* nl = memchr(buf, '\n', size);
    unsigned version = 0, crc_want = 0;
    size_t len = 0;
    int fields = 0;
    if (nl && strncmp(buf, want, strlen(want)) == 0) {
        *nl = 0;
        fields = sscanf(buf + strlen(want), "%u bytes=%zu crc32=%x", &version, &len, &crc_want);
        *nl = '\n';
    }
    const char* what = NULL;
    char msg[200];
    if (fields != 3) {
        snprintf(msg, sizeof msg, "first line is not \"%s%d bytes=N crc32=X\" (damaged, or not a checkpoint file)", want, CKPT_VERSION);
        what = msg;
    } else if (version != CKPT_VERSION) {
        snprintf(msg, sizeof msg, "version %u, this build reads version %d", version, CKPT_VERSION);
        what = msg;
    } else if ((size_t)(buf + size - (nl + 1)) != len) {
        snprintf(msg, sizeof msg, "%s: %zu bytes of text, the first line says %zu", (size_t)(buf + size - (nl + 1)) < len ?
                 "truncated" : "wrong size", (size_t)(buf + size - (nl + 1)), len);
        what = msg;
    } else if (crc_update(0, nl + 1, len) != crc_want) {
        snprintf(msg, sizeof msg, "checksum mismatch: crc32 %08x, the first line says %08x (the file is damaged)",
                 crc_update(0, nl + 1, len), crc_want);
        what = msg;
    }
    if (what) {
        free(buf);
        return ck_error(path, "%s", what);
    }
    memmove(buf, nl + 1, len + 1);
    *body = buf;
    if (file_size) *file_size = size;
    if (crc) *crc = crc_want;
    return 0;
}

// ----------------------------------------------------------------------------------------------
// writing

int checkpoint_begin(const char* dir, int step) {
    char tmp[CKPT_PATH_MAX], fin[CKPT_PATH_MAX], done[CKPT_PATH_MAX + 8];
    tmp_path(tmp, sizeof tmp, dir, step);
    checkpoint_path(fin, sizeof fin, dir, step);
    snprintf(done, sizeof done, "%s/DONE", fin);
    if (make_dirs(dir) != 0)
        return ck_error(dir, "cannot create the checkpoint directory: %s (set [checkpoint] dir to a writable path)", strerror(errno));
    if (exists(done))
        return ck_error(fin, "a complete checkpoint of this step exists already; refusing to overwrite it (move it away, or set [checkpoint] dir)");
    if (exists(fin) && remove_dir(fin) != 0)   // incomplete (no DONE): a crash between rename and DONE
        return ck_error(fin, "cannot remove this incomplete checkpoint: %s", strerror(errno));
    if (exists(tmp) && remove_dir(tmp) != 0)  // a crashed write
        return ck_error(tmp, "cannot remove this leftover of an interrupted write: %s", strerror(errno));
    if (mkdir(tmp, 0755) != 0)
        return ck_error(tmp, "cannot create: %s (check that [checkpoint] dir is writable and the disk has room)", strerror(errno));
    ck_pause();
    return 0;
}

// model.bin payload: u32 n_tensors, u32 0, u64 arena floats, n_tensors x 120-byte records
// (name[64], u32 ndim, u32 0, u64 shape[4], u64 offset, u64 numel), then the arena (f32).
static CkptGather g_gather;
static void* g_gather_ctx;
void checkpoint_set_gather(CkptGather gather, void* ctx) { g_gather = gather; g_gather_ctx = ctx; }

// model.bin from table t and its arena: `whole` (host) when set, else m->params (backend memory);
// config.ini with the text config_write printed (config_text: rendered when the state was taken)
static int write_model_file(const char* dir, int step, const char* config_text, size_t config_len, const GPT* m,
                            const ParamTable* t, const float* whole);

// config_write's text of cfg (malloc'd), or NULL
static char* render_config(const Config* cfg, size_t* len) {
    char* text = NULL;
    *len = 0;
    FILE* mf = open_memstream(&text, len);
    if (!mf) return NULL;
    config_write(cfg, mf);
    fclose(mf);
    return text;
}

int checkpoint_write_model(const char* dir, int step, const Config* cfg, const GPT* m) {
    size_t len;
    char* text = render_config(cfg, &len);
    if (!text) return ck_error(dir, "out of memory");
    int rc = write_model_file(dir, step, text, len, m, &m->table, NULL);
    free(text);
    return rc;
}

static int write_model_file(const char* dir, int step, const char* config_text, size_t config_len, const GPT* m,
                            const ParamTable* t, const float* whole) {
    char tmp[CKPT_PATH_MAX], path[CKPT_PATH_MAX + 32];
    tmp_path(tmp, sizeof tmp, dir, step);

    snprintf(path, sizeof path, "%s/model.bin", tmp);
    Writer w;
    if (w_open(&w, path) != 0) return -1;
    w_u32(&w, (uint32_t)t->n);
    w_u32(&w, 0);
    w_u64(&w, t->total);
    for (int i = 0; i < t->n; i++) {
        const ParamInfo* p = &t->p[i];
        char name[64] = {0};
        _Static_assert(sizeof(p->name) <= sizeof(name), "parameter names must fit the 64-byte record field");
        memcpy(name, p->name, strnlen(p->name, sizeof p->name));
        w_put(&w, name, sizeof name);
        w_u32(&w, (uint32_t)p->ndim);
        w_u32(&w, 0);
        const int max_dims = (int)(sizeof p->shape / sizeof p->shape[0]);   // 2 today; up to 4 fit the record
        _Static_assert(sizeof p->shape / sizeof p->shape[0] <= 4, "shapes of up to 4 dims fit the record");
        for (int d = 0; d < 4; d++) w_u64(&w, d < p->ndim && d < max_dims ? (uint64_t)p->shape[d] : 0);
        w_u64(&w, p->offset);
        w_u64(&w, p->numel);
    }
    // the arena, from backend memory, in chunks (with a pause in the middle for the crash test)
    size_t chunk = (size_t)1 << 20, done = 0;
    if (!whole && gpt_master_sharded(m)) { fclose(w.f); unlink(path); return ck_error(path, "the fp32 master is sharded: it must be gathered (checkpoint_set_gather)"); }
    float* host = whole ? NULL : malloc(chunk * sizeof(float));
    if (!whole && !host) { fclose(w.f); unlink(path); return ck_error(path, "out of memory"); }
    while (done < t->total) {
        size_t n = t->total - done < chunk ? t->total - done : chunk;
        if (whole) {
            w_put(&w, whole + done, n * sizeof(float));
        } else {
            ops_to_host(host, m->params + done, n * sizeof(float));
            w_put(&w, host, n * sizeof(float));
        }
        if (done < t->total / 2 && done + n >= t->total / 2) { fflush(w.f); ck_pause(); }
        done += n;
    }
    free(host);
    if (w_close(&w, CKPT_KIND_MODEL) != 0) return -1;
    ck_pause();

    // config.ini: the resolved config, exactly what config_write prints
    snprintf(path, sizeof path, "%s/config.ini", tmp);
    int rc = write_text(path, "config", config_text, config_len);
    if (rc == 0) ck_pause();
    return rc;
}

static void w_spike(Writer* w, const SpikeWindow* s) {
    w_i32(w, s ? s->window : 0);
    w_i32(w, s ? s->n : 0);
    w_i32(w, s ? s->head : 0);
    w_i32(w, 0);
    if (s) w_put(w, s->buf, (size_t)s->window * sizeof(double));
}

// rank_RRRRR.bin payload (version 1), in this order:
//   i32 rank, i32 nproc, i64 step, i32 adam_t, i32 nonfinite_run, f32 lr, i32 data_shuffle,
//   u64 data_seed, i64 epoch, i64 shard_idx, i64 batch_idx, u64 opt_offset, u64 opt_count,
//   spike window (loss), spike window (grad): i32 window, i32 n, i32 head, i32 0, f64 buf[window],
//   f32 m[opt_count], f32 v[opt_count]
// The AdamW segments of an expert shard: o's ranges in t's arena as pieces of the whole
// model's arena (table g): local offset, global offset, count
typedef struct { size_t local, global, n; } CkSeg;
typedef struct { CkSeg* s; int n, cap; } CkSegs;
static void seg_add(void* ctx, size_t local, size_t global, size_t n) {
    CkSegs* v = (CkSegs*)ctx;
    if (v->n > 0 && v->s[v->n - 1].local + v->s[v->n - 1].n == local && v->s[v->n - 1].global + v->s[v->n - 1].n == global) {
        v->s[v->n - 1].n += n;   // contiguous in both: one segment
        return;
    }
    if (v->n == v->cap) {
        v->cap = v->cap ? 2 * v->cap : 64;
        v->s = realloc(v->s, (size_t)v->cap * sizeof(CkSeg));
        if (!v->s) { fprintf(stderr, "error: out of memory (checkpoint segments)\n"); exit(1); }
    }
    v->s[v->n++] = (CkSeg){ local, global, n };
}
static void optim_segments(const Optim* o, const ParamTable* t, const ParamTable* g, CkSegs* v) {
    memset(v, 0, sizeof(*v));
    param_table_map(t, g, o->lo, o->hi, seg_add, v);
    if (o->xhi > o->xlo) param_table_map(t, g, o->xlo, o->xhi, seg_add, v);
}

#define CKPT_SEGMENTS UINT64_MAX   // opt_offset of a rank file whose AdamW state is in segments

static int write_rank_file(const char* dir, int step, int rank, int nproc, const Optim* o, int on_host,
                           size_t offset, size_t count, const CkSegs* segs, const CkptTrainState* st);

int checkpoint_write_rank(const char* dir, int step, int rank, int nproc, const Optim* o,
                          size_t offset, size_t count, const CkptTrainState* st) {
    return write_rank_file(dir, step, rank, nproc, o, 0, offset, count, NULL, st);
}

// segs: NULL, or the segments (then offset and count are unused). on_host: o->m and o->v are host
// memory (a snapshot's copies), else backend memory (read through ops_to_host in chunks)
static int write_rank_file(const char* dir, int step, int rank, int nproc, const Optim* o, int on_host,
                           size_t offset, size_t count, const CkSegs* segs, const CkptTrainState* st) {
    char tmp[CKPT_PATH_MAX], path[CKPT_PATH_MAX + 32];
    tmp_path(tmp, sizeof tmp, dir, step);
    snprintf(path, sizeof path, "%s/rank_%05d.bin", tmp, rank);
    Writer w;
    if (w_open(&w, path) != 0) return -1;
    w_i32(&w, rank);
    w_i32(&w, nproc);
    w_i64(&w, st->step);
    w_i32(&w, o->t);
    w_i32(&w, st->nonfinite_run);
    w_put(&w, &st->lr, 4);
    w_i32(&w, st->data_shuffle);
    w_u64(&w, st->data_seed);
    w_i64(&w, st->data.epoch);
    w_i64(&w, st->data.shard_idx);
    w_i64(&w, st->data.batch_idx);
    if (segs) {   // expert parallelism: u64 CKPT_SEGMENTS, u64 count, u64 nseg, nseg x (u64 offset, u64 count)
        count = 0;
        for (int i = 0; i < segs->n; i++) count += segs->s[i].n;
        w_u64(&w, CKPT_SEGMENTS);
        w_u64(&w, count);
        w_u64(&w, (uint64_t)segs->n);
        for (int i = 0; i < segs->n; i++) { w_u64(&w, segs->s[i].global); w_u64(&w, segs->s[i].n); }
    } else {
        w_u64(&w, offset);
        w_u64(&w, count);
    }
    w_spike(&w, st->loss_win);
    w_spike(&w, st->grad_win);
    size_t chunk = (size_t)1 << 20;
    float* host = malloc(chunk * sizeof(float));
    if (!host) { fclose(w.f); unlink(path); return ck_error(path, "out of memory"); }
    const CkSeg one = { offset, offset, count };
    const CkSeg* list = segs ? segs->s : &one;
    const int nlist = segs ? segs->n : 1;
    for (int which = 0; which < 2; which++) {
        for (int k = 0; k < nlist; k++) {
            // o holds [lo, hi) and [xlo, xhi): the segment's moments are contiguous in one of them
            const float* src = (which == 0 ? o->m : o->v) + optim_moment_index(o, list[k].local);
            for (size_t done = 0; done < list[k].n; done += chunk) {
                size_t n = list[k].n - done < chunk ? list[k].n - done : chunk;
                // a snapshot's copy is written in place, a chunk at a time too: the crc32 then
                // reads what fwrite has just read, from the cache, not a second pass over memory
                if (on_host) { w_put(&w, src + done, n * sizeof(float)); continue; }
                ops_to_host(host, src + done, n * sizeof(float));
                w_put(&w, host, n * sizeof(float));
            }
        }
        if (which == 0) { fflush(w.f); ck_pause(); }
    }
    free(host);
    if (w_close(&w, CKPT_KIND_RANK) != 0) return -1;
    ck_pause();
    return 0;
}

// data.bin (rank 0, a mixture only): its payload is the mixture's position as mixture_save
// wrote it (docs/formats.md); the checkpoint code keeps it as bytes.
static int write_data_file(const char* dir, int step, const CkptTrainState* st) {
    char tmp[CKPT_PATH_MAX], path[CKPT_PATH_MAX + 32];
    tmp_path(tmp, sizeof tmp, dir, step);
    snprintf(path, sizeof path, "%s/data.bin", tmp);
    Writer w;
    if (w_open(&w, path) != 0) return -1;
    w_put(&w, st->mix, st->mix_len);
    if (w_close(&w, CKPT_KIND_DATA) != 0) return -1;
    ck_pause();
    return 0;
}

// data.bin into st->mix (malloc'd) when the checkpoint has one, else NULL / 0.
static int read_data_file(const char* path, CkptTrainState* st) {
    char file[CKPT_PATH_MAX + 32];
    snprintf(file, sizeof file, "%s/data.bin", path);
    st->mix = NULL;
    st->mix_len = 0;
    if (!exists(file)) return 0;
    Reader r;
    if (r_open(&r, file, CKPT_KIND_DATA) != 0) return -1;
    unsigned char* buf = malloc(r.payload ? (size_t)r.payload : 1);
    if (!buf) { fclose(r.f); return ck_error(file, "out of memory"); }
    if (r_get(&r, buf, (size_t)r.payload) != 0) { fclose(r.f); free(buf); return -1; }
    if (r_close(&r) != 0) { free(buf); return -1; }
    st->mix = buf;
    st->mix_len = (size_t)r.payload;
    return 0;
}

static uint32_t kind_of(const char* name) {
    if (strcmp(name, "model.bin") == 0) return CKPT_KIND_MODEL;
    if (strcmp(name, "data.bin") == 0) return CKPT_KIND_DATA;
    return CKPT_KIND_RANK;
}

void checkpoint_abort(const char* dir, int step) {
    char tmp[CKPT_PATH_MAX];
    tmp_path(tmp, sizeof tmp, dir, step);
    remove_dir(tmp);
}

// Size and checksum of one file of the checkpoint at `dir` (header only for binary files).
static int file_summary(const char* dir, const char* name, uint64_t* size, uint32_t* crc) {
    char path[CKPT_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (strcmp(name, "config.ini") == 0) {
        char* body;
        if (read_text(path, "config", &body, size, crc) != 0) return -1;
        free(body);
        return 0;
    }
    Reader r;
    if (r_open(&r, path, kind_of(name)) != 0) return -1;
    *size = CKPT_HEADER_BYTES + r.payload;
    *crc = r.want_crc;
    fclose(r.f);
    return 0;
}

int checkpoint_commit(const char* dir, int step, int nproc) {
    char tmp[CKPT_PATH_MAX], fin[CKPT_PATH_MAX], path[CKPT_PATH_MAX + 32], path2[CKPT_PATH_MAX + 32];
    tmp_path(tmp, sizeof tmp, dir, step);
    checkpoint_path(fin, sizeof fin, dir, step);

    // DONE's body: the step, the process count, and every file with its size and checksum
    char* body = NULL;
    size_t len = 0;
    FILE* mf = open_memstream(&body, &len);
    if (!mf) return ck_error(tmp, "out of memory");
    fprintf(mf, "step %d\nnproc %d\n", step, nproc);
    int rc = 0;
    snprintf(path, sizeof path, "%s/data.bin", tmp);
    const int have_data = exists(path);   // a mixture's position (rank 0 wrote it)
    for (int i = -3; i < nproc && rc == 0; i++) {
        char name[32];
        if (i == -3 && !have_data) continue;
        if (i == -3) snprintf(name, sizeof name, "data.bin");
        else if (i == -2) snprintf(name, sizeof name, "model.bin");
        else if (i == -1) snprintf(name, sizeof name, "config.ini");
        else snprintf(name, sizeof name, "rank_%05d.bin", i);
        uint64_t size;
        uint32_t crc;
        rc = file_summary(tmp, name, &size, &crc);
        if (rc == 0) fprintf(mf, "file %s %llu %08x\n", name, (unsigned long long)size, crc);
    }
    fclose(mf);
    if (rc != 0) { free(body); return -1; }

    // the files are fsynced; now the directory's entries, then the rename makes it visible
    if (fsync_dir(tmp) != 0) rc = ck_error(tmp, "fsync failed: %s", strerror(errno));
    if (rc == 0) ck_pause();
    if (rc == 0 && rename(tmp, fin) != 0) rc = ck_error(tmp, "cannot rename to '%s': %s", fin, strerror(errno));
    if (rc != 0) { free(body); return -1; }
    if (fsync_dir(dir) != 0) rc = ck_error(dir, "fsync failed: %s", strerror(errno));
    if (rc == 0) ck_pause();
    // DONE, last: itself written under a temporary name and renamed
    snprintf(path, sizeof path, "%s/DONE.tmp", fin);
    snprintf(path2, sizeof path2, "%s/DONE", fin);
    if (rc == 0) rc = write_text(path, "DONE", body, len);
    if (rc == 0 && rename(path, path2) != 0) rc = ck_error(path, "cannot rename to DONE: %s", strerror(errno));
    if (rc == 0 && fsync_dir(fin) != 0) rc = ck_error(fin, "fsync failed: %s", strerror(errno));
    free(body);
    if (rc != 0) {
        remove_dir(fin);   // never complete: remove it rather than leave a directory without DONE
        return -1;
    }
    ck_pause();
    return 0;
}

// ---- the two phases of a write: the snapshot, then the files

size_t checkpoint_snapshot_bytes(size_t model_floats, size_t moment_floats) {
    return (model_floats + 2 * moment_floats) * sizeof(float);
}

// A spike window's ring copied into dst (its buffer grown to src's capacity).
static int copy_window(SpikeWindow* dst, const SpikeWindow* src) {
    if (dst->window < src->window) {
        double* b = realloc(dst->buf, (size_t)src->window * sizeof(double));
        if (!b) return -1;
        dst->buf = b;
    }
    dst->window = src->window;
    dst->n = src->n;
    dst->head = src->head;
    memcpy(dst->buf, src->buf, (size_t)src->window * sizeof(double));
    return 0;
}

int checkpoint_snapshot_reserve(CkptSnapshot* s, const GPT* m, const Optim* o, int rank) {
    const size_t model_floats = rank == 0 && m->table.ep_size <= 1 && !gpt_master_sharded(m) ? m->table.total : 0;
    const size_t need = checkpoint_snapshot_bytes(model_floats, optim_moment_count(o));
    if (s->buf_bytes >= need) return 0;
    ops_host_free(s->buf);
    s->buf = ops_host_alloc(need);
    s->buf_bytes = s->buf ? need : 0;
    if (!s->buf)
        return ck_error("[checkpoint] async", "out of host memory for the checkpoint snapshot (%.1f MiB; set [checkpoint] async = false)",
                        need / 1048576.0);
    memset(s->buf, 0, need);   // the pages now, not in the step loop's first snapshot
    return 0;
}

int checkpoint_snapshot(CkptSnapshot* s, int step, const Config* cfg, const GPT* m, const Optim* o,
                        const CkptTrainState* st, int rank, int nproc, int copy) {
    s->step = step;
    s->rank = rank;
    s->nproc = nproc;
    s->m = m;
    s->o = *o;
    s->st = *st;
    s->params = NULL;
    s->gathered = NULL;
    s->host = copy;
    // expert parallelism: the whole model from the group (a collective: every member calls it);
    // the gathered copy is host memory, the writer's own until the write ends
    // ZeRO-1's sharded fp32 master alike: the shards to rank 0's host copy
    if (m->table.ep_size > 1 || gpt_master_sharded(m)) {
        s->gathered = g_gather ? g_gather(g_gather_ctx, m) : NULL;
        if (rank == 0 && !s->gathered)
            return ck_error(cfg->ckpt.dir[0] ? cfg->ckpt.dir : cfg->log.run_dir,
                            "the experts or the master shards of this model were not gathered (no checkpoint_set_gather)");
        s->params = s->gathered;
    }
    if (rank == 0) {
        free(s->config_text);
        s->config_text = render_config(cfg, &s->config_len);
        if (!s->config_text) return ck_error(cfg->log.run_dir, "out of memory (the config for a checkpoint)");
    }
    if (!copy) {   // a view of the live state: the write reads the backend's memory itself
        if (rank == 0 && !s->params) s->params = m->params;
        return 0;
    }
    // the copies: rank 0's arena (unless gathered), this rank's m and v, the spike windows
    const size_t model_floats = rank == 0 && !s->gathered ? m->table.total : 0, mom = optim_moment_count(o);
    if (checkpoint_snapshot_reserve(s, m, o, rank) != 0) return -1;
    float* b = (float*)s->buf;
    if (model_floats) { ops_to_host(b, m->params, model_floats * sizeof(float)); s->params = b; }
    ops_to_host(b + model_floats, o->m, mom * sizeof(float));
    ops_to_host(b + model_floats + mom, o->v, mom * sizeof(float));
    s->o.m = b + model_floats;
    s->o.v = b + model_floats + mom;
    if ((st->loss_win && copy_window(&s->loss_win, st->loss_win) != 0) ||
        (st->grad_win && copy_window(&s->grad_win, st->grad_win) != 0))
        return ck_error(cfg->log.run_dir, "out of memory (the spike windows for a checkpoint)");
    s->st.loss_win = st->loss_win ? &s->loss_win : NULL;
    s->st.grad_win = st->grad_win ? &s->grad_win : NULL;
    // a mixture's position (data.bin, rank 0): the caller frees its bytes after this call
    if (st->mix_len > 0) {
        if (s->mix_cap < st->mix_len) {
            unsigned char* p = realloc(s->mix, st->mix_len);
            if (!p) return ck_error(cfg->log.run_dir, "out of memory (the data position for a checkpoint)");
            s->mix = p;
            s->mix_cap = st->mix_len;
        }
        memcpy(s->mix, st->mix, st->mix_len);
        s->st.mix = s->mix;
    }
    return 0;
}

int checkpoint_write_snapshot(const char* dir, const CkptSnapshot* s) {
    int failed = 0;
    const GPT* m = s->m;
    // the testing pause also before the first file of an asynchronous write: the step loop trains
    // on meanwhile, so a writer that read the live state instead of the copy would write a later one
    if (s->host) ck_pause();
    if (m->table.ep_size > 1) {
        // an expert shard: model.bin from the whole model's arena, and this rank's AdamW state as
        // segments of the whole model's arena
        ParamTable g;
        param_table_build(&g, &m->cfg);
        if (s->rank == 0) {
            failed = write_model_file(dir, s->step, s->config_text, s->config_len, m, &g, s->params) != 0;
            if (!failed && s->st.mix_len > 0) failed = write_data_file(dir, s->step, &s->st) != 0;
        }
        if (!failed) {
            CkSegs segs;
            optim_segments(&s->o, &m->table, &g, &segs);
            failed = write_rank_file(dir, s->step, s->rank, s->nproc, &s->o, s->host, 0, 0, &segs, &s->st) != 0;
            free(segs.s);
        }
        param_table_free(&g);
    } else {
        // a view (host = 0) reads the live arena through ops_to_host (whole = NULL); a sharded
        // master's was gathered (s->params)
        failed = s->rank == 0 && write_model_file(dir, s->step, s->config_text, s->config_len, m, &m->table,
                                                  s->host || s->gathered ? s->params : NULL) != 0;
        if (!failed && s->rank == 0 && s->st.mix_len > 0) failed = write_data_file(dir, s->step, &s->st) != 0;
        if (!failed) failed = write_rank_file(dir, s->step, s->rank, s->nproc, &s->o, s->host, s->o.lo, s->o.hi - s->o.lo,
                                              NULL, &s->st) != 0;
    }
    return failed ? -1 : 0;
}

void checkpoint_snapshot_release(CkptSnapshot* s) {
    free(s->gathered);
    s->gathered = NULL;
    s->params = NULL;
}

void checkpoint_snapshot_free(CkptSnapshot* s) {
    checkpoint_snapshot_release(s);
    ops_host_free(s->buf);
    free(s->config_text);
    free(s->loss_win.buf);
    free(s->grad_win.buf);
    free(s->mix);
    memset(s, 0, sizeof *s);
}

static int agree_alone(void* ctx, int failed) { (void)ctx; return failed != 0; }

int checkpoint_start(const char* dir, int step, int rank, CkptAgree agree, void* ctx) {
    if (!agree) agree = agree_alone;
    return agree(ctx, rank == 0 && checkpoint_begin(dir, step) != 0) ? -1 : 0;
}

int checkpoint_finish(const char* dir, int step, int rank, int nproc, int failed, CkptAgree agree, void* ctx) {
    if (!agree) agree = agree_alone;
    failed = agree(ctx, failed);
    if (rank == 0) {   // DONE only when every rank wrote its file
        if (!failed && checkpoint_commit(dir, step, nproc) != 0) failed = 1;
        if (failed) checkpoint_abort(dir, step);
    }
    return agree(ctx, failed) ? -1 : 0;   // every rank learns the outcome
}

int checkpoint_save_ranks(const char* dir, int step, const Config* cfg, const GPT* m, const Optim* o,
                          const CkptTrainState* st, int rank, int nproc, CkptAgree agree, void* ctx) {
    // the directory exists before anyone writes into it
    if (checkpoint_start(dir, step, rank, agree, ctx) != 0) return -1;
    // a view of the live state (no copy), written at once: the same files an asynchronous write
    // of this state writes from its copy (train/ckpt_async.h)
    CkptSnapshot s;
    memset(&s, 0, sizeof s);
    int failed = checkpoint_snapshot(&s, step, cfg, m, o, st, rank, nproc, 0) != 0;
    if (!failed) failed = checkpoint_write_snapshot(dir, &s) != 0;
    checkpoint_snapshot_free(&s);
    return checkpoint_finish(dir, step, rank, nproc, failed, agree, ctx);
}

int checkpoint_save(const char* dir, int step, const Config* cfg, const GPT* m, const Optim* o,
                    const CkptTrainState* st) {
    return checkpoint_save_ranks(dir, step, cfg, m, o, st, 0, 1, NULL, NULL);
}

// ----------------------------------------------------------------------------------------------
// reading

int checkpoint_verify(const char* path, CkptInfo* info, FILE* report) {
    char done[CKPT_PATH_MAX + 32];
    snprintf(done, sizeof done, "%s/DONE", path);
    if (!exists(path)) return ck_error(path, "no such checkpoint directory");
    if (!exists(done)) return ck_error(path, "no DONE marker: an incomplete checkpoint (the write was interrupted)");
    char* body;
    uint64_t done_size;
    uint32_t done_crc;
    if (read_text(done, "DONE", &body, &done_size, &done_crc) != 0) return -1;
    CkptInfo in = {0};
    int have_model = 0, have_config = 0, n_rank = 0, rc = 0;
    char* save = NULL;
    int line_no = 0;
    for (char* line = strtok_r(body, "\n", &save); line && rc == 0; line = strtok_r(NULL, "\n", &save)) {
        line_no++;
        char name[64];
        unsigned long long size;
        unsigned crc;
        if (line_no == 1) {
            if (sscanf(line, "step %d", &in.step) != 1) rc = ck_error(done, "line 2 is not \"step N\"");
            continue;
        }
        if (line_no == 2) {
            if (sscanf(line, "nproc %d", &in.nproc) != 1 || in.nproc < 1) rc = ck_error(done, "line 3 is not \"nproc N\"");
            continue;
        }
        if (sscanf(line, "file %63s %llu %x", name, &size, &crc) != 3 || strchr(name, '/')) {
            rc = ck_error(done, "line %d is not \"file NAME SIZE CRC32\"", line_no + 1);
            break;
        }
        char fpath[CKPT_PATH_MAX + 80];
        snprintf(fpath, sizeof fpath, "%s/%s", path, name);
        uint32_t got_crc = 0;
        uint64_t got_size = 0;
        if (strcmp(name, "config.ini") == 0) {
            char* text;
            rc = read_text(fpath, "config", &text, &got_size, &got_crc);
            if (rc == 0) free(text);
            have_config = 1;
        } else {
            int is_model = strcmp(name, "model.bin") == 0, is_data = strcmp(name, "data.bin") == 0;
            int r_idx = -1;
            if (!is_model && !is_data && sscanf(name, "rank_%d.bin", &r_idx) != 1) {
                rc = ck_error(done, "lists an unknown file '%s'", name);
                break;
            }
            Reader r;
            rc = r_open(&r, fpath, kind_of(name));
            if (rc == 0) {
                got_size = CKPT_HEADER_BYTES + r.payload;
                got_crc = r.want_crc;
                rc = r_skip_rest(&r);
                if (rc == 0) rc = r_close(&r);
                else fclose(r.f);
            }
            if (is_model) have_model = 1;
            else if (!is_data) n_rank++;
        }
        if (rc == 0 && (got_size != size || got_crc != crc))
            rc = ck_error(fpath, "size %llu / crc32 %08x, but DONE recorded %llu / %08x (a file from another checkpoint?)",
                          (unsigned long long)got_size, got_crc, size, crc);
        if (rc == 0) {
            in.n_files++;
            in.bytes += got_size;
            if (report) fprintf(report, "  %-16s %12llu bytes  crc32 %08x  ok\n", name, (unsigned long long)got_size, got_crc);
        }
    }
    free(body);
    if (rc != 0) return -1;
    if (!have_model || !have_config || n_rank != in.nproc)
        return ck_error(done, "lists %s%s%d rank file(s) for nproc %d (incomplete)", have_model ? "" : "no model.bin, ",
                        have_config ? "" : "no config.ini, ", n_rank, in.nproc);
    in.n_files++;   // DONE itself
    in.bytes += done_size;
    if (report) fprintf(report, "  %-16s %12llu bytes  crc32 %08x  ok\n", "DONE", (unsigned long long)done_size, done_crc);
    if (info) *info = in;
    return 0;
}

int checkpoint_load_config(const char* path, Config* c) {
    char file[CKPT_PATH_MAX + 32];
    snprintf(file, sizeof file, "%s/config.ini", path);
    char* body;
    if (read_text(file, "config", &body, NULL, NULL) != 0) return -1;
    free(body);
    config_defaults(c);
    if (config_load_file(c, file) != 0) return -1;
    return config_finalize(c, file);
}

// Restores a spike window: bit for bit when the window size is the same, else the newest values.
static int r_spike(Reader* r, SpikeWindow* s) {
    int32_t h[4];
    if (r_get(r, h, sizeof h) != 0) return -1;
    int window = h[0], n = h[1], head = h[2];
    if (window < 0 || window > (1 << 24) || n < 0 || n > window || head < 0 || (window > 0 && head >= window))
        return ck_error(r->path, "bad spike-detector window (size %d, held %d, head %d)", window, n, head);
    double* buf = malloc((size_t)(window > 0 ? window : 1) * sizeof(double));
    if (!buf) return ck_error(r->path, "out of memory");
    if (r_get(r, buf, (size_t)window * sizeof(double)) != 0) { free(buf); return -1; }
    if (s) {
        if (window == s->window) {
            memcpy(s->buf, buf, (size_t)window * sizeof(double));
            s->n = n;
            s->head = head;
        } else {   // [metrics] spike_window changed: keep the newest values, oldest first
            s->n = 0;
            s->head = 0;
            int keep = n < s->window ? n : s->window;
            for (int i = n - keep; i < n; i++) spike_push(s, buf[((head - n + i) % window + window) % window]);
        }
    }
    free(buf);
    return 0;
}

// ----------------------------------------------------------------------------------------------
// the AdamW state from the rank files, whatever process count and zero_stage wrote them

// The fixed fields at the start of a rank file's payload (docs/formats.md), in file order.
typedef struct {
    int32_t rank, nproc;
    int64_t step;
    int32_t t, nonfinite;
    float lr;
    int32_t shuffle;
    uint64_t seed;
    int64_t pos[3];            // the data position: epoch, shard_idx, batch_idx
    uint64_t off, cnt;         // the slice [off, off + cnt) of the arena its m and v cover
    // a file in segments (off = CKPT_SEGMENTS: expert parallelism): m and v are the nseg
    // segments [seg[2i], seg[2i] + seg[2i+1]) of the whole arena one after the other, cnt floats
    uint64_t nseg;
    uint64_t* seg;             // [2 * nseg] malloc'd (NULL for a slice)
} RankHead;

// Reads n bytes of the payload for the checksum only.
static int r_skip(Reader* r, uint64_t n) {
    char buf[1 << 16];
    while (n > 0) {
        size_t k = n < sizeof buf ? (size_t)n : sizeof buf;
        if (r_get(r, buf, k) != 0) return -1;
        n -= k;
    }
    return 0;
}

// Opens rank file f of the checkpoint at path and reads its fixed fields into h; checks that
// it is rank f's file of a checkpoint of nproc processes (nproc 0: any) and that its slice lies
// in the arena of total floats. file (n bytes) holds the path while r is open.
static int open_rank_file(Reader* r, char* file, size_t n, const char* path, int f, int nproc, size_t total,
                          RankHead* h) {
    snprintf(file, n, "%s/rank_%05d.bin", path, f);
    if (r_open(r, file, CKPT_KIND_RANK) != 0) return -1;
    if (r_get(r, &h->rank, 4) || r_get(r, &h->nproc, 4) || r_get(r, &h->step, 8) || r_get(r, &h->t, 4) ||
        r_get(r, &h->nonfinite, 4) || r_get(r, &h->lr, 4) || r_get(r, &h->shuffle, 4) || r_get(r, &h->seed, 8) ||
        r_get(r, h->pos, 24) || r_get(r, &h->off, 8) || r_get(r, &h->cnt, 8)) {
        fclose(r->f);
        return -1;
    }
    h->nseg = 0;
    h->seg = NULL;
    if (h->off == CKPT_SEGMENTS) {
        if (r_get(r, &h->nseg, 8) != 0) { fclose(r->f); return -1; }
        if (h->nseg > ((uint64_t)1 << 24)) { fclose(r->f); return ck_error(file, "%llu AdamW segments (damaged?)", (unsigned long long)h->nseg); }
        h->seg = malloc((size_t)(h->nseg ? h->nseg : 1) * 2 * sizeof(uint64_t));
        if (!h->seg) { fclose(r->f); return ck_error(file, "out of memory"); }
        if (r_get(r, h->seg, (size_t)h->nseg * 2 * sizeof(uint64_t)) != 0) { free(h->seg); h->seg = NULL; fclose(r->f); return -1; }
        uint64_t sum = 0;
        for (uint64_t i = 0; i < h->nseg; i++) {
            uint64_t a = h->seg[2 * i], n = h->seg[2 * i + 1];
            if (a > total || n > total - a) {
                fclose(r->f);
                ck_error(file, "holds AdamW segment [%llu, %llu), outside the arena of %zu floats (damaged?)",
                         (unsigned long long)a, (unsigned long long)(a + n), total);
                free(h->seg); h->seg = NULL;
                return -1;
            }
            sum += n;
        }
        if (sum != h->cnt) {
            fclose(r->f);
            free(h->seg); h->seg = NULL;
            return ck_error(file, "AdamW segments of %llu floats, the file says %llu (damaged?)", (unsigned long long)sum,
                            (unsigned long long)h->cnt);
        }
    }
    if (h->rank != f || h->nproc < 1 || f >= h->nproc || (nproc > 0 && h->nproc != nproc)) {
        fclose(r->f);
        return ck_error(file, "says it was written by rank %d of %d processes, but it is rank file %d of a checkpoint of %d "
                        "(a file from another checkpoint?)", h->rank, h->nproc, f, nproc > 0 ? nproc : h->nproc);
    }
    if (!h->seg && (h->off > total || h->cnt > total - h->off)) {
        fclose(r->f);
        return ck_error(file, "holds AdamW state for floats [%llu, %llu), outside the arena of %zu floats (damaged?)",
                        (unsigned long long)h->off, (unsigned long long)(h->off + h->cnt), total);
    }
    return 0;
}

// The rest of an open rank file (its fixed fields h read): the spike windows (restored into st's
// when st is set), then m and v, of which the arena's floats [a, b) (inside h's slice) go to
// dst_m and dst_v at a - base; the others pass through the checksum only. Closes the file.
static int read_rank_rest(Reader* r, const RankHead* h, CkptTrainState* st, size_t a, size_t b, size_t base,
                          float* dst_m, float* dst_v) {
    if (r_spike(r, st ? st->loss_win : NULL) != 0 || r_spike(r, st ? st->grad_win : NULL) != 0) goto fail;
    // m[cnt] then v[cnt], each: pre floats before a, keep in [a, b), post after b
    size_t pre = a < b ? a - h->off : h->cnt, keep = a < b ? b - a : 0;
    size_t post = h->cnt - pre - keep;
    for (int which = 0; which < 2; which++) {
        float* dst = which == 0 ? dst_m : dst_v;
        if (r_skip(r, (uint64_t)pre * sizeof(float)) != 0) goto fail;
        if (keep > 0 && r_get(r, dst + (a - base), keep * sizeof(float)) != 0) goto fail;
        if (r_skip(r, (uint64_t)post * sizeof(float)) != 0) goto fail;
    }
    return r_close(r);
fail:
    fclose(r->f);
    return -1;
}

// A piece to copy: floats [fpos, fpos + n) of a file's m (and v) to o's moments at k
typedef struct { size_t fpos, k, n; } CkPiece;

static int same_global_state(const char* file, const char* path, int f0, const RankHead* h, const RankHead* h0) {
    if (h->step != h0->step || h->t != h0->t || h->nonfinite != h0->nonfinite || h->shuffle != h0->shuffle ||
        h->seed != h0->seed || memcmp(h->pos, h0->pos, sizeof h->pos) != 0)
        return ck_error(file, "step %lld, AdamW t %d, data position (%lld, %lld, %lld), but %s/rank_%05d.bin has step %lld, t %d, "
                        "position (%lld, %lld, %lld) (files of different checkpoints?)", (long long)h->step, h->t, (long long)h->pos[0],
                        (long long)h->pos[1], (long long)h->pos[2], path, f0, (long long)h0->step, h0->t, (long long)h0->pos[0],
                        (long long)h0->pos[1], (long long)h0->pos[2]);
    return 0;
}

// The AdamW state of o's ranges as pieces of the whole model's arena (mine: segments with
// local = the index into o's moments), from rank files in slices or in segments, by global
// offset (expert parallelism on either side, docs/formats.md). Every file's m and v whose
// pieces are not all had yet is read whole into host memory (one file at a time).
// What the loaders hand back once the rank files are read: this process's AdamW m and v [cnt]
// (host copies) to the device, the step counter, and (st not NULL) the training state of the
// first file h0 with the writer's process count and ZeRO stage.
static void restore_state(Optim* o, CkptTrainState* st, const RankHead* h0, const float* host_m, const float* host_v,
                          size_t cnt, int nproc, int zero_stage) {
    ops_from_host(o->m, host_m, cnt * sizeof(float));
    ops_from_host(o->v, host_v, cnt * sizeof(float));
    o->t = h0->t;
    if (!st) return;
    st->step = (int)h0->step;
    st->nonfinite_run = h0->nonfinite;
    st->lr = h0->lr;
    st->data_shuffle = h0->shuffle;
    st->data_seed = h0->seed;
    st->data.epoch = h0->pos[0];
    st->data.shard_idx = h0->pos[1];
    st->data.batch_idx = h0->pos[2];
    st->ckpt_nproc = nproc;
    st->ckpt_zero_stage = nproc > 1 ? zero_stage : 0;
}

static int load_rank_segments(const char* path, Optim* o, CkptTrainState* st, int rank, size_t total,
                              size_t floats, const CkSegs* mine) {
    char file[CKPT_PATH_MAX + 32];
    Reader r;
    RankHead h0, h;
    memset(&h0, 0, sizeof h0);
    if (open_rank_file(&r, file, sizeof file, path, 0, 0, total, &h0) != 0) return -1;
    fclose(r.f);
    free(h0.seg);
    const int nproc = h0.nproc;
    const size_t cnt = optim_moment_count(o);
    float* host_m = calloc(cnt ? cnt : 1, sizeof(float));
    float* host_v = calloc(cnt ? cnt : 1, sizeof(float));
    unsigned char* have = calloc(cnt ? cnt : 1, 1);
    CkPiece* pc = NULL;
    float *fm = NULL, *fv = NULL;
    int rc = -1, nread = 0, f0 = 0, zero_stage = 0;
    uint64_t all_cnt = 0;   // the files' floats: each of the model's once under ZeRO-1 (segments)
    if (!host_m || !host_v || !have) { ck_error(path, "out of memory for the AdamW state (%zu floats)", cnt); goto done; }
    for (int i = 0; i < nproc; i++) {
        // this rank's own file first (the writer's layout), then the others in rank order
        const int f = i == 0 ? (rank < nproc ? rank : 0) : (i <= rank && rank < nproc ? i - 1 : i);
        if (open_rank_file(&r, file, sizeof file, path, f, nproc, total, &h) != 0) goto done;
        if (!h.seg && h.cnt != total) zero_stage = 1;
        all_cnt += h.cnt;
        // the pieces of my segments in this file
        uint64_t one[2] = { h.off, h.cnt };
        const uint64_t* fs = h.seg ? h.seg : one;
        const uint64_t fn = h.seg ? h.nseg : 1;
        int npc = 0, need = 0;
        free(pc);
        pc = NULL;
        size_t cap = 0, fpos = 0;
        for (uint64_t j = 0; j < fn; j++) {
            const size_t a = fs[2 * j], b = a + fs[2 * j + 1];
            for (int k = 0; k < mine->n; k++) {
                const size_t c = mine->s[k].global, e = c + mine->s[k].n;
                const size_t lo = a > c ? a : c, hi = b < e ? b : e;
                if (lo >= hi) continue;
                if ((size_t)npc == cap) {
                    cap = cap ? 2 * cap : 64;
                    pc = realloc(pc, cap * sizeof(CkPiece));
                    if (!pc) { fclose(r.f); ck_error(path, "out of memory"); goto done; }
                }
                pc[npc++] = (CkPiece){ fpos + (lo - a), mine->s[k].local + (lo - c), hi - lo };
                for (size_t x = 0; x < hi - lo && !need; x++) need = !have[mine->s[k].local + (lo - c) + x];
            }
            fpos += b - a;
        }
        if (!need && nread > 0) { fclose(r.f); free(h.seg); continue; }
        if (nread == 0) { h0 = h; f0 = f; }
        else if (same_global_state(file, path, f0, &h, &h0) != 0) { fclose(r.f); free(h.seg); goto done; }
        if (r_spike(&r, nread == 0 ? (st ? st->loss_win : NULL) : NULL) != 0 ||
            r_spike(&r, nread == 0 ? (st ? st->grad_win : NULL) : NULL) != 0) { fclose(r.f); free(h.seg); goto done; }
        free(fm); free(fv);
        fm = malloc((size_t)(h.cnt ? h.cnt : 1) * sizeof(float));
        fv = malloc((size_t)(h.cnt ? h.cnt : 1) * sizeof(float));
        if (!fm || !fv) { fclose(r.f); free(h.seg); ck_error(file, "out of memory for %llu floats", (unsigned long long)h.cnt); goto done; }
        if (r_get(&r, fm, (size_t)h.cnt * sizeof(float)) != 0 || r_get(&r, fv, (size_t)h.cnt * sizeof(float)) != 0) {
            fclose(r.f); free(h.seg); goto done;
        }
        free(h.seg);
        if (r_close(&r) != 0) goto done;
        for (int k = 0; k < npc; k++) {
            memcpy(host_m + pc[k].k, fm + pc[k].fpos, pc[k].n * sizeof(float));
            memcpy(host_v + pc[k].k, fv + pc[k].fpos, pc[k].n * sizeof(float));
            memset(have + pc[k].k, 1, pc[k].n);
        }
        nread++;
    }
    for (int k = 0; k < mine->n; k++)
        for (size_t x = 0; x < mine->s[k].n; x++)
            if (!have[mine->s[k].local + x]) {
                ck_error(path, "float %zu of the AdamW state (whole arena) is in none of its %d rank files (damaged or incomplete "
                         "checkpoint)", mine->s[k].global + x, nproc);
                goto done;
            }
    // segments (expert parallelism): ZeRO-1 holds every float of the model once over the files
    // (floats: the tensors' elements), zero_stage 0 the dense ones once per process
    if (h0.off == CKPT_SEGMENTS) zero_stage = all_cnt == floats;
    restore_state(o, st, &h0, host_m, host_v, cnt, nproc, zero_stage);
    rc = 0;
done:
    free(host_m); free(host_v); free(have); free(pc); free(fm); free(fv);
    return rc;
}

// The AdamW state of o's range [o->lo, o->hi) and the global state st (checkpoint_load).
static int load_rank_state(const char* path, Optim* o, CkptTrainState* st, int rank, size_t total) {
    char file[CKPT_PATH_MAX + 32];
    Reader r;
    RankHead h0;
    // the writer's process count (rank_00000.bin), then every file's slice
    if (open_rank_file(&r, file, sizeof file, path, 0, 0, total, &h0) != 0) return -1;
    fclose(r.f);
    const int nproc = h0.nproc;
    RankHead* heads = malloc((size_t)nproc * sizeof(RankHead));
    int* src = malloc((size_t)nproc * sizeof(int));
    const size_t lo = o->lo, hi = o->hi, cnt = hi - lo;
    float* host_m = calloc(cnt ? cnt : 1, sizeof(float));
    float* host_v = calloc(cnt ? cnt : 1, sizeof(float));
    int rc = -1, nsrc = 0, zero_stage = 0;
    if (!heads || !src || !host_m || !host_v) { ck_error(path, "out of memory for the AdamW state (%zu floats)", cnt); goto done; }
    for (int f = 0; f < nproc; f++) {
        if (open_rank_file(&r, file, sizeof file, path, f, nproc, total, &heads[f]) != 0) goto done;
        fclose(r.f);
        if (heads[f].cnt != total) zero_stage = 1;   // a shard: ZeRO-1 (zero_stage 0 writes full copies)
    }
    // the files to read: this rank's own when it covers the range (the writer's layout), else in
    // rank order each file that continues the range where the ones before it end
    if (rank < nproc && heads[rank].off <= lo && hi <= heads[rank].off + heads[rank].cnt) {
        src[nsrc++] = rank;
    } else {
        size_t covered = lo;
        for (int f = 0; f < nproc && covered < hi; f++) {
            size_t a = heads[f].off, b = heads[f].off + heads[f].cnt;
            if (a <= covered && covered < b) { src[nsrc++] = f; covered = b < hi ? b : hi; }
        }
        if (covered < hi) {
            ck_error(path, "floats [%zu, %zu) of the AdamW state are in none of its %d rank files (damaged or incomplete checkpoint)",
                     covered, hi, nproc);
            goto done;
        }
        if (nsrc == 0) src[nsrc++] = rank < nproc ? rank : 0;   // an empty range: the global state only
    }
    for (int i = 0; i < nsrc; i++) {
        const int f = src[i];
        RankHead h;
        if (open_rank_file(&r, file, sizeof file, path, f, nproc, total, &h) != 0) goto done;
        if (h.off != heads[f].off || h.cnt != heads[f].cnt) {
            fclose(r.f);
            ck_error(file, "changed while it was read");
            goto done;
        }
        // the global state is the same in every rank's file (the trainer's counters, the loss and
        // norm windows and the data position are global): take it from the first, compare the others
        if (i > 0 && (h.step != h0.step || h.t != h0.t || h.nonfinite != h0.nonfinite || h.shuffle != h0.shuffle ||
                      h.seed != h0.seed || memcmp(h.pos, h0.pos, sizeof h.pos) != 0)) {
            fclose(r.f);
            ck_error(file, "step %lld, AdamW t %d, data position (%lld, %lld, %lld), but %s/rank_%05d.bin has step %lld, t %d, "
                     "position (%lld, %lld, %lld) (files of different checkpoints?)", (long long)h.step, h.t, (long long)h.pos[0],
                     (long long)h.pos[1], (long long)h.pos[2], path, src[0], (long long)h0.step, h0.t, (long long)h0.pos[0],
                     (long long)h0.pos[1], (long long)h0.pos[2]);
            goto done;
        }
        if (i == 0) h0 = h;
        size_t a = h.off > lo ? h.off : lo, b = h.off + h.cnt < hi ? h.off + h.cnt : hi;
        if (read_rank_rest(&r, &h, i == 0 ? st : NULL, a, b > a ? b : a, lo, host_m, host_v) != 0) goto done;
    }
    restore_state(o, st, &h0, host_m, host_v, cnt, nproc, zero_stage);
    rc = 0;
done:
    free(heads); free(src); free(host_m); free(host_v);
    return rc;
}

// param_table_map's copy of a whole host arena's pieces into a shard's host arena
typedef struct { float* dst; const float* src; } CkCopy;
static void copy_piece(void* ctx, size_t local, size_t global, size_t n) {
    CkCopy* c = (CkCopy*)ctx;
    memcpy(c->dst + local, c->src + global, n * sizeof(float));
}

static int load_model_and_state(const char* path, GPT* m, Optim* o, CkptTrainState* st, int rank, const ParamTable* t,
                                const ParamTable* g);

int checkpoint_load(const char* path, GPT* m, Optim* o, CkptTrainState* st, int rank, int nproc) {
    (void)nproc;   // the reader's process count: any count may read any checkpoint (elastic resume)
    if (m->table.ep_size <= 1) return load_model_and_state(path, m, o, st, rank, &m->table, &m->table);
    // an expert shard: model.bin holds the whole model (table g), this process takes its part
    ParamTable g;
    param_table_build(&g, &m->cfg);
    int rc = load_model_and_state(path, m, o, st, rank, &m->table, &g);
    param_table_free(&g);
    return rc;
}

// t: m's table; g: the whole model's (model.bin's; t itself when m holds every expert)
static int load_model_and_state(const char* path, GPT* m, Optim* o, CkptTrainState* st, int rank, const ParamTable* tm,
                                const ParamTable* g) {
    char file[CKPT_PATH_MAX + 32];
    const ParamTable* t = g;   // what model.bin holds
    Reader r;
    snprintf(file, sizeof file, "%s/model.bin", path);
    if (r_open(&r, file, CKPT_KIND_MODEL) != 0) return -1;
    uint32_t n_tensors, zero;
    uint64_t total;
    if (r_get(&r, &n_tensors, 4) || r_get(&r, &zero, 4) || r_get(&r, &total, 8)) goto fail;
    if (n_tensors != (uint32_t)t->n || total != t->total) {
        ck_error(file, "%u tensors in %llu floats, but this model has %d tensors in %zu floats (the config differs from the checkpoint's config.ini)",
                 n_tensors, (unsigned long long)total, t->n, t->total);
        goto fail;
    }
    for (int i = 0; i < t->n; i++) {
        const ParamInfo* p = &t->p[i];
        char name[65] = {0};
        uint32_t ndim, pad;
        uint64_t shape[4], offset, numel;
        if (r_get(&r, name, 64) || r_get(&r, &ndim, 4) || r_get(&r, &pad, 4) || r_get(&r, shape, 32) ||
            r_get(&r, &offset, 8) || r_get(&r, &numel, 8)) goto fail;
        int same = strcmp(name, p->name) == 0 && ndim == (uint32_t)p->ndim && offset == p->offset && numel == p->numel;
        for (int d = 0; d < p->ndim && d < (int)(sizeof p->shape / sizeof p->shape[0]); d++)
            same = same && shape[d] == (uint64_t)p->shape[d];
        if (!same) {
            ck_error(file, "tensor %d is '%s' [%llu, %llu] at offset %llu, but this model's is '%s' [%d, %d] at offset %zu (the config differs from the checkpoint's)",
                     i, name, (unsigned long long)shape[0], (unsigned long long)shape[1], (unsigned long long)offset,
                     p->name, p->shape[0], p->ndim > 1 ? p->shape[1] : 0, p->offset);
            goto fail;
        }
    }
    // the arena: read into host memory, copy to the backend only once the checksum is good
    float* host = malloc(t->total * sizeof(float));
    if (!host) { ck_error(file, "out of memory for %zu floats", t->total); goto fail; }
    if (r_get(&r, host, t->total * sizeof(float)) != 0) { free(host); goto fail; }
    if (r_close(&r) != 0) { free(host); return -1; }
    if (tm != g) {   // this process's experts (by global index) and every dense tensor
        float* mine = calloc(tm->total ? tm->total : 1, sizeof(float));
        if (!mine) { free(host); return ck_error(file, "out of memory for %zu floats", tm->total); }
        CkCopy cc = { mine, host };
        param_table_map(tm, g, 0, tm->total, copy_piece, &cc);
        free(host);
        host = mine;
    }
    gpt_params_from_host(m, host);   // what this process holds of it (a sharded master: its shard)
    gpt_params_changed(m, 0);   // the compute copy of the weights follows (again below, with t)
    free(host);
    if (!o) return 0;

    // the AdamW state: by slice (the same layout on both sides, or another process count), or by
    // segments of the whole arena when either side is an expert shard
    RankHead h;
    if (open_rank_file(&r, file, sizeof file, path, 0, 0, g->total, &h) != 0) return -1;
    fclose(r.f);
    const int segmented = h.seg != NULL;
    free(h.seg);
    int rc;
    if (tm == g && !segmented) {
        rc = load_rank_state(path, o, st, rank, t->total);
    } else {
        CkSegs mine;
        optim_segments(o, tm, g, &mine);
        for (int k = 0; k < mine.n; k++) mine.s[k].local = optim_moment_index(o, mine.s[k].local);
        size_t floats = 0;
        for (int i = 0; i < g->n; i++) floats += g->p[i].numel;
        rc = load_rank_segments(path, o, st, rank, g->total, floats, &mine);
        free(mine.s);
    }
    if (rc != 0) return -1;
    if (st && read_data_file(path, st) != 0) return -1;
    gpt_params_changed(m, o->t);   // round as the uninterrupted run did after update t
    return 0;
fail:
    fclose(r.f);
    return -1;
}

// ----------------------------------------------------------------------------------------------
// the directory of checkpoints

// "step_" + 8 or more digits + suffix (exactly): the step, else -1.
static int parse_step(const char* name, const char* suffix) {
    if (strncmp(name, "step_", 5) != 0) return -1;
    const char* p = name + 5;
    int nd = 0;
    long v = 0;
    while (p[nd] >= '0' && p[nd] <= '9' && nd < 10) { v = v * 10 + (p[nd] - '0'); nd++; }
    if (nd < 8 || v > 2147483647L || strcmp(p + nd, suffix) != 0) return -1;
    return (int)v;
}

static int cmp_int(const void* a, const void* b) {
    int x = *(const int*)a, y = *(const int*)b;
    return (x > y) - (x < y);
}

int checkpoint_list(const char* dir, int* steps, int max) {
    DIR* d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent* e;
    char done[CKPT_PATH_MAX + 300];
    while ((e = readdir(d)) != NULL) {
        int s = parse_step(e->d_name, "");
        if (s < 0) continue;
        snprintf(done, sizeof done, "%s/%s/DONE", dir, e->d_name);
        if (exists(done) && n < max) steps[n++] = s;
    }
    closedir(d);
    qsort(steps, (size_t)n, sizeof(int), cmp_int);
    return n;
}

int checkpoint_prune(const char* dir, int keep_last, int keep_every, int current) {
    enum { MAXC = 100000 };
    int* steps = malloc(MAXC * sizeof(int));
    if (!steps) return 0;
    int n = checkpoint_list(dir, steps, MAXC), removed = 0;
    char path[CKPT_PATH_MAX];
    for (int i = 0; i < n; i++) {
        int newest_k = keep_last == 0 || i >= n - keep_last;
        int kept_forever = keep_every > 0 && steps[i] % keep_every == 0;
        if (newest_k || kept_forever || steps[i] == current) continue;
        checkpoint_path(path, sizeof path, dir, steps[i]);
        if (remove_dir(path) == 0) removed++;
        else fprintf(stderr, "warning: checkpoint '%s': cannot remove this old checkpoint: %s\n", path, strerror(errno));
    }
    free(steps);
    // leftovers: interrupted writes (step_N.tmp) and directories without DONE, older than current
    DIR* d = opendir(dir);
    if (!d) return removed;
    struct dirent* e;
    char full[CKPT_PATH_MAX + 300], done[CKPT_PATH_MAX + 310];
    while ((e = readdir(d)) != NULL) {
        int s_tmp = parse_step(e->d_name, ".tmp"), s = parse_step(e->d_name, "");
        snprintf(full, sizeof full, "%s/%s", dir, e->d_name);
        snprintf(done, sizeof done, "%s/DONE", full);
        if ((s_tmp >= 0 && s_tmp != current) || (s >= 0 && s < current && !exists(done))) {
            if (remove_dir(full) == 0) removed++;
        }
    }
    closedir(d);
    return removed;
}

int checkpoint_save_fresh(const char* dir, const Config* cfg, GPT* m) {
    Optim o;
    optim_init_range(&o, m, 0, m->table.total);
    SpikeWindow lw, gw;
    spike_init(&lw, cfg->metrics.spike_window);
    spike_init(&gw, cfg->metrics.spike_window);
    CkptTrainState ts;
    memset(&ts, 0, sizeof ts);
    ts.data_seed = cfg->train.seed;
    ts.data_shuffle = cfg->data.shuffle;
    ts.loss_win = &lw;
    ts.grad_win = &gw;
    int rc = checkpoint_save(dir, 0, cfg, m, &o, &ts);
    spike_free(&lw);
    spike_free(&gw);
    optim_free(&o);
    return rc;
}
