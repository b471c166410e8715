// Sequence-parallel attention (forward): the all-gather of K/V overlapped with a flash-attention
// forward that consumes K/V chunks as they arrive.
//
// Sharding. A sequence of S = world * seq_per_rank tokens; every rank holds the Q, K and V rows of
// seq_per_rank of them (SeqLayout):
//   kContiguous  rank r holds tokens [r S/P, (r + 1) S/P);
//   kZigZag      the sequence is cut into 2P pieces of seq_per_rank / 2 tokens and rank r holds
//                pieces r and 2P - 1 - r, so that under a causal mask every rank does the same work.
// Local row i of rank r is token position(r, i). Within a rank, positions grow with i: the causal
// skip below relies on it.
//
// K/V rows. One row per token holds both: [K (kv_heads x head_dim) | V (kv_heads x head_dim)], so
// one all-gather (comm/all_gather.hpp, `ag`, rows = tokens) moves both, one channel guards both
// halves of a chunk, and a kernel reads K and V as two strided views of the same rows. Gathered
// row r * seq_per_rank + i is local row i of rank r: rank-major, which in zig-zag is not sequence
// order -- the mask goes by kv_position().
//
// Channels. A K/V chunk is one communication tile of the all-gather: comm_rows tokens of one
// source rank (the last of a shard shorter), one channel of its slice. The attention adds no
// channel of its own; the slice is AllGatherPlan's, ag.num_channels() channels.
//
// Attention blocks. A work item is one q head x one block of bq local query rows. Its chunks run
// in arrival order: its own shard first, then the shard the all-gather delivers at each later
// step (kv_chunk, the inverse of arrival_step). Under a causal mask a chunk whose every key comes
// after every query of the block is skipped without a wait (chunk_needed); before any other chunk
// is read, the block waits on exactly that chunk's channel. The online softmax keeps, per query
// row, a running max m, sum l and accumulator o in fp32, rescaled per chunk as flash attention
// rescales per key tile, and ends with O = o / l and LSE = m + log(l) (natural log).
//
// Memory order. A chunk's channel is notified with release once its rows are in this rank's
// buffer: the pull's own notify after its copy, the push's peer notify after its stores, and for
// the rank's own shard block 0's notify at the start of the call (the rows were written before the
// launch). consumer_tile_wait acquires it, so the K/V loads after the wait see the rows; on the
// GPU the wait ends in a block barrier, which also keeps the loads from being hoisted above it.
// Q is local and O, LSE are written by the item's block only. Reuse across calls is the
// all-gather's, as for AG+GEMM: the pull's exit barrier keeps a rank's own rows in place until
// every peer has read them; the push's entry barrier keeps peers from writing a rank's buffer
// before that rank has entered the next call.
#pragma once

#include <cstdint>
#include <string>

#include "tilelink/comm/all_gather.hpp"

namespace tilelink {

enum class SeqLayout : uint32_t {
  kContiguous = 0,
  kZigZag = 1,  // seq_per_rank must be even
};

inline const char* to_string(SeqLayout v) { return v == SeqLayout::kZigZag ? "zigzag" : "contiguous"; }

// The most query rows per work item: sp_attention_block keeps each one's m and l in a local array
// (a kernel keeps them in registers). Flash attention's query tiles are 64-192 rows.
constexpr uint32_t kSpAttentionMaxBq = 256;

// Where a token lives: local row `row` of rank `rank`.
struct TokenHome {
  uint32_t rank;
  uint32_t row;
};

struct SpAttentionItem {
  uint32_t head;     // q head
  uint32_t q_block;  // local query rows [q_block * bq, ...)
};

// The rank whose shard the all-gather delivers to `rank` at `step` (0: `rank` itself); the inverse
// of arrival_step over whole shards.
TL_HOST_DEVICE uint32_t shard_at_step(const AllGatherPlan& ag, uint32_t rank, uint32_t step) {
  for (uint32_t owner = 0; owner < ag.world(); ++owner) {
    if (arrival_step(ag, rank, owner * ag.map.rows_per_rank, 1) == step) return owner;
  }
  return rank;  // not reached: every step delivers exactly one shard
}

struct SpAttentionPlan {
  AllGatherPlan ag;  // K/V rows: map.rows_per_rank = seq_per_rank, map.comm_rows tokens per chunk
  uint32_t q_heads = 0;
  uint32_t kv_heads = 0;  // GQA: q head h reads kv head h / (q_heads / kv_heads)
  uint32_t head_dim = 0;
  uint32_t bq = 0;        // query rows per work item
  bool causal = false;
  SeqLayout layout = SeqLayout::kContiguous;
  // The local pass first: every item of a block folds its own shard (present at the call's start)
  // before any item folds a remote chunk; (m, l) wait in a scratch buffer between the two passes
  // and o in O. Without it each item folds all its chunks in turn, and the first items of every
  // block wait for the all-gather.
  bool local_first = false;
  // The items run in sections of `section_kv_heads` kv heads (a divisor of kv_heads; 0: all of
  // them), every item of a section before the next: the CTAs running at once then read the K/V of
  // few heads, which stays in L2 while they stream it (FA3's L2 swizzle). 0 (one section) keeps
  // every head's first query blocks together instead.
  uint32_t section_kv_heads = 0;

