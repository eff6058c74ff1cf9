// data/decompress.h: a streaming reader of a file that may be compressed: plain, gzip (zlib),
// zstd (libzstd) or xz (liblzma), told apart by the first bytes (magic), never by the name.
//
//   gzip  1F 8B            every member in turn (cat a.gz b.gz > c.gz is a.gz's text then b.gz's)
//   zstd  28 B5 2F FD      every frame in turn (skippable frames skipped)
//   xz    FD 37 7A 58 5A 00  every stream in turn (LZMA_CONCATENATED; padding between them allowed)
//   anything else: plain, its bytes as they are (an empty file too)
//
// Memory is bounded: one input buffer (DECOMP_IN_BYTES) and the decoder's window (zstd: up to the
// frame's window, refused beyond 128 MiB by libzstd's default; xz: its dictionary; gzip: 32 KiB).
// Errors: one line on stderr naming the file and the compressed offset, e.g.
//   error: text 'x.zst': truncated zstd stream at compressed offset 4096 (the file ends inside a frame)
//   error: text 'x.gz': corrupt gzip stream at compressed offset 20: invalid block type
// and every later read returns -1 as well.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define DECOMP_IN_BYTES (1u << 18)   // compressed bytes read from the file at a time

typedef enum { DECOMP_PLAIN = 0, DECOMP_GZIP, DECOMP_ZSTD, DECOMP_XZ } DecompFormat;

typedef struct Decomp Decomp;  // private

// The format the first bytes b[0..n) announce (DECOMP_PLAIN for anything unknown).
DecompFormat decomp_detect(const unsigned char* b, size_t n);
// "plain", "gzip", "zstd" or "xz"
const char* decomp_format_name(DecompFormat f);

// Opens path and reads its first bytes to pick the format. NULL after one line on stderr.
Decomp* decomp_open(const char* path);
// Up to n decompressed bytes into buf: the count (0 only at the end of the text), or -1 after one
// line on stderr (a read error, a corrupt or truncated stream).
ssize_t decomp_read(Decomp* d, void* buf, size_t n);
// Bytes of the file consumed so far (compressed bytes; for plain text the same as decompressed):
// what a progress line measures against the file's size.
int64_t decomp_in_bytes(const Decomp* d);
DecompFormat decomp_format(const Decomp* d);
// Closes the file; safe on NULL.
void decomp_close(Decomp* d);
