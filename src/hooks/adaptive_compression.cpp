// The adaptive compression hook. Every level reuses a built-in hook: full
// precision is allreduce_hook, fp16/bf16 their compress hooks, PowerSGD
// powerSGD_hook on a PowerSGDState per rank (warm start on, its own error
// feedback off: the error is kept here, per bucket, so that it survives a
// change of level).
#include <ddp/hooks/adaptive_compression.h>

#include <ddp/errors.h>
#include <ddp/hooks/default_hooks.h>
#include <ddp/hooks/powersgd.h>

#include "base/fnv1a.h"
#include "base/mutex.h"
#include "hooks/adaptive_policy.h"
#include "hooks/state_dict_entries.h"
#include "rendezvous/default_group.h"
#include "timeline/rank_timeline.h"

#include <ATen/ATen.h>

#include <atomic>
#include <map>
#include <optional>
#include <sstream>

namespace ddp {

std::string CompressionLevel::name() const {
  switch (kind) {
    case Kind::kFull:
      return "full";
    case Kind::kFloat16:
      return "fp16";
    case Kind::kBFloat16:
      return "bf16";
    case Kind::kPowerSGD:
      return "powerSGD rank " + std::to_string(powerSGD_rank);
  }
  return "unknown";
}

namespace detail {
namespace {

double options_fingerprint(const AdaptiveCompressionOptions& o) {
  std::ostringstream text;
  for (const auto& level : o.levels()) text << level.name() << ';';
  text << o.window() << ';' << o.critical_threshold() << ';' << o.min_compression_rate() << ';'
       << o.error_feedback() << ';' << o.random_seed();
  return static_cast<double>(Fnv1a().add(text.str()).value() % (1u << 20));
}

}  // namespace

class AdaptiveCompression {
 public:
  explicit AdaptiveCompression(AdaptiveCompressionOptions options) : options_(std::move(options)) {
    auto bad = [](const std::string& what) {
      throw InvalidArgument(ErrorContext{-1, 0, "", "AdaptiveCompressionOptions", {}}, what);
    };
    if (options_.levels().empty()) bad("levels is empty: give at least one level");
    for (size_t i = 0; i < options_.levels().size(); ++i) {
      const auto& level = options_.levels()[i];
      if (level.kind == CompressionLevel::Kind::kPowerSGD && level.powerSGD_rank < 1) {
        bad("levels[" + std::to_string(i) + "] is PowerSGD of rank " +
            std::to_string(level.powerSGD_rank) + ": the rank must be >= 1");
      }
    }
    if (options_.window() < 1) {
      bad("window must be >= 1 iteration, got " + std::to_string(options_.window()));
    }
    if (!(options_.critical_threshold() > 0)) {
      bad("critical_threshold must be > 0, got " + std::to_string(options_.critical_threshold()));
    }
    if (!(options_.min_compression_rate() > 0)) {
      bad("min_compression_rate must be > 0, got " +
          std::to_string(options_.min_compression_rate()));
    }
    stats_.reductions_per_level.assign(options_.levels().size(), 0);
    fingerprint_ = options_fingerprint(options_);
  }

  ~AdaptiveCompression() {
    if (!timeline_) return;
    for (auto& [index, bucket] : buckets_) {
      if (bucket.last_seen + 1 >= iteration_) trace_run(index, bucket, iteration_);  // not gone
    }
  }

  const AdaptiveCompressionOptions& options() const { return options_; }

  AdaptiveCompressionStats stats() const {
    MutexLock lock(stats_mutex_);
    return stats_;
  }

  void mark_critical() { marks_.fetch_add(1); }

