// The scheduler's options from the process configuration (serving.*) and the
// model (its end-of-sequence tokens): the one place where they meet.
#pragma once

#include "config/options.h"
#include "engine/model/model_config.h"
#include "serving/scheduler.h"

namespace lg::serving {

SchedulerOptions schedulerOptions(const Config& config, const engine::ModelConfig& model);

}  // namespace lg::serving
