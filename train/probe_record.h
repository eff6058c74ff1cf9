// train/probe_record.h: the probe's `probe` record in log.jsonl (docs/metrics.md), written with
// the run log's JSON writer (train/jsonl.h). The probe itself (model/probe.h) computes; the
// trainer's side writes, so model/ knows nothing of the log.
#ifndef GATEDGPT_PROBE_RECORD_H
#define GATEDGPT_PROBE_RECORD_H
#include "../model/probe.h"
#include <stdio.h>

#include "jsonl.h"
#include "signals.h"

// One line: {"type":"probe",...}. sig: the per-group gradient norms and update ratios
// (train/signals.h), written when sig measured the probe's step (sig->step == r->step), else
// those fields are null (the step-0 probe; sig NULL).
void probe_write_json(const ProbeResult* r, const Signals* sig, FILE* f);
// The instability signals (docs/metrics.md) as fields of the open object j: the model-level
// ones (attn_logit_max, out_logit_absmax, out_z, grad_norm_embed, ...), or layer l's. r NULL:
// the probe's figures null; sig as above. The spike record (train_gpt.c) writes them too.
void probe_write_signals(Jsonl* j, const ProbeResult* r, const Signals* sig, int step);
void probe_write_signals_layer(Jsonl* j, const ProbeResult* r, const Signals* sig, int step, int l);

#endif
