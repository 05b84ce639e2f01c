#include "collectives/stager.h"

#include <atomic>

namespace ddp::detail {

namespace {
// The tests' stagers, by device type.
std::atomic<Stager*> put_in[static_cast<int>(c10::DeviceType::COMPILE_TIME_MAX_DEVICE_TYPES)];

std::atomic<Stager*>& slot(c10::DeviceType type) { return put_in[static_cast<int>(type)]; }
}  // namespace

Stager* stager_for(c10::DeviceType type) {
  if (Stager* s = slot(type).load(std::memory_order_acquire)) return s;
  return device_stager(type);
}

StagerForTesting::StagerForTesting(c10::DeviceType type, Stager* stager)
    : type_(type), previous_(slot(type).exchange(stager, std::memory_order_acq_rel)) {}

StagerForTesting::~StagerForTesting() { slot(type_).store(previous_, std::memory_order_release); }

}  // namespace ddp::detail
