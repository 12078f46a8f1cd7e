#include "common/logging.h"

#include <mutex>

#include "spdlog/sinks/stdout_color_sinks.h"

namespace kvt {
namespace {

std::mutex& LevelMutex() {
  static std::mutex mu;
  return mu;
}

spdlog::level::level_enum& CurrentLevel() {
  static spdlog::level::level_enum level = spdlog::level::info;
  return level;
}

}  // namespace

std::shared_ptr<spdlog::logger> Logger(const std::string& module) {
  std::lock_guard<std::mutex> lock(LevelMutex());
  std::shared_ptr<spdlog::logger> logger = spdlog::get(module);
  if (logger != nullptr) return logger;
  logger = spdlog::stderr_color_mt(module);
  logger->set_level(CurrentLevel());
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%L%$ [%n] %v");
  return logger;
}

bool SetLogLevel(const std::string& level) {
  spdlog::level::level_enum parsed = spdlog::level::from_str(level);
  if (parsed == spdlog::level::off && level != "off") return false;
  std::lock_guard<std::mutex> lock(LevelMutex());
  CurrentLevel() = parsed;
  spdlog::set_level(parsed);
  return true;
}

}  // namespace kvt
