// Store garbage collection for elastic jobs (src/elastic/store_gc.h), on a
// real TCPStore: which keys go and which stay, a key count flat over many
// membership changes, a pass that failed part-way taken up by the next, and a
// member whose last generation was collected forming the next one.
#include "base/store_values.h"
#include "compat/torch_compat.h"
#include "elastic/membership.h"
#include "elastic/record.h"
#include "elastic/store_gc.h"
#include "rendezvous/admission.h"
#include "rendezvous/store_listener.h"

#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstdlib>
#include <future>
#include <string>
#include <vector>

namespace ddp::detail::elastic {
namespace {

c10::intrusive_ptr<c10d::TCPStore> server() {
  c10d::TCPStoreOptions opts;
  opts.port = 0;
  opts.isServer = true;
  opts.waitWorkers = false;
  opts.timeout = std::chrono::seconds(10);
  compat::use_classic_tcp_store(opts);
  listen_on_ipv4(opts, "127.0.0.1");  // as ddp-store: no DNS look-up per client
  auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", opts);
  open_elastic_job(store, {}, std::nullopt);  // as ddp-store does, without a secret
  return store;
}

void set(c10d::Store& store, const std::string& key, const std::string& value) {
  store.set(key, store_bytes(value));
}

// Generation n as the members leave behind: its decision, two arrivals and
// two keys of its process group's rendezvous; member and heartbeat keys for
// each of its members.
void decide(c10d::Store& store, int64_t n, GenerationRecord record) {
  for (int id : record.members) {
    set(store, member_key(id), "host 1 " + std::to_string(100 + id));
    store.add(heartbeat_key(id), 1);
  }
  for (int k = 1; k <= 2; ++k) {
    store.add(generation_key(n, "count"), 1);
    set(store, generation_key(n, "slot/" + std::to_string(k)), std::to_string(record.members[0]));
  }
  set(store, generation_key(n, "group/shm/segment"), "x");
  set(store, generation_key(n, "group/rank0"), "y");
  set(store, generation_key(n, "decided"), record.encode());
}

GenerationRecord record(std::vector<int> members, std::vector<int> left = {},
                        std::vector<int> joined = {}) {
  GenerationRecord r;
  r.members = std::move(members);
  r.left = std::move(left);
  r.joined = std::move(joined);
  return r;
}

bool has(c10d::Store& store, const std::string& key) { return store.check({key}); }

// While one lives, a Membership made in this process is member 0 of a job
// of 1 on the store at `port` of this host.
struct AsMemberZero {
  explicit AsMemberZero(int port) {
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "1", 1);
  }
  ~AsMemberZero() {
    for (const char* name : {"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"}) unsetenv(name);
  }
};

TEST(StoreGc, KeepsTheLatestTwoGenerationsAndTheirMembers) {
  auto store = server();
  // Launchers' ids 0, 1, 3; fresh ids (joiners') f1, f2, f4.
  const int f1 = kFirstFreshId + 1, f2 = kFirstFreshId + 2, f4 = kFirstFreshId + 4;
  decide(*store, 0, record({0, 1, f1, f2}));
  decide(*store, 1, record({0, 1, f1}, {f2}));
  decide(*store, 2, record({0, f1, 3}, {1}, {3}));
  decide(*store, 3, record({0, 3}, {f1}));
  decide(*store, 4, record({0, 3, f4}, {}, {f4}));
  decide(*store, 5, record({0, f4}, {3}));
  const int64_t before = store->getNumKeys();
  const bool listed = compat::list_keys(*store).has_value();

  const int64_t deleted = collect_generations(*store, 5);
  EXPECT_EQ(store_text(store->get(floor_key())), "4");
  EXPECT_EQ(store_text(store->get(collected_key())), "4");
  for (int64_t n = 0; n < 4; ++n) {
    for (const char* k : {"decided", "count", "slot/1", "slot/2"}) {
      EXPECT_FALSE(has(*store, generation_key(n, k))) << n << " " << k;
    }
    EXPECT_EQ(has(*store, generation_key(n, "group/rank0")), !listed) << n;
  }
  for (int64_t n : {4, 5}) {
    for (const char* k : {"decided", "count", "slot/1", "group/rank0"}) {
      EXPECT_TRUE(has(*store, generation_key(n, k))) << n << " " << k;
    }
  }
  // f1 and f2 left in collected generations and are members of neither
  // kept one. 1 did too, but a launcher's id may be given again: its keys
  // stay for the duplicate check. 3 left in generation 5, which stays.
  for (int id : {f1, f2}) {
    EXPECT_FALSE(has(*store, member_key(id)) || has(*store, heartbeat_key(id))) << id;
  }
  for (int id : {0, 1, 3, f4}) {
    EXPECT_TRUE(has(*store, member_key(id)) && has(*store, heartbeat_key(id))) << id;
  }
  // 4 generations x (decided, count, 2 slots [, 2 group keys]) + 2 x 2 member keys.
  EXPECT_EQ(deleted, 4 * (listed ? 6 : 4) + 4);
  // The floor and progress keys were added.
  EXPECT_EQ(store->getNumKeys(), before - deleted + 2);
  EXPECT_EQ(collect_generations(*store, 5), 0) << "idempotent";
}

TEST(StoreGc, APassThatFailedPartWayIsTakenUpByTheNext) {
  auto store = server();
  for (int64_t n = 0; n <= 5; ++n) decide(*store, n, record({0}));
  // As if a pass for generation 5 had set the floor and collected 0 and 1.
  set(*store, floor_key(), "4");
  set(*store, collected_key(), "2");
  for (int64_t n : {0, 1}) store->deleteKey(generation_key(n, "decided"));
  collect_generations(*store, 5);
  for (int64_t n = 2; n < 4; ++n) EXPECT_FALSE(has(*store, generation_key(n, "decided"))) << n;
  EXPECT_TRUE(has(*store, generation_key(4, "decided")));
}

TEST(StoreGc, KeyCountIsFlatOverManyMembershipChanges) {
  if (!compat::list_keys(*server())) {
    GTEST_SKIP() << "this libtorch's TCPStore cannot list its keys: the process groups' "
                    "rendezvous keys stay (src/elastic/store_gc.h)";
  }
  auto store = server();
  // Each change: the oldest member leaves and a fresh one joins.
  // Launchers' ids first, then joiners with fresh ids.
  std::vector<int> members = {0, 1, 2};
  int next_id = kFirstFreshId;
  int64_t at_warm = 0;
  for (int64_t n = 0; n < 300; ++n) {
    GenerationRecord r = record(members);
    if (n > 0) {
      r.left = {members.front()};
      r.members.erase(r.members.begin());
      r.members.push_back(next_id);
      r.joined = {next_id++};
    }
    members = r.members;
    decide(*store, n, r);
    collect_generations(*store, n);
    if (n == 10) at_warm = store->getNumKeys();
  }
  EXPECT_EQ(store->getNumKeys(), at_warm) << "keys after 10 changes vs after 300";
}

TEST(StoreGc, AMemberWhoseGenerationWasCollectedFormsTheNextOne) {
  auto store = server();
  decide(*store, 0, record({0, 1}));
  decide(*store, 1, record({0}, {1}));
  for (int64_t n = 2; n <= 5; ++n) decide(*store, n, record({0}));
  collect_generations(*store, 5);
  ASSERT_FALSE(has(*store, generation_key(1, "decided")));
  store->deleteKey(member_key(0));  // this process takes id 0
  const AsMemberZero env(store->getPort());
  {
    Membership membership(ElasticOptions().reform_timeout(std::chrono::seconds(20)));
    ElasticWorld stale;
    stale.generation = 1;  // collected since: it starts over from generation 6
    stale.members = {0};
    const ElasticWorld world = membership.form(stale);
    EXPECT_EQ(world.generation, 6);
    EXPECT_EQ(world.members, std::vector<int>{0});
    EXPECT_FALSE(has(*store, generation_key(2, "count"))) << "nothing written below the floor";
  }
}

TEST(StoreGc, AMemberWaitingInAGenerationCollectedMeanwhileStartsOver) {
  auto store = server();
  decide(*store, 0, record({0, 5}));
  decide(*store, 1, record({0, 5}));
  store->deleteKey(member_key(0));  // this process takes id 0
  const AsMemberZero env(store->getPort());
  {
    Membership membership(ElasticOptions().reform_timeout(std::chrono::seconds(20)));
    ElasticWorld previous;
    previous.generation = 1;
    previous.members = {0, 5};
    // Member 5 (on another host, its heartbeat young) is awaited: this
    // process waits in generation 2.
    auto formed = std::async(std::launch::async, [&] { return membership.form(previous); });
    ASSERT_EQ(formed.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
    // Meanwhile the others went on without it: 3 and 4 decided, 0 to 2 collected.
    decide(*store, 3, record({7}));
    decide(*store, 4, record({0}));
    collect_generations(*store, 4);
    ASSERT_EQ(formed.wait_for(std::chrono::seconds(20)), std::future_status::ready);
    const ElasticWorld world = formed.get();
    EXPECT_EQ(world.generation, 5);
    EXPECT_EQ(world.members, std::vector<int>{0});
  }
}

}  // namespace
}  // namespace ddp::detail::elastic
