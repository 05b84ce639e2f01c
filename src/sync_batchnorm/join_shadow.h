// Join's replay (DistributedDataParallel::set_join_shadow_batch): a rank out
// of inputs runs the model's forward and backward only to issue the model's
// own collectives in the others' order. While it does, those collectives
// (SyncBatchNorm's) must contribute nothing: they ask in_join_shadow().
#pragma once

namespace ddp::detail {

// True on this thread while a JoinShadowScope is open.
bool in_join_shadow();

class JoinShadowScope {
 public:
  JoinShadowScope();
  ~JoinShadowScope();
  JoinShadowScope(const JoinShadowScope&) = delete;
  JoinShadowScope& operator=(const JoinShadowScope&) = delete;

 private:
  bool previous_;
};

}  // namespace ddp::detail
