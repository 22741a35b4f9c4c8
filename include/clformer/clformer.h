/* clformer: the public face. Include this one header. */
#ifndef CLFORMER_H
#define CLFORMER_H
#include "clformer/status.h"
#include "clformer/device.h"
#include "clformer/program.h"
#include "clformer/buffer.h"
#include "clformer/gemm.h"
#include "clformer/layernorm.h"
#include "clformer/elementwise.h"
#include "clformer/attention.h"
#include "clformer/embedding.h"
#include "clformer/crossentropy.h"
#include "clformer/optimizer.h"
#include "clformer/philox.h"
#include "clformer/selftest.h"
#include "clformer/config.h"
#include "clformer/data.h"
#include "clformer/safetensors.h"
#include "clformer/model.h"
#include "clformer/train.h"
#include "clformer/bench.h"
#include "clformer/experiments.h"
#endif
