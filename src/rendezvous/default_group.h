// The group an option names, else the default group: how DDP and the
// communication hooks read an optional process group.
#pragma once

#include <ddp/init.h>

namespace ddp::detail {

inline ProcessGroupPtr group_or_default(const ProcessGroupPtr& group) {
  return group ? group : default_process_group();
}

}  // namespace ddp::detail
