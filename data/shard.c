// data/shard.c: read, validate and write llm.c token shards (format in shard.h).
// Assumes a little-endian host, as llm.c does (x86-64, aarch64).
#define _POSIX_C_SOURCE 200809L
#include "shard.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

// One line to stderr: "error: shard '<path>': <message>".
static void shard_error(const char* path, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "error: shard '%s': ", path);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

int shard_write(const char* path, const int* tokens, int64_t num_tokens) {
    if (num_tokens < 0 || num_tokens > INT32_MAX) {
        shard_error(path, "cannot write %lld tokens (the header holds an int32 count; split into more shards)",
                    (long long)num_tokens);
        return -1;
    }
    // pick the narrowest format that holds every token
    int wide = 0;
    for (int64_t i = 0; i < num_tokens; i++) {
        if (tokens[i] < 0) {
            shard_error(path, "cannot write negative token %d at offset %lld", tokens[i], (long long)i);
            return -1;
        }
        if (tokens[i] > 65535) wide = 1;
    }
    int32_t header[SHARD_HEADER_INTS];
    memset(header, 0, sizeof(header));
    header[0] = wide ? SHARD_MAGIC_U32 : SHARD_MAGIC_U16;
    header[1] = wide ? SHARD_VERSION_U32 : SHARD_VERSION_U16;
    header[2] = (int32_t)num_tokens;

    size_t plen = strlen(path);
    char* tmp = malloc(plen + 5);
    if (!tmp) { shard_error(path, "out of memory"); return -1; }
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    FILE* f = fopen(tmp, "wb");
    if (!f) {
        shard_error(path, "cannot create '%s': %s", tmp, strerror(errno));
        free(tmp);
        return -1;
    }
    int ok = fwrite(header, sizeof(header), 1, f) == 1;
    // convert in chunks so a 100M-token shard needs no second full-size buffer
    enum { CHUNK = 4096 };  // 16 KiB on the stack
    static_assert(sizeof(uint32_t) == 4 && sizeof(uint16_t) == 2, "token widths");
    uint32_t buf[CHUNK];
    for (int64_t i = 0; ok && i < num_tokens; i += CHUNK) {
        int64_t n = num_tokens - i < CHUNK ? num_tokens - i : CHUNK;
        if (wide) {
            for (int64_t j = 0; j < n; j++) buf[j] = (uint32_t)tokens[i + j];
            ok = fwrite(buf, 4, (size_t)n, f) == (size_t)n;
        } else {
            uint16_t* b16 = (uint16_t*)buf;
            for (int64_t j = 0; j < n; j++) b16[j] = (uint16_t)tokens[i + j];
            ok = fwrite(b16, 2, (size_t)n, f) == (size_t)n;
        }
    }
    // on disk before the rename makes it visible under its final name
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) ok = 0;
    if (fclose(f) != 0) ok = 0;
    if (!ok) {
        shard_error(path, "write to '%s' failed: %s", tmp, strerror(errno));
        remove(tmp);
        free(tmp);
        return -1;
    }
    if (rename(tmp, path) != 0) {
        shard_error(path, "cannot rename '%s' into place: %s", tmp, strerror(errno));
        remove(tmp);
        free(tmp);
        return -1;
    }
    free(tmp);
    return 0;
}

// Validates a header already read from a file of file_bytes bytes.
static int shard_check_header(const char* path, const int32_t* h, int64_t file_bytes, ShardHeader* out) {
    int token_bytes;
    if (h[0] == SHARD_MAGIC_U16) {
        token_bytes = 2;
        if (h[1] != SHARD_VERSION_U16) {
            shard_error(path, "version %d with magic %d (uint16 tokens); expected version %d",
                        h[1], h[0], SHARD_VERSION_U16);
            return -1;
        }
    } else if (h[0] == SHARD_MAGIC_U32) {
        token_bytes = 4;
        if (h[1] != SHARD_VERSION_U32) {
            shard_error(path, "version %d with magic %d (uint32 tokens); expected version %d",
                        h[1], h[0], SHARD_VERSION_U32);
            return -1;
        }
    } else {
        shard_error(path, "wrong magic %d (expected %d for uint16 or %d for uint32 tokens); not an llm.c token shard?",
                    h[0], SHARD_MAGIC_U16, SHARD_MAGIC_U32);
        return -1;
    }
    int64_t n = h[2];
    if (n < 0) {
        shard_error(path, "negative token count %lld in header", (long long)n);
        return -1;
    }
    int64_t want = SHARD_HEADER_BYTES + n * token_bytes;
    if (want > file_bytes) {
        shard_error(path, "header says %lld tokens (%lld bytes) but the file has only %lld bytes; truncated?",
                    (long long)n, (long long)want, (long long)file_bytes);
        return -1;
    }
    if (want < file_bytes) {
        shard_error(path, "header says %lld tokens (%lld bytes) but the file has %lld bytes; trailing garbage?",
                    (long long)n, (long long)want, (long long)file_bytes);
        return -1;
    }
    out->magic = h[0];
    out->version = h[1];
    out->token_bytes = token_bytes;
    out->num_tokens = n;
    out->file_bytes = file_bytes;
    return 0;
}

