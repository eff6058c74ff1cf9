// data/prepare.c: text files -> a BPE tokenizer and llm.c token shards (the `prepare` command).
//
//   prepare --train FILE... [--val FILE...] --out DIR [--vocab-size 8192] [--tokenizer TOK]
//           [--field NAME] [--shard-tokens 100000000] [-j N] [--batch-bytes 1048576] [--stats]
//           [--quiet] [--progress]
//   prepare --decode SHARD [--tokenizer TOK]
//
// Trains a byte-level BPE on the train files (or loads --tokenizer: our tokenizer.bin, or a
// Hugging Face tokenizer.json / a directory holding one, data/hf_tokenizer.h), saves it next to
// the shards as their sidecar (DIR/tokenizer.bin, or DIR/tokenizer.json: the file's bytes
// unchanged), then encodes the train and val files, streaming, into DIR/train_000000.bin ... and
// DIR/val_000000.bin ... (data/shard.h; uint32 tokens when the vocabulary exceeds 65536).
// Documents: a line holding only <|endoftext|> separates documents (a file without one is one
// document); in a .jsonl file each line is a document (its string field NAME, default "text").
// An end-of-text token is written before every document. --decode prints a shard back as text
// (end-of-text as its token text). Input files may be gzip, zstd or xz compressed (told by their
// first bytes; data/decompress.h), read as a stream.
//
// -j N (default: the cores online) encodes on N threads (data/encode_pool.h: a reader, N workers
// with a tokenizer each, the writer in document order), so the shards are the same bytes for every
// N; -j 1 is the single-threaded stream (tokenizer_stream_file), the reference the tests compare with.
//
// Every file appears atomically (written as NAME.tmp, then renamed). Old train_*/val_* shards
// in DIR are removed first (they would belong to another tokenizer), and train_000000.bin is
// renamed into place last: its presence means the whole set is complete. A run that fails while
// encoding (a corrupt stream, a bad line) removes the shards it wrote.
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "encode_pool.h"
#include "shard.h"
#include "tokenizer.h"

