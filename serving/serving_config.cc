#include "serving/serving_config.h"

namespace lg::serving {

SchedulerOptions schedulerOptions(const Config& config, const engine::ModelConfig& model) {
  SchedulerOptions o;
  o.step_tokens = config.serving.step_tokens;
  o.max_running = config.serving.max_running;
  o.max_queued = config.serving.max_queued;
  o.max_queue_wait = std::chrono::milliseconds(config.serving.max_queue_wait_ms);
  o.output_reservation_tokens = config.serving.output_reservation_tokens;
  o.max_stop_strings = config.serving.max_stop_strings;
  o.eos_token_ids.assign(model.eos_token_ids.begin(), model.eos_token_ids.end());
  return o;
}

}  // namespace lg::serving
