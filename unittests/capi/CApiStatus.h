//===- unittests/capi/CApiStatus.h - Reading C API statuses in tests -*- C++ -*-===//
#pragma once

#include "qd-c/qd.h"

#include <string>
#include <utility>

namespace qd::capitest {

/// The message of `status` (which it frees), "" for success.
inline std::string message(qd_status status) {
  std::string text = qd_status_message(status);
  qd_status_free(status);
  return text;
}

/// The code of `status` and its message, freeing it.
inline std::pair<qd_status_code, std::string> take(qd_status status) {
  qd_status_code code = qd_status_get_code(status);
  return {code, message(status)};
}

} // namespace qd::capitest
