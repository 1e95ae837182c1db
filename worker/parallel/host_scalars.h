// A few host floats reduced over a group whose collectives need device
// memory: the loss, the step agreement and the ZeRO norm are host values, and
// NCCL takes CUDA tensors only.
#pragma once

#include <string>

#include "comm/communicator.h"
#include "tensor/tensor.h"

namespace weft {

// All-reduces values[0, n) on `group`. On the CPU the collective reads and
// writes `values` in place and runs asynchronously like any other (values
// hold the result after wait()). With `device` CUDA the values are staged
// through a device copy and the call returns completed: values hold the
// result on return (a loss or a stop flag per step is not worth a pinned
// asynchronous path).
comm::WorkPtr all_reduce_host(comm::Communicator& group, Device device, float* values, int n, comm::ReduceOp op,
                              const std::string& label);

}  // namespace weft
