/* CUDA templates from kernel_src/, embedded at build time (see kernel_src/embed.py). */
#ifndef KVJIT_EMBEDDED_H
#define KVJIT_EMBEDDED_H

extern const char kvjit_src_store_kv_cache[];
extern const unsigned long kvjit_src_store_kv_cache_len;
extern const char kvjit_src_transfer_kv[];
extern const unsigned long kvjit_src_transfer_kv_len;

#endif
