/*
 * URLs as kvjit shows them (logs, errors, `kvjit info`, the Python binding): the one redaction of
 * secrets a URL may carry, so no surface prints a password or a signed query.
 */
#ifndef KVJIT_URL_H
#define KVJIT_URL_H

#include <stddef.h>

/**
 * @p text (one URL, or a list of them separated by spaces, commas or tabs, each optionally
 * ending "|ro"/"|rw") with every userinfo ("user:password@") replaced by "***@" and the value of
 * every query parameter named like a secret (token, signature or sig, key, secret, password,
 * credential, auth) replaced by "***". Always NUL-terminated; cut to @p capacity.
 */
void kvjit_url_redact(char *out, size_t capacity, const char *text);

/** kvjit_url_redact() into a malloc'd string (NULL out of memory). */
char *kvjit_url_redact_dup(const char *text);

#endif
