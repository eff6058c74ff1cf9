// model/doc_mask.c: the document index of each token of a packed batch (doc_mask.h).
#include "doc_mask.h"
#include <stddef.h>

void doc_starts(int* ds, const int* idx, int B, int T, int eot) {
    for (int b = 0; b < B; b++) {
        const int* x = idx + (size_t)b * T;
        int* d = ds + (size_t)b * T;
        int start = 0;
        for (int t = 0; t < T; t++) {
            if (t > 0 && x[t - 1] == eot) start = t;   // the token after end-of-text opens a document
            d[t] = start;
        }
    }
}
