// A process world's bootstrap inputs, without a GPU: the unique id's hex form round-trips and bad
// text is refused by name, and World::from_launcher names the first launcher variable that is
// missing or out of range before it touches CUDA or NVSHMEM.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "runtime/heap_layout.hpp"
#include "runtime/world_transport.hpp"
#include "cpu_test_util.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/runtime/world.hpp"

namespace tilelink {
namespace {

// The launcher's variables for one test, restored at its end.
class ScopedEnv {
 public:
  ScopedEnv() {
    for (const char* name : kNames) {
      const char* v = std::getenv(name);
      saved_[index(name)] = v != nullptr ? std::string(v) : kUnset;
    }
  }
  ~ScopedEnv() {
    for (const char* name : kNames) {
      const std::string& v = saved_[index(name)];
      if (v == kUnset) {
        unsetenv(name);
      } else {
        setenv(name, v.c_str(), 1);
      }
    }
  }
  void set(const char* name, const std::string& value) { setenv(name, value.c_str(), 1); }
  void unset(const char* name) { unsetenv(name); }

 private:
  static constexpr const char* kNames[] = {"RANK",        "WORLD_SIZE",  "LOCAL_RANK",
                                           "TILELINK_UNIQUE_ID", "MASTER_ADDR", "MASTER_PORT",
                                           "TILELINK_TORCHRUN_LIBRARY"};
  static constexpr size_t kCount = sizeof(kNames) / sizeof(kNames[0]);
  static constexpr const char* kUnset = "\x01unset";
  static size_t index(const char* name) {
    for (size_t i = 0; i < kCount; ++i) {
      if (std::string(kNames[i]) == name) return i;
    }
    return 0;
  }
  std::string saved_[kCount];
};

using test::refusal;

TEST(UniqueIdText, RoundTripsRandomIds) {
  std::mt19937_64 rng(std::random_device{}());
  for (int i = 0; i < 20; ++i) {
    UniqueId id;
    for (auto& b : id.bytes) b = static_cast<unsigned char>(rng());
    const std::string hex = id.to_hex();
    ASSERT_EQ(hex.size(), 2 * id.bytes.size());
    EXPECT_EQ(UniqueId::from_hex(hex, "test").bytes, id.bytes);
    std::string upper = hex;
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    EXPECT_EQ(UniqueId::from_hex(upper, "test").bytes, id.bytes);
  }
}

TEST(UniqueIdText, RefusesWrongLengthAndNonHexByName) {
  const std::string good(256, 'a');
  EXPECT_NE(refusal([&] { UniqueId::from_hex(good.substr(1), "here"); }).find("256 hex digits"), std::string::npos);
  EXPECT_NE(refusal([&] { UniqueId::from_hex(good + "0", "here"); }).find("256 hex digits"), std::string::npos);
  std::string bad = good;
  bad[100] = 'g';
  const std::string why = refusal([&] { UniqueId::from_hex(bad, "here"); });
  EXPECT_NE(why.find("here"), std::string::npos) << why;
  EXPECT_NE(why.find("unique id"), std::string::npos) << why;
}

TEST(FromLauncher, NamesTheFirstMissingOrBadVariable) {
  ScopedEnv env;
  env.unset("WORLD_SIZE");
  env.unset("RANK");
  env.unset("LOCAL_RANK");
  env.unset("TILELINK_UNIQUE_ID");
  env.unset("MASTER_ADDR");  // not under torchrun: the id must come in TILELINK_UNIQUE_ID
  const std::string unset_why = refusal([] { World::from_launcher(); });
  EXPECT_NE(unset_why.find("'WORLD_SIZE' = unset"), std::string::npos) << unset_why;
  env.set("WORLD_SIZE", "0");
  EXPECT_NE(refusal([] { World::from_launcher(); }).find("WORLD_SIZE"), std::string::npos);
  env.set("WORLD_SIZE", "4");
  EXPECT_NE(refusal([] { World::from_launcher(); }).find("RANK"), std::string::npos);
  env.set("RANK", "4");  // one past the last rank
  const std::string rank_why = refusal([] { World::from_launcher(); });
  EXPECT_NE(rank_why.find("'RANK' = 4"), std::string::npos) << rank_why;
  env.set("RANK", "3x");
  EXPECT_NE(refusal([] { World::from_launcher(); }).find("RANK"), std::string::npos);
  env.set("RANK", "3");
  EXPECT_NE(refusal([] { World::from_launcher(); }).find("LOCAL_RANK"), std::string::npos);
  env.set("LOCAL_RANK", "3");
  EXPECT_NE(refusal([] { World::from_launcher(); }).find("TILELINK_UNIQUE_ID"), std::string::npos);
  env.set("TILELINK_UNIQUE_ID", "abc");
  EXPECT_NE(refusal([] { World::from_launcher(); }).find("256 hex digits"), std::string::npos);
}

// Under torchrun (MASTER_ADDR, MASTER_PORT; no TILELINK_UNIQUE_ID) the id travels over torchrun's
// store through the plugin: a bad port is refused by name, a missing plugin says where it looked.
TEST(FromLauncher, UnderTorchrunNamesABadPortAndAMissingPlugin) {
  ScopedEnv env;
  env.set("WORLD_SIZE", "2");
  env.set("RANK", "1");  // a reader: it makes no id
  env.set("LOCAL_RANK", "1");
  env.unset("TILELINK_UNIQUE_ID");
  env.set("MASTER_ADDR", "127.0.0.1");
  env.set("MASTER_PORT", "port");
  const std::string port_why = refusal([] { World::from_launcher(); });
  EXPECT_NE(port_why.find("'MASTER_PORT' = port"), std::string::npos) << port_why;
  env.set("MASTER_PORT", "29999");
  env.set("TILELINK_TORCHRUN_LIBRARY", "/nonexistent/libtilelink_torchrun.so");
  std::string why;
  try {
    World::from_launcher();
  } catch (const std::exception& e) {
    why = e.what();
  }
  EXPECT_NE(why.find("/nonexistent/libtilelink_torchrun.so: no such file"), std::string::npos) << why;
  EXPECT_NE(why.find("tilelink launch"), std::string::npos) << why;
}

// A process world's transport, as every process decides it from every process's word: auto is
// load_store on one node and put_signal as soon as any process cannot map a peer (another node),
// load_store with an unmapped peer and requests that differ are refused naming the rank, and the
// answer is the same whichever process applies the rule.
TEST(TransportChoice, AutoFollowsTheMappingsAndRefusalsNameTheRank) {
  using detail::resolve_transport;
  using detail::transport_word;
  std::mt19937 rng(11);
  for (int world = 1; world <= 8; ++world) {
    for (int trial = 0; trial < 20; ++trial) {
      const int unmapped = std::uniform_int_distribution<int>(-1, world - 1)(rng);  // -1: one node
      const Transport asked = std::uniform_int_distribution<int>(0, 2)(rng) == 0   ? Transport::kLoadStore
                              : std::uniform_int_distribution<int>(0, 1)(rng) == 0 ? Transport::kPutSignal
                                                                                   : Transport::kAuto;
      std::vector<uint64_t> words;
      for (int p = 0; p < world; ++p) words.push_back(transport_word(asked, p != unmapped));
      for (int rank = 0; rank < world; ++rank) {
        SCOPED_TRACE("world " + std::to_string(world) + ", rank " + std::to_string(rank) + ", asked " +
                     to_string(asked) + ", unmapped " + std::to_string(unmapped));
        if (asked == Transport::kLoadStore && unmapped >= 0) {
          const std::string why = refusal([&] { resolve_transport(words, rank); });
          EXPECT_NE(why.find("rank " + std::to_string(unmapped) + " cannot map"), std::string::npos) << why;
          EXPECT_NE(why.find("put_signal or auto"), std::string::npos) << why;
          continue;
        }
        const Transport want = asked == Transport::kAuto
                                   ? (unmapped < 0 ? Transport::kLoadStore : Transport::kPutSignal)
                                   : asked;
        EXPECT_EQ(resolve_transport(words, rank), want);
      }
    }
  }
  // Requests that differ: refused in every process, naming the other rank's request.
  const std::vector<uint64_t> mixed = {transport_word(Transport::kAuto, true), transport_word(Transport::kAuto, true),
                                       transport_word(Transport::kPutSignal, true)};
  for (int rank = 0; rank < 2; ++rank) {
    const std::string why = refusal([&] { resolve_transport(mixed, rank); });
    EXPECT_NE(why.find("rank 2 for put_signal"), std::string::npos) << why;
  }
  EXPECT_NE(refusal([&] { resolve_transport(mixed, 2); }).find("rank 0 for auto"), std::string::npos);
  EXPECT_NE(refusal([&] { resolve_transport(mixed, 3); }).find("'rank' = 3"), std::string::npos);
}

// TILELINK_TRANSPORT names the request (auto among them) and a bad value is refused before any
// collective step.
TEST(TransportChoice, EnvironmentNamesTheRequest) {
  const char* saved = std::getenv("TILELINK_TRANSPORT");
  const std::string keep = saved != nullptr ? saved : "";
  unsetenv("TILELINK_TRANSPORT");
  EXPECT_EQ(detail::transport_from_env(Transport::kAuto), Transport::kAuto);
  setenv("TILELINK_TRANSPORT", "auto", 1);
  EXPECT_EQ(detail::transport_from_env(Transport::kLoadStore), Transport::kAuto);
  setenv("TILELINK_TRANSPORT", "put_signal", 1);
  EXPECT_EQ(detail::transport_from_env(Transport::kAuto), Transport::kPutSignal);
  setenv("TILELINK_TRANSPORT", "nvlink", 1);
  const std::string why = refusal([] { detail::transport_from_env(Transport::kAuto); });
  EXPECT_NE(why.find("load_store, put_signal or auto"), std::string::npos) << why;
  if (saved != nullptr) {
    setenv("TILELINK_TRANSPORT", keep.c_str(), 1);
  } else {
    unsetenv("TILELINK_TRANSPORT");
  }
}

// The heap's affine view, agreed by every process (heap_layout.hpp): NVSHMEM's rotated mappings
// (peer (me + k) mod P at k strides from the process's own segment) give each process the same
// stride; any other layout, or one process's, gives none; an unmapped peer is named in every
// process alike. Random strides and worlds.
TEST(HeapLayout, RotatedMappingsAgreeOnOneStrideAndUnmappedPeersAreNamed) {
  std::mt19937_64 rng(::testing::UnitTest::GetInstance()->random_seed());
  for (int trial = 0; trial < 50; ++trial) {
    const int n = 2 + static_cast<int>(rng() % 7);
    const size_t stride = (1 + rng() % 1000) << 20;
    auto rotated = [&](int me) {  // made-up addresses of each process's own mappings (never dereferenced)
      std::vector<char*> b(static_cast<size_t>(n));
      for (int k = 0; k < n; ++k) {
        b[static_cast<size_t>((me + k) % n)] =
            reinterpret_cast<char*>((uintptr_t(1) << 40) + uintptr_t(4096) * uintptr_t(1 + me) + uintptr_t(k) * stride);
      }
      return b;
    };
    std::vector<uint64_t> words;
    for (int me = 0; me < n; ++me) words.push_back(detail::heap_layout_word(rotated(me), me));
    for (int me = 0; me < n; ++me) {
      EXPECT_EQ(words[static_cast<size_t>(me)], stride) << "n " << n << " me " << me;
      const detail::HeapLayout l = detail::agree_heap_layout(words, words[static_cast<size_t>(me)]);
      EXPECT_EQ(l.stride, stride);
      EXPECT_EQ(l.unmapped, "");
    }
    // One process whose mapping is not rotated (two peers swapped): nobody pushes.
    const int odd = static_cast<int>(rng() % static_cast<uint64_t>(n));
    std::vector<char*> swapped = rotated(odd);
    if (n > 2) {
      std::swap(swapped[static_cast<size_t>((odd + 1) % n)], swapped[static_cast<size_t>((odd + 2) % n)]);
      std::vector<uint64_t> w2 = words;
      w2[static_cast<size_t>(odd)] = detail::heap_layout_word(swapped, odd);
      EXPECT_EQ(w2[static_cast<size_t>(odd)], 0u);
      for (int me = 0; me < n; ++me) EXPECT_EQ(detail::agree_heap_layout(w2, w2[static_cast<size_t>(me)]).stride, 0u);
    }
    // A peer this process cannot map: named, in every process.
    std::vector<char*> missing = rotated(odd);
    missing[static_cast<size_t>((odd + 1) % n)] = nullptr;
    std::vector<uint64_t> w3 = words;
    w3[static_cast<size_t>(odd)] = detail::heap_layout_word(missing, odd);
    EXPECT_EQ(w3[static_cast<size_t>(odd)], detail::kUnmappedPeer);
    for (int me = 0; me < n; ++me) {
      const detail::HeapLayout l = detail::agree_heap_layout(w3, w3[static_cast<size_t>(me)]);
      EXPECT_EQ(l.unmapped, std::to_string(odd));
      EXPECT_EQ(l.stride, 0u);
    }
  }
  // Segments below the process's own (a negative stride) are not an affine view either.
  EXPECT_EQ(detail::heap_layout_word({reinterpret_cast<char*>(0x20000), reinterpret_cast<char*>(0x10000)}, 0), 0u);
}

}  // namespace
}  // namespace tilelink
