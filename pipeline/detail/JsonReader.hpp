// The strict reader of a JSON object behind every fromJson (pipeline/ParamsJson.hpp, the job
// descriptions): each key read is known; done() refuses any other key, naming the known ones; a
// value of the wrong type is refused naming the key. A key that is absent leaves the target as is.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "core/Errors.hpp"
#include "pipeline/ParamsJson.hpp"

namespace kortex::pipeline::detail {

using nlohmann::json;

inline std::string shown(json const& v) {
  std::string s = v.dump();
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return std::string(v.type_name()) + " " + s;
}

// Reads the keys of one object into a struct; every key read is known, done() refuses the rest.
class JsonReader {
 public:
  JsonReader(json const& j, std::string what) : j_(j), what_(std::move(what)) {
    if (!j_.is_object()) throw InvalidArgument(what_ + " must be a JSON object, got " + shown(j_));
  }

  template <class T>
  JsonReader& number(const char* key, T& out) {
    if (json const* v = find(key)) {
      if (!v->is_number()) wrongType(key, "a number", *v);
      out = static_cast<T>(v->get<double>());
    }
    return *this;
  }
  // A number, or the string "inf" (JSON has no infinity) for +infinity.
  template <class T>
  JsonReader& numberOrInf(const char* key, T& out) {
    if (json const* v = find(key)) {
      if (v->is_string() && v->get<std::string>() == "inf") out = std::numeric_limits<T>::infinity();
      else if (v->is_number()) out = static_cast<T>(v->get<double>());
      else wrongType(key, "a number or \"inf\"", *v);
    }
    return *this;
  }
  JsonReader& integer(const char* key, int& out) {
    if (json const* v = find(key)) out = toInt(key, *v, "an integer");
    return *this;
  }
  JsonReader& integers(const char* key, std::vector<int>& out) {
    if (json const* v = find(key)) {
      if (!v->is_array()) wrongType(key, "a list of integers", *v);
      std::vector<int> r;
      for (json const& e : *v) r.push_back(toInt(key, e, "a list of integers"));
      out = std::move(r);
    }
    return *this;
  }
  JsonReader& flag(const char* key, bool& out) {
    if (json const* v = find(key)) {
      if (!v->is_boolean()) wrongType(key, "true or false", *v);
      out = v->get<bool>();
    }
    return *this;
  }
  template <class E, class Parse>
  JsonReader& choice(const char* key, E& out, Parse parse) {
    if (json const* v = find(key)) {
      if (!v->is_string()) wrongType(key, "a string", *v);
      try {
        out = parse(v->get<std::string>());
      } catch (InvalidArgument const& e) {
        throw InvalidArgument(what_ + ": '" + key + "': " + e.what());
      }
    }
    return *this;
  }
  template <class Params>
  JsonReader& object(const char* key, Params& out) {
    if (json const* v = find(key)) {
      if (!v->is_object()) wrongType(key, "a JSON object", *v);
      fromJson(*v, out);
    }
    return *this;
  }
  JsonReader& text(const char* key, std::string& out) {
    if (json const* v = find(key)) {
      if (!v->is_string()) wrongType(key, "a string", *v);
      out = v->get<std::string>();
    }
    return *this;
  }
  JsonReader& path(const char* key, std::filesystem::path& out) {
    std::string s = out.string();
    text(key, s);
    out = s;
    return *this;
  }
  // A job description's "job" key: absent, or `kind` ("register", "apply", ...).
  JsonReader& jobKind(const char* kind) {
    std::string given = kind;
    text("job", given);
    if (given != kind) throw InvalidArgument(what_ + ": 'job' must be \"" + kind + "\", got \"" + given + "\"");
    return *this;
  }
  // The value itself (null when absent), for a key the caller reads in its own way.
  json const* raw(const char* key) { return find(key); }
  [[noreturn]] void wrongType(const char* key, const char* want, json const& v) const {
    throw InvalidArgument(what_ + ": '" + key + "' must be " + want + ", got " + shown(v));
  }
  void done() const {
    for (auto const& item : j_.items()) {
      if (known_.count(item.key())) continue;
      std::string list;
      for (auto const& k : known_) list += (list.empty() ? "" : ", ") + k;
      throw InvalidArgument(what_ + ": unknown key '" + item.key() + "' (known: " + list + ")");
    }
  }

 private:
  json const* find(const char* key) {
    known_.insert(key);
    auto it = j_.find(key);
    return it == j_.end() ? nullptr : &*it;
  }
  int toInt(const char* key, json const& v, const char* want) const {
    if (v.is_number_unsigned()) {
      if (v.get<std::uint64_t>() > std::uint64_t(std::numeric_limits<int>::max())) wrongType(key, want, v);
      return int(v.get<std::uint64_t>());
    }
    if (!v.is_number_integer()) wrongType(key, want, v);
    const std::int64_t i = v.get<std::int64_t>();
    if (i < std::numeric_limits<int>::min() || i > std::numeric_limits<int>::max()) wrongType(key, want, v);
    return int(i);
  }

  json const& j_;
  std::string what_;
  std::set<std::string> known_;
};


}  // namespace kortex::pipeline::detail