static void usage(FILE* f) {
    fprintf(f,
        "usage: prepare --train FILE... [--val FILE...] --out DIR [options]\n"
        "       prepare --decode SHARD [--tokenizer TOK]\n"
        "\n"
        "Trains a byte-level BPE tokenizer on the train files (or loads one), saves it next to the shards\n"
        "(DIR/tokenizer.bin, or DIR/tokenizer.json for a Hugging Face one), and encodes the texts into\n"
        "llm.c token shards DIR/train_NNNNNN.bin and DIR/val_NNNNNN.bin. In text files a line holding\n"
        "only <|endoftext|> separates documents (a file without one is a single document); in a .jsonl\n"
        "file every line is a document. An end-of-text token is written before every document. Files may\n"
        "be gzip, zstd or xz compressed (told by their first bytes; name.jsonl.gz etc. count as .jsonl).\n"
        "\n"
        "options:\n"
        "  --train FILE...       text files for training the tokenizer and for the train shards\n"
        "  --val FILE...         text files for the validation shards (optional)\n"
        "  --out DIR             output directory (created if missing); old shards in it are removed\n"
        "  --vocab-size N        vocabulary to train: 256 bytes + merges + 1 end-of-text (default 8192);\n"
        "                        above 65536 the shards hold uint32 tokens\n"
        "  --tokenizer FILE      use this tokenizer instead of training one: our tokenizer.bin, or a Hugging\n"
        "                        Face tokenizer.json (byte-level BPE: GPT-2, Qwen2/3, Llama 3; or a directory\n"
        "                        holding one); with --decode: the tokenizer to decode with (default: the\n"
        "                        tokenizer.bin or tokenizer.json in the shard's directory; llm.c's\n"
        "                        gpt2_tokenizer.bin works too)\n"
        "  --field NAME          the string field holding each document in .jsonl files (default text)\n"
        "  --shard-tokens N      tokens per shard (default 100000000)\n"
        "  -j N, --jobs N        encode on N threads (default: the cores online); the shards are the same\n"
        "                        bytes for every N; -j 1 reads and encodes on one thread\n"
        "  --batch-bytes N       text per unit of work with -j N >= 2 (default 1048576); at most 2N + 1\n"
        "                        units are in memory (a longer document is cut where a space follows a\n"
        "                        non-space byte; a tokenizer.json's documents are held whole)\n"
        "  --stats               print unigram statistics: the entropy of the train and val token\n"
        "                        frequencies and the cross-entropy of val under train's frequencies\n"
        "                        (nats/token; the loss of a model that only knows token frequencies)\n"
        "  --quiet               no progress line (percent, MB of the files, MB/s, documents, tokens/s,\n"
        "                        elapsed time and ETA; shown when stderr is a terminal)\n"
        "  --progress            the progress line also when stderr is not a terminal (after 1 s, then every 10 s)\n"
        "  --decode SHARD        print the shard's tokens as text on stdout, then exit\n"
        "  -h, --help            this text\n");
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// mkdir -p
static int make_dirs(const char* dir) {
    char* p = strdup(dir);
    if (!p) return -1;
    for (char* s = p + 1;; s++) {
        if (*s == '/' || *s == '\0') {
            char c = *s;
            *s = '\0';
            struct stat st;
            if (mkdir(p, 0755) != 0 && !(errno == EEXIST && stat(p, &st) == 0 && S_ISDIR(st.st_mode))) {
                fprintf(stderr, "error: prepare: cannot create directory '%s': %s\n", p,
                        errno == EEXIST ? "a file of that name exists" : strerror(errno));
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

// ---- encoding one split into shards --------------------------------------------------------------

typedef struct {
    const Tokenizer* tok;
    const char* out_dir;
    const char* split;        // "train" or "val"
    const char* field;        // the document field of .jsonl files
    int* buf;                 // the shard being filled, grown up to cap
    int64_t n, bufcap, cap;
    int shards;               // shards written so far
    int64_t docs, bytes, tokens;
    int64_t* counts;          // [vocab] token frequencies (for --stats)
    int* scratch;             // ids of one piece
    size_t scratch_cap;
    int jobs;                 // -j: 1 the single-threaded stream, else encode_pool_run on toks[0..jobs)
    Tokenizer* toks;
    size_t batch_bytes;
    // progress
    int show;                 // 0: none; 1: a terminal line rewritten in place; 2: a line after 1 s, then every 10 s (--progress)
    int64_t done, total;
    double t0, last;
} Enc;

// train_000000.bin is written under a .pending name and renamed last (see the top comment)
static void shard_path(const Enc* e, int idx, char* path, size_t size) {
    snprintf(path, size, "%s/%s_%06d.bin%s", e->out_dir, e->split, idx,
             (idx == 0 && strcmp(e->split, "train") == 0) ? ".pending" : "");
}

static int enc_flush(Enc* e) {
    char path[4096];
    shard_path(e, e->shards, path, sizeof(path));
    if (shard_write(path, e->buf, e->n) != 0) return -1;
    e->shards++;
    e->n = 0;
    return 0;
}

static inline int enc_push(Enc* e, int id) {
    if (e->n == e->bufcap) {  // grow the shard buffer: small corpora need no 100M-token buffer
        int64_t c = e->bufcap ? e->bufcap * 2 : (int64_t)1 << 20;
        if (c > e->cap) c = e->cap;
        int* g = realloc(e->buf, (size_t)c * sizeof(int));
        if (!g) { fprintf(stderr, "error: prepare: out of memory for a shard of %lld tokens\n", (long long)c); return -1; }
        e->buf = g;
        e->bufcap = c;
    }
    e->buf[e->n++] = id;
    e->counts[id]++;
    e->tokens++;
    return e->n == e->cap ? enc_flush(e) : 0;
}

static int enc_doc(void* ctx) {
    Enc* e = ctx;
    e->docs++;
    return enc_push(e, tokenizer_eot(e->tok));
}

static int enc_piece(void* ctx, const unsigned char* p, size_t n) {
    Enc* e = ctx;
    if (n > e->scratch_cap) {
        int* g = realloc(e->scratch, n * sizeof(int));
        if (!g) { fprintf(stderr, "error: prepare: out of memory\n"); return -1; }
        e->scratch = g;
        e->scratch_cap = n;
    }
    size_t m = tokenizer_encode_piece(e->tok, p, n, e->scratch);
    for (size_t i = 0; i < m; i++)
        if (enc_push(e, e->scratch[i]) != 0) return -1;
    e->bytes += (int64_t)n;
    return 0;
}

// seconds as "12s", "3m05s" or "2h07m"
static void fmt_duration(double s, char* out, size_t size) {
    long t = s > 0 ? (long)(s + 0.5) : 0;
    if (t < 60) snprintf(out, size, "%lds", t);
    else if (t < 3600) snprintf(out, size, "%ldm%02lds", t / 60, t % 60);
    else snprintf(out, size, "%ldh%02ldm", t / 3600, (t % 3600) / 60);
}

// "encoding train  42.0%  123.4 MB  35.2 MB/s  1189 docs  1.52 M tokens/s  elapsed 3m30s  ETA 4m50s":
// percent and MB of the files read (compressed bytes for a compressed file), documents and tokens
// written so far; the ETA is the file bytes left over the rate so far (shown after 1 s; the final
// line has none). A terminal gets the line rewritten in place; --progress on a non-terminal, a line
// after 1 s, then every 10 s.
static void enc_progress_line(Enc* e, int final) {
    double dt = now_s() - e->t0;
    double pct = e->total > 0 ? 100.0 * (double)e->done / (double)e->total : 100.0;
    double rate = dt > 0 ? (double)e->done / dt : 0.0;
    char el[32], eta[48] = "";
    fmt_duration(dt, el, sizeof el);
    if (!final && dt >= 1.0 && rate > 0 && e->total > e->done) {
        char t[32];
        fmt_duration((double)(e->total - e->done) / rate, t, sizeof t);
        snprintf(eta, sizeof eta, "  ETA %s", t);
    }
    fprintf(stderr, "%sencoding %-5s %5.1f%% %8.1f MB %7.1f MB/s %8lld docs %7.2f M tokens/s  elapsed %s%s%s",
            e->show == 1 ? "\r" : "", e->split, pct, (double)e->done / 1e6, rate / 1e6, (long long)e->docs,
            dt > 0 ? (double)e->tokens / dt / 1e6 : 0.0, el, eta, final || e->show == 2 ? "\n" : "\033[K");
    fflush(stderr);
}

static void enc_progress(void* ctx, size_t got) {
    Enc* e = ctx;
    e->done += (int64_t)got;
    if (!e->show) return;
    double t = now_s();
    if (t - e->last >= (e->show == 1 ? 0.1 : e->last == e->t0 ? 1.0 : 10.0)) {
        e->last = t;
        enc_progress_line(e, 0);
    }
}

// encode_pool_run's sink: a batch's ids in document order (ENCODE_POOL_DOC: a document begins)
static int enc_batch(void* ctx, const int* ids, size_t n, int64_t text_bytes, int64_t in_bytes) {
    Enc* e = ctx;
    for (size_t i = 0; i < n; i++)
        if ((ids[i] == ENCODE_POOL_DOC ? enc_doc(e) : enc_push(e, ids[i])) != 0) return -1;
    e->bytes += text_bytes;
    enc_progress(e, (size_t)in_bytes);
    return 0;
}

static int encode_split(Enc* e, char** files, int nfiles) {
    e->t0 = e->last = now_s();
    for (int i = 0; i < nfiles; i++) {
        struct stat st;
        if (stat(files[i], &st) == 0) e->total += (int64_t)st.st_size;
    }
    if (e->jobs > 1) {
        EncodePoolSink sink = {.batch = enc_batch, .ctx = e};
        if (encode_pool_run(files, nfiles, e->field, e->toks, e->jobs, e->batch_bytes, &sink) != 0) return -1;
    } else {
        TokenizerStream st = {.doc_begin = enc_doc, .piece = enc_piece, .progress = enc_progress, .ctx = e,
                              .tok = e->tok, .jsonl_field = e->field};
        for (int i = 0; i < nfiles; i++)
            if (tokenizer_stream_file(files[i], &st) != 0) return -1;
    }
    if (e->show) enc_progress_line(e, 1);
    if (e->tokens == 0) {
        fprintf(stderr, "error: prepare: the %s files hold no text (first: '%s')\n", e->split, files[0]);
        return -1;
    }
    if (e->n > 0 && enc_flush(e) != 0) return -1;
    return 0;
}

static void enc_summary(const Enc* e) {
    int64_t text_tokens = e->tokens - e->docs;
    printf("%s: %lld documents, %lld bytes, %lld tokens (%lld end-of-text), %.3f bytes/token, %d shard%s\n",
           e->split, (long long)e->docs, (long long)e->bytes, (long long)e->tokens, (long long)e->docs,
           text_tokens > 0 ? (double)e->bytes / (double)text_tokens : 0.0, e->shards, e->shards == 1 ? "" : "s");
}

// entropy of a frequency table, nats
static double entropy(const int64_t* c, int V, int64_t N) {
    double h = 0.0;
    for (int i = 0; i < V; i++)
        if (c[i] > 0) { double p = (double)c[i] / (double)N; h -= p * log(p); }
    return h;
}

static void print_stats(const Enc* tr, const Enc* va, int V) {
    printf("stats: unigram entropy (nats/token, end-of-text included): train %.4f", entropy(tr->counts, V, tr->tokens));
    if (va && va->tokens > 0) {
        // val cross-entropy under train frequencies, add-one smoothed so unseen tokens stay finite
        double h = 0.0;
        int64_t unseen = 0;
        for (int i = 0; i < V; i++) {
            if (va->counts[i] == 0) continue;
            double p = ((double)tr->counts[i] + 1.0) / ((double)tr->tokens + V);
            h -= (double)va->counts[i] * log(p);
            if (tr->counts[i] == 0) unseen += va->counts[i];
        }
        h /= (double)va->tokens;
        printf(", val %.4f; val under train frequencies (add-one) %.4f; val tokens unseen in train %lld",
               entropy(va->counts, V, va->tokens), h, (long long)unseen);
    }
    printf("; uniform ln(V) %.4f\n", log((double)V));
}

// removes DIR/{train,val}_NNNNNN.bin[.pending][.tmp]: shards of an earlier run (another tokenizer),
// or (report 0: silently) those of this run when it failed
static int remove_old_shards(const char* dir, int report) {
    DIR* d = opendir(dir);
    if (!d) { fprintf(stderr, "error: prepare: cannot list '%s': %s\n", dir, strerror(errno)); return -1; }
    int removed = 0, rc = 0;
    struct dirent* ent;
    while ((ent = readdir(d))) {
        const char* nm = ent->d_name;
        size_t pre = strncmp(nm, "train_", 6) == 0 ? 6 : strncmp(nm, "val_", 4) == 0 ? 4 : 0;
        if (!pre || strlen(nm) < pre + 10) continue;
        int digits = 1;
        for (size_t i = pre; i < pre + 6; i++) digits &= nm[i] >= '0' && nm[i] <= '9';
        const char* rest = nm + pre + 6;
        if (!digits || (strcmp(rest, ".bin") != 0 && strcmp(rest, ".bin.pending") != 0 && strcmp(rest, ".bin.tmp") != 0 &&
                        strcmp(rest, ".bin.pending.tmp") != 0))
            continue;
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", dir, nm);
        if (unlink(path) != 0) {
            fprintf(stderr, "error: prepare: cannot remove old shard '%s': %s\n", path, strerror(errno));
            rc = -1;
            break;
        }
        removed++;
    }
    closedir(d);
    if (removed && report) printf("prepare: removed %d old shard%s from %s\n", removed, removed == 1 ? "" : "s", dir);
    return rc;
}

// What the first bytes of a file say it is when it is not text (NULL: nothing known). prepare reads
// UTF-8 text, plain or gzip/zstd/xz compressed; a bzip2 file, an archive or a token shard read as
// text would make shards of noise.
static const char* binary_kind(const unsigned char* b, size_t n, const char** fix) {
    *fix = "";
    // (gzip, zstd and xz are read: data/decompress.h)
    if (n >= 10 && b[0] == 'B' && b[1] == 'Z' && b[2] == 'h' && b[3] >= '1' && b[3] <= '9' &&
        (memcmp(b + 4, "\x31\x41\x59\x26\x53\x59", 6) == 0 || memcmp(b + 4, "\x17\x72\x45\x38\x50\x90", 6) == 0)) {
        *fix = ": decompress it first (bunzip2 -k)";
        return "bzip2-compressed data";
    }
    if (n >= 4 && b[0] == 'P' && b[1] == 'K' && ((b[2] == 3 && b[3] == 4) || (b[2] == 5 && b[3] == 6) || (b[2] == 7 && b[3] == 8))) {
        *fix = ": unpack it first (unzip) and pass the text files";
        return "a zip archive";
    }
    if (n >= 8) {
        int32_t h[2];
        memcpy(h, b, 8);
        if ((h[0] == SHARD_MAGIC_U16 && h[1] == 1) || (h[0] == SHARD_MAGIC_U32 && h[1] == 7)) {
            *fix = ": it is already tokens (train_gpt reads it through [data] train_glob)";
            return "an llm.c token shard";
        }
    }
    if (n >= 2 && ((b[0] == 0xFF && b[1] == 0xFE) || (b[0] == 0xFE && b[1] == 0xFF))) {
        *fix = ": convert it to UTF-8 (iconv -f UTF-16 -t UTF-8)";
        return "UTF-16 text";
    }
    return NULL;
}

static int check_input(const char* what, const char* path) {
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "error: prepare: %s file '%s': %s\n", what, path, strerror(errno));
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        fprintf(stderr, "error: prepare: %s file '%s' is not a regular file\n", what, path);
        return -1;
    }
    FILE* f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "error: prepare: %s file '%s': %s\n", what, path, strerror(errno));
        return -1;
    }
    unsigned char head[16];
    size_t n = fread(head, 1, sizeof head, f);
    fclose(f);
    const char* fix;
    const char* kind = binary_kind(head, n, &fix);
    if (kind) {  // (text with a NUL byte elsewhere is refused while it is read: tokenizer_stream_file)
        fprintf(stderr, "error: prepare: %s file '%s' looks like %s (its first bytes), not UTF-8 text%s\n", what, path, kind, fix);
        return -1;
    }
    return 0;
}

// ---- --decode ----------------------------------------------------------------------------------

static int decode_shard(const char* shard_path_arg, const char* tok_path) {
    char deflt[4096];
    if (!tok_path) {  // the sidecar: tokenizer.bin, else tokenizer.json
        const char* slash = strrchr(shard_path_arg, '/');
        int dl = slash ? (int)(slash - shard_path_arg) : 1;
        const char* dir = slash ? shard_path_arg : ".";
        snprintf(deflt, sizeof(deflt), "%.*s/tokenizer.bin", dl, dir);
        if (access(deflt, F_OK) != 0) {
            snprintf(deflt, sizeof(deflt), "%.*s/tokenizer.json", dl, dir);
            if (access(deflt, F_OK) != 0) snprintf(deflt, sizeof(deflt), "%.*s/tokenizer.bin", dl, dir);
        }
        tok_path = deflt;
    }
    Tokenizer tok;
    if (tokenizer_load(&tok, tok_path) != 0) return 1;
    Shard sh;
    if (shard_open(&sh, shard_path_arg, tokenizer_vocab_size(&tok)) != 0) { tokenizer_free(&tok); return 1; }
    enum { CHUNK = 65536 };
    int* ids = malloc(CHUNK * sizeof(int));
    char* text = NULL;
    int rc = ids ? 0 : 1;
    for (int64_t i = 0; rc == 0 && i < sh.header.num_tokens; i += CHUNK) {
        int64_t n = sh.header.num_tokens - i < CHUNK ? sh.header.num_tokens - i : CHUNK;
        shard_get(&sh, i, n, ids);
        size_t len = 0;
        if (tokenizer_decode(&tok, ids, (size_t)n, &text, &len) != 0) rc = 1;
        else if (fwrite(text, 1, len, stdout) != len) {
            fprintf(stderr, "error: prepare: writing the decoded text failed: %s\n", strerror(errno));
            rc = 1;
        }
    }
    if (fflush(stdout) != 0) rc = 1;
    free(text);
    free(ids);
    shard_close(&sh);
    tokenizer_free(&tok);
    return rc;
}

// ---- main ---------------------------------------------------------------------------------------

static int parse_int(const char* opt, const char* s, long long lo, long long hi, long long* out) {
    char* end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end != '\0' || end == s || v < lo || v > hi) {
        fprintf(stderr, "error: prepare: %s must be an integer in [%lld, %lld], got '%s'\n", opt, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

// train and val have room for argc file names each
static int prepare_main(int argc, char** argv, char** train, char** val) {
    int ntrain = 0, nval = 0, stats = 0, quiet = 0, progress = 0;
    const char *out = NULL, *tok_path = NULL, *decode = NULL, *field = "text";
    long long vocab = 8192, shard_tokens = 100000000, batch_bytes = 1 << 20;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    long long jobs = cores >= 1 ? (cores < 256 ? cores : 256) : 1;
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        if (strcmp(a, "--train") == 0 || strcmp(a, "--val") == 0) {
            int is_train = a[2] == 't';
            int start = i;
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) {
                if (is_train) train[ntrain++] = argv[++i];
                else val[nval++] = argv[++i];
            }
            if (i == start) { fprintf(stderr, "error: prepare: %s needs at least one file\n", a); return 1; }
        } else if (strcmp(a, "--out") == 0 && i + 1 < argc) out = argv[++i];
        else if (strcmp(a, "--tokenizer") == 0 && i + 1 < argc) tok_path = argv[++i];
        else if (strcmp(a, "--decode") == 0 && i + 1 < argc) decode = argv[++i];
        else if (strcmp(a, "--field") == 0 && i + 1 < argc) field = argv[++i];
        else if (strcmp(a, "--vocab-size") == 0 && i + 1 < argc) {
            if (parse_int(a, argv[++i], 257, 1 << 30, &vocab) != 0) return 1;
        } else if (strcmp(a, "--shard-tokens") == 0 && i + 1 < argc) {
            if (parse_int(a, argv[++i], 1, 0x7fffffff, &shard_tokens) != 0) return 1;
        } else if ((strcmp(a, "-j") == 0 || strcmp(a, "--jobs") == 0) && i + 1 < argc) {
            if (parse_int(a, argv[++i], 1, 256, &jobs) != 0) return 1;
        } else if (strcmp(a, "--batch-bytes") == 0 && i + 1 < argc) {
            if (parse_int(a, argv[++i], 1, (long long)1 << 30, &batch_bytes) != 0) return 1;
        } else if (strcmp(a, "--stats") == 0) stats = 1;
        else if (strcmp(a, "--quiet") == 0) quiet = 1;
        else if (strcmp(a, "--progress") == 0) progress = 1;
        else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) { usage(stdout); return 0; }
        else {
            fprintf(stderr, "error: prepare: unknown or incomplete argument '%s' (see prepare --help)\n", a);
            return 1;
        }
    }
    if (decode) return decode_shard(decode, tok_path);
    if (ntrain == 0 || !out) {
        fprintf(stderr, "error: prepare: --train FILE... and --out DIR are required (see prepare --help)\n");
        return 1;
    }
    for (int i = 0; i < ntrain; i++) if (check_input("train", train[i]) != 0) return 1;
    for (int i = 0; i < nval; i++) if (check_input("val", val[i]) != 0) return 1;
    if (make_dirs(out) != 0) return 1;
    if (access(out, W_OK) != 0) {
        fprintf(stderr, "error: prepare: output directory '%s' is not writable: %s\n", out, strerror(errno));
        return 1;
    }

    // 1. the tokenizer
    Tokenizer tok;
    double t0 = now_s();
    if (tok_path) {
        if (tokenizer_load(&tok, tok_path) != 0) return 1;
        if (!tok.can_encode) {
            fprintf(stderr, "error: prepare: tokenizer '%s' is an llm.c file without merges; it can decode, not encode\n",
                    tok_path);
            return 1;
        }
        if (tokenizer_eot(&tok) < 0) {
            fprintf(stderr, "error: prepare: tokenizer '%s' has no end-of-text token (looked for <|endoftext|>, "
                            "<|end_of_text|>, </s>, <eos>); every document starts with one\n", tok_path);
            tokenizer_free(&tok);
            return 1;
        }
        printf("prepare: tokenizer %s: %s, vocab_size %d, %d merges, end-of-text id %d\n", tok_path,
               tokenizer_is_hf(&tok) ? "Hugging Face tokenizer.json" : "ours", tokenizer_vocab_size(&tok), tok.n_merges,
               tokenizer_eot(&tok));
    } else {
        int64_t total = 0;
        for (int i = 0; i < ntrain; i++) {
            struct stat st;
            if (stat(train[i], &st) == 0) total += st.st_size;
        }
        printf("prepare: training a BPE tokenizer, vocab_size %lld, on %d file%s (%.1f MB)\n", vocab, ntrain,
               ntrain == 1 ? "" : "s", (double)total / 1e6);
        fflush(stdout);
        if (tokenizer_train_field(&tok, (const char* const*)train, ntrain, (int)vocab, field) != 0) return 1;
        printf("prepare: tokenizer trained in %.2f s: %d merges\n", now_s() - t0, tok.n_merges);
    }
    // the sidecar: which tokenizer made the shards (a tokenizer.json is copied byte for byte); the
    // other kind's file from an earlier run would contradict it, so it goes
    char path[4096], other[4096];
    int hf = tokenizer_is_hf(&tok);
    snprintf(path, sizeof(path), "%s/%s", out, hf ? "tokenizer.json" : "tokenizer.bin");
    snprintf(other, sizeof(other), "%s/%s", out, hf ? "tokenizer.bin" : "tokenizer.json");
    if (tok_path && strcmp(tok_path, path) == 0) printf("prepare: %s is the tokenizer itself; kept\n", path);
    else if (tokenizer_save(&tok, path) != 0) return 1;
    if (unlink(other) == 0) printf("prepare: removed %s (another tokenizer's sidecar)\n", other);
    printf("prepare: wrote %s\n", path);
    fflush(stdout);

    // 2. the shards; with -j N, every worker its own copy of the tokenizer (encoding fills its
    // cache), loaded from the sidecar just written
    if (remove_old_shards(out, 1) != 0) return 1;
    const int V = tokenizer_vocab_size(&tok);
    Tokenizer* toks = NULL;
    if (jobs > 1) {
        toks = calloc((size_t)jobs, sizeof(Tokenizer));
        if (!toks) { fprintf(stderr, "error: prepare: out of memory for %lld tokenizers\n", jobs); return 1; }
        for (int w = 0; w < jobs; w++) {
            if (tokenizer_load(&toks[w], path) != 0) return 1;
            if (tokenizer_vocab_size(&toks[w]) != V) {
                fprintf(stderr, "error: prepare: '%s' read back has vocab_size %d, not %d\n", path, tokenizer_vocab_size(&toks[w]), V);
                return 1;
            }
        }
    }
    Enc tr = {.tok = &tok, .out_dir = out, .split = "train", .field = field, .cap = shard_tokens,
               .show = quiet ? 0 : isatty(2) ? 1 : progress ? 2 : 0, .jobs = (int)jobs, .toks = toks,
               .batch_bytes = (size_t)batch_bytes};
    Enc va = tr;
    va.split = "val";
    tr.counts = calloc((size_t)V, sizeof(int64_t));
    va.counts = calloc((size_t)V, sizeof(int64_t));
    if (!tr.counts || !va.counts) { fprintf(stderr, "error: prepare: out of memory\n"); return 1; }
    double t1 = now_s();
    int failed = encode_split(&tr, train, ntrain) != 0;
    if (!failed && nval > 0) {
        va.buf = tr.buf;  // train's last shard is written: reuse the buffer
        va.bufcap = tr.bufcap;
        tr.buf = NULL;
        failed = encode_split(&va, val, nval) != 0;
    }
    if (failed) {  // (the failure said why) no shard of a half-read input stays under a final name
        remove_old_shards(out, 0);
        return 1;
    }
    // commit: train_000000.bin appears last
    char pending[4096];
    shard_path(&tr, 0, pending, sizeof(pending));
    snprintf(path, sizeof(path), "%s/train_000000.bin", out);
    if (rename(pending, path) != 0) {
        fprintf(stderr, "error: prepare: cannot rename '%s' to '%s': %s\n", pending, path, strerror(errno));
        return 1;
    }
    double dt = now_s() - t1;
    printf("prepare: encoded %.1f MB in %.2f s (%.1f MB/s) into %s\n", (double)(tr.done + va.done) / 1e6, dt,
           dt > 0 ? (double)(tr.done + va.done) / 1e6 / dt : 0.0, out);
    enc_summary(&tr);
    if (nval > 0) enc_summary(&va);
    if (stats) print_stats(&tr, nval > 0 ? &va : NULL, V);
    free(tr.buf); free(va.buf); free(tr.counts); free(va.counts); free(tr.scratch); free(va.scratch);
    for (int w = 0; toks && w < jobs; w++) tokenizer_free(&toks[w]);
    free(toks);
    tokenizer_free(&tok);
    return 0;
}

int main(int argc, char** argv) {
    char** train = malloc((size_t)argc * sizeof(char*));
    char** val = malloc((size_t)argc * sizeof(char*));
    int rc = train && val ? prepare_main(argc, argv, train, val) : 1;
    free(train);
    free(val);
    return rc;
}
