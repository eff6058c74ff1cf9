// data/encode_pool.c: prepare's parallel encoder (encode_pool.h): a reader thread, N worker
// threads and the calling thread as the in-order writer, around one mutex.
#define _POSIX_C_SOURCE 200809L
#include "encode_pool.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    size_t off, len;          // the document's text in the batch: text[off .. off + len)
    int file;                 // files[file] (messages)
    int64_t doc_no, end_off;  // as tokenizer_read_docs gave them (messages)
    int cont;                 // continues the previous batch's last document (cut there): no end-of-text
} PoolDoc;

typedef struct PoolBatch {
    int64_t seq;              // its place in the output
    unsigned char* text;      // [len] the documents' text, back to back
    size_t len, cap;
    PoolDoc* docs;            // [ndocs]
    size_t ndocs, docs_cap;
    int open;                 // docs[ndocs - 1] still takes text
    int64_t in_bytes;         // file bytes read while it filled
    int* ids;                 // [nids] the worker's output: ENCODE_POOL_DOC, then the document's ids, ...
    size_t nids, ids_cap;
    struct PoolBatch* next;   // in the todo queue or the done list
} PoolBatch;

typedef struct {
    char* const* files;
    int nfiles;
    const char* field;
    Tokenizer* toks;
    size_t batch_bytes;
    pthread_mutex_t mu;       // guards everything below up to `cur`
    pthread_cond_t cv_work;   // todo got a batch, or the reader finished, or a failure
    pthread_cond_t cv_done;   // done got a batch, or the reader finished, or a failure
    pthread_cond_t cv_space;  // a batch left flight, or a failure
    PoolBatch *todo, *todo_tail;  // FIFO of batches to encode
    PoolBatch* done;          // encoded batches, sorted by seq
    int inflight, max_inflight;
    int64_t nbatches;         // batches handed to the workers so far
    int reader_done, failed;
    // the reader thread's own
    PoolBatch* cur;           // the batch being filled
    int file;                 // the file being read
    size_t scan_from;         // cur->text[.. scan_from) holds no cut point of the open document
} Pool;

typedef struct {
    Pool* pool;
    int w;                    // toks[w]
    PoolBatch* b;             // the batch being encoded
    int skip_doc;             // the current document continues one: no end-of-text
} PoolWorker;

static void pool_batch_free(PoolBatch* b) {
    if (!b) return;
    free(b->text);
    free(b->docs);
    free(b->ids);
    free(b);
}

// grows *p (elements of size sz, *cap of them) to hold need; -1 when out of memory
static int pool_grow(void** p, size_t* cap, size_t need, size_t sz) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 1024;
    while (c < need) c *= 2;
    void* g = realloc(*p, c * sz);
    if (!g) return -1;
    *p = g;
    *cap = c;
    return 0;
}

static void pool_fail(Pool* p) {
    pthread_mutex_lock(&p->mu);
    p->failed = 1;
    pthread_cond_broadcast(&p->cv_work);
    pthread_cond_broadcast(&p->cv_done);
    pthread_cond_broadcast(&p->cv_space);
    pthread_mutex_unlock(&p->mu);
}

// ---- the reader --------------------------------------------------------------------------------

