// data/decompress.c: plain / gzip / zstd / xz files read as one stream of bytes (decompress.h).
//
// Each read runs the format's decoder over the input buffer until the caller's buffer is full or
// the file ends. The end of the file is the end of the text only at a member / frame / stream
// boundary; anywhere else it is a truncated stream (an error, never a silent short text).
#define _POSIX_C_SOURCE 200809L
#include "decompress.h"

#include <errno.h>
#include <lzma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

struct Decomp {
    char* path;             // for messages
    FILE* f;
    DecompFormat fmt;
    unsigned char* in;      // [DECOMP_IN_BYTES] compressed input; in[pos..len) not yet consumed
    size_t pos, len;
    int64_t in_off;         // the file offset of in[0]
    int file_eof;           // the file has no more bytes beyond in[len)
    int failed;             // an error was reported: every later read fails
    int in_frame;           // inside a gzip member / zstd frame (the file must not end here)
    int done;               // xz: the decoder said the end (LZMA_STREAM_END)
    z_stream z;
    ZSTD_DStream* zs;
    lzma_stream lz;
};

DecompFormat decomp_detect(const unsigned char* b, size_t n) {
    if (n >= 2 && b[0] == 0x1F && b[1] == 0x8B) return DECOMP_GZIP;
    if (n >= 4 && memcmp(b, "\x28\xB5\x2F\xFD", 4) == 0) return DECOMP_ZSTD;
    if (n >= 6 && memcmp(b, "\xFD" "7zXZ\x00", 6) == 0) return DECOMP_XZ;
    return DECOMP_PLAIN;
}

const char* decomp_format_name(DecompFormat f) {
    return f == DECOMP_GZIP ? "gzip" : f == DECOMP_ZSTD ? "zstd" : f == DECOMP_XZ ? "xz" : "plain";
}

// "error: text '<file>': <corrupt|truncated> <format> stream at compressed offset N<detail>"
static ssize_t decomp_fail(Decomp* d, const char* what, const char* detail) {
    fprintf(stderr, "error: text '%s': %s %s stream at compressed offset %lld%s\n", d->path, what,
            decomp_format_name(d->fmt), (long long)(d->in_off + (int64_t)d->pos), detail);
    d->failed = 1;
    return -1;
}

// Reads the next compressed bytes once in[] is used up.
static int decomp_fill(Decomp* d) {
    if (d->pos < d->len || d->file_eof) return 0;
    d->in_off += (int64_t)d->len;
    d->pos = d->len = 0;
    d->len = fread(d->in, 1, DECOMP_IN_BYTES, d->f);
    if (d->len < DECOMP_IN_BYTES) {
        if (ferror(d->f)) {
            fprintf(stderr, "error: text '%s': read error at offset %lld: %s\n", d->path, (long long)d->in_off, strerror(errno));
            d->failed = 1;
            return -1;
        }
        d->file_eof = 1;
    }
    return 0;
}

void decomp_close(Decomp* d) {
    if (!d) return;
    if (d->fmt == DECOMP_GZIP) inflateEnd(&d->z);
    if (d->zs) ZSTD_freeDStream(d->zs);
    if (d->fmt == DECOMP_XZ) lzma_end(&d->lz);
    if (d->f) fclose(d->f);
    free(d->in);
    free(d->path);
    free(d);
}

Decomp* decomp_open(const char* path) {
    Decomp* d = calloc(1, sizeof(Decomp));
    if (d) { d->path = strdup(path); d->in = malloc(DECOMP_IN_BYTES); }
    if (!d || !d->path || !d->in) {
        fprintf(stderr, "error: text '%s': out of memory\n", path);
        decomp_close(d);
        return NULL;
    }
    d->f = fopen(path, "rb");
    if (!d->f) {
        fprintf(stderr, "error: text '%s': cannot open: %s\n", path, strerror(errno));
        decomp_close(d);
        return NULL;
    }
    if (decomp_fill(d) != 0) { decomp_close(d); return NULL; }
    d->fmt = decomp_detect(d->in, d->len);
    int ok = 1;
    if (d->fmt == DECOMP_GZIP) ok = inflateInit2(&d->z, 15 + 16) == Z_OK;  // 16: gzip wrapper only
    else if (d->fmt == DECOMP_ZSTD) ok = (d->zs = ZSTD_createDStream()) != NULL && !ZSTD_isError(ZSTD_initDStream(d->zs));
    else if (d->fmt == DECOMP_XZ) {
        d->lz = (lzma_stream)LZMA_STREAM_INIT;
        ok = lzma_stream_decoder(&d->lz, UINT64_MAX, LZMA_CONCATENATED) == LZMA_OK;
    }
    if (!ok) {
        fprintf(stderr, "error: text '%s': cannot start the %s decoder (out of memory?)\n", path, decomp_format_name(d->fmt));
        if (d->fmt == DECOMP_XZ) d->fmt = DECOMP_PLAIN;  // nothing to lzma_end
        decomp_close(d);
        return NULL;
    }
    return d;
}

DecompFormat decomp_format(const Decomp* d) { return d->fmt; }
int64_t decomp_in_bytes(const Decomp* d) { return d->in_off + (int64_t)d->pos; }

