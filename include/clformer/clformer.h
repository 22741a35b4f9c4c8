/* clformer: the public face. Include this one header. */
#ifndef CLFORMER_H
#define CLFORMER_H
#include "clformer/status.h"
#include "clformer/device.h"
#include "clformer/program.h"
#include "clformer/buffer.h"
#include "clformer/gemm.h"
#endif
