/*
 * An op launch's handle (src/op/op.c, kvjit_op_launch), on a fake driver table: the kernel's
 * CUfunction, remembered per entry for each of the first KVJIT_OP_FUNCTION_SLOTS contexts that
 * launched it while current, in that context only (named by cuCtxGetId: a new context at a dead
 * one's address gets its own function, never the dead one's); the CUkernel everywhere else (a
 * stream of a context not current on its first launch, past the slots, a driver that cannot say).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "kvjit.h"
#include "op.h"
#include "program.h"

#define KERNEL ((CUkernel)(uintptr_t)0x1000)
#define CTX_A ((CUcontext)(uintptr_t)0xa000)
#define CTX_B ((CUcontext)(uintptr_t)0xb000)
#define STREAM_A ((struct CUstream_st *)(uintptr_t)0xa100)
#define STREAM_B ((struct CUstream_st *)(uintptr_t)0xb100)

/* The fake machine: the current context, each context's id (a context made again at A's address
 * gets a new one), whether cuCtxGetId works, and what was launched. */
static struct {
  CUcontext current;
  unsigned long long id_a, id_b;
  int id_fails, get_function;
  CUfunction launched;
} fake;

static CUfunction function_of(CUcontext ctx, unsigned long long id) {
  return (CUfunction)(uintptr_t)((uintptr_t)ctx + 0x10 * id);
}

static unsigned long long id_of(CUcontext ctx) { return ctx == CTX_A ? fake.id_a : fake.id_b; }

static CUresult fake_error_name(CUresult res, const char **name) {
  (void)res;
  *name = "CUDA_ERROR_INVALID_VALUE";
  return CUDA_SUCCESS;
}

static CUresult fake_current(CUcontext *ctx) {
  *ctx = fake.current;
  return CUDA_SUCCESS;
}

static CUresult fake_stream_ctx(CUstream stream, CUcontext *ctx) {
  *ctx = (struct CUstream_st *)stream == STREAM_A ? CTX_A : CTX_B;
  return CUDA_SUCCESS;
}

static CUresult fake_ctx_id(CUcontext ctx, unsigned long long *id) {
  if (fake.id_fails) return CUDA_ERROR_INVALID_VALUE;
  *id = id_of(ctx);
  return CUDA_SUCCESS;
}

static CUresult fake_get_function(CUfunction *fn, CUkernel kernel) {
  fake.get_function++;
  if (kernel != KERNEL || fake.current == NULL) return CUDA_ERROR_INVALID_CONTEXT;
  *fn = function_of(fake.current, id_of(fake.current));
  return CUDA_SUCCESS;
}

static CUresult fake_launch(const CUlaunchConfig *cfg, CUfunction f, void **params, void **extra) {
  (void)cfg, (void)params, (void)extra;
  fake.launched = f;
  return CUDA_SUCCESS;
}

static kvjit_driver driver(void) {
  kvjit_driver d;
  memset(&d, 0, sizeof d);
  d.cuGetErrorName = fake_error_name;
  d.cuCtxGetCurrent = fake_current;
  d.cuStreamGetCtx = fake_stream_ctx;
  d.cuCtxGetId = fake_ctx_id;
  d.cuKernelGetFunction = fake_get_function;
  d.cuLaunchKernelEx = fake_launch;
  return d;
}

static kvjit_kernel kernel_of_entries;

static void entry_init(kvjit_op_entry *e) {
  memset(&fake, 0, sizeof fake);
  fake.current = CTX_A;
  fake.id_a = 1;
  fake.id_b = 2;
  kernel_of_entries.handle = KERNEL;
  memset(e, 0, sizeof *e);
  kvjit_op_entry_init(e, &kernel_of_entries);
  e->geo.block = 128;
}

/* The handle one launch on @p stream used. */
static CUfunction launch(const kvjit_driver *d, const kvjit_op_entry *e, struct CUstream_st *stream) {
  int params = 0;
  fake.launched = NULL;
  assert_int_equal(kvjit_op_launch(d, e, 1, 1, stream, &params), KVJIT_OK);
  return fake.launched;
}

static void test_first_current_context_launches_its_function(void **state) {
  (void)state;
  kvjit_op_entry e;
  entry_init(&e);
  const kvjit_driver d = driver();
  const CUfunction fa = function_of(CTX_A, 1);
  assert_ptr_equal(launch(&d, &e, STREAM_A), fa);
  assert_ptr_equal(launch(&d, &e, STREAM_A), fa);
  assert_ptr_equal(launch(&d, &e, NULL), fa); /* the NULL stream runs in the current context, A */
  assert_int_equal(fake.get_function, 1);
}

