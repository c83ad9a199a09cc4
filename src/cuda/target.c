/* Target codes: parsing and spelling, what this NVRTC builds, which GPUs may load what. */
#include "target.h"

#include <stdio.h>
#include <string.h>

#include "nvrtc_lib.h"
#include "status.h"

/* Arch-specific variants exist from 9.0 on, family ones from 10.0 on (NVRTC 12.9 and later). */
#define FIRST_ARCH_SPECIFIC 90
#define FIRST_FAMILY 100

static int suffix_of(int code) {
  if (code & KVJIT_TARGET_ARCH_SPECIFIC) return 'a';
  if (code & KVJIT_TARGET_FAMILY) return 'f';
  return 0;
}

/* "90", "100a", "9.0", "10.0" after an optional prefix; cc 30..999. -1 when malformed. */
static int parse_number(const char *p, int allow_dotted, int allow_suffix, int *suffix) {
  *suffix = 0;
  int digits = 0;
  while (p[digits] >= '0' && p[digits] <= '9') digits++;
  if (allow_dotted && (digits == 1 || digits == 2) && p[digits] == '.' && p[digits + 1] >= '0' &&
      p[digits + 1] <= '9' && p[digits + 2] == '\0' && p[0] != '0') {
    int major = digits == 1 ? p[0] - '0' : (p[0] - '0') * 10 + (p[1] - '0');
    int cc = major * 10 + (p[digits + 1] - '0');
    return cc >= 30 ? cc : -1;
  }
  if ((digits != 2 && digits != 3) || p[0] == '0') return -1;
  const char *rest = p + digits;
  if ((rest[0] == 'a' || rest[0] == 'f') && rest[1] == '\0' && allow_suffix) {
    *suffix = rest[0];
  } else if (rest[0] != '\0') {
    return -1;
  }
  int cc = 0;
  for (int i = 0; i < digits; i++) cc = cc * 10 + (p[i] - '0');
  return cc >= 30 ? cc : -1;
}

kvjit_status kvjit_parse_target(const char *text, int *target) {
  if (text == NULL || target == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "target text or target is NULL");
  const char *p = text;
  int ptx = 0;
  if (!strncmp(p, "sm_", 3)) {
    p += 3;
  } else if (!strncmp(p, "compute_", 8)) {
    p += 8;
    ptx = 1;
  }
  int suffix;
  int cc = parse_number(p, p == text, 1, &suffix);
  if (cc < 0) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT,
                      "target \"%s\": expected sm_XY, sm_XYa, sm_XYf, compute_XY[a|f], XY or X.Y (e.g. sm_90a)", text);
  }
  *target = cc | (ptx ? KVJIT_TARGET_PTX : 0) | (suffix == 'a' ? KVJIT_TARGET_ARCH_SPECIFIC : 0) |
            (suffix == 'f' ? KVJIT_TARGET_FAMILY : 0);
  return KVJIT_OK;
}

/* GPUs by the names people type, for an op's arch (the CLI's --arch h100, Python's arch="H100"). */
static const struct gpu_name {
  const char *name; /* lower case, no spaces or dashes */
  int cc;
} gpu_names[] = {
    {"v100", 70},    {"t4", 75},      {"a100", 80},    {"a800", 80},    {"a30", 80},   {"a10g", 86},
    {"a10", 86},     {"a40", 86},     {"a6000", 86},   {"rtx3090", 86}, {"l4", 89},    {"l40s", 89},
    {"l40", 89},     {"rtx4090", 89}, {"h100", 90},    {"h200", 90},    {"h800", 90},  {"h20", 90},
    {"gh200", 90},   {"b200", 100},   {"gb200", 100},  {"b100", 100},   {"b300", 103}, {"gb300", 103},
    {"thor", 110},   {"rtx5090", 120}, {"rtxpro6000", 120}, {"gb10", 121},
};

