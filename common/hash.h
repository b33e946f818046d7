/* hash — FNV-1a 64, the one hash bf persists: checkpoint and safetensors
 * checksums, config hashes, stage keys, data-cache and tokenizer ids. Every
 * value it gives is written to disk or compared with one that was, so the
 * function must never change: a new hash would need a new name and a record
 * in the file of which one was used. */
#ifndef BF_HASH_H
#define BF_HASH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The published FNV-1a 64 offset basis. Config hashes (cfg_hash) and stage
 * keys (stage_graph) start from it. */
#define FNV1A64_BASIS 0xcbf29ce484222325ull

/* The seed bf's binary hashes start from: the published basis,
 * 14695981039346656037, with its last digit dropped. It is not the standard
 * basis, but checkpoint.bin, the checkpoint set (data_fnv1a64,
 * config_hash), safetensors files, data caches and tokenizer ids were all
 * written with it, so it stays. */
#define FNV1A64_SEED 1469598103934665603ull

/* fnv1a64 — h folded over the n bytes at p, one byte at a time:
 * h = (h ^ byte) * 1099511628211 (mod 2^64). Chains: hashing a then b
 * equals hashing a and b joined, so fnv1a64(fnv1a64(s, a, na), b, nb) is the
 * hash of the concatenation. p may be NULL when n is 0. Pure; thread-safe. */
uint64_t fnv1a64(uint64_t h, const void *p, size_t n);

#ifdef __cplusplus
}
#endif

#endif
