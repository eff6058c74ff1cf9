// train/checkpoint.c: checkpoint files: write (atomic), verify, load, list, prune.
// Format: docs/formats.md ("Checkpoints"); the API and the write protocol: checkpoint.h.
// Assumes a little-endian host, as the token shards do.
#define _GNU_SOURCE   // open_memstream, nanosleep
#include "checkpoint.h"

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
static void ck_pause(void) {
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
        snprintf(msg, sizeof msg, "kind %u, expected %u (%s)", k, kind, kind == CKPT_KIND_MODEL ? "model" : "rank state");
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
int checkpoint_write_model(const char* dir, int step, const Config* cfg, const GPT* m) {
    char tmp[CKPT_PATH_MAX], path[CKPT_PATH_MAX + 32];
    tmp_path(tmp, sizeof tmp, dir, step);
    const ParamTable* t = &m->table;

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
    float* host = malloc(chunk * sizeof(float));
    if (!host) { fclose(w.f); unlink(path); return ck_error(path, "out of memory"); }
    while (done < t->total) {
        size_t n = t->total - done < chunk ? t->total - done : chunk;
        ops_to_host(host, m->params + done, n * sizeof(float));
        w_put(&w, host, n * sizeof(float));
        if (done < t->total / 2 && done + n >= t->total / 2) { fflush(w.f); ck_pause(); }
        done += n;
    }
    free(host);
    if (w_close(&w, CKPT_KIND_MODEL) != 0) return -1;
    ck_pause();

    // config.ini: the resolved config, exactly what config_write prints
    char* text = NULL;
    size_t len = 0;
    FILE* mf = open_memstream(&text, &len);
    if (!mf) return ck_error(path, "out of memory");
    config_write(cfg, mf);
    fclose(mf);
    snprintf(path, sizeof path, "%s/config.ini", tmp);
    int rc = write_text(path, "config", text, len);
    free(text);
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
int checkpoint_write_rank(const char* dir, int step, int rank, int nproc, const Optim* o,
                          size_t offset, size_t count, const CkptTrainState* st) {
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
    w_u64(&w, offset);
    w_u64(&w, count);
    w_spike(&w, st->loss_win);
    w_spike(&w, st->grad_win);
    size_t chunk = (size_t)1 << 20;
    float* host = malloc(chunk * sizeof(float));
    if (!host) { fclose(w.f); unlink(path); return ck_error(path, "out of memory"); }
    for (int which = 0; which < 2; which++) {
        const float* src = (which == 0 ? o->m : o->v) + (offset - o->lo);   // o holds [lo, hi)
        for (size_t done = 0; done < count; done += chunk) {
            size_t n = count - done < chunk ? count - done : chunk;
            ops_to_host(host, src + done, n * sizeof(float));
            w_put(&w, host, n * sizeof(float));
        }
        if (which == 0) { fflush(w.f); ck_pause(); }
    }
    free(host);
    if (w_close(&w, CKPT_KIND_RANK) != 0) return -1;
    ck_pause();
    return 0;
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
    if (r_open(&r, path, strcmp(name, "model.bin") == 0 ? CKPT_KIND_MODEL : CKPT_KIND_RANK) != 0) return -1;
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
    for (int i = -2; i < nproc && rc == 0; i++) {
        char name[32];
        if (i == -2) snprintf(name, sizeof name, "model.bin");
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

static int agree_alone(void* ctx, int failed) { (void)ctx; return failed != 0; }

int checkpoint_save_ranks(const char* dir, int step, const Config* cfg, const GPT* m, const Optim* o,
                          const CkptTrainState* st, int rank, int nproc, CkptAgree agree, void* ctx) {
    if (!agree) agree = agree_alone;
    // the directory exists before anyone writes into it
    if (agree(ctx, rank == 0 && checkpoint_begin(dir, step) != 0)) return -1;
    int failed = rank == 0 && checkpoint_write_model(dir, step, cfg, m) != 0;
    if (!failed) failed = checkpoint_write_rank(dir, step, rank, nproc, o, o->lo, o->hi - o->lo, st) != 0;
    failed = agree(ctx, failed);
    if (rank == 0) {   // DONE only when every rank wrote its file
        if (!failed && checkpoint_commit(dir, step, nproc) != 0) failed = 1;
        if (failed) checkpoint_abort(dir, step);
    }
    return agree(ctx, failed) ? -1 : 0;   // every rank learns the outcome
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
            int is_model = strcmp(name, "model.bin") == 0;
            int r_idx = -1;
            if (!is_model && sscanf(name, "rank_%d.bin", &r_idx) != 1) {
                rc = ck_error(done, "lists an unknown file '%s'", name);
                break;
            }
            Reader r;
            rc = r_open(&r, fpath, is_model ? CKPT_KIND_MODEL : CKPT_KIND_RANK);
            if (rc == 0) {
                got_size = CKPT_HEADER_BYTES + r.payload;
                got_crc = r.want_crc;
                rc = r_skip_rest(&r);
                if (rc == 0) rc = r_close(&r);
                else fclose(r.f);
            }
            if (is_model) have_model = 1;
            else n_rank++;
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
    if (h->rank != f || h->nproc < 1 || f >= h->nproc || (nproc > 0 && h->nproc != nproc)) {
        fclose(r->f);
        return ck_error(file, "says it was written by rank %d of %d processes, but it is rank file %d of a checkpoint of %d "
                        "(a file from another checkpoint?)", h->rank, h->nproc, f, nproc > 0 ? nproc : h->nproc);
    }
    if (h->off > total || h->cnt > total - h->off) {
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
    ops_from_host(o->m, host_m, cnt * sizeof(float));
    ops_from_host(o->v, host_v, cnt * sizeof(float));
    o->t = h0.t;
    if (st) {
        st->step = (int)h0.step;
        st->nonfinite_run = h0.nonfinite;
        st->lr = h0.lr;
        st->data_shuffle = h0.shuffle;
        st->data_seed = h0.seed;
        st->data.epoch = h0.pos[0];
        st->data.shard_idx = h0.pos[1];
        st->data.batch_idx = h0.pos[2];
        st->ckpt_nproc = nproc;
        st->ckpt_zero_stage = nproc > 1 ? zero_stage : 0;
    }
    rc = 0;
done:
    free(heads); free(src); free(host_m); free(host_v);
    return rc;
}

int checkpoint_load(const char* path, GPT* m, Optim* o, CkptTrainState* st, int rank, int nproc) {
    char file[CKPT_PATH_MAX + 32];
    const ParamTable* t = &m->table;
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
    ops_from_host(m->params, host, t->total * sizeof(float));
    gpt_params_changed(m, 0);   // the compute copy of the weights follows (again below, with t)
    if (!o) { free(host); return 0; }

    free(host);
    (void)nproc;   // the reader's process count: any count may read any checkpoint (elastic resume)
    if (load_rank_state(path, o, st, rank, t->total) != 0) return -1;
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