int shard_read_header(const char* path, ShardHeader* header) {
    FILE* f = fopen(path, "rb");
    if (!f) {
        shard_error(path, "cannot open: %s", strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        shard_error(path, "cannot stat: %s", strerror(errno));
        fclose(f);
        return -1;
    }
    int32_t h[SHARD_HEADER_INTS];
    if (st.st_size < SHARD_HEADER_BYTES || fread(h, sizeof(h), 1, f) != 1) {
        shard_error(path, "file has %lld bytes, too small for the %d-byte header",
                    (long long)st.st_size, SHARD_HEADER_BYTES);
        fclose(f);
        return -1;
    }
    fclose(f);
    return shard_check_header(path, h, (int64_t)st.st_size, header);
}

void shard_close(Shard* shard) {
    if (shard->map) munmap(shard->map, (size_t)shard->map_bytes);
    free(shard->path);
    memset(shard, 0, sizeof(*shard));
}

int shard_open(Shard* shard, const char* path, int vocab_size) {
    memset(shard, 0, sizeof(*shard));
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        shard_error(path, "cannot open: %s", strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        shard_error(path, "cannot stat: %s", strerror(errno));
        close(fd);
        return -1;
    }
    if (st.st_size < SHARD_HEADER_BYTES) {
        shard_error(path, "file has %lld bytes, too small for the %d-byte header",
                    (long long)st.st_size, SHARD_HEADER_BYTES);
        close(fd);
        return -1;
    }
    void* map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);  // the mapping keeps the file alive
    if (map == MAP_FAILED) {
        shard_error(path, "mmap failed: %s", strerror(errno));
        return -1;
    }
    ShardHeader hdr;
    if (shard_check_header(path, (const int32_t*)map, (int64_t)st.st_size, &hdr) != 0) {
        munmap(map, (size_t)st.st_size);
        return -1;
    }
    const unsigned char* tokens = (const unsigned char*)map + SHARD_HEADER_BYTES;
    // one sequential pass: a bad id here is a wrong tokenizer/vocab_size, better caught on load
    // than as an out-of-bounds embedding read in the middle of training
    if (vocab_size > 0) {
        int64_t n = hdr.num_tokens;
        int64_t bad = -1;
        uint32_t bad_value = 0;
        if (hdr.token_bytes == 2) {
            const uint16_t* t = (const uint16_t*)tokens;
            for (int64_t i = 0; i < n; i++)
                if (t[i] >= (uint32_t)vocab_size) { bad = i; bad_value = t[i]; break; }
        } else {
            const uint32_t* t = (const uint32_t*)tokens;
            for (int64_t i = 0; i < n; i++)
                if (t[i] >= (uint32_t)vocab_size) { bad = i; bad_value = t[i]; break; }
        }
        if (bad >= 0) {
            shard_error(path, "token %u at offset %lld (byte %lld) is >= vocab_size %d; wrong tokenizer or vocab_size?",
                        bad_value, (long long)bad,
                        (long long)(SHARD_HEADER_BYTES + bad * hdr.token_bytes), vocab_size);
            munmap(map, (size_t)st.st_size);
            return -1;
        }
    }
    shard->path = strdup(path);
    if (!shard->path) {
        shard_error(path, "out of memory");
        munmap(map, (size_t)st.st_size);
        return -1;
    }
    shard->header = hdr;
    shard->tokens = tokens;
    shard->map = map;
    shard->map_bytes = (int64_t)st.st_size;
    return 0;
}

void shard_get(const Shard* shard, int64_t start, int64_t n, int* out) {
    assert(shard->map && start >= 0 && n >= 0 && start + n <= shard->header.num_tokens);
    if (shard->header.token_bytes == 2) {
        const uint16_t* t = (const uint16_t*)shard->tokens + start;
        for (int64_t i = 0; i < n; i++) out[i] = (int)t[i];
    } else {
        const uint32_t* t = (const uint32_t*)shard->tokens + start;
        for (int64_t i = 0; i < n; i++) out[i] = (int)t[i];
    }
}
