/*
 * Targets: what a program is built for (sm_XY, sm_XYa, sm_XYf, compute_XY[a|f]) as one int code
 * (compute capability | KVJIT_TARGET_* flags, kvjit.h), the key's view of it, the NVRTC option
 * that asks for it, and which GPUs may load what it produces.
 */
#ifndef KVJIT_TARGET_H
#define KVJIT_TARGET_H

#include <stddef.h>

#include "key.h"
#include "kvjit_tools.h"

#define KVJIT_TARGET_FLAGS (KVJIT_TARGET_ARCH_SPECIFIC | KVJIT_TARGET_FAMILY | KVJIT_TARGET_PTX)

/** Compute capability part of a code (90 for sm_90a). */
static inline int kvjit_target_cc(int code) { return code & KVJIT_TARGET_CC_MASK; }

/**
 * Check that @p code is a well-formed target (cc 0 allowed only when @p allow_current: "the
 * current device's"); @p what names the argument in the message.
 */
kvjit_status kvjit_target_check(int code, int allow_current, const char *what);

/**
 * The key target for building @p code (cc filled in): what this NVRTC supports, checked when an
 * NVRTC is loadable, with the PTX fallback for a plain sm_XY newer than NVRTC knows (the newest
 * compute_XY, finished by the driver; @p ptx_fallback set to 1). Without NVRTC the code is taken
 * as it is and the key's NVRTC version is kvjit_nvrtc_key_version()'s.
 * @return KVJIT_ERR_UNSUPPORTED with a one-line list of what this NVRTC builds.
 */
kvjit_status kvjit_target_resolve(kvjit_key_target *out, int code, int *ptx_fallback);

/** The code of a key target (what kvjit_program_arch() and cache listings report). */
int kvjit_target_code(const kvjit_key_target *target);

/** "--gpu-architecture=sm_90a" for @p target into @p buf. */
void kvjit_target_option(const kvjit_key_target *target, char *buf, size_t capacity);

/**
 * Whether code built for @p code may run on a device of compute capability @p device_cc: a plain
 * or family (f) cubin within its major version at the same or a later minor, an arch-specific (a)
 * one only on that compute capability, PTX on that or any later one (a/f PTX as their cubins).
 * @return KVJIT_OK or KVJIT_ERR_UNSUPPORTED naming the target and the device.
 */
kvjit_status kvjit_target_check_device(int code, int device_cc);

/** The one-line error for a target NVRTC rejected (@p nvrtc_text: its complaint). */
kvjit_status kvjit_target_unknown(int code, const char *nvrtc_text);

#endif
