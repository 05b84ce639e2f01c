// A build without CUDA: no device has a stager (staging copies block).
#include "collectives/stager.h"

namespace ddp::detail {

Stager* device_stager(c10::DeviceType) { return nullptr; }

}  // namespace ddp::detail
