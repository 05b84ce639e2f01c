// What the store says of one decided generation, in one line: who its
// members are (in rank order), who left and who joined since the previous
// one, and how long its formation took. Written once by the member whose
// proposal won (compare-and-set on `elastic/g<N>/decided`), read by every
// member and by ddp-store's report of membership changes.
//
//   members=0,2;left=1;joined=;formed_ms=412
#pragma once

#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace ddp::detail::elastic {

// Every key of elastic training lives under this prefix on the store.
inline std::string key(const std::string& suffix) { return "elastic/" + suffix; }
// Keys of generation `n`: its arrivals, its decision, its process group.
inline std::string generation_key(int64_t n, const std::string& suffix) {
  return key("g" + std::to_string(n) + "/" + suffix);
}

// The lowest generation whose keys the store still holds: the ones before
// it were collected (elastic/store_gc.h). Absent: 0.
inline std::string floor_key() { return key("floor"); }
// The first generation whose keys have not been collected (store_gc.h).
inline std::string collected_key() { return key("collected"); }
// Member `id`'s process and heartbeat.
inline std::string member_key(int id) { return key("member/" + std::to_string(id)); }
inline std::string heartbeat_key(int id) { return key("hb/" + std::to_string(id)); }

struct GenerationRecord {
  std::vector<int> members, left, joined;
  int64_t formed_ms = 0;

  static std::string join(const std::vector<int>& ids) {
    std::string out;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i) out += ',';
      out += std::to_string(ids[i]);
    }
    return out;
  }

  std::string encode() const {
    return "members=" + join(members) + ";left=" + join(left) + ";joined=" + join(joined) +
           ";formed_ms=" + std::to_string(formed_ms);
  }

  // nullopt: not a record of this form.
  static std::optional<GenerationRecord> decode(const std::string& text) {
    GenerationRecord r;
    std::istringstream fields(text);
    std::string field;
    int seen = 0;
    while (std::getline(fields, field, ';')) {
      const auto eq = field.find('=');
      if (eq == std::string::npos) return std::nullopt;
      const std::string name = field.substr(0, eq), value = field.substr(eq + 1);
      try {
        if (name == "formed_ms") {
          r.formed_ms = std::stoll(value);
        } else {
          std::vector<int>* ids = name == "members"  ? &r.members
                                  : name == "left"   ? &r.left
                                  : name == "joined" ? &r.joined
                                                     : nullptr;
          if (!ids) return std::nullopt;
          std::istringstream list(value);
          for (std::string id; std::getline(list, id, ',');) ids->push_back(std::stoi(id));
        }
      } catch (const std::exception&) {
        return std::nullopt;
      }
      ++seen;
    }
    if (seen != 4 || r.members.empty()) return std::nullopt;
    return r;
  }
};

}  // namespace ddp::detail::elastic