  TL_HOST_DEVICE uint32_t world() const { return ag.world(); }
  TL_HOST_DEVICE uint32_t seq_per_rank() const { return ag.map.rows_per_rank; }
  TL_HOST_DEVICE uint32_t seq_len() const { return ag.map.total_rows(); }
  TL_HOST_DEVICE uint32_t kv_head(uint32_t q_head) const { return q_head / (q_heads / kv_heads); }
  // Elements of one K/V row, and where K and V of a kv head start in it.
  TL_HOST_DEVICE uint32_t kv_row_elems() const { return 2 * kv_heads * head_dim; }
  TL_HOST_DEVICE uint32_t k_offset(uint32_t kv_h) const { return kv_h * head_dim; }
  TL_HOST_DEVICE uint32_t v_offset(uint32_t kv_h) const { return (kv_heads + kv_h) * head_dim; }
  // Gathered row g of float K/V rows (the CPU protocol's element type).
  TL_HOST_DEVICE const float* kv_row(const void* kv, uint32_t g) const {
    return reinterpret_cast<const float*>(static_cast<const char*>(kv) + uint64_t(g) * ag.pitch);
  }

  // Global token position of local row `row` of rank `rank`, and its inverse.
  TL_HOST_DEVICE uint32_t position(uint32_t rank, uint32_t row) const {
    if (layout == SeqLayout::kContiguous) return rank * seq_per_rank() + row;
    const uint32_t half = seq_per_rank() / 2;
    return row < half ? rank * half + row : (2 * world() - 1 - rank) * half + (row - half);
  }
  TL_HOST_DEVICE TokenHome home(uint32_t pos) const {
    if (layout == SeqLayout::kContiguous) return {pos / seq_per_rank(), pos % seq_per_rank()};
    const uint32_t half = seq_per_rank() / 2;
    const uint32_t piece = pos / half;
    return piece < world() ? TokenHome{piece, pos % half} : TokenHome{2 * world() - 1 - piece, half + pos % half};
  }
  // Position of gathered K/V row g.
  TL_HOST_DEVICE uint32_t kv_position(uint32_t g) const {
    return position(g / seq_per_rank(), g % seq_per_rank());
  }

  TL_HOST_DEVICE uint32_t q_blocks() const { return (seq_per_rank() + bq - 1) / bq; }
  TL_HOST_DEVICE uint32_t num_items() const { return q_heads * q_blocks(); }
  // Sections of section_kv_heads kv heads one after the other; within a section the items of one
  // query block are adjacent, so the q heads of one kv head run together (GQA: they share its K/V
  // tiles). Under the causal mask the last query blocks, which see the most keys, come first.
  TL_HOST_DEVICE uint32_t section_q_heads() const {
    return (section_kv_heads == 0 ? kv_heads : section_kv_heads) * (q_heads / kv_heads);
  }
  TL_HOST_DEVICE SpAttentionItem item(uint32_t i) const {
    const uint32_t heads = section_q_heads(), per_section = heads * q_blocks();
    const uint32_t section = i / per_section, r = i % per_section;
    const uint32_t block = r / heads;
    return {section * heads + r % heads, causal ? q_blocks() - 1 - block : block};
  }
  TL_HOST_DEVICE RowRange q_rows(uint32_t q_block) const {
    const uint32_t row0 = q_block * bq;
    return {row0, seq_per_rank() - row0 < bq ? seq_per_rank() - row0 : bq};
  }

