// The backend registry: names, errors, DDP_BACKEND, options of the wrong
// type, and a backend registered from outside the library working with
// round-robin groups and the debug wrapper like a built-in one.
#include "spawn.h"
#include "support/raised.h"

#include <ddp/ddp.h>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdlib>

namespace ddp::testing {
namespace {

// Sets an environment variable for the scope of one test.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_.empty()) {
      unsetenv(name_);
    } else {
      setenv(name_, old_.c_str(), 1);
    }
  }

 private:
  const char* name_;
  std::string old_;
};

TEST(Registry, ListsTheBuiltInBackends) {
  auto names = backend_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "gloo"), names.end());
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
}

TEST(Registry, UnknownNameListsTheAvailableOnes) {
  Raised r = raised([] { find_backend("nccl-please"); });
  ASSERT_TRUE(r) << r;
  EXPECT_TRUE(r.mentions("'nccl-please'")) << r;
  // Every registered backend, the user's choices.
  for (const std::string& name : backend_names()) {
    EXPECT_TRUE(r.mentions(name)) << name << ": " << r;
  }
  EXPECT_TRUE(r.mentions("gloo")) << r;
}

TEST(Registry, MpiIsEitherBuiltOrExplainsWhatBuildsIt) {
  auto names = backend_names();
  if (std::find(names.begin(), names.end(), "mpi") != names.end()) {
    EXPECT_EQ(find_backend("mpi").name, "mpi");
  } else {
    Raised r = raised([] { find_backend("mpi"); });
    ASSERT_TRUE(r) << r;
    EXPECT_TRUE(r.mentions("'mpi'")) << r;
    EXPECT_TRUE(r.mentions("Open MPI")) << r;  // what the build needs
  }
}

TEST(Registry, EnvironmentChoosesTheDefaultButNotOverAnExplicitName) {
  {
    ScopedEnv env("DDP_BACKEND", "no-such-backend");
    EXPECT_EQ(resolve_backend_name(""), "no-such-backend");
    EXPECT_EQ(resolve_backend_name("gloo"), "gloo");
    StorePtr store = c10::make_intrusive<c10d::HashStore>();
    Raised r = raised([&] { make_group(store, 0, 1); });
    ASSERT_TRUE(r) << r;
    EXPECT_TRUE(r.mentions("'no-such-backend'")) << r;
    EXPECT_TRUE(r.mentions("DDP_BACKEND")) << r;  // what chose it
  }
  unsetenv("DDP_BACKEND");
  EXPECT_EQ(resolve_backend_name(""), "auto");
}

TEST(Registry, CrossHostBackendFromTheEnvironmentAndItsErrorSaysWhoChoseIt) {
  EXPECT_EQ(resolve_cross_backend(HierarchicalOptions()), "gloo");
  ScopedEnv env("DDP_CROSS_BACKEND", "no-such-cross");
  EXPECT_EQ(resolve_cross_backend(HierarchicalOptions()), "no-such-cross");
  EXPECT_EQ(resolve_cross_backend(HierarchicalOptions().cross_backend("gloo")), "gloo");
  for (const char* backend : {"auto", "hierarchical"}) {
    StorePtr store = c10::make_intrusive<c10d::HashStore>();
    Raised r = raised([&] { make_group(store, 0, 1, InitOptions().backend(backend)); });
    ASSERT_TRUE(r) << backend << ": " << r;
    EXPECT_TRUE(r.mentions("'no-such-cross'")) << r;
    // What chose it: the option and the variable.
    EXPECT_TRUE(r.mentions("HierarchicalOptions::cross_backend")) << r;
    EXPECT_TRUE(r.mentions("DDP_CROSS_BACKEND")) << r;
  }
}

struct NotGlooOptions : BackendOptions {};

TEST(Registry, OptionsOfAnotherBackendAreRefused) {
  StorePtr store = c10::make_intrusive<c10d::HashStore>();
  auto options = InitOptions().backend("gloo").backend_options(std::make_shared<NotGlooOptions>());
  Raised r = raised([&] { make_group(store, 0, 1, options); });
  ASSERT_TRUE(r) << r;
  EXPECT_EQ(r.context.rank, 0) << r;
  EXPECT_EQ(r.context.world_size, 1) << r;
  // The options given, the ones the backend takes, and the backend.
  EXPECT_TRUE(r.mentions("NotGlooOptions")) << r;
  EXPECT_TRUE(r.mentions("ddp::GlooOptions")) << r;
  EXPECT_TRUE(r.mentions("gloo")) << r;
}