// One decoder step into out[*got..n): the progress (bytes consumed or produced), or -1.
static int gzip_step(Decomp* d, unsigned char* out, size_t n, size_t* got) {
    if (!d->in_frame) {
        if (d->pos == d->len) return 0;  // the end of the file at a member boundary: the end
        // another member follows (gzip -c a >x; gzip -c b >>x); anything else is not gzip data
        if (d->in[d->pos] != 0x1F) return (int)decomp_fail(d, "corrupt", ": the bytes after a member are not another gzip member");
        if (inflateReset(&d->z) != Z_OK) return (int)decomp_fail(d, "corrupt", ": inflateReset failed");
        d->in_frame = 1;
    }
    d->z.next_in = d->in + d->pos;
    d->z.avail_in = (uInt)(d->len - d->pos);
    d->z.next_out = out + *got;
    d->z.avail_out = (uInt)(n - *got);
    int r = inflate(&d->z, Z_NO_FLUSH);
    size_t used = d->len - d->pos - d->z.avail_in, made = n - *got - d->z.avail_out;
    d->pos += used;
    *got += made;
    if (r == Z_STREAM_END) d->in_frame = 0;  // the member's end (its CRC and length checked): another may follow
    else if (r != Z_OK && r != Z_BUF_ERROR) {
        char msg[256];
        snprintf(msg, sizeof msg, ": %s", d->z.msg ? d->z.msg : r == Z_MEM_ERROR ? "out of memory" : "inflate failed");
        return (int)decomp_fail(d, "corrupt", msg);
    }
    return used + made > 0 || r == Z_STREAM_END;
}

static int zstd_step(Decomp* d, unsigned char* out, size_t n, size_t* got) {
    ZSTD_inBuffer ib = {d->in, d->len, d->pos};
    ZSTD_outBuffer ob = {out, n, *got};
    size_t r = ZSTD_decompressStream(d->zs, &ob, &ib);
    if (ZSTD_isError(r)) {
        char msg[256];
        snprintf(msg, sizeof msg, ": %s", ZSTD_getErrorName(r));
        return (int)decomp_fail(d, "corrupt", msg);
    }
    size_t used = ib.pos - d->pos, made = ob.pos - *got;
    d->pos = ib.pos;
    *got = ob.pos;
    // 0: a frame is decoded and flushed, the next bytes (if any) start another. (A call that did
    // nothing says nothing: past a frame's end it asks for the next frame's header.)
    if (used + made > 0) d->in_frame = r != 0;
    return used + made > 0;
}

static int xz_step(Decomp* d, unsigned char* out, size_t n, size_t* got) {
    if (d->done) return 0;
    d->lz.next_in = d->in + d->pos;
    d->lz.avail_in = d->len - d->pos;
    d->lz.next_out = out + *got;
    d->lz.avail_out = n - *got;
    // LZMA_FINISH once the whole file is in: the decoder then tells a clean end from a cut one
    lzma_ret r = lzma_code(&d->lz, d->file_eof ? LZMA_FINISH : LZMA_RUN);
    size_t used = d->len - d->pos - d->lz.avail_in, made = n - *got - d->lz.avail_out;
    d->pos += used;
    *got += made;
    d->in_frame = 1;
    if (r == LZMA_STREAM_END) { d->done = 1; d->in_frame = 0; return 1; }
    if (r == LZMA_BUF_ERROR && d->file_eof) return (int)decomp_fail(d, "truncated", " (the file ends inside an xz stream)");
    if (r != LZMA_OK && r != LZMA_BUF_ERROR)
        return (int)decomp_fail(d, "corrupt", r == LZMA_DATA_ERROR ? ": compressed data is corrupt" :
                                r == LZMA_FORMAT_ERROR ? ": not an xz stream" : r == LZMA_OPTIONS_ERROR ? ": unsupported options" :
                                r == LZMA_MEM_ERROR || r == LZMA_MEMLIMIT_ERROR ? ": out of memory" : ": lzma_code failed");
    return used + made > 0;
}

ssize_t decomp_read(Decomp* d, void* buf, size_t n) {
    if (d->failed) return -1;
    unsigned char* out = buf;
    size_t got = 0;
    if (d->fmt == DECOMP_PLAIN) {  // the sniffed bytes first, then straight from the file
        while (got < n) {
            if (decomp_fill(d) != 0) return -1;
            size_t k = d->len - d->pos < n - got ? d->len - d->pos : n - got;
            if (k == 0) break;
            memcpy(out + got, d->in + d->pos, k);
            d->pos += k;
            got += k;
        }
        return (ssize_t)got;
    }
    while (got < n) {
        if (decomp_fill(d) != 0) return -1;
        int p = d->fmt == DECOMP_GZIP ? gzip_step(d, out, n, &got) : d->fmt == DECOMP_ZSTD ? zstd_step(d, out, n, &got)
                                                                                           : xz_step(d, out, n, &got);
        if (p < 0) return -1;
        if (p == 0 && d->pos == d->len && d->file_eof) {  // nothing more will come
            if (d->in_frame)
                return decomp_fail(d, "truncated", d->fmt == DECOMP_GZIP ? " (the file ends inside a member)"
                                                  : d->fmt == DECOMP_ZSTD ? " (the file ends inside a frame)"
                                                                          : " (the file ends inside an xz stream)");
            break;
        }
        if (p == 0 && got < n && d->pos < d->len) return decomp_fail(d, "corrupt", ": the decoder is stuck");
    }
    return (ssize_t)got;
}
