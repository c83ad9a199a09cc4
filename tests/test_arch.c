/*
 * The current device's arch as an op call finds it (src/cuda/arch.c), on a fake driver table:
 * with one arch on every visible device the first call with a context asks the driver once and no
 * later call asks; with mixed archs every call asks cuCtxGetDevice; a call without a context fails
 * with KVJIT_ERR_NO_DEVICE until the rule is decided (the op call's adopt-and-retry path).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "arch.h"
#include "kvjit.h"

/* The fake machine: device ordinals 0..count-1, their capabilities, the current context's device
 * (-1: none), a device whose attributes cannot be read (-1: none), and the driver calls made. */
static struct {
  int count, sm[8], current, unreadable;
  int ctx_get_device, get_attribute;
} fake;

static CUresult fake_error_name(CUresult res, const char **name) {
  *name = res == CUDA_ERROR_INVALID_CONTEXT ? "CUDA_ERROR_INVALID_CONTEXT" : "CUDA_ERROR_INVALID_VALUE";
  return CUDA_SUCCESS;
}

static CUresult fake_count(int *count) {
  *count = fake.count;
  return CUDA_SUCCESS;
}

static CUresult fake_get(CUdevice *dev, int ordinal) {
  if (ordinal < 0 || ordinal >= fake.count) return CUDA_ERROR_INVALID_DEVICE;
  *dev = ordinal;
  return CUDA_SUCCESS;
}

static CUresult fake_attribute(int *value, CUdevice_attribute attr, CUdevice dev) {
  fake.get_attribute++;
  if (dev < 0 || dev >= fake.count || dev == fake.unreadable) return CUDA_ERROR_INVALID_VALUE;
  if (attr == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) *value = fake.sm[dev] / 10;
  else if (attr == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR) *value = fake.sm[dev] % 10;
  else return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

static CUresult fake_ctx_device(CUdevice *dev) {
  fake.ctx_get_device++;
  if (fake.current < 0) return CUDA_ERROR_INVALID_CONTEXT;
  *dev = fake.current;
  return CUDA_SUCCESS;
}

static kvjit_driver driver(void) {
  kvjit_driver d;
  memset(&d, 0, sizeof d);
  d.cuGetErrorName = fake_error_name;
  d.cuDeviceGetCount = fake_count;
  d.cuDeviceGet = fake_get;
  d.cuDeviceGetAttribute = fake_attribute;
  d.cuCtxGetDevice = fake_ctx_device;
  return d;
}

static void machine(int count, const int *sm, int current) {
  memset(&fake, 0, sizeof fake);
  fake.count = count;
  memcpy(fake.sm, sm, (size_t)count * sizeof *sm);
  fake.current = current;
  fake.unreadable = -1;
}

/* @p calls calls, each expecting @p want; the cuCtxGetDevice calls they made. */
static int calls_asking(kvjit_arch_memo *memo, const kvjit_driver *d, int calls, int want) {
  const int before = fake.ctx_get_device;
  for (int i = 0; i < calls; i++) {
    int sm = 0;
    assert_int_equal(kvjit_arch_current_in(memo, d, &sm), KVJIT_OK);
    assert_int_equal(sm, want);
  }
  return fake.ctx_get_device - before;
}

static void test_one_device_asks_once(void **state) {
  (void)state;
  static kvjit_arch_memo memo;
  const kvjit_driver d = driver();
  machine(1, (const int[]){90}, 0);
  assert_int_equal(calls_asking(&memo, &d, 1, 90), 1);
  assert_int_equal(calls_asking(&memo, &d, 100, 90), 0);
}

static void test_same_arch_on_every_device_asks_once(void **state) {
  (void)state;
  static kvjit_arch_memo memo;
  const kvjit_driver d = driver();
  machine(4, (const int[]){90, 90, 90, 90}, 2);
  assert_int_equal(calls_asking(&memo, &d, 1, 90), 1);
  const int attributes = fake.get_attribute;
  fake.current = 3; /* another device of the same arch: nothing to ask */
  assert_int_equal(calls_asking(&memo, &d, 100, 90), 0);
  assert_int_equal(fake.get_attribute, attributes);
}

static void test_mixed_archs_ask_on_every_call(void **state) {
  (void)state;
  static kvjit_arch_memo memo;
  const kvjit_driver d = driver();
  machine(4, (const int[]){90, 90, 80, 90}, 0);
  assert_int_equal(calls_asking(&memo, &d, 3, 90), 3);
  fake.current = 2;
  assert_int_equal(calls_asking(&memo, &d, 3, 80), 3);
  /* each device's capability is read once, then remembered */
  const int attributes = fake.get_attribute;
  fake.current = 0;
  assert_int_equal(calls_asking(&memo, &d, 3, 90), 3);
  assert_int_equal(fake.get_attribute, attributes);
}

static void test_no_context_fails_until_decided(void **state) {
  (void)state;
  static kvjit_arch_memo memo;
  const kvjit_driver d = driver();
  machine(2, (const int[]){90, 90}, -1);
  int sm = 0;
  for (int i = 0; i < 2; i++) {
    assert_int_equal(kvjit_arch_current_in(&memo, &d, &sm), KVJIT_ERR_NO_DEVICE);
    assert_non_null(strstr(kvjit_last_error(), "cuCtxGetDevice (no current CUDA context?): CUDA_ERROR_INVALID_CONTEXT"));
  }
  fake.current = 1; /* the op call adopted a context and retries */
  assert_int_equal(calls_asking(&memo, &d, 1, 90), 1);
  /* Decided: a later call without a context is answered; its launch is what fails (and adopts). */
  fake.current = -1;
  assert_int_equal(calls_asking(&memo, &d, 5, 90), 0);
}

static void test_mixed_without_context_keeps_failing(void **state) {
  (void)state;
  static kvjit_arch_memo memo;
  const kvjit_driver d = driver();
  machine(2, (const int[]){90, 100}, 1);
  assert_int_equal(calls_asking(&memo, &d, 1, 100), 1);
  fake.current = -1;
  int sm = 0;
  assert_int_equal(kvjit_arch_current_in(&memo, &d, &sm), KVJIT_ERR_NO_DEVICE);
}

static void test_unreadable_device_keeps_asking(void **state) {
  (void)state;
  static kvjit_arch_memo memo;
  const kvjit_driver d = driver();
  machine(3, (const int[]){90, 90, 90}, 0);
  fake.unreadable = 2; /* the rule cannot be decided: asked per call, as before it */
  assert_int_equal(calls_asking(&memo, &d, 4, 90), 4);
  fake.current = 2;
  int sm = 0;
  assert_int_equal(kvjit_arch_current_in(&memo, &d, &sm), KVJIT_ERR_CUDA);
  assert_non_null(strstr(kvjit_last_error(), "cuDeviceGetAttribute(COMPUTE_CAPABILITY)"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_one_device_asks_once),
      cmocka_unit_test(test_same_arch_on_every_device_asks_once),
      cmocka_unit_test(test_mixed_archs_ask_on_every_call),
      cmocka_unit_test(test_no_context_fails_until_decided),
      cmocka_unit_test(test_mixed_without_context_keeps_failing),
      cmocka_unit_test(test_unreadable_device_keeps_asking),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
