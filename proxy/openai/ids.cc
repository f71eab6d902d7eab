#include "proxy/openai/ids.h"

#include <random>

namespace lg::proxy::openai {

std::string newId(std::string_view prefix, size_t random_chars) {
  static constexpr std::string_view kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng = [] {
    std::random_device device;
    std::seed_seq seq{device(), device(), device(), device()};
    return std::mt19937_64(seq);
  }();
  std::string id(prefix);
  id.reserve(prefix.size() + random_chars);
  std::uniform_int_distribution<size_t> pick(0, kAlphabet.size() - 1);
  for (size_t i = 0; i < random_chars; ++i) id.push_back(kAlphabet[pick(rng)]);
  return id;
}

std::string outputItemId(std::string_view prefix, std::string_view response_id, size_t output_index) {
  std::string_view random = response_id;
  if (random.starts_with("resp_")) random.remove_prefix(5);
  return std::string(prefix) + std::string(random) + "_" + std::to_string(output_index);
}

std::optional<OutputItemRef> parseOutputItemId(std::string_view id) {
  const size_t prefix = id.find('_');
  const size_t last = id.rfind('_');
  if (prefix == std::string_view::npos || last == prefix || last + 1 >= id.size() || id.size() - last > 6) {
    return std::nullopt;
  }
  const std::string_view kind = id.substr(0, prefix + 1);
  if (kind != "msg_" && kind != "fc_" && kind != "ctc_" && kind != "rs_") return std::nullopt;
  size_t index = 0;
  for (char c : id.substr(last + 1)) {
    if (c < '0' || c > '9') return std::nullopt;
    index = index * 10 + static_cast<size_t>(c - '0');
  }
  return OutputItemRef{"resp_" + std::string(id.substr(prefix + 1, last - prefix - 1)), index};
}

}  // namespace lg::proxy::openai
