// ddprun: launches the ranks of a ddp (distributed data-parallel) program on
// one node, like `torchrun --no_python`, without needing Python.
//
// main() parses the arguments (bad ones: one-line error, exit 2), makes the
// job's secret when none is given (job_secret.h), picks a free rendezvous
// port when none was given on a single-node run, and hands
// over to the launcher, whose result is ddprun's exit status; with
// --max-restarts it starts the whole job again after a failure. With a
// flight-recorder directory, each failed start ends with the line that the
// ranks' dumps tell.
#include "flight_report.h"
#include "free_port.h"
#include "job_secret.h"
#include "launcher.h"
#include "options.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  const ddprun::ParseResult parsed = ddprun::parse_options(args);
  switch (parsed.outcome) {
    case ddprun::ParseOutcome::HELP:
      std::fputs(ddprun::usage_text().c_str(), stdout);
      return 0;
    case ddprun::ParseOutcome::ERROR:
      std::fprintf(stderr, "ddprun: %s; see ddprun --help\n", parsed.error.c_str());
      return 2;
    case ddprun::ParseOutcome::RUN:
      break;
  }
  const ddprun::Options& opts = parsed.opts;
  const char* inherited_flight_dir = std::getenv("DDP_FLIGHT_RECORDER_DIR");
  const std::string flight_dir = !opts.flight_recorder_dir.empty() ? opts.flight_recorder_dir
                                 : inherited_flight_dir           ? inherited_flight_dir
                                                                  : "";

  bool no_secret = false;
  const std::string secret_note = ddprun::ensure_job_secret(opts, no_secret);
  if (!secret_note.empty()) std::fprintf(stderr, "ddprun: %s\n", secret_note.c_str());
  if (no_secret) return 1;

  std::string error;
  if (!ddprun::install_launcher_signals(error)) {
    std::fprintf(stderr, "ddprun: cannot set up signal handling: %s\n", error.c_str());
    return 1;
  }
  // With --max-restarts, a failed job is stopped as a whole (the launcher
  // does that) and started again on a fresh rendezvous port, so that no rank
  // meets a store or a peer of the failed attempt.
  for (int attempt = 0;; ++attempt) {
    int master_port = 0;
    if (opts.master_port) {
      master_port = *opts.master_port;
    } else {
      const auto port = ddprun::find_free_port(opts.master_addr, error);
      if (!port) {
        std::fprintf(stderr,
                     "ddprun: cannot pick a free port on --master-addr %s (%s); pass "
                     "--master-port P\n",
                     opts.master_addr.c_str(), error.c_str());
        return 1;
      }
      master_port = *port;
    }
    if (!flight_dir.empty() && !ddprun::prepare_flight_dir(flight_dir, error)) {
      std::fprintf(stderr, "ddprun: %s\n", error.c_str());
      return 1;
    }
    std::fflush(stdout);  // ddprun writes its own output with write(2) from here on
    const ddprun::LaunchResult r = ddprun::run_launcher(opts, master_port, attempt);
    if (r.status != 0 && !r.exec_failed && !flight_dir.empty()) {
      std::fprintf(stderr, "ddprun: flight recorder: %s\n", ddprun::flight_report(flight_dir).c_str());
    }
    if (r.status == 0 || r.interrupted || r.exec_failed) return r.status;
    if (attempt == opts.max_restarts) {
      if (opts.max_restarts > 0) {
        std::fprintf(stderr, "ddprun: giving up after %d restart(s); the last failure: %s\n",
                     opts.max_restarts, r.failure.c_str());
      }
      return r.status;
    }
    std::fprintf(stderr, "ddprun: restarting every rank (restart %d of %d) after: %s\n",
                 attempt + 1, opts.max_restarts, r.failure.c_str());
  }
}