  // The j-th K/V chunk (an all-gather mapping channel; 0 <= j < num_kv_chunks) of `rank`'s order:
  // shards in the order they arrive (own first), chunks of a shard in row order.
  TL_HOST_DEVICE uint32_t num_kv_chunks() const { return ag.map.num_channels(); }
  TL_HOST_DEVICE uint32_t kv_chunk(uint32_t rank, uint32_t j) const {
    const uint32_t cpr = ag.map.chunks_per_rank();
    return ag.map.channel(shard_at_step(ag, rank, j / cpr), j % cpr);
  }
  // Whether a query block (local rows `q` of `rank`) reads chunk `ch` at all: always without a
  // mask; with the causal mask, unless the chunk's first key (positions grow with rows within a
  // shard) comes after the block's last query.
  TL_HOST_DEVICE bool chunk_needed(uint32_t rank, RowRange q, uint32_t ch) const {
    if (!causal) return true;
    return kv_position(ag.map.rows_of_channel(ch).row0) <= position(rank, q.row0 + q.rows - 1);
  }
};

// "" if the plan is one the protocol runs, else what is wrong (which field, its value, what was
// expected). elem_bytes: bytes of one K/V element.
inline std::string check_sp_attention_plan(const SpAttentionPlan& p, uint32_t elem_bytes) {
  auto bad = [](const char* field, uint64_t value, const std::string& expected) {
    return std::string("SpAttentionPlan: '") + field + "' = " + std::to_string(value) + ": expected " + expected;
  };
  if (p.world() == 0) return bad("ag.map.world", p.world(), ">= 1");
  if (p.seq_per_rank() == 0) return bad("ag.map.rows_per_rank", 0, ">= 1 token per rank");
  if (p.ag.map.comm_rows == 0) return bad("ag.map.comm_rows", 0, ">= 1");
  if (p.layout == SeqLayout::kZigZag && p.seq_per_rank() % 2 != 0) {
    return bad("ag.map.rows_per_rank", p.seq_per_rank(), "an even number of tokens per rank for the zig-zag layout");
  }
  if (p.kv_heads == 0 || p.q_heads == 0 || p.q_heads % p.kv_heads != 0) {
    return bad("q_heads", p.q_heads, "a positive multiple of kv_heads (" + std::to_string(p.kv_heads) + ")");
  }
  if (p.section_kv_heads != 0 && p.kv_heads % p.section_kv_heads != 0) {
    return bad("section_kv_heads", p.section_kv_heads, "0 (all) or a divisor of kv_heads (" + std::to_string(p.kv_heads) + ")");
  }
  if (p.head_dim == 0) return bad("head_dim", 0, ">= 1");
  if (p.bq == 0 || p.bq > kSpAttentionMaxBq) return bad("bq", p.bq, "1 to " + std::to_string(kSpAttentionMaxBq));
  if (uint64_t(p.ag.row_bytes) != uint64_t(p.kv_row_elems()) * elem_bytes) {
    return bad("ag.row_bytes", p.ag.row_bytes,
               "2 * kv_heads * head_dim * elem_bytes = " + std::to_string(uint64_t(p.kv_row_elems()) * elem_bytes));
  }
  if (p.ag.row_bytes % kTileAlignment != 0) {
    return bad("ag.row_bytes", p.ag.row_bytes, "a multiple of " + std::to_string(kTileAlignment));
  }
  if (p.ag.pitch < p.ag.row_bytes || p.ag.pitch % kTileAlignment != 0) {
    return bad("ag.pitch", p.ag.pitch, ">= ag.row_bytes and a multiple of " + std::to_string(kTileAlignment));
  }
  return "";
}

}  // namespace tilelink
