/* Canonical name expressions and the include scanner (no NVRTC needed). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "include_scan.h"
#include "names.h"

static void expect_canonical(const char *in, const char *want) {
  char out[256];
  kvjit_name_canonical(in, out);
  if (strcmp(out, want) != 0) fail_msg("canonical(\"%s\") = \"%s\", expected \"%s\"", in, out, want);
  assert_true(strlen(out) <= strlen(in));
}

static void test_whitespace_does_not_matter(void **state) {
  (void)state;
  expect_canonical("scale<256,float>", "scale<256,float>");
  expect_canonical("scale<256, float>", "scale<256,float>");
  expect_canonical("scale< 256 , float >", "scale<256,float>");
  expect_canonical("  scale<256,\tfloat>\n", "scale<256,float>");
  expect_canonical("&scale<256, float>", "scale<256,float>");
  expect_canonical("& scale<256, float>", "scale<256,float>");
  expect_canonical("ns :: k < 1 >", "ns::k<1>");
  expect_canonical("fill", "fill");
}

static void test_spaces_cxx_needs_are_kept(void **state) {
  (void)state;
  expect_canonical("k<unsigned int>", "k<unsigned int>");
  expect_canonical("k<unsigned   int, long  long>", "k<unsigned int,long long>");
  expect_canonical("k<const float *>", "k<const float*>");
  expect_canonical("k<N - -1>", "k<N- -1>"); /* "--" would be a decrement */
  expect_canonical("k<a< b<int> > >", "k<a<b<int>>>");
  expect_canonical("k<a<b<int>>>", "k<a<b<int>>>");
  expect_canonical("k<' '>", "k<' '>"); /* literals as they are */
  expect_canonical("k< 'a' , \"x y\" >", "k<'a',\"x y\">");
  expect_canonical("k<sizeof (int) * 2>", "k<sizeof(int)*2>");
}

static size_t scan(const char *text, kvjit_scan_directive **d) {
  size_t n = 0;
  assert_int_equal(kvjit_scan(text, strlen(text), d, &n), KVJIT_OK);
  return n;
}

static void expect_name(const char *text, const kvjit_scan_directive *d, const char *name) {
  size_t len = d->end - d->start;
  if (len != strlen(name) || memcmp(text + d->start, name, len) != 0) {
    fail_msg("directive at %zu is \"%.*s\", expected %s", d->start, (int)len, text + d->start, name);
  }
}

static void test_scanner_finds_every_directive(void **state) {
  (void)state;
  const char *text =
      "#include \"a.h\"\n"
      "  #  include <b/c.h>\n"
      "#if 0\n#include \"in_if0.h\"\n#endif\n"
      "#if __has_include(<opt.h>)\n#endif\n"
      "/* #include \"in_comment.h\" */ // #include \"x.h\"\n"
      "const char *s = \"#include <in_string.h>\";\n"
      "const char *r = R\"x(\n#include \"in_raw.h\"\n)x\";\n"
      "int n = 1'000'000; char c = '\"';\n"
      "#include \"after.h\"\n"
      "x = y; #include \"not_at_line_start.h\"\n";
  kvjit_scan_directive *d = NULL;
  size_t n = scan(text, &d);
  assert_int_equal(n, 5);
  expect_name(text, &d[0], "\"a.h\"");
  expect_name(text, &d[1], "<b/c.h>");
  assert_true(d[1].angled);
  expect_name(text, &d[2], "\"in_if0.h\""); /* every branch: a superset */
  expect_name(text, &d[3], "<opt.h>");
  assert_true(d[3].has_include);
  expect_name(text, &d[4], "\"after.h\"");
  for (size_t i = 0; i < n; i++) assert_false(d[i].computed);
  free(d);
}

static void test_scanner_flags_computed_includes(void **state) {
  (void)state;
  kvjit_scan_directive *d = NULL;
  assert_int_equal(scan("#define H \"a.h\"\n#include H\n", &d), 1);
  assert_true(d[0].computed);
  free(d);
  assert_int_equal(scan("#if __has_include(HEADER)\n#endif\n", &d), 1);
  assert_true(d[0].computed && d[0].has_include);
  free(d);
  assert_int_equal(scan("#include_next <x.h>\n", &d), 1);
  assert_true(d[0].computed);
  free(d);
  /* Not directives: no include at all, __has_include without parentheses. */
  assert_int_equal(scan("__global__ void k() {}\n", &d), 0);
  assert_null(d);
  assert_int_equal(scan("#ifdef __has_include\n#endif // include\n", &d), 0);
  free(d);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_whitespace_does_not_matter),
      cmocka_unit_test(test_spaces_cxx_needs_are_kept),
      cmocka_unit_test(test_scanner_finds_every_directive),
      cmocka_unit_test(test_scanner_flags_computed_includes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
