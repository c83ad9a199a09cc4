/* The table of op families the check harness runs (and the bench driver times). */
#include "check.h"

extern const check_op check_store_op, check_transfer_op;

const check_op *const check_ops[] = {&check_store_op, &check_transfer_op};
const size_t check_num_ops = sizeof check_ops / sizeof check_ops[0];