/* The compute capability of a GPU name ("H100", "h100-sxm", "NVIDIA H200", "RTX 4090"), or -1. */
static int gpu_name_cc(const char *text) {
  char name[32];
  size_t n = 0;
  for (const char *p = text; *p != '\0'; p++) {
    if (*p == ' ' || *p == '-' || *p == '_') continue;
    if (n + 1 == sizeof name) return -1;
    name[n++] = (char)(*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p);
  }
  name[n] = '\0';
  const char *model = strncmp(name, "nvidia", 6) == 0 ? name + 6 : name;
  for (size_t i = 0; i < sizeof gpu_names / sizeof gpu_names[0]; i++) {
    size_t len = strlen(gpu_names[i].name);
    /* "h100sxm5" is an H100; "h1000" is no GPU we know. */
    if (strncmp(model, gpu_names[i].name, len) == 0 && !(model[len] >= '0' && model[len] <= '9'))
      return gpu_names[i].cc;
  }
  return -1;
}

kvjit_status kvjit_parse_arch(const char *text, int *sm) {
  if (text == NULL || sm == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "arch text or sm is NULL");
  const char *p = !strncmp(text, "sm_", 3) || !strncmp(text, "SM_", 3) ? text + 3 : text;
  int suffix;
  int cc = parse_number(p, p == text, 0, &suffix);
  if (cc < 0) cc = gpu_name_cc(text);
  if (cc >= 0) {
    *sm = cc;
    return KVJIT_OK;
  }
  int target;
  if (kvjit_parse_target(text, &target) == KVJIT_OK) {
    char plain[16];
    snprintf(plain, sizeof plain, "sm_%d", kvjit_target_cc(target));
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT,
                      "arch \"%s\": ops build plain sm_XY cubins (%s runs on the same GPUs; the ops use no "
                      "arch-specific features); sm_XYa, sm_XYf and compute_XY are targets of the generic loader "
                      "(kvjit_parse_target, kvjit_program_desc.arch)",
                      text, plain);
  }
  return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT,
                    "arch \"%s\": expected sm_XY (e.g. sm_90), XY, X.Y or a GPU name (e.g. h100, b200, l40s)", text);
}

kvjit_status kvjit_target_check(int code, int allow_current, const char *what) {
  int cc = kvjit_target_cc(code);
  int flags = code & ~KVJIT_TARGET_CC_MASK;
  int bad = code < 0 || (flags & ~KVJIT_TARGET_FLAGS) != 0 ||
            ((flags & KVJIT_TARGET_ARCH_SPECIFIC) && (flags & KVJIT_TARGET_FAMILY)) ||
            (cc == 0 ? !allow_current : cc < 10 || cc > 999);
  if (bad) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT,
                      "%s: %d (%#x) is not a target: a compute capability such as 90, or'ed with at most one of "
                      "KVJIT_TARGET_ARCH_SPECIFIC / _FAMILY and optionally KVJIT_TARGET_PTX%s",
                      what, code, (unsigned)code, allow_current ? "; 0 for the current device" : "");
  }
  return KVJIT_OK;
}

kvjit_status kvjit_target_name(int target, char *out, size_t capacity) {
  if (out == NULL || capacity == 0) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "out is NULL or capacity is 0");
  out[0] = '\0';
  kvjit_status st = kvjit_target_check(target, 0, "target");
  if (st != KVJIT_OK) return st;
  int suffix = suffix_of(target);
  char suffix_text[2] = {(char)suffix, '\0'};
  int n = snprintf(out, capacity, "%s_%d%s", (target & KVJIT_TARGET_PTX) ? "compute" : "sm", kvjit_target_cc(target),
                   suffix_text);
  if (n < 0 || (size_t)n >= capacity) {
    out[0] = '\0';
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "capacity %zu: too small for a target name", capacity);
  }
  return KVJIT_OK;
}

int kvjit_target_code(const kvjit_key_target *t) {
  return t->arch | (t->kind == KVJIT_PAYLOAD_PTX ? KVJIT_TARGET_PTX : 0) |
         (t->suffix == 'a' ? KVJIT_TARGET_ARCH_SPECIFIC : 0) | (t->suffix == 'f' ? KVJIT_TARGET_FAMILY : 0);
}

void kvjit_target_option(const kvjit_key_target *t, char *buf, size_t capacity) {
  char name[32];
  kvjit_target_name(kvjit_target_code(t), name, sizeof name);
  snprintf(buf, capacity, "--gpu-architecture=%s", name);
}

