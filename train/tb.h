// train/tb.h: TensorBoard event files from C ([log] tensorboard; docs/formats.md "TensorBoard
// event file"). An event file is a TFRecord stream of serialized `Event` protocol buffers:
//
//   record = uint64 length (little-endian) | uint32 masked CRC-32C of those 8 bytes
//            | the Event's bytes | uint32 masked CRC-32C of them
//
// The three messages written (Event, Summary with its Value, SessionLog) are encoded here by hand:
// a varint, a fixed64, a fixed32 and a length-delimited field are all they use (why not
// protobuf-c: docs/formats.md). Every record of the run log mirrors into one Event whose
// Summary holds the record's numbers as simple_value scalars (train/jsonl.h's jsonl_mirror;
// the tag names: docs/metrics.md "TensorBoard").
//
//   TbWriter tb;
//   tb_open(&tb, run_dir, marker_step);       // run_dir/tb/events.out.tfevents.<time>.<host>
//   jsonl_mirror(logf, tb_mirror_record, &tb);
//   ... records ...
//   jsonl_mirror(logf, NULL, NULL); tb_close(&tb);
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "jsonl.h"

// CRC-32C (Castagnoli: reflected polynomial 0x82F63B78, initial value and final xor 0xFFFFFFFF)
// of p[0..n), and the masked form TFRecord stores: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t tb_crc32c(const void* p, size_t n);
uint32_t tb_mask_crc(uint32_t crc);

// A growing byte buffer.
typedef struct {
    unsigned char* p;
    size_t len, cap;
} TbBuf;

// One serialized Event appended to b: the file's first (file_version "brain.Event:2"), the
// restart marker (session_log status START at step), and scalars (summary: n values, tag and
// simple_value each).
void tb_event_file_version(TbBuf* b, double wall_time);
void tb_event_start(TbBuf* b, double wall_time, long long step);
void tb_event_scalars(TbBuf* b, double wall_time, long long step, int n, const char* const* tags, const float* v);
// One TFRecord of data[0..n) appended to out.
void tb_frame(TbBuf* out, const unsigned char* data, size_t n);

// The tag of one number of a record: "<type>[/<name>]/<path>", the "layers/<i>/" of a per-layer
// value moved to the end as "/layer_<i>" ("probe/f_attn/layer_3"). Returns 0 for what is not
// mirrored: the per-layer "layer" index itself. out gets at most cap - 1 characters.
int tb_tag(char* out, size_t cap, const JsonlRecord* rec, const char* path);

typedef struct {
    FILE* f;
    char path[1200];
    TbBuf ev, rec;        // the event being encoded, and its TFRecord
    char* tags;           // the tags of one record: an arena of tag_cap bytes a number
    const char** tag_p;
    float* val;
    int cap;
    int failed;           // a write failed: warned once, nothing more is written
} TbWriter;

// Creates run_dir/tb and a new event file there (never appends to an older one, which a crash
// may have cut mid-record): events.out.tfevents.<unix time>.<hostname>, the time raised above
// every file already there so that the files sort in the order they were written (TensorBoard
// reads them in name order). Writes the file_version event and the restart marker at
// marker_step: TensorBoard drops the events of earlier files whose step >= marker_step.
// Returns 0, or 1 after one line naming the path.
int tb_open(TbWriter* w, const char* run_dir, int marker_step);
// The jsonl mirror (JsonlMirrorFn; ctx = the TbWriter): one Event of the record's numbers at
// its step, as float32 (simple_value), flushed. "run" records (the launch's shape, not a curve)
// and records without numbers write nothing.
void tb_mirror_record(void* ctx, const JsonlRecord* rec);
void tb_close(TbWriter* w);
