/*
 * Loading a READY program into the driver, once per context: its library and kernels, an alias
 * through its bundle, and an entry the driver rejects rebuilt once.
 */
#ifndef KVJIT_LOAD_H
#define KVJIT_LOAD_H

#include "context.h"
#include "driver.h"
#include "entry.h"
#include "kvjit_tools.h"
#include "program.h"
#include "request.h"

/**
 * Load a READY program into the driver (once per context; cuLibraryLoadData) and its kernels. With
 * @p req (NULL for a bundle loaded for its alias), an entry the driver cannot use is rebuilt once.
 */
kvjit_status kvjit_program_load(kvjit_context *ctx, kvjit_program *p, const kvjit_request *req,
                                const kvjit_entry_label *label, const kvjit_driver *drv);

#endif