  HookStateDict state_dict() const {
    HookStateDict d;
    d.shared["iteration"] = int_entry(iteration_);
    d.shared["memories_checked_at"] = int_entry(memories_checked_at_);
    d.shared["layout"] = int_entry(layout_);
    std::map<size_t, at::Tensor> decisions, errors, sums, judged;
    for (const auto& [index, b] : buckets_) {
      decisions[index] = at::tensor({static_cast<int64_t>(b.level), b.decided_at, b.last_seen});
      if (b.error.defined()) errors[index] = b.error;
      if (b.window_sum.defined()) sums[index] = b.window_sum;
      judged[index] = at::tensor({b.previous_norm, static_cast<double>(b.marks_seen)});
    }
    put_per_bucket(d.shared, "bucket.", decisions);
    put_per_bucket(d.per_rank, "error.", errors);
    put_per_bucket(d.per_rank, "window_sum.", sums);
    put_per_bucket(d.per_rank, "judged.", judged);
    d.per_rank["marks"] = int_entry(static_cast<int64_t>(marks_.load()));
    for (const auto& [rank, state] : powersgd_) {
      nest(d, "powersgd" + std::to_string(rank) + "/", state.state_dict());
    }
    MutexLock lock(stats_mutex_);
    d.per_rank["stats.iterations"] = int_entry(stats_.iterations);
    d.per_rank["stats.bytes_sent"] = int_entry(stats_.bytes_sent);
    d.per_rank["stats.bytes_uncompressed"] = int_entry(stats_.bytes_uncompressed);
    d.per_rank["stats.reductions_per_level"] = at::tensor(stats_.reductions_per_level, at::kLong);
    std::vector<double> switches;
    for (const auto& c : stats_.switches) {
      switches.insert(switches.end(),
                      {static_cast<double>(c.iteration), static_cast<double>(c.bucket),
                       static_cast<double>(c.from), static_cast<double>(c.to),
                       c.critical ? 1.0 : 0.0, c.norm_change});
    }
    d.per_rank["stats.switches"] = at::tensor(switches, at::kDouble);
    std::vector<int64_t> levels(stats_.bucket_levels.begin(), stats_.bucket_levels.end());
    d.per_rank["stats.bucket_levels"] = at::tensor(levels, at::kLong);
    return d;
  }

  void load_state_dict(const HookStateDict& d) {
    const std::string owner = "AdaptiveCompressionState";
    // Everything is read and checked before any member changes.
    const int64_t iteration = read_int(d.shared, "iteration", owner);
    const int64_t checked_at = read_int(d.shared, "memories_checked_at", owner);
    const int64_t layout = read_int(d.shared, "layout", owner);
    std::map<size_t, Bucket> buckets;
    for (const auto& [index, t] : per_bucket(d.shared, "bucket.", owner)) {
      if (t.numel() != 3) bad_state_dict(owner, "bucket " + std::to_string(index) + "'s entry");
      const auto level = static_cast<size_t>(t[0].item<int64_t>());
      if (level >= options_.levels().size()) {
        bad_state_dict(owner, "bucket " + std::to_string(index) + " at level " +
                                  std::to_string(level) + " of " +
                                  std::to_string(options_.levels().size()) + " (other levels?)");
      }
      Bucket& b = buckets[index];
      b.level = level;
      b.decided_at = t[1].item<int64_t>();
      b.last_seen = t[2].item<int64_t>();
    }
    for (auto& [index, t] : per_bucket(d.per_rank, "error.", owner)) buckets[index].error = t;
    for (auto& [index, t] : per_bucket(d.per_rank, "window_sum.", owner))
      buckets[index].window_sum = t;
    for (const auto& [index, t] : per_bucket(d.per_rank, "judged.", owner)) {
      if (t.numel() != 2) bad_state_dict(owner, "bucket " + std::to_string(index) + "'s norms");
      buckets[index].previous_norm = t[0].item<double>();
      buckets[index].marks_seen = static_cast<uint64_t>(t[1].item<double>());
    }
    std::map<int64_t, HookStateDict> powersgd;
    for (const auto* from : {&d.shared, &d.per_rank}) {
      for (const auto& [key, t] : *from) {
        if (key.compare(0, 8, "powersgd") != 0) continue;
        const size_t slash = key.find('/');
        try {
          const int64_t rank = std::stoll(key.substr(8, slash - 8));
          powersgd.emplace(rank, nested(d, key.substr(0, slash + 1)));
        } catch (const std::exception&) {
          bad_state_dict(owner, "an entry '" + key + "' without a PowerSGD rank");
        }
      }
    }
    for (const auto& [rank, dict] : powersgd) {
      PowerSGDState(nullptr, rank, 0, 1, false, false).load_state_dict(dict);  // checks it
    }
    std::optional<int64_t> marks;
    if (d.per_rank.count("marks")) marks = read_int(d.per_rank, "marks", owner);
    const bool has_stats = d.per_rank.count("stats.iterations") > 0;
    AdaptiveCompressionStats stats;
    stats.reductions_per_level.assign(options_.levels().size(), 0);
    if (has_stats) {
      stats.iterations = read_int(d.per_rank, "stats.iterations", owner);
      stats.bytes_sent = read_int(d.per_rank, "stats.bytes_sent", owner);
      stats.bytes_uncompressed = read_int(d.per_rank, "stats.bytes_uncompressed", owner);
      const at::Tensor per_level = entry(d.per_rank, "stats.reductions_per_level", owner);
      if (per_level.numel() != static_cast<int64_t>(options_.levels().size())) {
        bad_state_dict(owner, "statistics of another number of levels");
      }
      for (int64_t k = 0; k < per_level.numel(); ++k)
        stats.reductions_per_level[k] = per_level[k].item<int64_t>();
      const at::Tensor switches = entry(d.per_rank, "stats.switches", owner).contiguous();
      for (int64_t k = 0; k + 6 <= switches.numel(); k += 6) {
        const double* v = switches.data_ptr<double>() + k;
        stats.switches.push_back({static_cast<int64_t>(v[0]), static_cast<size_t>(v[1]),
                                  static_cast<size_t>(v[2]), static_cast<size_t>(v[3]), v[4] != 0,
                                  v[5]});
      }
      const at::Tensor levels = entry(d.per_rank, "stats.bucket_levels", owner).contiguous();
      for (int64_t k = 0; k < levels.numel(); ++k)
        stats.bucket_levels.push_back(static_cast<size_t>(levels[k].item<int64_t>()));
    }
    iteration_ = iteration;
    memories_checked_at_ = checked_at;
    layout_ = layout;
    buckets_ = std::move(buckets);
    powersgd_.clear();
    pending_powersgd_ = std::move(powersgd);
    if (marks) marks_.store(static_cast<uint64_t>(*marks));
    MutexLock lock(stats_mutex_);
    stats_ = std::move(stats);
  }

