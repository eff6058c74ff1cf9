// train/mc_eval.c: multiple-choice scoring (train/mc_eval.h; docs/metrics.md).
#include "mc_eval.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonl.h"
#include "progress.h"
#include "watchdog.h"

// Python's str.rstrip() set on ASCII (lm-eval's _encode_pair moves these onto the continuation)
static int is_py_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f); }

static int utf8_chars(const char* s) {
    int n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

static int row_error(const McTask* t, int line, int choice, const char* what) {
    fprintf(stderr, "error: task %s:%d: choice %d: %s\n", t->path, line, choice, what);
    return -1;
}

int mc_prepare(McPrepared* p, const McTask* t, const Tokenizer* tok, int max_len, int vocab_size) {
    memset(p, 0, sizeof *p);
    p->task = t;
    p->row0 = malloc((size_t)(t->n + 1) * sizeof(int));
    for (int e = 0; e < t->n; e++) {
        p->row0[e] = p->n_rows;
        p->n_rows += t->ex[e].n_choices;
    }
    p->row0[t->n] = p->n_rows;
    const int R = p->n_rows;
    p->tok_off = malloc((size_t)(R + 1) * sizeof(int));
    p->cont = malloc((size_t)R * sizeof(int));
    p->chars = malloc((size_t)R * sizeof(int));
    p->bytes = malloc((size_t)R * sizeof(int));
    p->ll = calloc((size_t)R, sizeof(double));
    size_t cap = 1024, used = 0;
    p->toks = malloc(cap * sizeof(int));
    p->tok_off[0] = 0;
    int* ctx_ids = NULL;
    int* whole = NULL;
    char* text = NULL;
    size_t text_cap = 0;
    int rc = 0;
    for (int e = 0; e < t->n; e++) {
        const McExample* x = &t->ex[e];
        // the context without its trailing whitespace, which moves onto each continuation
        size_t cl = strlen(x->context), keep = cl;
        while (keep > 0 && is_py_space((unsigned char)x->context[keep - 1])) keep--;
        size_t n_ctx = 0;
        if (cl == 0) {   // lm-eval: an empty context is the prefix token (end-of-text) alone
            if (tokenizer_eot(tok) < 0) { rc = row_error(t, x->line, 0, "the context is empty and the tokenizer has no end-of-text token to stand for it"); goto done; }
            ctx_ids = realloc(ctx_ids, sizeof(int));
            ctx_ids[0] = tokenizer_eot(tok);
            n_ctx = 1;
        } else if (keep == 0) {
            { rc = row_error(t, x->line, 0, "the context is only whitespace (lm-eval would score the continuation without any token before it)"); goto done; }
        } else {
            free(ctx_ids);
            ctx_ids = NULL;
            if (tokenizer_encode(tok, x->context, keep, &ctx_ids, &n_ctx) != 0) { rc = -1; goto done; }
        }
        for (int c = 0; c < x->n_choices; c++) {
            const int r = p->row0[e] + c;
            // continuation = the moved whitespace + the target delimiter " " + the choice
            const char* ch = x->choices[c];
            size_t need = cl + strlen(ch) + 2;
            if (need > text_cap) { text_cap = 2 * need; text = realloc(text, text_cap); }
            size_t n_whole = 0;
            free(whole);
            whole = NULL;
            int* cont_ids;
            size_t n_cont;
            if (cl == 0) {
                snprintf(text, text_cap, " %s", ch);
                if (tokenizer_encode(tok, text, strlen(text), &whole, &n_whole) != 0) { rc = -1; goto done; }
                cont_ids = whole;
                n_cont = n_whole;
            } else {
                snprintf(text, text_cap, "%s %s", x->context, ch);   // = context[:keep] + moved + " " + choice
                if (tokenizer_encode(tok, text, strlen(text), &whole, &n_whole) != 0) { rc = -1; goto done; }
                if (n_whole <= n_ctx) { rc = row_error(t, x->line, c, "the continuation encodes to no token after the context's"); goto done; }
                cont_ids = whole + n_ctx;
                n_cont = n_whole - n_ctx;
            }
            if ((int)n_cont > max_len) {
                char why[160];
                snprintf(why, sizeof why, "the continuation has %zu tokens, more than the model's max_seq_len %d", n_cont, max_len);
                rc = row_error(t, x->line, c, why);
                goto done;
            }
            // the row = ctx + cont, cut from the left to max_len + 1 tokens (lm-eval: [-(max_length + 1):])
            size_t L = n_ctx + n_cont, cut = L > (size_t)max_len + 1 ? L - ((size_t)max_len + 1) : 0;
            p->truncated += cut > 0;
            if (used + L - cut > cap) { cap = 2 * (used + L); p->toks = realloc(p->toks, cap * sizeof(int)); }
            for (size_t i = cut; i < L; i++) {
                int id = i < n_ctx ? ctx_ids[i] : cont_ids[i - n_ctx];
                if (id < 0 || id >= vocab_size) { rc = row_error(t, x->line, c, "a token id is not below the model's vocab_size (the wrong tokenizer?)"); goto done; }
                p->toks[used++] = id;
            }
            p->tok_off[r + 1] = (int)used;
            p->cont[r] = (int)n_cont;
            p->chars[r] = utf8_chars(ch);
            p->bytes[r] = (int)strlen(ch);
            const int n_in = (int)(L - cut) - 1;
            if (n_in > p->T) p->T = n_in;
        }
    }
done:
    free(ctx_ids);
    free(whole);
    free(text);
    return rc;
}

void mc_prepared_free(McPrepared* p) {
    free(p->row0); free(p->tok_off); free(p->toks); free(p->cont); free(p->chars); free(p->bytes); free(p->ll);
    memset(p, 0, sizeof *p);
}

// the first maximum of ll[i] / den[i] (den NULL: of ll), as numpy's argmax
static int argmax_div(const double* ll, const int* den, int n) {
    int best = 0;
    double bv = den ? ll[0] / den[0] : ll[0];
    for (int i = 1; i < n; i++) {
        double v = den ? ll[i] / den[i] : ll[i];
        if (v > bv) { bv = v; best = i; }
    }
    return best;
}

// mean and lm-eval's mean_stderr (sample std / sqrt(n)) of x[n]
static void mean_se(const double* x, int n, double* mean, double* se) {
    double s = 0.0;
    for (int i = 0; i < n; i++) s += x[i];
    *mean = n > 0 ? s / n : NAN;
    if (n < 2) { *se = NAN; return; }
    double v = 0.0;
    for (int i = 0; i < n; i++) v += (x[i] - *mean) * (x[i] - *mean);
    *se = sqrt(v / (n - 1)) / sqrt((double)n);
}

void mc_score(GPT* m, McPrepared* p, long tokens_per_forward, Comm* comm, double progress_s, McResult* r) {
    memset(r, 0, sizeof *r);
    const double t0 = progress_now();
    const McTask* t = p->task;
    const int T = p->T, R = p->n_rows;
    int rows = (int)(tokens_per_forward / T);
    if (rows < 1) rows = 1;
    if (rows > R) rows = R;
    const int batches = (R + rows - 1) / rows;
    // this process's share: the batches of its data-parallel group (an expert-parallel group's
    // members run the same forwards; only its member 0 contributes, so each row is added once)
    const int part = comm ? comm->rep_rank : 0, parts = comm ? comm->rep_size : 1;
    const int adds = comm ? comm->ep_rank == 0 : 1, talk = comm ? comm->rank == 0 : 1;
    const int B0 = m->B, T0 = m->T;
    if (m->B != rows || m->T != T) gpt_alloc_acts(m, rows, T);
    int* in = malloc((size_t)rows * T * sizeof(int));
    int* tg = malloc((size_t)rows * T * sizeof(int));
    float* loss = malloc((size_t)rows * T * sizeof(float));
    memset(p->ll, 0, (size_t)R * sizeof(double));
    Progress prog;
    progress_init(&prog, t0);
    double last_line = t0;
    int mine = 0, done = 0;
    for (int b = part; b < batches; b += parts) mine++;
    for (int b = part; b < batches; b += parts) {
        const double tb = progress_now();
        // rows r0 .. r0 + rows - 1, each right-padded with token 0 (causal: padding after a row's
        // last token changes none of its positions)
        const int r0 = b * rows;
        memset(in, 0, (size_t)rows * T * sizeof(int));
        memset(tg, 0, (size_t)rows * T * sizeof(int));
        for (int i = 0; i < rows && r0 + i < R; i++) {
            const int* s = p->toks + p->tok_off[r0 + i];
            const int n_in = p->tok_off[r0 + i + 1] - p->tok_off[r0 + i] - 1;
            memcpy(in + (size_t)i * T, s, (size_t)n_in * sizeof(int));
            memcpy(tg + (size_t)i * T, s + 1, (size_t)n_in * sizeof(int));
        }
        gpt_forward(m, in, tg);
        gpt_losses_to_host(m, loss);   // [rows, T]: -log p(tg | the row up to it)
        for (int i = 0; i < rows && r0 + i < R && adds; i++) {
            const int row = r0 + i, n_in = p->tok_off[row + 1] - p->tok_off[row] - 1;
            const float* lr = loss + (size_t)i * T;
            double s = 0.0;
            // the continuation's targets are the last cont[row] of the row's n_in positions
            for (int q = n_in - p->cont[row]; q < n_in; q++) s -= (double)lr[q];
            p->ll[row] = s;
        }
        done++;
        const double te = progress_now();
        progress_item(&prog, te - tb);
        watchdog_progress();   // a long task is progress, batch by batch (train/watchdog.h)
        if (talk && progress_s >= 0.0 && done < mine && te - last_line >= progress_s) {
            char el[32], left[32];
            fprintf(stderr, "task %s: batch %d/%d of this process | %s elapsed, ETA %s\n", t->name, done, mine,
                    progress_fmt(progress_elapsed(&prog, te), el, sizeof el), progress_fmt(progress_eta(&prog, done, mine), left, sizeof left));
            last_line = te;
        }
    }
    // every row from the process that computed it (the others hold 0 there: the sums are exact)
    if (comm) comm_allreduce_sum_f64(comm, p->ll, (size_t)R);
    if (B0 > 0 && (B0 != rows || T0 != T)) gpt_alloc_acts(m, B0, T0);
    free(in);
    free(tg);
    free(loss);

    // the figures, per example in file order (the same on every process)
    double* hit = malloc((size_t)3 * (t->n > 0 ? t->n : 1) * sizeof(double));
    double chance = 0.0;
    for (int e = 0; e < t->n; e++) {
        const McExample* x = &t->ex[e];
        const double* ll = p->ll + p->row0[e];
        hit[e] = argmax_div(ll, NULL, x->n_choices) == x->gold;
        hit[t->n + e] = argmax_div(ll, p->chars + p->row0[e], x->n_choices) == x->gold;
        hit[2 * t->n + e] = argmax_div(ll, p->bytes + p->row0[e], x->n_choices) == x->gold;
        chance += 1.0 / x->n_choices;
    }
    mean_se(hit, t->n, &r->acc, &r->acc_stderr);
    mean_se(hit + t->n, t->n, &r->acc_norm, &r->acc_norm_stderr);
    mean_se(hit + 2 * t->n, t->n, &r->acc_bytes, &r->acc_bytes_stderr);
    free(hit);
    r->n = t->n;
    r->n_rows = R;
    r->chance = t->n > 0 ? chance / t->n : NAN;
    r->T = T;
    r->rows = rows;
    r->batches = batches;
    r->truncated = p->truncated;
    r->seconds = progress_now() - t0;
}

void mc_write_record(const McResult* r, const McTask* t, int step, FILE* f) {
    Jsonl j;
    jsonl_begin(&j, f, "task", step);
    jsonl_str(&j, "task", t->name);
    jsonl_str(&j, "file", t->path);
    jsonl_int(&j, "n", r->n);
    jsonl_num(&j, "acc", r->acc);
    jsonl_num(&j, "acc_stderr", r->acc_stderr);
    jsonl_num(&j, "acc_norm", r->acc_norm);
    jsonl_num(&j, "acc_norm_stderr", r->acc_norm_stderr);
    jsonl_num(&j, "acc_bytes", r->acc_bytes);
    jsonl_num(&j, "acc_bytes_stderr", r->acc_bytes_stderr);
    jsonl_num(&j, "chance", r->chance);
    jsonl_int(&j, "truncated", r->truncated);
    jsonl_num(&j, "ms", r->seconds * 1e3);
    jsonl_end(&j);
}
