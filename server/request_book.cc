#include "server/request_book.h"

#include "absl/strings/str_cat.h"

namespace kvt::server {

void RequestEvents::Add(EventKind kind, uint32_t layer) {
  const absl::Time now = absl::Now();
  kvt::MutexLock lock(&mu_);
  if (finished_) return;
  events_.push_back({kind, layer, now - start_, absl::OkStatus()});
}

bool RequestEvents::Finish(const absl::Status& status) {
  const absl::Time now = absl::Now();
  kvt::MutexLock lock(&mu_);
  if (finished_) return false;
  finished_ = true;
  events_.push_back({status.ok() ? EventKind::kDone : EventKind::kFailed, 0, now - start_, status});
  return true;
}

bool RequestEvents::finished() const {
  kvt::MutexLock lock(&mu_);
  return finished_;
}

absl::Status RequestEvents::outcome() const {
  kvt::MutexLock lock(&mu_);
  if (!finished_) return absl::UnknownError("still running");
  return events_.back().status;
}

std::vector<RequestEvent> RequestEvents::WaitFrom(size_t from, absl::Time deadline, bool* finished) const {
  kvt::MutexLock lock(&mu_);
  auto news = [this, from]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return events_.size() > from; };
  mu_.AwaitWithDeadline(news, deadline);
  *finished = finished_;
  if (events_.size() <= from) return {};
  return std::vector<RequestEvent>(events_.begin() + from, events_.end());
}

std::vector<RequestEvent> RequestEvents::Snapshot() const {
  kvt::MutexLock lock(&mu_);
  return events_;
}

absl::Status RequestBook::Add(std::shared_ptr<RequestRecord> record) {
  kvt::MutexLock lock(&mu_);
  DropExpiredLocked(absl::Now());
  Key key{static_cast<int>(record->side), record->request_id};
  if (live_.contains(key)) {
    return absl::AlreadyExistsError(absl::StrCat("request \"", record->request_id, "\" is already live on the ",
                                                 SideName(record->side), " side of this daemon"));
  }
  if (static_cast<int>(live_.size()) >= max_live_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "this daemon already has ", live_.size(), " live requests (kvtd --max_requests); retry when some finish"));
  }
  for (auto it = finished_.begin(); it != finished_.end(); ++it) {
    if (it->second->side == record->side && it->second->request_id == record->request_id) {
      finished_.erase(it);
      break;
    }
  }
  live_.emplace(std::move(key), std::move(record));
  return absl::OkStatus();
}

void RequestBook::Retire(const RequestRecord& record) {
  kvt::MutexLock lock(&mu_);
  auto it = live_.find(Key{static_cast<int>(record.side), record.request_id});
  if (it == live_.end() || it->second.get() != &record) return;
  if (keep_finished_ > 0) finished_.emplace_back(absl::Now(), std::move(it->second));
  live_.erase(it);
  DropExpiredLocked(absl::Now());
}

void RequestBook::DropExpiredLocked(absl::Time now) {
  while (!finished_.empty() &&
         (static_cast<int>(finished_.size()) > keep_finished_ || now - finished_.front().first > retention_)) {
    finished_.pop_front();
  }
}

std::shared_ptr<RequestRecord> RequestBook::Find(Side side, const std::string& id) const {
  kvt::MutexLock lock(&mu_);
  auto it = live_.find(Key{static_cast<int>(side), id});
  if (it != live_.end()) return it->second;
  for (auto f = finished_.rbegin(); f != finished_.rend(); ++f) {
    if (f->second->side == side && f->second->request_id == id) return f->second;
  }
  return nullptr;
}

std::vector<std::shared_ptr<RequestRecord>> RequestBook::Live() const {
  kvt::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<RequestRecord>> out;
  out.reserve(live_.size());
  for (const auto& [key, record] : live_) {
    if (!record->events.finished()) out.push_back(record);
  }
  return out;
}

}  // namespace kvt::server
