#include "flight_dump.h"

#include "flight/format.h"

#include <dirent.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace ddp::flight {
namespace {

[[noreturn]] void broken(const std::string& path, int line, const std::string& what) {
  throw std::runtime_error("ddp-flight: " + path + ":" + std::to_string(line) + ": " + what +
                           " (not a flight-recorder dump of this version?)");
}

FlightState state_named(const std::string& name, const std::string& path, int line) {
  for (auto s : {FlightState::QUEUED, FlightState::STARTED, FlightState::COMPLETED,
                 FlightState::FAILED}) {
    if (name == to_string(s)) return s;
  }
  broken(path, line, "unknown state '" + name + "'");
}

}  // namespace

bool is_flight_dump(const std::string& name) {
  const std::string suffix = flight_format::kSuffix;
  return name.size() > suffix.size() &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

FlightDump read_flight_dump(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("ddp-flight: cannot read " + path + ": " + std::strerror(errno));
  FlightDump d;
  d.path = path;
  std::string text;
  int line = 1;
  if (!std::getline(in, text) || text != flight_format::kMagic) {
    broken(path, line, "the first line is not '" + std::string(flight_format::kMagic) + "'");
  }
  std::vector<int> group_index;  // group line's index -> position in d.groups
  while (std::getline(in, text)) {
    ++line;
    std::istringstream words(text);
    std::string key;
    words >> key;
    if (key == "process") {
      words >> d.process;
    } else if (key == "rank") {
      words >> d.rank;
    } else if (key == "pid") {
      words >> d.pid;
    } else if (key == "host") {
      words >> d.host;
    } else if (key == "reason") {
      std::getline(words >> std::ws, d.reason);
    } else if (key == "dumped_ns") {
      words >> d.dumped_ns;
    } else if (key == "capacity") {
      words >> d.capacity;
    } else if (key == "group") {
      int index = -1;
      FlightDump::Group g;
      if (!(words >> index >> g.rank >> g.size >> g.backend >> g.name) || index < 0) {
        broken(path, line, "a group line needs: index rank size backend name");
      }
      if (group_index.size() <= static_cast<size_t>(index)) group_index.resize(index + 1, -1);
      group_index[index] = static_cast<int>(d.groups.size());
      d.groups.push_back(g);
    } else if (key == "record") {
      FlightRecord r;
      int group = -1;
      std::string state;
      if (!(words >> r.seq >> group >> r.kind >> r.op >> r.dtype >> r.count >> r.root >>
            r.bucket >> state >> r.issued_ns >> r.started_ns >> r.ended_ns)) {
        broken(path, line, "a record line has 12 fields");
      }
      if (group < 0 || static_cast<size_t>(group) >= group_index.size() ||
          group_index[group] < 0) {
        broken(path, line, "record of group " + std::to_string(group) + ", which no group line names");
      }
      const FlightDump::Group& g = d.groups[group_index[group]];
      r.group = g.name;
      r.group_rank = g.rank;
      r.group_size = g.size;
      r.backend = g.backend;
      r.state = state_named(state, path, line);
      d.records.push_back(std::move(r));
    } else if (!key.empty()) {
      broken(path, line, "unknown line '" + key + "'");
    }
    if (words.fail() && key != "reason") broken(path, line, "malformed '" + key + "' line");
  }
  return d;
}

std::vector<FlightDump> read_flight_dumps(const std::string& dir,
                                          std::vector<std::string>* problems) {
  DIR* handle = opendir(dir.c_str());
  if (!handle) {
    throw std::runtime_error("ddp-flight: cannot read the directory " + dir + ": " +
                             std::strerror(errno));
  }
  std::vector<std::string> names;
  while (dirent* entry = readdir(handle)) {
    if (is_flight_dump(entry->d_name)) names.push_back(entry->d_name);
  }
  closedir(handle);
  std::sort(names.begin(), names.end());
  std::vector<FlightDump> dumps;
  for (const auto& name : names) {
    try {
      dumps.push_back(read_flight_dump(dir + "/" + name));
    } catch (const std::runtime_error& e) {
      if (problems) problems->push_back(std::string(e.what()) + "; left out");
    }
  }
  return dumps;
}

}  // namespace ddp::flight
