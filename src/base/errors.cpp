// The one formatter behind every ddp::Error (include/ddp/errors.h).
#include <ddp/errors.h>

#include <utility>

namespace ddp {

std::string format_context(const ErrorContext& context) {
  std::string out;
  if (context.rank >= 0) {
    out = "rank " + std::to_string(context.rank);
    if (context.world_size > 0) out += " of " + std::to_string(context.world_size);
  }
  if (!context.backend.empty()) out += (out.empty() ? "[" : " [") + context.backend + "]";
  if (!context.operation.empty()) out += (out.empty() ? "" : ": ") + context.operation;
  return out;
}

namespace {

std::string message(const ErrorContext& context, const std::string& problem,
                    const std::string& remedy) {
  const std::string where = format_context(context);
  std::string out = "ddp: " + (where.empty() ? problem : where + ": " + problem);
  if (!remedy.empty()) out += " " + remedy;
  return out;
}

}  // namespace

Error::Error(ErrorContext context, const std::string& problem, const std::string& remedy)
    : std::runtime_error(message(context, problem, remedy)),
      context_(std::move(context)),
      problem_(problem),
      remedy_(remedy) {}

Error::Error(const std::string& problem) : Error(ErrorContext{}, problem) {}

}  // namespace ddp