kvjit_status kvjit_target_unknown(int code, const char *nvrtc_text) {
  char name[32];
  if (kvjit_target_name(code, name, sizeof name) != KVJIT_OK) snprintf(name, sizeof name, "%d", code);
  const kvjit_nvrtc *nv;
  if (kvjit_nvrtc_get(&nv) != KVJIT_OK) return kvjit_fail(KVJIT_ERR_UNSUPPORTED, "target %s: not supported", name);
  char list[256] = "";
  size_t used = 0;
  for (int i = 0; i < nv->num_archs && used < sizeof list; i++) {
    used += (size_t)snprintf(list + used, sizeof list - used, "%s%d", i ? " " : "", nv->archs[i]);
  }
  int family = nv->major > 12 || (nv->major == 12 && nv->minor >= 9);
  return kvjit_fail(KVJIT_ERR_UNSUPPORTED,
                    "target %s: NVRTC %d.%d builds sm_XY for XY in {%s}, sm_XYa for those >= %d%s, and compute_XY "
                    "(PTX)%s%s",
                    name, nv->major, nv->minor, list, FIRST_ARCH_SPECIFIC,
                    family ? ", sm_XYf for those >= 100" : "", nvrtc_text ? ": " : "", nvrtc_text ? nvrtc_text : "");
}

kvjit_status kvjit_target_resolve(kvjit_key_target *out, int code, int *ptx_fallback) {
  if (ptx_fallback) *ptx_fallback = 0;
  int cc = kvjit_target_cc(code);
  out->arch = cc;
  out->kind = (code & KVJIT_TARGET_PTX) ? KVJIT_PAYLOAD_PTX : KVJIT_PAYLOAD_CUBIN;
  out->suffix = suffix_of(code);
  const kvjit_nvrtc *nv;
  if (kvjit_nvrtc_get(&nv) != KVJIT_OK) {
    /* No NVRTC: the key is still computable, so a warm cache serves; a miss will say why. */
    kvjit_nvrtc_key_version(&out->nvrtc_major, &out->nvrtc_minor);
    kvjit_clear_error();
    return KVJIT_OK;
  }
  out->nvrtc_major = nv->major;
  out->nvrtc_minor = nv->minor;
  int known = 0;
  for (int i = 0; i < nv->num_archs; i++) known |= nv->archs[i] == cc;
  int newest = nv->archs[nv->num_archs - 1];
  if (!known && code == cc && cc > newest) {
    /* A GPU newer than this NVRTC: PTX for the newest arch it knows, finished by the driver. */
    out->arch = newest;
    out->kind = KVJIT_PAYLOAD_PTX;
    if (ptx_fallback) *ptx_fallback = 1;
    return KVJIT_OK;
  }
  int family_ok = nv->major > 12 || (nv->major == 12 && nv->minor >= 9);
  if (!known || (out->suffix == 'a' && cc < FIRST_ARCH_SPECIFIC) ||
      (out->suffix == 'f' && (cc < FIRST_FAMILY || !family_ok))) {
    return kvjit_target_unknown(code, NULL);
  }
  return KVJIT_OK;
}

kvjit_status kvjit_target_check_device(int code, int device_cc) {
  int cc = kvjit_target_cc(code);
  int same_major = device_cc / 10 == cc / 10 && device_cc % 10 >= cc % 10;
  int ok;
  const char *rule;
  if (code & KVJIT_TARGET_ARCH_SPECIFIC) {
    ok = device_cc == cc;
    rule = "arch-specific code runs only on GPUs of exactly that compute capability";
  } else if (code & KVJIT_TARGET_FAMILY) {
    ok = same_major;
    rule = "family code runs on GPUs of its major version from its minor version on";
  } else if (code & KVJIT_TARGET_PTX) {
    ok = device_cc >= cc;
    rule = "PTX runs on GPUs of that compute capability or newer";
  } else {
    ok = same_major;
    rule = "a cubin runs on GPUs of its major version from its minor version on";
  }
  if (ok) return KVJIT_OK;
  char name[32];
  kvjit_target_name(code, name, sizeof name);
  return kvjit_fail(KVJIT_ERR_UNSUPPORTED, "target %s cannot run on the current device (sm_%d): %s", name, device_cc,
                    rule);
}