// queues cur for the workers (waiting while 2 N batches are in flight); -1 after a failure elsewhere
static int pool_submit(Pool* p) {
    PoolBatch* b = p->cur;
    p->cur = NULL;
    p->scan_from = 0;
    pthread_mutex_lock(&p->mu);
    while (p->inflight >= p->max_inflight && !p->failed) pthread_cond_wait(&p->cv_space, &p->mu);
    if (p->failed) { pthread_mutex_unlock(&p->mu); pool_batch_free(b); return -1; }
    b->seq = p->nbatches++;
    if (p->todo_tail) p->todo_tail->next = b;
    else p->todo = b;
    p->todo_tail = b;
    p->inflight++;
    pthread_cond_signal(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
    return 0;
}

static PoolBatch* pool_cur(Pool* p) {
    if (!p->cur && !(p->cur = calloc(1, sizeof(PoolBatch)))) fprintf(stderr, "error: prepare: out of memory for a batch\n");
    return p->cur;
}

// a new document in cur holding text[0..n)
static int pool_open_doc(Pool* p, const unsigned char* s, size_t n, int64_t doc_no, int64_t end_off, int cont) {
    PoolBatch* b = pool_cur(p);
    if (!b) return -1;
    if (pool_grow((void**)&b->docs, &b->docs_cap, b->ndocs + 1, sizeof(PoolDoc)) != 0) goto oom;
    b->docs[b->ndocs++] = (PoolDoc){.off = b->len, .len = 0, .file = p->file, .doc_no = doc_no, .end_off = end_off, .cont = cont};
    b->open = 1;
    if (n == 0) return 0;
    if (pool_grow((void**)&b->text, &b->cap, b->len + n, 1) != 0) goto oom;
    memcpy(b->text + b->len, s, n);
    b->len += n;
    b->docs[b->ndocs - 1].len = n;
    return 0;
oom:
    fprintf(stderr, "error: prepare: out of memory for a batch of %zu bytes\n", b->len + n);
    return -1;
}

static int pool_text(void* ctx, const unsigned char* s, size_t n, int64_t doc_no, int64_t end_off) {
    Pool* p = ctx;
    PoolBatch* b = pool_cur(p);
    if (!b) return -1;
    if (!b->open) return pool_open_doc(p, s, n, doc_no, end_off, 0) != 0 ? -1 : 0;
    PoolDoc* d = &b->docs[b->ndocs - 1];
    if (pool_grow((void**)&b->text, &b->cap, b->len + n, 1) != 0) {
        fprintf(stderr, "error: prepare: out of memory for a document of %zu bytes\n", d->len + n);
        return -1;
    }
    memcpy(b->text + b->len, s, n);
    b->len += n;
    d->len += n;
    d->end_off = end_off;
    if (b->len < p->batch_bytes) return 0;
    // a long document: cut it where the two parts' pieces are those of the whole
    size_t from = p->scan_from > d->off ? p->scan_from : d->off;
    size_t c = tokenizer_safe_cut(&p->toks[0], b->text, from, b->len);
    p->scan_from = b->len - 1;  // the next search starts with the bytes not yet searched
    if (c == 0) return 0;
    d->len = c - d->off;
    b->open = 0;
    size_t rest = b->len - c;
    b->len = c;
    // the rest moves to a fresh batch, as the same document continued (no end-of-text)
    unsigned char* tail = malloc(rest ? rest : 1);
    if (!tail) { fprintf(stderr, "error: prepare: out of memory\n"); return -1; }
    memcpy(tail, b->text + c, rest);
    int rc = pool_submit(p);
    if (rc == 0) rc = pool_open_doc(p, tail, rest, doc_no, end_off, 1);
    free(tail);
    return rc;
}

static int pool_doc_end(void* ctx) {
    Pool* p = ctx;
    if (!p->cur || !p->cur->open) return 0;  // an empty document: nothing to encode
    p->cur->open = 0;
    p->scan_from = 0;
    return p->cur->len >= p->batch_bytes ? pool_submit(p) : 0;
}

static void pool_progress(void* ctx, size_t bytes) {
    Pool* p = ctx;
    if (pool_cur(p)) p->cur->in_bytes += (int64_t)bytes;
}

static void* pool_reader(void* arg) {
    Pool* p = arg;
    TokenizerDocSink sink = {.text = pool_text, .doc_end = pool_doc_end, .progress = pool_progress, .ctx = p};
    int rc = 0;
    for (p->file = 0; rc == 0 && p->file < p->nfiles; p->file++)
        rc = tokenizer_read_docs(p->files[p->file], p->field, &sink);
    if (rc == 0 && p->cur && (p->cur->ndocs > 0 || p->cur->in_bytes > 0)) rc = pool_submit(p);
    pool_batch_free(p->cur);
    p->cur = NULL;
    pthread_mutex_lock(&p->mu);
    p->reader_done = 1;
    if (rc != 0) p->failed = 1;
    pthread_cond_broadcast(&p->cv_work);
    pthread_cond_broadcast(&p->cv_done);
    pthread_cond_broadcast(&p->cv_space);
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

// ---- the workers -------------------------------------------------------------------------------

static int pool_worker_doc(void* ctx) {
    PoolWorker* w = ctx;
    if (w->skip_doc) return 0;
    PoolBatch* b = w->b;
    if (pool_grow((void**)&b->ids, &b->ids_cap, b->nids + 1, sizeof(int)) != 0) {
        fprintf(stderr, "error: prepare: out of memory for the ids of a batch\n");
        return -1;
    }
    b->ids[b->nids++] = ENCODE_POOL_DOC;
    return 0;
}

static int pool_worker_piece(void* ctx, const unsigned char* s, size_t n) {
    PoolWorker* w = ctx;
    PoolBatch* b = w->b;
    if (pool_grow((void**)&b->ids, &b->ids_cap, b->nids + n, sizeof(int)) != 0) {  // at most n ids
        fprintf(stderr, "error: prepare: out of memory for the ids of a batch\n");
        return -1;
    }
    b->nids += tokenizer_encode_piece(&w->pool->toks[w->w], s, n, b->ids + b->nids);
    return 0;
}

static void* pool_worker(void* arg) {
    PoolWorker* w = arg;
    Pool* p = w->pool;
    TokenizerStream st = {.doc_begin = pool_worker_doc, .piece = pool_worker_piece, .ctx = w, .tok = &p->toks[w->w]};
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (!p->todo && !p->reader_done && !p->failed) pthread_cond_wait(&p->cv_work, &p->mu);
        PoolBatch* b = p->failed ? NULL : p->todo;
        if (b) {
            p->todo = b->next;
            if (!p->todo) p->todo_tail = NULL;
            b->next = NULL;
        }
        pthread_mutex_unlock(&p->mu);
        if (!b) return NULL;  // the reader is done and the queue empty, or a failure
        w->b = b;
        int rc = 0;
        for (size_t i = 0; rc == 0 && i < b->ndocs; i++) {
            const PoolDoc* d = &b->docs[i];
            w->skip_doc = d->cont;
            rc = tokenizer_stream_doc(&st, p->files[d->file], d->doc_no, d->end_off, b->text + d->off, d->len);
        }
        if (rc != 0) {  // (the failing call said why)
            pool_batch_free(b);
            pool_fail(p);
            return NULL;
        }
        free(b->text);  // the writer needs only the ids (and len)
        b->text = NULL;
        pthread_mutex_lock(&p->mu);
        PoolBatch** at = &p->done;  // sorted by seq
        while (*at && (*at)->seq < b->seq) at = &(*at)->next;
        b->next = *at;
        *at = b;
        pthread_cond_signal(&p->cv_done);
        pthread_mutex_unlock(&p->mu);
    }
}

// ---- the writer (the calling thread) -------------------------------------------------------------

// the done batch that comes next in the output, or NULL while it is still being encoded
static PoolBatch* pool_next_done(const Pool* p, int64_t next) {
    return p->done && p->done->seq == next ? p->done : NULL;
}

int encode_pool_run(char* const* files, int nfiles, const char* jsonl_field, Tokenizer* toks, int nthreads,
                    size_t batch_bytes, const EncodePoolSink* sink) {
    Pool p = {.files = files, .nfiles = nfiles, .field = jsonl_field, .toks = toks,
              .batch_bytes = batch_bytes, .max_inflight = 2 * nthreads};
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.cv_work, NULL);
    pthread_cond_init(&p.cv_done, NULL);
    pthread_cond_init(&p.cv_space, NULL);
    PoolWorker* ws = calloc((size_t)nthreads, sizeof(PoolWorker));
    pthread_t* th = calloc((size_t)nthreads + 1, sizeof(pthread_t));
    int started = 0, rc = 0;
    if (!ws || !th) { fprintf(stderr, "error: prepare: out of memory\n"); free(ws); free(th); return -1; }
    if (pthread_create(&th[0], NULL, pool_reader, &p) != 0) rc = -1;
    else started = 1;
    for (int i = 0; rc == 0 && i < nthreads; i++) {
        ws[i] = (PoolWorker){.pool = &p, .w = i};
        if (pthread_create(&th[1 + i], NULL, pool_worker, &ws[i]) != 0) rc = -1;
        else started++;
    }
    if (rc != 0) { fprintf(stderr, "error: prepare: cannot start %d threads\n", nthreads + 1); pool_fail(&p); }
    for (int64_t next = 0; rc == 0;) {
        pthread_mutex_lock(&p.mu);
        while (!p.failed && !pool_next_done(&p, next) && !(p.reader_done && next == p.nbatches))
            pthread_cond_wait(&p.cv_done, &p.mu);
        PoolBatch* b = p.failed ? NULL : pool_next_done(&p, next);
        if (b) p.done = b->next;
        if (p.failed) rc = -1;
        pthread_mutex_unlock(&p.mu);
        if (!b) break;  // every batch written, or a failure
        if (sink->batch(sink->ctx, b->ids, b->nids, (int64_t)b->len, b->in_bytes) != 0) { rc = -1; pool_fail(&p); }
        pool_batch_free(b);
        pthread_mutex_lock(&p.mu);
        p.inflight--;
        next++;
        pthread_cond_signal(&p.cv_space);
        pthread_mutex_unlock(&p.mu);
    }
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    while (p.todo) { PoolBatch* b = p.todo; p.todo = b->next; pool_batch_free(b); }
    while (p.done) { PoolBatch* b = p.done; p.done = b->next; pool_batch_free(b); }
    pthread_mutex_destroy(&p.mu);
    pthread_cond_destroy(&p.cv_work);
    pthread_cond_destroy(&p.cv_done);
    pthread_cond_destroy(&p.cv_space);
    free(ws);
    free(th);
    return rc;
}
