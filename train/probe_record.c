// train/probe_record.c: the probe record (train/probe_record.h).
#include "probe_record.h"
#include "jsonl.h"
#include <math.h>

// the probe's floats: 6 significant digits (null when not finite)
static void jfloat(Jsonl* j, const char* key, float v) { jsonl_fmt(j, key, "%.6g", v); }

// sig's figures when it measured `step`, else none (null fields)
static const Signals* sig_of(const Signals* sig, int step) { return sig && sig->step == step && step > 0 ? sig : NULL; }

static void sig_fields(Jsonl* j, const Signals* sig, int l) { signals_write_json(sig, j, l); }

void probe_write_signals(Jsonl* j, const ProbeResult* r, const Signals* sig, int step) {
    jfloat(j, "attn_logit_max", r ? r->attn_logit_max : NAN);
    jfloat(j, "out_logit_absmax", r ? r->out_logit_absmax : NAN);
    jfloat(j, "out_z", r ? r->out_z : NAN);
    sig_fields(j, sig_of(sig, step), -1);
}

void probe_write_signals_layer(Jsonl* j, const ProbeResult* r, const Signals* sig, int step, int l) {
    jfloat(j, "attn_logit_max", r ? r->layer[l].attn_logit_max : NAN);
    jfloat(j, "attn_logit_head_mean", r ? r->layer[l].attn_logit_head_mean : NAN);
    sig_fields(j, sig_of(sig, step), l);
}

void probe_write_json(const ProbeResult* r, const Signals* sig, FILE* f) {
    Jsonl j;
    jsonl_begin(&j, f, "probe", r->step);
    jfloat(&j, "loss", r->loss);
    jfloat(&j, "f_attn_uniform", r->f_attn_uniform);
    jfloat(&j, "f_attn_mean", r->f_attn_mean);
    jfloat(&j, "m_act_mean", r->m_act_mean);
    jfloat(&j, "gate_mean", r->gate_mean);
    if (r->has_linear) jfloat(&j, "gdn_state_norm_mean", r->gdn_state_norm_mean);
    probe_write_signals(&j, r, sig, r->step);
    jfloat(&j, "ms", r->ms);
    jsonl_arr(&j, "layers");
    for (int l = 0; l < r->n_layer; l++) {
        const ProbeLayer* p = &r->layer[l];
        jsonl_obj(&j, NULL);
        jsonl_int(&j, "layer", l);
        if (r->has_linear) jsonl_str(&j, "kind", p->linear ? "linear" : "attention");
        jfloat(&j, "f_attn", p->f_attn);
        jfloat(&j, "f_attn_max_head", p->f_attn_max_head);
        jsonl_int(&j, "sink_heads", p->sink_heads);
        jfloat(&j, "m_act", p->m_act);
        jsonl_int(&j, "m_act_pos", p->m_act_pos);
        jfloat(&j, "m_act_ratio", p->m_act_ratio);
        jfloat(&j, "attn_out_max", p->attn_out_max);
        jsonl_int(&j, "attn_out_pos", p->attn_out_pos);
        jfloat(&j, "mlp_out_max", p->mlp_out_max);
        jsonl_int(&j, "mlp_out_pos", p->mlp_out_pos);
        jfloat(&j, "gate_mean", p->gate_mean);
        probe_write_signals_layer(&j, r, sig, r->step, l);
        if (r->has_linear) {
            jfloat(&j, "gdn_state_norm", p->gdn_state_norm);
            jfloat(&j, "gdn_state_norm_max", p->gdn_state_norm_max);
        }
        if (r->has_gate && !p->linear) {
            jsonl_arr(&j, "gate_hist");
            for (int i = 0; i < 10; i++) jfloat(&j, NULL, p->gate_hist[i]);
            jsonl_close(&j);
        } else {
            jsonl_null(&j, "gate_hist");
        }
        if (p->n_expert > 0) {
            jsonl_obj(&j, "moe");
            jsonl_arr(&j, "tokens_per_expert");
            for (int i = 0; i < p->n_expert; i++) jsonl_int(&j, NULL, p->moe_counts[i]);
            jsonl_close(&j);
            jfloat(&j, "max_load", p->moe_max_load);
            jfloat(&j, "entropy", p->moe_entropy);
            jfloat(&j, "aux", p->moe_aux);
            jfloat(&j, "z", p->moe_z);
            jsonl_int(&j, "dropped", p->moe_dropped);
            jsonl_close(&j);
        } else {
            jsonl_null(&j, "moe");
        }
        jsonl_close(&j);
    }
    jsonl_end(&j);
}
