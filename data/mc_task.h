// data/mc_task.h: a multiple-choice task file (JSONL) read into contexts, choices and gold
// indices, as lm-evaluation-harness's multiple_choice tasks see them (docs/formats.md "Task
// files"). Scoring is train/mc_eval.h's.
//
// Each non-empty line is one JSON object, in one of two forms:
//   generic     {"context": "...", "choices": ["...", ...], "gold": k}   (names changed by McFields)
//   HellaSwag   {"activity_label", "ctx_a", "ctx_b" (or "ctx"), "endings": [...], "label": k or "k"}
//               (a line with "endings" is read as HellaSwag's), preprocessed as lm-eval's
//               hellaswag task does (tasks/hellaswag/utils.py):
//                 context = preprocess(activity_label + ": " + ctx_a + " " + capitalize(ctx_b))
//                 choice  = preprocess(ending)
//               preprocess: strip; " [title]" -> ". "; remove every "[...]" (shortest, one line);
//               "  " -> " " (one pass); capitalize: first character title-case, the rest lower.
// A choice is scored as the continuation " " + choice of the context (lm-eval's target
// delimiter); the strings here carry no delimiter, so acc_norm divides by the choice's own length.
//
// Errors: one line "error: task FILE:LINE: field 'F': what is wrong (the fix)", -1, nothing kept.
#pragma once

typedef struct {
    char* context;   // UTF-8
    char** choices;  // [n_choices], UTF-8, none empty
    int n_choices;   // >= 1
    int gold;        // 0 .. n_choices - 1
    int line;        // 1-based line of the file (for messages and dumps)
} McExample;

// The generic form's field names (--fields ctx=...,choices=...,gold=...)
typedef struct {
    char ctx[64], choices[64], gold[64];
} McFields;

typedef struct {
    char path[1024];
    char name[128];    // the file's base name without its extension (the record's "task")
    McExample* ex;     // [n] in file order
    int n;
    int n_hellaswag;   // how many lines were in HellaSwag's form
} McTask;

// Defaults: context, choices, gold.
void mc_fields_default(McFields* f);
// "ctx=question,choices=options,gold=answer" (any subset, any order) over the defaults. -1 and an
// error line naming `what` (e.g. "--fields") on an unknown key or an empty / too long name.
int mc_fields_parse(McFields* f, const char* spec, const char* what);
// Reads the first `limit` examples of path (limit <= 0: all). fields NULL: the defaults.
int mc_task_load(McTask* t, const char* path, const McFields* fields, int limit);
void mc_task_free(McTask* t);
// lm-eval's HellaSwag preprocessing of one string (the rules above), in a new malloc'd string
// (exposed for the tests).
char* mc_hellaswag_preprocess(const char* s);
