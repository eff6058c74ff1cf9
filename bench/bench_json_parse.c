// bench/bench_json_parse.c: the time cJSON and jansson take to parse a tokenizer.json and walk
// its vocab and merges (why data/hf_tokenizer.c uses cJSON: docs/formats.md). Not built by CMake:
//   cc -O2 bench/bench_json_parse.c -o /tmp/bench_json_parse $(pkg-config --cflags --libs libcjson jansson)
//   /tmp/bench_json_parse tokenizer.json
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }

int main(int argc, char** argv) {
    if (argc != 2) { fprintf(stderr, "usage: %s tokenizer.json\n", argv[0]); return 1; }
    FILE* f = fopen(argv[1], "rb");
    if (!f) { perror(argv[1]); return 1; }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char* buf = malloc(n + 1);
    if (fread(buf, 1, n, f) != (size_t)n) return 1;
    buf[n] = 0;
    fclose(f);
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now();
        cJSON* root = cJSON_ParseWithLength(buf, n);
        const cJSON* m = cJSON_GetObjectItemCaseSensitive(root, "model");
        const cJSON* e;
        long sum = 0, nm = 0;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(m, "vocab")) sum += e->valueint;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(m, "merges")) nm++;
        double t1 = now();
        cJSON_Delete(root);
        double t2 = now();
        json_error_t err;
        json_t* jr = json_loadb(buf, n, 0, &err);
        json_t* jm = json_object_get(jr, "model");
        const char* k;
        json_t* v;
        long sum2 = 0;
        json_object_foreach(json_object_get(jm, "vocab"), k, v) sum2 += json_integer_value(v);
        long nm2 = json_array_size(json_object_get(jm, "merges"));
        double t3 = now();
        json_decref(jr);
        double t4 = now();
        printf("%.1f MB: cJSON parse+walk %.3f s (free %.3f s); jansson parse+walk %.3f s (free %.3f s) [%ld %ld %ld %ld]\n",
               n / 1e6, t1 - t0, t2 - t1, t3 - t2, t4 - t3, sum, nm, sum2, nm2);
    }
    return 0;
}
