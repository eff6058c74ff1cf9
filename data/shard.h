// data/shard.h: token shards in llm.c's binary format.
//
// File layout (little-endian, as llm.c's dev/data/data_common.py writes it):
//   header: 256 x int32
//     [0] magic     20240520 -> tokens are uint16 (GPT-2 style vocab <= 65536)
//                   20240801 -> tokens are uint32 (llm.c's Llama-3 variant)
//     [1] version   1 for uint16, 7 for uint32
//     [2] number of tokens in the file
//     [3..255] zero
//   tokens: num_tokens x uint16 (or uint32)
// A file's size must be exactly 1024 + num_tokens * token_bytes.
//
// Every function that can fail prints one line to stderr naming the file and returns -1.
#pragma once
#include <stdint.h>

#define SHARD_HEADER_INTS 256
#define SHARD_HEADER_BYTES (SHARD_HEADER_INTS * 4)
#define SHARD_MAGIC_U16 20240520
#define SHARD_VERSION_U16 1
#define SHARD_MAGIC_U32 20240801
#define SHARD_VERSION_U32 7

// What a shard's header says, after validation against the file size.
typedef struct {
    int magic;
    int version;
    int token_bytes;     // 2 (uint16 tokens) or 4 (uint32 tokens)
    int64_t num_tokens;  // header[2]
    int64_t file_bytes;  // size of the file on disk
} ShardHeader;

// A shard mapped read-only into memory (mmap), its tokens validated against vocab_size.
typedef struct {
    char* path;                   // owned copy, for messages
    ShardHeader header;
    const unsigned char* tokens;  // first token, inside the mapping (header.token_bytes each)
    void* map;                    // whole-file mapping; NULL when closed
    int64_t map_bytes;
} Shard;

// Writes tokens[0..num_tokens) to path: uint16 format when every token < 65536, else the
// uint32 variant. Writes path.tmp and renames it, so a crash never leaves a half shard.
// Tokens must be >= 0 and num_tokens <= INT32_MAX (the header stores an int32 count).
int shard_write(const char* path, const int* tokens, int64_t num_tokens);

// Reads and validates the header: file exists, magic/version known, file size matches the count.
int shard_read_header(const char* path, ShardHeader* header);

// Maps the shard and checks every token id < vocab_size (skip the check with vocab_size <= 0).
// On failure the shard is left closed (shard_close is still safe to call).
int shard_open(Shard* shard, const char* path, int vocab_size);

// Unmaps and frees; safe on a zeroed or already-closed Shard.
void shard_close(Shard* shard);

// out[i] = token (start + i) for i in [0, n). Requires 0 <= start, start + n <= num_tokens.
void shard_get(const Shard* shard, int64_t start, int64_t n, int* out);
