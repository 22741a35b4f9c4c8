/* Helpers shared by the subcommands. */
#include <string.h>
#include "cli.h"
#include "clformer/status.h"
#include "clformer/device.h"

int cf_exit_code(int status) {
  switch (status) {
    case CF_OK: return 0;
    case CF_ERR_NO_DEVICE: case CF_ERR_CONFIG: case CF_ERR_INVALID_ARG: case CF_ERR_DATA:
    case CF_ERR_CHECKPOINT: case CL_PLATFORM_NOT_FOUND_KHR: case CL_DEVICE_NOT_FOUND:
      return 2;
    default: return 1;
  }
}

int cf_arg_is(const char *arg, const char *long_name, const char *short_name) {
  return (long_name && !strcmp(arg, long_name)) || (short_name && !strcmp(arg, short_name));
}
