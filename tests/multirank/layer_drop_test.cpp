// Layer-drop hints in the Reducer, threads as ranks: hinted parameters are
// left out (not sent, gradients untouched) while the others stay exact,
// with packed buckets and with the zeros of the fallback (comm hook,
// gradient_as_bucket_view), under no_sync, find_unused_parameters and Join;
// hints that differ, or that a gradient breaks, fail on every rank and the
// next iteration goes on.
#include "reducer_fixtures.h"

#include <map>

namespace ddp::testing {
namespace {

// Each rank's gradients for `step` with `skip` left out of the graph on
// every rank, averaged over `size` ranks (a skipped one: undefined).
std::vector<at::Tensor> average_skipping(int size, int step, int skip) {
  std::vector<at::Tensor> sum(3);
  for (int r = 0; r < size; ++r) {
    Chain local;
    local.forward(Chain::input(r, step), skip).sum().backward();
    for (size_t i = 0; i < 3; ++i) {
      if (static_cast<int>(i) == skip) continue;
      sum[i] = sum[i].defined() ? sum[i] + local.params[i].grad() : local.params[i].grad().clone();
    }
  }
  for (auto& s : sum) {
    if (s.defined()) s /= size;
  }
  return sum;
}

ReducerOptions hinted() { return ReducerOptions().layer_drop_hints(true); }

// Sizes of the bucket allreduces (the chain's parameters have 3, 5, 7
// elements; packed buckets send sums of them), without the status and the
// hints' exchange.
std::vector<std::string> bucket_allreduces(const Events& events) {
  std::vector<std::string> out;
  for (const auto& e : events) {
    if (e.rfind("allreduce ", 0) != 0) continue;
    const int n = std::stoi(e.substr(10));
    if (n == 9 || n > 15) continue;  // the hints' exchange (3 + 3 * 2), the status
    out.push_back(e.substr(10));
  }
  return out;
}

// Runs one step: hint `skip` (-1: none), forward skipping it, backward.
void step(Reducer& reducer, Chain& chain, int rank, int s, int skip) {
  chain.clear_grads();
  if (skip >= 0) reducer.hint_unused({chain.params[skip]});
  backward_step(reducer, chain, rank, s, skip);
}

// Runs step `s` hinting `skip`: the hinted parameter's gradient stays
// undefined, the others are exact.
void expect_exact_step(Reducer& reducer, Chain& chain, int rank, int s, int skip) {
  step(reducer, chain, rank, s, skip);
  const auto expected = average_skipping(2, s, skip);
  for (size_t i = 0; i < 3; ++i) {
    if (static_cast<int>(i) == skip) {
      EXPECT_FALSE(chain.params[i].grad().defined()) << "rank " << rank << " w" << i;
      continue;
    }
    ASSERT_TRUE(chain.params[i].grad().defined()) << "rank " << rank << " w" << i;
    EXPECT_TRUE(at::allclose(chain.params[i].grad(), expected[i], 1e-13, 1e-13))
        << "rank " << rank << " step " << s << " w" << i;
  }
}

TEST(LayerDrop, HintedParametersAreLeftOutAndTheOthersAreExact) {
  // w2 and w1 share a bucket (first bucket 1 byte: [w2], then [w1 w0]).
  for (bool as_view : {false, true}) {
    for (bool find_unused : {false, true}) {
      spawn(2, [&](int rank, StorePtr store) {
        Log log;
        auto pg = std::make_shared<RecordingGroup>(make_group(store, rank, 2), &log);
        Chain chain;
        Reducer reducer(chain.params, chain.names, pg,
                        hinted()
                            .first_bucket_cap_bytes(1)
                            .gradient_as_bucket_view(as_view)
                            .find_unused_parameters(find_unused));
        log.take();  // construction's checks across ranks
        const int skips[] = {0, -1, 1, 2, 0, 0, -1};
        for (int s = 0; s < 7; ++s) {
          expect_exact_step(reducer, chain, rank, s, skips[s]);
          EXPECT_EQ(reducer.stats().dropped_parameters, skips[s] >= 0 ? 1 : 0);
          const auto sent = bucket_allreduces(log.take());
          if (as_view) {  // the fallback: every bucket, hinted slices as zeros
            EXPECT_EQ(sent, (std::vector<std::string>{"7", "8"})) << "step " << s;
          } else {  // packed: the hinted slice is not sent
            const std::map<int, std::vector<std::string>> packed{
                {-1, {"7", "8"}}, {0, {"7", "5"}}, {1, {"7", "3"}}, {2, {"8"}}};
            EXPECT_EQ(sent, packed.at(skips[s])) << "step " << s;
          }
        }
      });
    }
  }
}

// A gradient left untouched stays what it was; one a packed bucket held in
// an earlier iteration is not overwritten by another parameter's slice.
TEST(LayerDrop, AHintedParameterKeepsItsGradientThroughLaterIterations) {
  spawn(2, [&](int rank, StorePtr store) {
    auto pg = make_group(store, rank, 2);
    Chain chain;
    Reducer reducer(chain.params, chain.names, pg, hinted());  // one bucket
    auto run = [&](int s, int skip) {
      if (skip >= 0) reducer.hint_unused({chain.params[skip]});
      backward_step(reducer, chain, rank, s, skip);
    };
    run(0, -1);
    // w2's gradient is a view of the buffer step 0 wrote (offset 0); that
    // buffer is written again at step 2, packed, with w1's slice there.
    const at::Tensor w2 = chain.params[2].grad().clone();
    for (int s = 1; s < 4; ++s) {
      chain.params[0].mutable_grad() = at::Tensor();
      chain.params[1].mutable_grad() = at::Tensor();
      run(s, 2);
      EXPECT_TRUE(at::equal(chain.params[2].grad(), w2)) << "rank " << rank << " step " << s;
      const auto expected = average_skipping(2, s, 2);
      for (int i : {0, 1}) {
        EXPECT_TRUE(at::allclose(chain.params[i].grad(), expected[i], 1e-13, 1e-13))
            << "rank " << rank << " step " << s << " w" << i;
      }
    }
  });
}

TEST(LayerDrop, WithACommHookHintedSlicesAreSentAsZeros) {
  spawn(2, [&](int rank, StorePtr store) {
    auto pg = make_group(store, rank, 2);
    Chain chain;
    Reducer reducer(chain.params, chain.names, pg, hinted());
    std::vector<int64_t> seen;
    reducer.register_comm_hook([&](GradBucket& bucket) {
      seen.push_back(bucket.buffer().numel());
      return allreduce_hook(pg, bucket);
    });
    for (int s = 0; s < 4; ++s) {
      const int skip = s % 2 ? 1 : -1;
      expect_exact_step(reducer, chain, rank, s, skip);
    }
    for (int64_t n : seen) EXPECT_EQ(n, 15) << "a hook sees whole buckets";
  });
}

// Under no_sync a parameter used in one pass is reduced even if the
// synchronizing pass hints it; one hinted in every pass is left out.
TEST(LayerDrop, UnderNoSyncOnlyParametersHintedInEveryPassAreLeftOut) {
  spawn(2, [&](int rank, StorePtr store) {
    auto pg = make_group(store, rank, 2);
    Chain chain;
    Reducer reducer(chain.params, chain.names, pg, hinted());
    auto pass = [&](int s, std::vector<int> hint, int skip, bool sync) {
      std::vector<at::Tensor> tensors;
      for (int i : hint) tensors.push_back(chain.params[i]);
      reducer.hint_unused(tensors);
      at::Tensor out = chain.forward(Chain::input(rank, s), skip);
      reducer.prepare_for_backward({out}, sync);
      out.sum().backward();
    };
    // Both passes hint and skip w0: it is left out; w1 and w2 carry both.
    pass(0, {0}, 0, false);
    pass(1, {0}, 0, true);
    EXPECT_FALSE(chain.params[0].grad().defined());
    EXPECT_EQ(reducer.stats().dropped_parameters, 1);
    for (size_t i = 1; i < 3; ++i) {
      at::Tensor expected;
      for (int s : {0, 1}) {
        const auto e = average_skipping(2, s, 0)[i];
        expected = expected.defined() ? expected + e : e;
      }
      EXPECT_TRUE(at::allclose(chain.params[i].grad(), expected, 1e-13, 1e-13)) << "w" << i;
    }
    // A pass without a hint ends the intersection: nothing left out.
    chain.clear_grads();
    pass(2, {0}, 0, false);
    backward_step(reducer, chain, rank, 3);
    EXPECT_EQ(reducer.stats().dropped_parameters, 0);
    EXPECT_TRUE(chain.params[0].grad().defined());
    // Used while accumulating, hinted by the synchronizing pass: what the
    // first pass accumulated is reduced.
    chain.clear_grads();
    pass(4, {}, -1, false);
    pass(5, {0}, 0, true);
    EXPECT_EQ(reducer.stats().dropped_parameters, 0);
    const at::Tensor w0 = expected_average(2, {4})[0];
    EXPECT_TRUE(at::allclose(chain.params[0].grad(), w0, 1e-13, 1e-13)) << "rank " << rank;
  });
}

// Rank 1 is out of inputs: it shadows (Join), by shadow_iteration() and
// by replaying a whole forward (prepare_for_shadow_backward, as a model
// with collectives of its own does), while rank 0 hints w1. Both end with
// rank 0's gradients halved; w1 is left out on both.
TEST(LayerDrop, AJoinedRankSendsWhatTheHintsLeave) {
  spawn(2, [&](int rank, StorePtr store) {
    auto pg = make_group(store, rank, 2);
    Chain chain;
    Reducer reducer(chain.params, chain.names, pg, hinted());
    step(reducer, chain, rank, 0, 1);
    for (int s = 1; s < 4; ++s) {
      if (rank == 1 && s % 2 == 1) {
        reducer.shadow_iteration();
      } else if (rank == 1) {
        at::Tensor out = chain.forward(Chain::input(rank, s));  // uses w1
        reducer.prepare_for_shadow_backward({out});
        out.sum().backward();
      } else {
        step(reducer, chain, rank, s, 1);
      }
      Chain local;
      local.forward(Chain::input(0, s), 1).sum().backward();
      EXPECT_FALSE(chain.params[1].grad().defined() &&
                   chain.params[1].grad().ne(0).any().item<bool>())
          << "rank " << rank << " step " << s;
      for (size_t i : {0, 2}) {
        EXPECT_TRUE(at::allclose(chain.params[i].grad(), local.params[i].grad() / 2, 1e-13, 1e-13))
            << "rank " << rank << " step " << s << " w" << i;
      }
    }
  });
}

TEST(LayerDrop, HintsThatDifferAreAnErrorOnEveryRankBeforeAnythingIsSent) {
  spawn(2, [&](int rank, StorePtr store) {
    Log log;
    auto pg = std::make_shared<RecordingGroup>(make_group(store, rank, 2), &log);
    Chain chain;
    Reducer reducer(chain.params, chain.names, pg, hinted());
    log.take();
    EXPECT_THROW(step(reducer, chain, rank, 0, rank), InvalidArgument);
    EXPECT_TRUE(bucket_allreduces(log.take()).empty()) << "a bucket was sent";
    // Only rank 1 hints: the same.
    EXPECT_THROW(step(reducer, chain, rank, 1, rank == 1 ? 0 : -1), InvalidArgument);
    // The next iteration, hinted alike, is exact.
    expect_exact_step(reducer, chain, rank, 2, 2);
    // A hint broken under no_sync, then hints that differ: the failed
    // iteration takes its broken hint with it; the next one is exact.
    reducer.hint_unused({chain.params[0]});
    backward_step(reducer, chain, rank, 3, /*skip=*/-1, /*synchronize=*/false);  // uses w0
    EXPECT_THROW(step(reducer, chain, rank, 4, rank), InvalidArgument);
    expect_exact_step(reducer, chain, rank, 5, 0);
  });
}

TEST(LayerDrop, AHintedParameterThatGetsAGradientIsAnErrorOnEveryRank) {
  spawn(2, [&](int rank, StorePtr store) {
    auto pg = make_group(store, rank, 2);
    Chain chain;
    Reducer reducer(chain.params, chain.names, pg, hinted());
    chain.clear_grads();
    // Both hint w1; rank 1's forward uses it anyway.
    reducer.hint_unused({chain.params[1]});
    at::Tensor out = chain.forward(Chain::input(rank, 0), rank == 1 ? -1 : 1);
    reducer.prepare_for_backward({out});
    EXPECT_THROW(out.sum().backward(), InvalidArgument);
    expect_exact_step(reducer, chain, rank, 1, 0);
  });
}

TEST(LayerDrop, MisuseIsAClearError) {
  spawn(2, [&](int rank, StorePtr store) {
    auto pg = make_group(store, rank, 2);
    Chain chain;
    EXPECT_THROW(Reducer(chain.params, chain.names, pg, hinted().static_graph(true)),
                 InvalidArgument);
    {
      Reducer plain(chain.params, chain.names, pg);
      EXPECT_THROW(plain.hint_unused({chain.params[0]}), InvalidArgument);
    }
    Reducer reducer(chain.params, chain.names, pg, hinted());
    EXPECT_THROW(reducer.hint_unused({at::ones({3}, at::kDouble).requires_grad_()}),
                 InvalidArgument);
    EXPECT_NO_THROW(reducer.hint_unused({at::ones({3})}));  // frozen: skipped
    EXPECT_THROW(reducer.hint_unused({at::Tensor()}), InvalidArgument);
    // Ranks that disagree on the option stop at construction.
    EXPECT_THROW(Reducer(chain.params, chain.names, pg, hinted().layer_drop_hints(rank == 0)),
                 InvalidArgument);
  });
}

}  // namespace
}  // namespace ddp::testing
