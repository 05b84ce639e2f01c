#include "flight_report.h"

#include "flight_dump.h"
#include "flight_verdict.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <vector>

namespace ddprun {

bool prepare_flight_dir(const std::string& dir, std::string& error) {
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    error = "cannot make the flight-recorder directory " + dir + ": " + std::strerror(errno);
    return false;
  }
  DIR* handle = opendir(dir.c_str());
  if (!handle) {
    error = "cannot read the flight-recorder directory " + dir + ": " + std::strerror(errno);
    return false;
  }
  while (dirent* entry = readdir(handle)) {
    const std::string name = entry->d_name;
    if (ddp::flight::is_flight_dump(name) && unlink((dir + "/" + name).c_str()) != 0) {
      error = "cannot remove the earlier dump " + dir + "/" + name + ": " + std::strerror(errno);
      closedir(handle);
      return false;
    }
  }
  closedir(handle);
  return true;
}

std::string flight_report(const std::string& dir) {
  try {
    std::vector<std::string> problems;
    const auto dumps = ddp::flight::read_flight_dumps(dir, &problems);
    std::string unread;
    if (!problems.empty()) {
      unread = "; " + std::to_string(problems.size()) + " dump(s) could not be read";
    }
    if (dumps.empty()) return "no rank left a dump in " + dir + unread;
    return ddp::flight::flight_verdict(dumps) + " (dumps: " + dir + unread +
           "; details: ddp-flight " + dir + ")";
  } catch (const std::exception& e) {
    return e.what();
  }
}

}  // namespace ddprun
