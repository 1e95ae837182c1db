// The modes a config chooses by name (parallel.strategy, parallel.zero.overlap,
// parallel.isp.wdp_strategy, train.recompute): enums with one table of their
// spellings each, parsed once where a config is read (the worker's YAML, the
// operator's TrainingJob) and compared as enums everywhere after. Header-only,
// standard library only, like weft_contract.h.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace weft::contract {

// parallel.strategy: bucketed all-reduce, ZeRO (sharded optimizer state), ISP
// (sequence- and weight-sharded).
enum class Strategy : uint8_t { Dp, Zero, Isp };
// parallel.isp.wdp_strategy: how ISP reduces over its weight-data-parallel group.
enum class WdpStrategy : uint8_t { Dp, Zero };
// parallel.zero.overlap: when ZeRO steps a shard against the reduce-scatters.
enum class ZeroOverlap : uint8_t { None, AfterBackward, Interleaved };
// train.recompute: pointwise recompute in backward; auto = on with cuda.
enum class Recompute : uint8_t { Auto, None, Pointwise };

// Each mode's spellings, in the enum's order.
template <class E>
struct ModeNames;
template <>
struct ModeNames<Strategy> {
  static constexpr std::array<std::string_view, 3> names{"dp", "zero", "isp"};
};
template <>
struct ModeNames<WdpStrategy> {
  static constexpr std::array<std::string_view, 2> names{"dp", "zero"};
};
template <>
struct ModeNames<ZeroOverlap> {
  static constexpr std::array<std::string_view, 3> names{"none", "after_backward", "interleaved"};
};
template <>
struct ModeNames<Recompute> {
  static constexpr std::array<std::string_view, 3> names{"auto", "none", "pointwise"};
};

template <class E>
inline constexpr bool kIsMode = false;
template <class E>
  requires requires { ModeNames<E>::names; }
inline constexpr bool kIsMode<E> = true;

template <class E>
std::optional<E> parse_mode(std::string_view text) {
  const auto& names = ModeNames<E>::names;
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == text) return static_cast<E>(i);
  return std::nullopt;
}

template <class E>
std::string_view mode_name(E mode) {
  return ModeNames<E>::names[static_cast<size_t>(mode)];
}

// "dp, zero, isp": the spellings for an error message.
template <class E>
std::string mode_choices() {
  std::string out;
  for (std::string_view n : ModeNames<E>::names) {
    if (!out.empty()) out += ", ";
    out += n;
  }
  return out;
}

// "'fsdp' is not one of dp, zero, isp": the message every reader of a config
// gives for a spelling it does not know.
template <class E>
std::string not_a_mode(std::string_view text) {
  return "'" + std::string(text) + "' is not one of " + mode_choices<E>();
}

}  // namespace weft::contract
