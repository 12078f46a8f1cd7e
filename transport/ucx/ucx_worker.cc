#include "transport/ucx/ucx_worker.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "transport/ucx/ucx_status.h"

namespace kvt::transport::internal {

absl::StatusOr<UcxWorker> CreateUcxWorker(const UcxWorkerSpec& spec) {
  ucp_config_t* raw_config = nullptr;
  KVT_RETURN_IF_ERROR(UcsToStatus(ucp_config_read(nullptr, nullptr, &raw_config), "ucp_config_read"));
  UcpConfig config(raw_config);
  if (!spec.tls.empty()) {
    KVT_RETURN_IF_ERROR(UcsToStatus(ucp_config_modify(config.get(), "TLS", spec.tls.c_str()),
                                    absl::StrCat("UCX TLS=", spec.tls)));
  }
  if (!spec.net_devices.empty()) {
    KVT_RETURN_IF_ERROR(UcsToStatus(ucp_config_modify(config.get(), "NET_DEVICES", spec.net_devices.c_str()),
                                    absl::StrCat("UCX NET_DEVICES=", spec.net_devices)));
  }

  ucp_params_t params = {};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = spec.features;
  if (spec.workers_unshared) {
    params.field_mask |= UCP_PARAM_FIELD_MT_WORKERS_SHARED;
    params.mt_workers_shared = 0;
  }
  ucp_context_h context = nullptr;
  ucs_status_t init = ucp_init(&params, config.get(), &context);
  if (init != UCS_OK && (params.features & UCP_FEATURE_WAKEUP) != 0) {
    params.features &= ~static_cast<uint64_t>(UCP_FEATURE_WAKEUP);
    init = ucp_init(&params, config.get(), &context);
  }
  KVT_RETURN_IF_ERROR(UcsToStatus(init, absl::StrCat("ucp_init with TLS=", spec.tls)));
  UcxWorker out;
  out.context.reset(context);
  out.wakeup = (params.features & UCP_FEATURE_WAKEUP) != 0;

  ucp_worker_params_t worker_params = {};
  worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  worker_params.thread_mode = spec.thread_mode;
  ucp_worker_h worker = nullptr;
  KVT_RETURN_IF_ERROR(UcsToStatus(ucp_worker_create(context, &worker_params, &worker), "ucp_worker_create"));
  out.worker.reset(worker);

  ucp_address_t* address = nullptr;
  size_t address_length = 0;
  KVT_RETURN_IF_ERROR(
      UcsToStatus(ucp_worker_get_address(worker, &address, &address_length), "ucp_worker_get_address"));
  out.address.assign(reinterpret_cast<const char*>(address), address_length);
  ucp_worker_release_address(worker, address);
  return out;
}

}  // namespace kvt::transport::internal
