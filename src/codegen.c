/* PLACEHOLDER */ static const char placeholder_codegen = 0; const char *kvjit_codegen_placeholder(void); const char *kvjit_codegen_placeholder(void) { return &placeholder_codegen; }
