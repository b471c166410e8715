// What a waiter needs to report a timeout: where to write the record (core/error_record.hpp),
// and after how long.
#pragma once

#include <cstdint>

#include "tilelink/core/error_record.hpp"

namespace tilelink {

class StreamWaitObserver;  // primitives/host.hpp

// `claim` is a word in device memory (atomics on it are cheap and always supported); `record` is
// in mapped pinned host memory so that it survives the trap that follows.
struct ErrorChannelView {
  uint32_t* claim = nullptr;      // 0 = no error claimed yet
  ErrorRecord* record = nullptr;  // may be null: a timeout then only traps
  uint64_t timeout_ns = 0;        // 0 = wait forever (never the default)
  // Host only: told of every rank_wait, which cannot bound itself (the World's error channel);
  // null: nobody watches.
  StreamWaitObserver* stream_waits = nullptr;
};

}  // namespace tilelink