TEST(Registry, AutoTakesTheOptionsOfThePartItPicks) {
  StorePtr store = c10::make_intrusive<c10d::HashStore>();
  // One host: auto picks shm, and Gloo's options (for the cross-host part)
  // are no error.
  auto pg =
      make_group(store, 0, 1,
                 InitOptions()
                     .timeout(std::chrono::seconds(60))
                     .backend_options(std::make_shared<GlooOptions>(GlooOptions().threads(2))));
  EXPECT_EQ(pg->backend_name(), "shm");
}

TEST(Registry, RegisteringTwiceOrWithoutCreateIsRefused) {
  Backend b;
  b.name = "gloo";
  b.create = [](const BackendSetup&) -> ProcessGroupPtr { return nullptr; };
  Raised twice = raised([&] { register_backend(b); });
  ASSERT_TRUE(twice) << twice;
  EXPECT_EQ(twice.context.operation, "register_backend") << twice;
  EXPECT_TRUE(twice.mentions("'gloo'")) << twice;
  Backend empty;
  empty.name = "nothing-to-create";
  Raised uncreatable = raised([&] { register_backend(empty); });
  ASSERT_TRUE(uncreatable) << uncreatable;
  EXPECT_EQ(uncreatable.context.operation, "register_backend('nothing-to-create')") << uncreatable;
  EXPECT_TRUE(uncreatable.mentions("create")) << uncreatable;  // the field left empty
}

// A fourth backend from outside the library: Gloo under another name, with
// a tensor rule of its own (no float32; the debug wrapper's int64
// fingerprints must still pass).
// Its refusal, a value of this test's that the error must pass on.
const char* const kNoFloat32Reason = "is float32; no-float32 takes any other dtype";

class NoFloat32Group : public RoundRobinProcessGroup {
 public:
  using RoundRobinProcessGroup::RoundRobinProcessGroup;
  std::string backend_name() const override { return "no-float32"; }
  std::string unsupported_reason(const at::Tensor& t) const override {
    return t.scalar_type() != at::kFloat ? "" : kNoFloat32Reason;
  }
};

TEST(Registry, AnOutsideBackendWorksWithRoundRobinAndTheDebugWrapper) {
  static std::once_flag once;
  std::call_once(once, [] {
    Backend b;
    b.name = "no-float32";
    b.summary = "gloo under another name, refusing float32 (a test)";
    b.create = [](const BackendSetup& setup) -> ProcessGroupPtr {
      BackendSetup inner = setup;
      inner.options = nullptr;
      return std::make_shared<NoFloat32Group>(
          std::vector<ProcessGroupPtr>{find_backend("gloo").create(inner)});
    };
    register_backend(b);
  });
  ScopedEnv debug("DDP_DEBUG", "detail");
  spawn(3, [](int rank, StorePtr store) {
    auto pg = make_group(store, rank, 3,
                         InitOptions()
                             .backend("no-float32")
                             .round_robin_groups(2)
                             .timeout(std::chrono::seconds(60)));
    EXPECT_EQ(pg->backend_name(), "round_robin(2xno-float32)+checked");
    at::Tensor t = at::full({10}, rank + 1.0, at::kDouble);
    pg->allreduce(t)->wait();
    EXPECT_TRUE(at::equal(t, at::full({10}, 6.0, at::kDouble)));
    Raised r = raised([&] { pg->allreduce(at::ones({2}, at::kFloat)); });
    ASSERT_TRUE(r) << r;
    EXPECT_TRUE(r.on(*pg)) << r;
    EXPECT_EQ(r.context.operation, "allreduce") << r;
    EXPECT_TRUE(r.mentions("tensor")) << r;  // the argument
    EXPECT_TRUE(r.mentions(kNoFloat32Reason)) << r;
  });
}

}  // namespace
}  // namespace ddp::testing
