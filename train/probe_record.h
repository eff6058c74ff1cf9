// train/probe_record.h: the probe's `probe` record in log.jsonl (docs/metrics.md), written with
// the run log's JSON writer (train/jsonl.h). The probe itself (model/probe.h) computes; the
// trainer's side writes, so model/ knows nothing of the log.
#ifndef GATEDGPT_PROBE_RECORD_H
#define GATEDGPT_PROBE_RECORD_H
#include "../model/probe.h"
#include <stdio.h>

void probe_write_json(const ProbeResult* r, FILE* f);   // one line: {"type":"probe",...}

#endif
