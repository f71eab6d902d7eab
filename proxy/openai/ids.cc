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

}  // namespace lg::proxy::openai
