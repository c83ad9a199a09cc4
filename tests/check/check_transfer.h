/* transfer_kv's checks (check_transfer.c): what the bench driver's peers need of them. */
#ifndef KVJIT_TEST_CHECK_TRANSFER_H
#define KVJIT_TEST_CHECK_TRANSFER_H

#include "check.h"

/** The public call's arguments for launch @p l of a case in world @p w (ids of set l->step % w->sets). */
void check_transfer_args(const void *c, const check_world *w, const check_launch *l, kvjit_transfer_kv_args *out);

#endif