  FuturePtr reduce(GradBucket& bucket) {
    if (!group_) {
      group_ = group_or_default(options_.process_group());
      timeline_ = RankTimeline::open_from_env(group_->rank());
    }
    if (!options_checked_) check_same_options(bucket.buffer().device());
    if ((iteration_ != memories_checked_at_ && iteration_ <= 2) || bucket.layout() != layout_) {
      layout_ = bucket.layout();
      forget_bucket_memories();
    }
    const size_t index = bucket.index();
    Bucket& state = buckets_[index];
    if (state.run_start == TraceClock::time_point{}) {  // a new bucket
      state.run_start = TraceClock::now();
      state.run_start_iteration = iteration_;
    }
    state.last_seen = iteration_;
    at::Tensor buffer = bucket.buffer();
    for (at::Tensor* kept : {&state.error, &state.window_sum}) {  // a checkpoint's: on the CPU
      if (kept->defined() && kept->device() != buffer.device()) *kept = kept->to(buffer.device());
    }
    if (iteration_ > 0 && iteration_ % options_.window() == 0 && state.decided_at < iteration_) {
      decide(index, state, buffer.device());
    }
    if (group_->rank() == 0) accumulate(state, buffer);

    const CompressionLevel& level = options_.levels()[state.level];
    const int64_t full_bytes = buffer.numel() * static_cast<int64_t>(buffer.element_size());
    int64_t sent_bytes = 0;
    FuturePtr result;
    if (level.kind == CompressionLevel::Kind::kPowerSGD) {
      PowerSGDState& powersgd = powersgd_state(level.powerSGD_rank);
      const int64_t before = powersgd.compression_stats().numel_after;
      at::Tensor input_copy;
      if (options_.error_feedback()) {
        if (state.error.defined() && state.error.numel() == buffer.numel())
          buffer.add_(state.error);
        input_copy = buffer.clone();
      }
      // Never the last bucket to PowerSGD: this hook counts the iterations,
      // and the state then does not log its own (PowerSGD's iteration 0).
      GradBucket inner(index, /*is_last=*/false, buffer, bucket.parameters());
      result = powerSGD_hook(powersgd, inner);  // synchronous: the buffer holds the result
      if (options_.error_feedback()) state.error = input_copy.sub_(buffer);
      sent_bytes = (powersgd.compression_stats().numel_after - before) *
                   static_cast<int64_t>(buffer.element_size());
    } else {
      if (state.error.defined()) {
        if (state.error.numel() == buffer.numel()) buffer.add_(state.error);
        state.error = at::Tensor();
      }
      switch (level.kind) {
        case CompressionLevel::Kind::kFloat16:
          result = fp16_compress_hook(group_, bucket);
          sent_bytes = buffer.numel() * 2;
          break;
        case CompressionLevel::Kind::kBFloat16:
          result = bf16_compress_hook(group_, bucket);
          sent_bytes = buffer.numel() * 2;
          break;
        default:
          result = allreduce_hook(group_, bucket);
          sent_bytes = full_bytes;
      }
    }
    {
      MutexLock lock(stats_mutex_);
      stats_.bytes_sent += sent_bytes;
      stats_.bytes_uncompressed += full_bytes;
      ++stats_.reductions_per_level[state.level];
      if (stats_.bucket_levels.size() <= index) stats_.bucket_levels.resize(index + 1, 0);
      stats_.bucket_levels[index] = state.level;
      if (bucket.is_last()) stats_.iterations = iteration_ + 1;
    }
    if (bucket.is_last()) ++iteration_;
    return result;
  }

