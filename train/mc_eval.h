// train/mc_eval.[ch]: multiple-choice evaluation as lm-evaluation-harness (0.4) defines it, over
// a task file of data/mc_task.h (docs/metrics.md "Multiple-choice tasks").
//
// Per choice, the score is the log-likelihood of the continuation " " + choice given the context:
//   context, continuation = lm-eval's _encode_pair: trailing whitespace of the context moves to
//     the front of the continuation; whole = encode(context + continuation), ctx = encode(context),
//     the continuation's tokens = whole[len(ctx):]   (an empty context: ctx = [end-of-text])
//   the row = (ctx + cont) cut from the left to max_seq_len + 1 tokens; input = row[:-1]
//   ll = sum over the continuation's tokens of log p(token | every token before it in the row)
// Per example: acc = [argmax ll == gold], acc_norm = [argmax ll / len(choice) == gold] with the
// length in characters (Unicode code points) of the choice string, as lm-eval's acc_norm;
// acc_bytes the same over its UTF-8 bytes (lm-eval's acc_bytes). argmax: the first maximum.
// Each is a mean over the examples with stderr = sample std (n - 1) / sqrt(n) (lm-eval's
// mean_stderr).
//
// Batched: the rows of all examples, in order, are cut into batches of `rows` rows of T tokens
// (T = the longest row, rows = the caller's tokens per forward / T), right-padded; the batches are
// dealt round-robin to the data-parallel groups (Comm.rep_rank of rep_size; an expert-parallel
// group runs its batches together) and the per-row log-likelihoods gathered (each row is computed
// on exactly one group, the others add 0), so every figure is the same for any process count.
#pragma once
#include "../data/mc_task.h"
#include "../data/tokenizer.h"
#include "../model/gpt.h"
#include "comm.h"

typedef struct {
    int n;                                            // examples
    int n_rows;                                       // choices scored
    double acc, acc_norm, acc_bytes;                  // means of 0/1 per example
    double acc_stderr, acc_norm_stderr, acc_bytes_stderr;   // NaN when n < 2
    double chance;                                    // mean over the examples of 1 / n_choices
    int T, rows, batches;                             // the forwards: batches of rows x T tokens
    int truncated;                                    // rows cut from the left to max_seq_len
    double seconds;
} McResult;

// A task tokenised once (every process holds all of it; it is small): row r = choice c of
// example e, rows in example order.
typedef struct {
    const McTask* task;
    int n_rows;
    int* row0;       // [task->n + 1] the first row of each example
    int* tok_off;    // [n_rows + 1] row r's tokens are toks[tok_off[r] .. tok_off[r + 1])
    int* toks;       // the rows' tokens after the left cut (length n_in + 1)
    int* cont;       // [n_rows] the continuation's tokens (the last cont[r] of the row)
    int* chars;      // [n_rows] the choice's length in Unicode code points
    int* bytes;      // [n_rows] ... in UTF-8 bytes
    int T;           // the longest row's input length (<= max_seq_len)
    int truncated;
    double* ll;      // [n_rows] the log-likelihoods of the last mc_score
} McPrepared;

// Tokenise every choice of t with tok (kept as a pointer: t must outlive p). max_len = the
// model's max_seq_len. -1 and one error line naming the file and line on a row that cannot be
// scored (a continuation longer than max_len, a context of whitespace only, an empty context
// without an end-of-text token, a token id >= vocab_size).
int mc_prepare(McPrepared* p, const McTask* t, const Tokenizer* tok, int max_len, int vocab_size);
void mc_prepared_free(McPrepared* p);
// Score every row on m (forward passes, no backward) and compute the figures. tokens_per_forward:
// rows x T is at most this (at least one row); comm: NULL for one process, else every rank calls
// it. progress_s: a progress line on stderr (rank 0) at most every progress_s seconds (< 0: none).
// m's activations are resized for the forwards and restored to their shape afterwards.
void mc_score(GPT* m, McPrepared* p, long tokens_per_forward, Comm* comm, double progress_s, McResult* r);
// The "task" record of log.jsonl (docs/metrics.md), through train/jsonl.h: task (the file's base
// name), file, n, acc, acc_stderr, acc_norm, acc_norm_stderr, acc_bytes, acc_bytes_stderr, chance,
// truncated, ms (a stderr is null when n < 2).
void mc_write_record(const McResult* r, const McTask* t, int step, FILE* f);
