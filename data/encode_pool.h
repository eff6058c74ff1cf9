// data/encode_pool.h: documents encoded on N threads, their ids handed on in document order
// (`prepare -j N`, data/prepare.c).
//
//   reader thread     tokenizer_read_docs over the files in turn (decompressing): documents
//                     gathered into batches of about batch_bytes of text, each with a sequence
//                     number; a document longer than a batch is cut at tokenizer_safe_cut (so its
//                     pieces are those of the whole; a tokenizer.json's documents are never cut)
//   N worker threads  each with its own Tokenizer: a batch's documents -> ids
//                     (tokenizer_stream_doc + tokenizer_encode_piece)
//   calling thread    the writer: batches in sequence order -> sink (so the ids, and the shards
//                     made of them, do not depend on N or on timing)
// At most 2 N batches are in flight (queued, being encoded or waiting for the writer) plus the one
// the reader fills: peak memory = (2 N + 1) x (batch text + its ids, 4 bytes an id: at most
// 5 x batch_bytes + a line) on top of the N tokenizers; a document that cannot be cut (no space
// after a non-space byte, or a tokenizer.json's document) is held whole.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "tokenizer.h"

// What the writer hands on, on the calling thread, batch after batch in document order.
typedef struct {
    // ids[0..n): a document's start is ENCODE_POOL_DOC (its end-of-text goes there), every other
    // entry a token id; text_bytes: the text they encode; in_bytes: file bytes the reader consumed
    // for this batch (for progress). Non-zero return: stop, encode_pool_run returns -1.
    int (*batch)(void* ctx, const int* ids, size_t n, int64_t text_bytes, int64_t in_bytes);
    void* ctx;
} EncodePoolSink;
#define ENCODE_POOL_DOC (-1)

// Encodes files[0..nfiles) (text or .jsonl with jsonl_field, see tokenizer_read_docs) with
// toks[0..nthreads) (distinct Tokenizers, the same vocabulary: loaded separately, as encoding
// writes a cache inside each), nthreads >= 1. 0, or -1 after one line on stderr (a bad file, a
// corrupt stream, no memory) once every thread has stopped.
int encode_pool_run(char* const* files, int nfiles, const char* jsonl_field, Tokenizer* toks, int nthreads,
                    size_t batch_bytes, const EncodePoolSink* sink);