 private:
  struct Bucket {
    size_t level = 0;
    int64_t decided_at = 0;  // the iteration of the last decision
    at::Tensor error;        // what PowerSGD lost last time (error feedback)
    // Rank 0: the gradient summed over the current window, and the norm of
    // the previous window's sum (negative: none yet).
    at::Tensor window_sum;
    double previous_norm = -1;
    uint64_t marks_seen = 0;  // rank 0: mark_critical() calls already judged
    int64_t last_seen = 0;    // the last iteration that reduced this index
    // The current level's run, for the timeline.
    TraceClock::time_point run_start;
    int64_t run_start_iteration = 0;
  };

  // DDP rebuilds its buckets after the first iteration (and while bucket
  // autotuning tries sizes: GradBucket::layout changes), so before the
  // second and the third, and at each rebuild, what is kept per bucket index
  // may belong to other gradients now: the errors and PowerSGD's warm
  // starts go. (Rank 0's window sum starts again where its bucket's size
  // changed.)
  void forget_bucket_memories() {
    memories_checked_at_ = iteration_;
    powersgd_.clear();
    for (auto& entry : buckets_) entry.second.error = at::Tensor();
    MutexLock lock(stats_mutex_);
    stats_.bucket_levels.clear();
  }

  void accumulate(Bucket& state, const at::Tensor& buffer) {
    if (!state.window_sum.defined() || state.window_sum.numel() != buffer.numel()) {
      state.window_sum = at::zeros_like(buffer, at::kDouble);  // buckets were rebuilt
    }
    state.window_sum.add_(buffer);
  }

  // Before the hook's first collective: every rank's options agree, or
  // InvalidArgument on every rank. The fingerprints (f < 2^20) agree when
  // n * sum(f^2) == sum(f)^2: equal ones always pass (both sides round the
  // same n^2 f^2 once), and the test is exact below 90 ranks.
  void check_same_options(const at::Device& device) {
    options_checked_ = true;
    at::Tensor mine = at::tensor({fingerprint_, fingerprint_ * fingerprint_}, at::kDouble);
    const auto sums = allreduce_doubles(mine, device);
    if (group_->size() * sums[1] != sums[0] * sums[0]) {
      throw InvalidArgument(group_->error_context("adaptive_compression_hook"),
                            "the ranks' AdaptiveCompressionOptions differ (levels, window, "
                            "critical_threshold, min_compression_rate, error_feedback or "
                            "random_seed): give every rank the same options");
    }
  }

  // Sums `values` over the ranks, on `device` (a group may take only that:
  // nccl), counted in the bytes sent.
  std::vector<double> allreduce_doubles(const at::Tensor& values, const at::Device& device) {
    at::Tensor on_device = values.to(device);
    group_->allreduce(on_device)->wait();
    {
      MutexLock lock(stats_mutex_);
      stats_.bytes_sent += on_device.numel() * static_cast<int64_t>(on_device.element_size());
    }
    at::Tensor result = on_device.cpu();
    return {result.data_ptr<double>(), result.data_ptr<double>() + result.numel()};
  }

  // At the first launch of a window: rank 0 judges the window that ended
  // and every rank adopts its decision (the others add zeros to it).
  void decide(size_t index, Bucket& state, const at::Device& device) {
    state.decided_at = iteration_;
    const bool judging = iteration_ >= 2 * options_.window();
    at::Tensor decision = at::zeros({3}, at::kDouble);
    if (group_->rank() == 0) {
      const double norm = state.window_sum.defined() ? state.window_sum.norm().item<double>() : 0;
      if (state.window_sum.defined()) state.window_sum.zero_();
      LevelDecision d{state.level, false, 0};
      if (judging) {
        const uint64_t marks = marks_.load();
        d = next_level(state.level, options_.levels().size(), state.previous_norm, norm,
                       options_.critical_threshold(), marks != state.marks_seen);
        state.marks_seen = marks;
      }
      state.previous_norm = norm;
      auto* values = decision.data_ptr<double>();
      values[0] = static_cast<double>(d.level);
      values[1] = d.critical ? 1 : 0;
      values[2] = d.norm_change;
    }
    if (!judging) return;  // the first windows keep levels[0]: nothing to agree on
    const auto values = allreduce_doubles(decision, device);
    const auto to = static_cast<size_t>(values[0]);
    if (to >= options_.levels().size()) {  // the options were checked: a broken peer
      // About rank 0, the rank that decides.
      throw CommunicationError(group_->error_context("adaptive_compression_hook").about({0}),
                               "received level " + std::to_string(to) + " for bucket " +
                                   std::to_string(index) + " from rank 0, of " +
                                   std::to_string(options_.levels().size()));
    }
    if (to == state.level) return;
    AdaptiveCompressionStats::Switch change;
    change.iteration = iteration_;
    change.bucket = index;
    change.from = state.level;
    change.to = to;
    change.critical = values[1] != 0;
    change.norm_change = values[2];
    trace_run(index, state, iteration_);
    state.level = to;
    state.run_start = TraceClock::now();
    state.run_start_iteration = iteration_;
    MutexLock lock(stats_mutex_);
    stats_.switches.push_back(change);
  }

