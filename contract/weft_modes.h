// The modes a config chooses by name (device, comm.backend, data.source,
// train.dtype, train.recompute, train.attention, checkpoint.async,
// parallel.strategy, parallel.zero.overlap, parallel.isp.wdp_strategy): enums
// with one table of their spellings each, parsed once where a config is read
// (the worker's YAML, the operator's TrainingJob) and compared as enums
// everywhere after. A mode with an `auto` spelling is made concrete once, by
// the worker's resolve() (config/config.h). Header-only, standard library
// only, like weft_contract.h.
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
// device: where a rank trains.
enum class ComputeDevice : uint8_t { Cpu, Cuda };
// comm.backend: the collectives' transport; auto = nccl on cuda, gloo on cpu.
enum class CommBackend : uint8_t { Auto, Gloo, Nccl };
// train.dtype: the working dtype of weights and activations; auto = bf16 on
// cuda, f32 on cpu.
enum class WorkingDtype : uint8_t { Auto, F32, Bf16 };
// data.source: the synthetic Markov chain or llm.c token shards.
enum class DataSource : uint8_t { Synthetic, Shards };
// checkpoint.async: sharded checkpoints written in the background; auto = on
// with cuda. Spelled as YAML booleans.
enum class CheckpointAsync : uint8_t { Auto, On, Off };
// train.attention: which CUDA kernels run attention. auto: cuDNN's fused flash
// attention where it can run the call (cuDNN loaded, bf16, a shape it
// supports), weft's SIMT kernels otherwise, chosen per call by the kernels;
// cudnn: cuDNN or an error, never a silent fallback; simt: weft's kernels.
// The CPU has one attention and ignores it.
enum class Attention : uint8_t { Auto, Cudnn, Simt };
// data.document_boundaries: none (attention is causal over the whole
// sequence) or eos (each eos_token ends a packed document).
enum class DocumentBoundaries : uint8_t { None, Eos };

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
template <>
struct ModeNames<ComputeDevice> {
  static constexpr std::array<std::string_view, 2> names{"cpu", "cuda"};
};
template <>
struct ModeNames<CommBackend> {
  static constexpr std::array<std::string_view, 3> names{"auto", "gloo", "nccl"};
};
template <>
struct ModeNames<WorkingDtype> {
  static constexpr std::array<std::string_view, 3> names{"auto", "f32", "bf16"};
};
template <>
struct ModeNames<DataSource> {
  static constexpr std::array<std::string_view, 2> names{"synthetic", "shards"};
};
template <>
struct ModeNames<CheckpointAsync> {
  static constexpr std::array<std::string_view, 3> names{"auto", "true", "false"};
};
template <>
struct ModeNames<Attention> {
  static constexpr std::array<std::string_view, 3> names{"auto", "cudnn", "simt"};
};
template <>
struct ModeNames<DocumentBoundaries> {
  static constexpr std::array<std::string_view, 2> names{"none", "eos"};
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
