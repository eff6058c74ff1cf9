// model/doc_mask.h: attention within documents ([data] doc_mask; docs/architecture.md).
// A packed sequence of T tokens holds several documents, each closed by the end-of-text token:
// the end-of-text token belongs to the document it closes (it attends within it) and the token
// after it starts the next one. The sequence's first token starts a document (the one that an
// earlier sequence may have begun: the mask never looks across sequences anyway).
#pragma once

// ds[b*T + t] (=) the index within sequence b of the first token of t's document, from the
// host tokens idx[B*T]: ds[b*T] = 0, ds[b*T + t] = t when idx[b*T + t - 1] == eot, else
// ds[b*T + t - 1]. Non-decreasing in t, ds <= t (the attention ops rely on both: ops_types.h).
void doc_starts(int* ds, const int* idx, int B, int T, int eot);
