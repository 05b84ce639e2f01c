// ddp-store: the store of an elastic job, held by a process that trains
// nothing, so that it outlives any rank (include/ddp/elastic.h). It hosts
// libtorch's TCPStore, deletes the keys of generations no member reads again
// (src/elastic/store_gc.h) and, with --report, says in one line each
// membership change the members decide, with the store's key count.
//
//   ddp-store --port 29500 [--host ADDR] [--report [--report-as NAME]]
//
// Runs until SIGTERM or SIGINT (ddprun --elastic sends SIGTERM when the job
// ends). Port 0 takes a free port; the first line of output names it:
//   ddp-store: listening on port 29500
// With $DDP_JOB_SECRET it admits only processes that prove the same secret,
// and the job's keys are sealed with it (docs/security.md).
#include "base/store_values.h"
#include "compat/torch_compat.h"
#include "elastic/record.h"
#include "elastic/store_gc.h"
#include "rendezvous/admission.h"
#include "rendezvous/store_listener.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <chrono>
#include <ctime>
#include <string>

namespace {

constexpr const char* kUsage =
    "usage: ddp-store [--host ADDR] [--port P] [--report [--report-as NAME]]\n"
    "  Hosts the TCPStore of one elastic ddp job until SIGTERM/SIGINT (start a\n"
    "  new one for each job: the keys of a finished job stay).\n"
    "  --host ADDR     this host's address as the store's own client reaches it\n"
    "                  (default 127.0.0.1; libtorch's server listens on every\n"
    "                  interface)\n"
    "  --port P        port (default 29500; 0: a free one, printed)\n"
    "  --report        one line per membership change the members decide, with\n"
    "                  the store's key count (old generations' keys are deleted)\n"
    "  --report-as N   the lines' prefix (default ddp-store; ddprun: ddprun)\n"
    "  $DDP_JOB_SECRET: the job's secret; processes without it are refused\n";

// The server's options, or a client's of it (the admission thread's).
c10d::TCPStoreOptions store_options(int port, bool server) {
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(port);
  opts.isServer = server;
  opts.waitWorkers = false;
  opts.timeout = std::chrono::seconds(30);
  ddp::compat::use_classic_tcp_store(opts);
  return opts;
}

// "1, 2" or "none".
std::string ids(const std::vector<int>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out.empty() ? "none" : out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string host = "127.0.0.1";
  std::string reporter = "ddp-store";
  int port = 29500;
  bool report = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--host" || a == "--port" || a == "--report-as") && i + 1 < argc) {
      const std::string v = argv[++i];
      if (a == "--host") {
        host = v;
      } else if (a == "--report-as") {
        reporter = v;
      } else {
        char* end = nullptr;
        const long p = std::strtol(v.c_str(), &end, 10);
        if (v.empty() || *end || p < 0 || p > 65535) {
          std::fprintf(stderr, "ddp-store: --port must be a port number (0-65535), got '%s'\n",
                       v.c_str());
          return 2;
        }
        port = static_cast<int>(p);
      }
    } else if (a == "--report") {
      report = true;
    } else if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else {
      std::fprintf(stderr, "ddp-store: unknown argument '%s'\n%s", a.c_str(), kUsage);
      return 2;
    }
  }
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);  // before the store's threads start: they inherit it

  c10::intrusive_ptr<c10d::TCPStore> store;
  try {
    auto opts = store_options(port, /*server=*/true);
    ddp::detail::listen_on_ipv4(opts, host);  // no DNS look-up at each accept
    store = c10::make_intrusive<c10d::TCPStore>(host, opts);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddp-store: cannot listen on %s:%d: %s\n", host.c_str(), port, e.what());
    return 1;
  }
  const int listening = static_cast<int>(store->getPort());
  // The job is opened here, for its whole life: with $DDP_JOB_SECRET, a
  // process is admitted only with it, and the job's keys are sealed
  // (rendezvous/admission.h); this process reads them as a member would.
  ddp::detail::ElasticAdmission job;
  try {
    const auto secret = ddp::detail::JobSecret::from_env();
    job = ddp::detail::open_elastic_job(
        store,
        [host, listening] {
          return c10::make_intrusive<c10d::TCPStore>(host,
                                                     store_options(listening, /*server=*/false));
        },
        secret);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddp-store: cannot open the job: %s\n", e.what());
    return 1;
  }
  std::printf("ddp-store: listening on port %d\n", listening);
  std::fflush(stdout);

  namespace el = ddp::detail::elastic;
  int64_t next = 0;  // the first generation not seen decided yet
  std::string last_error;
  const timespec poll{0, 20 * 1000 * 1000};
  for (;;) {
    const int sig = sigtimedwait(&stop, nullptr, &poll);
    if (sig == SIGTERM || sig == SIGINT) return 0;
    try {
      while (job.store->check({el::generation_key(next, "decided")})) {
        const auto r = el::GenerationRecord::decode(
            ddp::detail::store_text(job.store->get(el::generation_key(next, "decided"))));
        el::collect_generations(*job.store, next);
        if (r && report) {
          std::printf(
              "%s: elastic: generation %lld: world %zu (members %s); left: %s; joined: %s; "
              "formed in %.3f s; store keys %lld\n",
              reporter.c_str(), static_cast<long long>(next), r->members.size(),
              ids(r->members).c_str(), ids(r->left).c_str(), ids(r->joined).c_str(),
              r->formed_ms / 1000.0, static_cast<long long>(store->getNumKeys()));
          std::fflush(stdout);
        }
        ++next;
      }
    } catch (const std::exception& e) {
      if (e.what() != last_error) {  // once, not at every poll
        last_error = e.what();
        std::fprintf(stderr, "ddp-store: reading the store: %s\n", e.what());
      }
    }
  }
}
