// weft comm: the CUDA side of host-staged collectives (staged_communicator.h):
// pinned host buffers, a copy stream for device -> host ordered after the
// compute stream by an event, a copy-back stream for host -> device, and the
// compute stream waiting on the copy back's event. Created on the device
// current at construction; the lane threads that call it make that device
// current for themselves. Only built with CUDA (WEFT_HAVE_NCCL).
#pragma once

#include <memory>

#include "comm/staged_communicator.h"

namespace weft::comm {

// `compute_stream`: a cudaStream_t (nullptr: the legacy default stream).
std::shared_ptr<StagingDevice> make_cuda_staging(void* compute_stream);

}  // namespace weft::comm
