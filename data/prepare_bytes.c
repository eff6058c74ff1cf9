// data/prepare_bytes.c: text file -> byte-level token shards (vocab 256, token = byte value).
// A stop-gap until the BPE tokenizer: every byte is one token, no merges.
//
//   prepare_bytes --input FILE --out DIR [--val-every N]
//
// The file is cut into blocks of 64 KiB; block i goes to validation when i % N == 0 (so val
// is never empty and samples the whole file), the rest to training, in order. Writes
// DIR/val_000000.bin, then DIR/train_000000.bin (a present train shard means both are done).
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "shard.h"

#define BLOCK_BYTES (64 * 1024)

static void usage(void) {
    fprintf(stderr, "usage: prepare_bytes --input FILE --out DIR [--val-every N]\n"
                    "  byte-level shards (vocab 256): every Nth 64 KiB block (N >= 2, default 20) goes to\n"
                    "  DIR/val_000000.bin, the rest to DIR/train_000000.bin\n");
}

// mkdir -p
static int make_dirs(const char* dir) {
    char* p = strdup(dir);
    if (!p) return -1;
    for (char* s = p + 1; ; s++) {
        if (*s == '/' || *s == '\0') {
            char c = *s;
            *s = '\0';
            if (mkdir(p, 0755) != 0 && errno != EEXIST) {
                fprintf(stderr, "error: prepare_bytes: cannot create directory '%s': %s\n", p, strerror(errno));
                free(p);
                return -1;
            }
            *s = c;
            if (c == '\0') break;
        }
    }
    free(p);
    return 0;
}

int main(int argc, char** argv) {
    const char* input = NULL;
    const char* out = NULL;
    long val_every = 20;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--input") == 0 && i + 1 < argc) input = argv[++i];
        else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) out = argv[++i];
        else if (strcmp(argv[i], "--val-every") == 0 && i + 1 < argc) {
            char* end;
            val_every = strtol(argv[++i], &end, 10);
            if (*end != '\0' || val_every < 2) {
                fprintf(stderr, "error: prepare_bytes: --val-every must be an integer >= 2, got '%s'\n", argv[i]);
                return 1;
            }
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage();
            return 0;
        } else {
            fprintf(stderr, "error: prepare_bytes: unknown or incomplete argument '%s'\n", argv[i]);
            usage();
            return 1;
        }
    }
    if (!input || !out) {
        usage();
        return 1;
    }

    // read the whole file: the stop-gap corpus is a few MB
    FILE* f = fopen(input, "rb");
    if (!f) {
        fprintf(stderr, "error: prepare_bytes: cannot open '%s': %s\n", input, strerror(errno));
        return 1;
    }
    size_t cap = 1 << 20, len = 0;
    unsigned char* bytes = malloc(cap);
    for (;;) {
        if (!bytes) {
            fprintf(stderr, "error: prepare_bytes: out of memory reading '%s'\n", input);
            fclose(f);
            return 1;
        }
        len += fread(bytes + len, 1, cap - len, f);
        if (len < cap) break;
        cap *= 2;
        unsigned char* grown = realloc(bytes, cap);
        if (!grown) free(bytes);
        bytes = grown;
    }
    int read_error = ferror(f);
    fclose(f);
    if (read_error) {
        fprintf(stderr, "error: prepare_bytes: read error on '%s'\n", input);
        free(bytes);
        return 1;
    }
    if (len > (size_t)INT32_MAX) {
        fprintf(stderr, "error: prepare_bytes: '%s' is over 2 GiB; one shard holds at most 2^31-1 tokens\n", input);
        free(bytes);
        return 1;
    }

    // split by blocks
    int* train = malloc((len ? len : 1) * sizeof(int));
    int* val = malloc((len ? len : 1) * sizeof(int));
    if (!train || !val) {
        fprintf(stderr, "error: prepare_bytes: out of memory\n");
        return 1;
    }
    int64_t ntrain = 0, nval = 0;
    size_t nblocks = 0;
    for (size_t b0 = 0; b0 < len; b0 += BLOCK_BYTES, nblocks++) {
        size_t b1 = b0 + BLOCK_BYTES < len ? b0 + BLOCK_BYTES : len;
        int to_val = nblocks % (size_t)val_every == 0;
        for (size_t i = b0; i < b1; i++) {
            if (to_val) val[nval++] = bytes[i];
            else train[ntrain++] = bytes[i];
        }
    }
    free(bytes);
    if (ntrain == 0) {
        fprintf(stderr, "error: prepare_bytes: '%s' has %zu bytes (%zu block(s) of 64 KiB), all went to val; "
                        "need more than 64 KiB of text\n", input, len, nblocks);
        free(train);
        free(val);
        return 1;
    }

    if (make_dirs(out) != 0) return 1;
    size_t dlen = strlen(out) + 32;
    char* train_path = malloc(dlen);
    char* val_path = malloc(dlen);
    if (!train_path || !val_path) return 1;
    snprintf(train_path, dlen, "%s/train_000000.bin", out);
    snprintf(val_path, dlen, "%s/val_000000.bin", out);
    // val first: the train shard is the "done" marker prepare scripts look for
    if (shard_write(val_path, val, nval) != 0 || shard_write(train_path, train, ntrain) != 0) return 1;

    printf("prepare_bytes: %s: %zu bytes in %zu blocks of 64 KiB, val every %ld\n", input, len, nblocks, val_every);
    printf("prepare_bytes: train %lld tokens -> %s\n", (long long)ntrain, train_path);
    printf("prepare_bytes: val   %lld tokens -> %s\n", (long long)nval, val_path);
    printf("prepare_bytes: vocab_size 256 (byte-level)\n");
    free(train);
    free(val);
    free(train_path);
    free(val_path);
    return 0;
}
