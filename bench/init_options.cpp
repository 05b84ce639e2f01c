// ddp_bench::init_options (subcommands.h), for ddp_bench and paper_bench.
#include "subcommands.h"

#include <ddp/backends/gloo.h>
#include <ddp/init.h>

#include <memory>

namespace ddp_bench {

ddp::InitOptions init_options(int gloo_threads) {
  ddp::InitOptions init;
  if (ddp::resolve_backend_name(init.backend()) == "gloo") {
    init.backend_options(
        std::make_shared<ddp::GlooOptions>(ddp::GlooOptions().threads(gloo_threads)));
  }
  return init;
}

}  // namespace ddp_bench
