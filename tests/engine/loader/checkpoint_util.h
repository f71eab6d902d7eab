// Test helpers that build modified copies of the fixture checkpoints in a
// temporary directory (dropped, retyped or reshaped tensors, edited configs,
// shards).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/model/safetensors.h"

namespace lg::engine::testing {

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A tensor of a fixture checkpoint that a test may edit before it is written.
struct EditableTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

// Reads every tensor of FIXTURE/model.safetensors.
std::vector<EditableTensor> readFixtureTensors(const std::string& fixture);
// Writes tensors to path (bytes are written as they are, whatever dtype/shape say).
void writeTensors(const std::string& path, const std::vector<EditableTensor>& tensors);
// Copies FIXTURE/config.json into dir, editing it first.
void writeConfig(const std::string& fixture, const std::string& dir,
                 const std::function<void(nlohmann::json&)>& edit = {});
// config.json + model.safetensors of a fixture with optional edits.
void writeCheckpoint(const std::string& fixture, const std::string& dir,
                     const std::function<void(std::vector<EditableTensor>&)>& edit_tensors = {},
                     const std::function<void(nlohmann::json&)>& edit_config = {});

}  // namespace lg::engine::testing