static void test_each_context_launches_its_own_function(void **state) {
  (void)state;
  kvjit_op_entry e;
  entry_init(&e);
  const kvjit_driver d = driver();
  assert_ptr_equal(launch(&d, &e, STREAM_A), function_of(CTX_A, 1));
  assert_ptr_equal(launch(&d, &e, STREAM_B), (CUfunction)KERNEL); /* B's stream while A is current */
  fake.current = CTX_B;
  assert_ptr_equal(launch(&d, &e, STREAM_B), function_of(CTX_B, 2));
  assert_ptr_equal(launch(&d, &e, NULL), function_of(CTX_B, 2));
  assert_ptr_equal(launch(&d, &e, STREAM_A), function_of(CTX_A, 1)); /* A's stream: its context's */
  assert_int_equal(fake.get_function, 2);
}

static void test_a_stream_of_another_context_fills_nothing(void **state) {
  (void)state;
  kvjit_op_entry e;
  entry_init(&e);
  const kvjit_driver d = driver();
  assert_ptr_equal(launch(&d, &e, STREAM_B), (CUfunction)KERNEL); /* cuKernelGetFunction would give A's */
  assert_int_equal(fake.get_function, 0);
  fake.current = CTX_B;
  assert_ptr_equal(launch(&d, &e, STREAM_B), function_of(CTX_B, 2));
}

static void test_a_context_made_again_at_the_same_address_gets_its_own(void **state) {
  (void)state;
  kvjit_op_entry e;
  entry_init(&e);
  const kvjit_driver d = driver();
  assert_ptr_equal(launch(&d, &e, STREAM_A), function_of(CTX_A, 1));
  fake.id_a = 7; /* A destroyed, a new context at its address */
  assert_ptr_equal(launch(&d, &e, STREAM_A), function_of(CTX_A, 7));
  assert_ptr_equal(launch(&d, &e, NULL), function_of(CTX_A, 7));
}

static void test_past_the_slots_the_kernel(void **state) {
  (void)state;
  kvjit_op_entry e;
  entry_init(&e);
  const kvjit_driver d = driver();
  for (unsigned long long id = 1; id <= KVJIT_OP_FUNCTION_SLOTS; id++) {
    fake.id_a = id; /* contexts made one after the other */
    assert_ptr_equal(launch(&d, &e, STREAM_A), function_of(CTX_A, id));
  }
  fake.id_a = KVJIT_OP_FUNCTION_SLOTS + 1;
  assert_ptr_equal(launch(&d, &e, STREAM_A), (CUfunction)KERNEL);
  fake.id_a = 3; /* a context with a slot still finds it */
  assert_ptr_equal(launch(&d, &e, STREAM_A), function_of(CTX_A, 3));
  assert_int_equal(fake.get_function, KVJIT_OP_FUNCTION_SLOTS);
}

static void test_a_driver_that_cannot_say_gets_the_kernel(void **state) {
  (void)state;
  kvjit_op_entry e;
  entry_init(&e);
  const kvjit_driver d = driver();
  fake.id_fails = 1;
  assert_ptr_equal(launch(&d, &e, STREAM_A), (CUfunction)KERNEL);
  fake.id_fails = 0;
  fake.current = NULL; /* no context: nothing to fill */
  assert_ptr_equal(launch(&d, &e, NULL), (CUfunction)KERNEL);
  fake.id_a = ~0ull - 1; /* an id the cache cannot hold */
  fake.current = CTX_A;
  assert_ptr_equal(launch(&d, &e, STREAM_A), (CUfunction)KERNEL);
  assert_ptr_equal(launch(&d, &e, STREAM_A), (CUfunction)KERNEL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_first_current_context_launches_its_function),
      cmocka_unit_test(test_each_context_launches_its_own_function),
      cmocka_unit_test(test_a_stream_of_another_context_fills_nothing),
      cmocka_unit_test(test_a_context_made_again_at_the_same_address_gets_its_own),
      cmocka_unit_test(test_past_the_slots_the_kernel),
      cmocka_unit_test(test_a_driver_that_cannot_say_gets_the_kernel),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
