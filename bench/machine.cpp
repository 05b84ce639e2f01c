#include "machine.h"

#include "bench_util.h"

#include <dlfcn.h>
#include <sched.h>
#include <sys/utsname.h>

#include <cstdlib>
#include <ctime>
#include <fstream>
#include <thread>

namespace ddp_bench {

namespace {

std::string read_first_match(const std::string& path, const std::string& key) {
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(key, 0) != 0) continue;
    auto colon = line.find_first_of(":=", key.size());
    if (colon == std::string::npos) continue;
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(" \t\""));
    while (!value.empty() && (value.back() == '"' || value.back() == ' ')) value.pop_back();
    return value;
  }
  return "";
}

int allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 0;
  return CPU_COUNT(&set);
}

std::string utc_now() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string link_description() {
  if (const char* link = std::getenv("DDP_BENCH_LINK"); link && *link) return link;
  const char* master = std::getenv("MASTER_ADDR");
  std::string m = master ? master : "";
  if (m.empty() || m == "127.0.0.1" || m == "localhost" || m == "::1") return "loopback";
  return "network (MASTER_ADDR=" + m + ")";
}

}  // namespace

double link_rate_bits_per_s() {
  const char* v = std::getenv("DDP_BENCH_LINK_RATE_BPS");
  if (!v || !*v) return 0.0;
  char* end = nullptr;
  double rate = std::strtod(v, &end);
  return end && *end == '\0' && rate > 0 ? rate : 0.0;
}

Json describe_machine(const std::string& torch_version) {
  Json m = Json::object();
  std::string cpu = read_first_match("/proc/cpuinfo", "model name");
  m.set("cpu_model", cpu.empty() ? "unknown" : cpu);
  m.set("logical_cpus", static_cast<int64_t>(std::thread::hardware_concurrency()));
  m.set("cpus_allowed", allowed_cpus());
  std::string mem = read_first_match("/proc/meminfo", "MemTotal");  // "24000000 kB"
  if (!mem.empty()) m.set("mem_total_gib", format_fixed(std::atof(mem.c_str()) / (1 << 20), 1));
  utsname u{};
  if (uname(&u) == 0) {
    m.set("kernel", std::string(u.sysname) + " " + u.release + " " + u.machine);
  }
  std::string os = read_first_match("/etc/os-release", "PRETTY_NAME");
  if (!os.empty()) m.set("os", os);
  m.set("libtorch", torch_version);
#ifdef __VERSION__
  m.set("compiler", __VERSION__);
#endif
  m.set("link", link_description());
  if (double rate = link_rate_bits_per_s(); rate > 0) m.set("link_rate_bits_per_s", rate);
  m.set("date_utc", utc_now());
  return m;
}

std::string machine_summary(const std::string& torch_version) {
  std::string cpu = read_first_match("/proc/cpuinfo", "model name");
  utsname u{};
  std::string kernel = uname(&u) == 0 ? std::string(u.release) : "?";
  return (cpu.empty() ? "unknown CPU" : cpu) + ", " + std::to_string(allowed_cpus()) +
         " CPUs, Linux " + kernel + ", libtorch " + torch_version + ", link: " + link_description();
}

Json& add_machine_and_config(Json& result, const std::string& torch_version, Json config) {
  return result.set("machine", describe_machine(torch_version)).set("config", std::move(config));
}

int limit_openblas_threads(int threads) {
  using SetFn = void (*)(int);
  using GetFn = int (*)();
  auto set = reinterpret_cast<SetFn>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  auto get = reinterpret_cast<GetFn>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  if (!set || !get) return 0;
  set(threads);
  return get();
}

}  // namespace ddp_bench
