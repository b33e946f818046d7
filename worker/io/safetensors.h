/* safetensors — the standard safetensors file, read and written without any
 * outside code, so a bf model opens in PyTorch/numpy and a file written there
 * opens in bf.
 *
 * Layout (all little-endian):
 *   u64 N | N bytes of UTF-8 JSON | data section
 * The JSON is one object: tensor name → {"dtype": "F32", "shape": [d0, ...],
 * "data_offsets": [begin, end]} (byte offsets into the data section), plus an
 * optional "__metadata__" object of string → string. The writer pads the JSON
 * with spaces to a multiple of 8 bytes, as the reference implementation does,
 * so the data section starts 8-byte aligned. Offsets must tile the data
 * section exactly: sorted by begin, the first starts at 0, each begins where
 * the previous ended, the last ends at the end of the file, and each spans
 * numel × dtype size bytes.
 *
 * Every check of the reference reader is made here too, with limits of our
 * own on what a file may make us allocate (ST_MAX_*). bf's tensors are F32;
 * other dtypes are parsed and skipped (st_read_f32 refuses them by name).
 * Errors name the file and, where one is at fault, the tensor. */
#ifndef SAFETENSORS_H
#define SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define ST_MAX_HEADER 100000000u /* bytes of JSON (the reference's own cap) */
#define ST_MAX_TENSORS (1 << 20)
#define ST_MAX_NAME 1024 /* bytes of one tensor name or metadata key */
#define ST_MAX_DIMS 8
#define ST_MAX_META 4096 /* metadata entries */
#define ST_MAX_DIM ((uint64_t)1 << 40)

typedef struct st_tensor {
    char *name;     /* NUL-terminated, owned by the st_file */
    char dtype[16]; /* as written in the file: "F32", "BF16", ... */
    int dtype_bits; /* bits per element (F32: 32; F4: 4) */
    int ndim;       /* 0 = a scalar (numel 1) */
    uint64_t shape[ST_MAX_DIMS];
    uint64_t numel;
    uint64_t begin, end; /* byte offsets within the data section */
} st_tensor;

typedef struct st_file {
    char path[4096];
    FILE *f;
    st_tensor *t; /* n tensors, sorted by begin (file order) */
    int n;
    char **meta_key, **meta_val; /* n_meta pairs, in file order */
    int n_meta;
    uint64_t header_len; /* N */
    uint64_t data_start; /* 8 + N */
    uint64_t data_len;   /* bytes of the data section */
} st_file;

/* Opens path and validates its header completely (sizes, JSON, dtypes,
 * shapes, offsets, duplicates, metadata types, file length). Returns 0 with
 * the file held open (st_close releases it), or -1 with a message naming the
 * file and the tensor at fault; *f is then empty and needs no st_close. */
int st_open(st_file *f, const char *path, char *err, size_t errlen);
void st_close(st_file *f);

/* Index of the tensor named name, or -1. */
int st_find(const st_file *f, const char *name);
/* Value of a metadata key, or NULL. Owned by f. */
const char *st_meta(const st_file *f, const char *key);

/* Reads tensor i (an F32 tensor) into out[numel]. Returns 0, or -1 with a
 * message (another dtype: named, with what bf reads; a short read). */
int st_read_f32(const st_file *f, int i, float *out, char *err, size_t errlen);

/* 1 when st_read_as_f32 converts tensors of this dtype to F32 (F32 itself,
 * F16, BF16, F64), else 0. */
int st_dtype_converts(const char *dtype);

/* Reads tensor i into out[numel] as F32, converting F16, BF16 and F64 (an
 * F64 beyond F32's range becomes +-Inf; F16/BF16 convert exactly). Returns 0,
 * or -1 with a message (another dtype; a short read; out of memory). */
int st_read_as_f32(const st_file *f, int i, float *out, char *err, size_t errlen);

/* FNV-1a 64 of the whole data section, read in chunks (for files whose
 * writer recorded one in the metadata). Returns 0 or -1 with a message. */
int st_data_fnv(const st_file *f, uint64_t *out, char *err, size_t errlen);

/* One tensor to write: F32, data = numel floats in row-major order. */
typedef struct st_entry {
    const char *name;
    int ndim; /* 0 .. ST_MAX_DIMS */
    const int64_t *shape;
    const float *data;
} st_entry;

/* Writes n tensors, in the order given (the data section follows it, so a
 * caller passing its tensors in buffer order gets the buffer verbatim), and
 * n_meta metadata pairs (meta[2k] = key, meta[2k+1] = value) into path
 * atomically: a temporary file beside it, fsync, rename, fsync of the folder.
 * A crash leaves the old file or the new one. Refuses empty or duplicate
 * names, bad shapes and a header over ST_MAX_HEADER. Returns 0 or -1 with a
 * message naming the file (and the tensor at fault). */
int st_write(const char *path, const st_entry *t, int n, const char *const *meta, int n_meta,
             char *err, size_t errlen);

/* st_write with every tensor stored as BF16 when bf16 is 1 (each float
 * rounded to nearest even, kernels/bk_bf16.h: a file for bf16 inference,
 * bfworker export --dtype bf16), as F32 when 0. */
int st_write_as(const char *path, const st_entry *t, int n, const char *const *meta, int n_meta,
                int bf16, char *err, size_t errlen);

/* Writes all n bytes of p to fd, retrying short writes and EINTR; 0, or -1
 * with errno set. */
int st_write_all(int fd, const void *p, size_t n);

#endif
