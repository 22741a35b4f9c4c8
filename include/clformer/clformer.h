/* clformer: the public face. Include this one header; one header per public layer, in layer order. */
#ifndef CLFORMER_H
#define CLFORMER_H
#include "clformer/base.h"
#include "clformer/runtime.h"
#include "clformer/gemm.h"
#include "clformer/ops.h"
#include "clformer/ref.h"
#include "clformer/check.h"
#include "clformer/config.h"
#include "clformer/model.h"
#include "clformer/data.h"
#include "clformer/dist.h"
#include "clformer/train.h"
#include "clformer/experiments.h"
#include "clformer/bench.h"
#endif
