// The fuzzer's design space: random draws of every op's Arguments and Config, deterministic from a
// 64-bit seed. Host-only C++ (no CUDA code): the GPU fuzzer (tests/fuzz/fuzz_main.cpp) runs the
// draws through the ops, the CPU suite (tests/cpu/test_fuzz_protocols.cpp) through the protocols
// on the CPU executor.
//
// One draw_<op>(Rng&, const Space&) per op returns a plain struct (fuzz_draws.hpp): the world size
// and the op's Arguments but their buffers -- the shape, the offsets into the symmetric buffers and
// the op's whole Config. Every knob takes, with some
// probability, its automatic value (0 / ""), its extremes (one row per communication tile, one
// block, the largest count the budget allows) and values the op must refuse (comm_rows 0 for a
// collective, threads 33, blocks past the SM budget, an unknown kernel name, K below the minimum
// or not a multiple of 8, M < world, M off the tile grid, a misaligned offset, q_heads not a
// multiple of kv_heads...). A draw is therefore either refused by can_implement, with a reason, or
// must run and match a reference: the harnesses decide which, never the generator. Enum knobs take
// their declared values, and values past them only where can_implement promises to check them
// (the MLP / MoE activation, the GEMM+RS scatter). Shapes stay small (Space): the point is
// coverage, and small shapes keep their relations to the tiles (one tile, a tile and a row, a
// tile row spanning shards).
//
// Seeds. A run has a seed S; draw i of op `op` uses draw_seed(S, op, i), printed with a failure,
// so a failing draw replays alone. Streams are identical across standard libraries: mt19937_64's
// output is fixed by the standard, and the uniform draws are written in fuzz_knobs.hpp (rejection
// sampling) instead of std::uniform_int_distribution, whose algorithm is not.
#pragma once

#include "fuzz_describe.hpp"
#include "fuzz_draws.hpp"
#include "fuzz_knobs.hpp"
