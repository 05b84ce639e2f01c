// Cancelling this process's group set-ups (base/setup_cancel.h): a set-up
// wait on the store ends at once with the reason, not at its timeout; and
// only while a SetupWindow is open.
#include "base/arrival.h"
#include "base/setup_cancel.h"

#include <ddp/errors.h>

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

namespace ddp::detail {
namespace {

using Clock = std::chrono::steady_clock;

TEST(SetupCancel, AWaitingBarrierEndsAtOnceWithTheReason) {
  StorePtr store = c10::make_intrusive<c10d::HashStore>();
  SetupWindow window;
  std::thread heartbeat([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    cancel_group_setups("member 3 of generation 7 is gone");
  });
  const auto start = Clock::now();
  std::string text;
  try {
    wait_for_all_ranks(store, 0, 2, std::chrono::seconds(30), "shm");  // rank 1 never comes
  } catch (const CommunicationError& e) {
    text = e.what();
  }
  heartbeat.join();
  EXPECT_NE(text.find("set-up was cancelled: member 3 of generation 7 is gone"), std::string::npos)
      << text;
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
}

TEST(SetupCancel, NothingIsCancelledOutsideAWindow) {
  StorePtr store = c10::make_intrusive<c10d::HashStore>();
  cancel_group_setups("too early");  // no window: ignored
  EXPECT_FALSE(wait_for_key(store, "k", Clock::now() + std::chrono::milliseconds(20)));
  {
    SetupWindow window;
    cancel_group_setups("now");
    EXPECT_THROW(wait_for_key(store, "k", Clock::now() + std::chrono::seconds(5)),
                 CommunicationError);
  }
  // The window closed: the cancel went with it.
  SetupWindow next;
  EXPECT_FALSE(wait_for_key(store, "k", Clock::now() + std::chrono::milliseconds(20)));
}

}  // namespace
}  // namespace ddp::detail