  // The bucket's run at its current level, as a span of the timeline.
  void trace_run(size_t index, const Bucket& state, int64_t end_iteration) {
    if (!timeline_ || end_iteration <= state.run_start_iteration) return;
    std::ostringstream name;
    name << "bucket " << index << ": " << options_.levels()[state.level].name();
    timeline_->add({"compression", name.str(), state.run_start, TraceClock::now()},
                   state.run_start_iteration);
  }

  PowerSGDState& powersgd_state(int64_t rank) {
    auto it = powersgd_.find(rank);
    if (it != powersgd_.end()) return it->second;
    // Error feedback and warm start off at construction: PowerSGDState then
    // allows starting at once, which is safe here because its memories are
    // dropped when DDP rebuilds its buckets (forget_bucket_memories).
    PowerSGDState powersgd(group_, rank, /*start_powerSGD_iter=*/0, options_.min_compression_rate(),
                           /*use_error_feedback=*/false,
                           /*warm_start=*/false, /*orthogonalization_epsilon=*/0,
                           options_.random_seed() + static_cast<uint64_t>(rank));
    powersgd.warm_start = true;
    auto loaded = pending_powersgd_.find(rank);  // a checkpoint's
    if (loaded != pending_powersgd_.end()) {
      powersgd.load_state_dict(loaded->second);
      pending_powersgd_.erase(loaded);
    }
    return powersgd_.emplace(rank, std::move(powersgd)).first->second;
  }

  const AdaptiveCompressionOptions options_;
  double fingerprint_ = 0;  // of the options that must agree across ranks, < 2^20
  // Touched by the communication thread only.
  ProcessGroupPtr group_;
  std::shared_ptr<RankTimeline> timeline_;
  int64_t iteration_ = 0;
  int64_t memories_checked_at_ = -1;
  int64_t layout_ = 0;  // GradBucket::layout the memories belong to
  bool options_checked_ = false;
  std::map<size_t, Bucket> buckets_;
  std::map<int64_t, PowerSGDState> powersgd_;          // by rank
  std::map<int64_t, HookStateDict> pending_powersgd_;  // by rank: loaded, not yet made
  // Any thread.
  std::atomic<uint64_t> marks_{0};
  mutable Mutex stats_mutex_;
  AdaptiveCompressionStats stats_ DDP_GUARDED_BY(stats_mutex_);
};

}  // namespace detail

AdaptiveCompressionState::AdaptiveCompressionState(AdaptiveCompressionOptions options)
    : impl_(std::make_unique<detail::AdaptiveCompression>(std::move(options))) {}
AdaptiveCompressionState::~AdaptiveCompressionState() = default;
AdaptiveCompressionState::AdaptiveCompressionState(AdaptiveCompressionState&&) noexcept = default;
AdaptiveCompressionState& AdaptiveCompressionState::operator=(AdaptiveCompressionState&&) noexcept =
    default;

const AdaptiveCompressionOptions& AdaptiveCompressionState::options() const {
  return impl_->options();
}
AdaptiveCompressionStats AdaptiveCompressionState::stats() const { return impl_->stats(); }
void AdaptiveCompressionState::mark_critical() { impl_->mark_critical(); }
HookStateDict AdaptiveCompressionState::state_dict() const { return impl_->state_dict(); }
void AdaptiveCompressionState::load_state_dict(const HookStateDict& dict) {
  impl_->load_state_dict(dict);
}

FuturePtr adaptive_compression_hook(AdaptiveCompressionState& state, GradBucket& bucket) {
  return state.impl_->reduce(bucket);
}

}  // namespace ddp
