#include <ddp/statistics.h>

#include <cstdio>

namespace ddp {

std::string IterationStats::summary() const {
  char head[256];
  std::snprintf(head, sizeof(head),
                "iteration %lld: forward %.2f ms, backward compute %.2f ms, communication %.2f ms "
                "(%.2f ms overlapped), finalize %.2f ms, %zu buckets",
                static_cast<long long>(iteration), forward_ms, backward_compute_ms,
                communication_ms, overlapped_ms, finalize_ms, bucket_count());
  std::string out = head;
  if (!bucket_bytes.empty()) {
    out += " [";
    for (size_t b = 0; b < bucket_bytes.size(); ++b) {
      char size[32];
      std::snprintf(size, sizeof(size), "%s%.2f MB", b ? ", " : "", bucket_bytes[b] / 1e6);
      out += size;
    }
    out += "]";
  }
  if (buckets_rebuilt) out += ", buckets rebuilt";
  out += ", " + std::to_string(unused_parameters) + " unused parameters";
  for (size_t i = 0; i < unused_parameter_names.size(); ++i) {
    out += (i ? ", " : ": ") + unused_parameter_names[i];
  }
  return out;
}

}  // namespace ddp
