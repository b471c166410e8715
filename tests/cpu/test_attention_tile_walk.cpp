// The SP attention kernel's walk (src/ops/attention/sm90_flash_attention_tile_walk.hpp), run on the
// CPU for every CTA of a persistent grid and checked against plain references:
//  - every pass deals every item to exactly one CTA (round-robin), and a CTA counts its items;
//  - every (item, key tile) pair that a query of the item can see is visited exactly once over
//    the passes and no other pair: no K/V is skipped that the softmax needs, none read twice;
//  - an item's tiles come in the rank's arrival order of chunks (own shard first), each chunk's
//    tiles in row order, and the producer's wait falls on a chunk's first tile;
//  - with the local pass first, pass 0 reads only the own shard and parks, pass 1 the rest and
//    resumes; a ring step reads only its shard;
//  - the items come in sections of kv heads, q heads of one query block together, the heaviest
//    causal blocks first.
// The references compute positions, visibility and arrival steps by brute force, not through the
// walk's shortcuts (the causal skip by a chunk's or tile's first key, the host's chunk table).
// The checker itself is tested on walks broken on purpose: a dropped chunk, a repeated tile, a
// tile the mask hides, chunks out of order, an item on the wrong CTA, a wrong chunk table.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <vector>

// The walk is src/ code of the attention op (not a public header); it has no CUDA dependency.
#include "ops/attention/sm90_flash_attention_tile_walk.hpp"

namespace tilelink::test {
namespace {

using detail::FlashItemScheduler;
using detail::FlashKeyTile;
using detail::FlashPass;
using detail::FlashTileCursor;
using detail::kFlashBlockM;
using detail::kFlashBlockN;

struct WalkCase {
  uint32_t world, seq_per_rank, comm_rows, q_heads, kv_heads;
  bool causal;
  SeqLayout layout;
  CommOrder order;
  AgMethod method;
  bool local_first;
  uint32_t section_kv_heads;
  int32_t only_shard;  // >= 0: a ring step over that shard's keys
  uint32_t ctas;
  uint32_t rank;
};

std::string describe(const WalkCase& c) {
  return "world " + std::to_string(c.world) + " rank " + std::to_string(c.rank) + " seq/rank " +
         std::to_string(c.seq_per_rank) + " comm_rows " + std::to_string(c.comm_rows) + " heads " +
         std::to_string(c.q_heads) + "/" + std::to_string(c.kv_heads) + (c.causal ? " causal" : " full") +
         (c.layout == SeqLayout::kZigZag ? " zigzag" : " contiguous") +
         (c.order == CommOrder::kRing ? " ring" : " mesh") + (c.method == AgMethod::kPull ? " pull" : " push") +
         (c.local_first ? " local first" : "") + " sections " + std::to_string(c.section_kv_heads) +
         " only_shard " + std::to_string(c.only_shard) + " ctas " + std::to_string(c.ctas);
}

SpAttentionPlan make_plan(const WalkCase& c) {
  SpAttentionPlan p;
  p.ag.map = RowShardMapping{c.seq_per_rank, c.comm_rows, c.world};
  p.ag.order = c.order;
  p.ag.method = c.method;
  p.q_heads = c.q_heads;
  p.kv_heads = c.kv_heads;
  p.head_dim = 64;
  p.bq = kFlashBlockM;
  p.causal = c.causal;
  p.layout = c.layout;
  p.local_first = c.local_first;
  p.section_kv_heads = c.section_kv_heads;
  p.ag.row_bytes = p.kv_row_elems() * 2;
  p.ag.pitch = p.ag.row_bytes;
  return p;
}

// The host's chunk table (SpAttention builds the same one for the kernel).
std::vector<uint32_t> chunk_table(const SpAttentionPlan& plan, uint32_t rank) {
  std::vector<uint32_t> order(plan.num_kv_chunks());
  for (uint32_t j = 0; j < order.size(); ++j) order[j] = plan.kv_chunk(rank, j);
  return order;
}

// One item as one CTA ran it in one pass, with the key tiles it visited in order.
struct ItemRun {
  uint32_t cta, pass, i, n;
  FlashPass fp;
  std::vector<FlashKeyTile> tiles;
};

// The walk of every CTA, as the kernel's producer and consumers run it.
std::vector<ItemRun> run_walk(const SpAttentionPlan& plan, const WalkCase& c, const std::vector<uint32_t>& order) {
  std::vector<ItemRun> runs;
  const FlashItemScheduler items(plan);
  for (uint32_t cta = 0; cta < c.ctas; ++cta) {
    items.for_each(cta, c.ctas, [&](uint32_t pass, uint32_t i, uint32_t n) {
      ItemRun run{cta, pass, i, n, detail::flash_pass(plan, pass), {}};
      FlashTileCursor cursor(plan, order.data(), c.rank, c.only_shard, plan.q_rows(plan.item(i).q_block), run.fp);
      FlashKeyTile kt;
      while (cursor.next(kt)) run.tiles.push_back(kt);
      runs.push_back(run);
    });
  }
  return runs;
}

// Reference: the step at which `rank` holds shard `owner` (0: its own), from the all-gather's
// schedule: a full-mesh pull fetches owner's shard at step owner - rank, the others deliver it at
// step rank - owner.
uint32_t ref_arrival_step(const SpAttentionPlan& plan, uint32_t rank, uint32_t owner) {
  const uint32_t w = plan.world();
  const bool mesh_pull = plan.ag.order == CommOrder::kFullMesh && plan.ag.method == AgMethod::kPull;
  return mesh_pull ? (owner + w - rank) % w : (rank + w - owner) % w;
}

// Reference: whether some query of local rows `q` of `rank` sees some key of gathered rows `keys`.
bool ref_visible(const SpAttentionPlan& plan, uint32_t rank, RowRange q, RowRange keys) {
  if (!plan.causal) return true;
  uint32_t last_query = 0, first_key = ~0u;
  for (uint32_t r = q.row0; r < q.row0 + q.rows; ++r) last_query = std::max(last_query, plan.position(rank, r));
  for (uint32_t g = keys.row0; g < keys.row0 + keys.rows; ++g) first_key = std::min(first_key, plan.kv_position(g));
  return first_key <= last_query;
}

// Everything wrong with a walk, in words; empty if it is right.
std::vector<std::string> check_walk(const SpAttentionPlan& plan, const WalkCase& c, const std::vector<uint32_t>& order,
                                    const std::vector<ItemRun>& runs) {
  std::vector<std::string> bad;
  const uint32_t spr = plan.seq_per_rank(), items = plan.q_heads * ((spr + kFlashBlockM - 1) / kFlashBlockM);
  const uint32_t tiles_per_shard = (spr + kFlashBlockN - 1) / kFlashBlockN;
  const uint32_t passes = c.local_first && c.world > 1 ? 2 : 1;
  auto item_name = [](uint32_t i) { return "item " + std::to_string(i); };

  // The host's table: shards in arrival order, each shard's chunks in row order.
  for (uint32_t j = 1; j < order.size(); ++j) {
    const RowRange a = plan.ag.map.rows_of_channel(order[j - 1]), b = plan.ag.map.rows_of_channel(order[j]);
    const uint32_t sa = ref_arrival_step(plan, c.rank, a.row0 / spr), sb = ref_arrival_step(plan, c.rank, b.row0 / spr);
    if (sa > sb || (sa == sb && a.row0 >= b.row0)) bad.push_back("chunk table: entry " + std::to_string(j) + " out of order");
  }
  std::vector<uint32_t> arrival(plan.num_kv_chunks(), ~0u);  // chunk -> its index in the table
  for (uint32_t j = 0; j < order.size(); ++j) arrival[order[j]] = j;

  // Items: each pass deals each item once, to CTA i % ctas; a CTA's items in order, n counting.
  std::map<std::pair<uint32_t, uint32_t>, uint32_t> dealt;  // (pass, item) -> times
  std::map<uint32_t, std::vector<const ItemRun*>> by_cta;
  for (const ItemRun& r : runs) {
    ++dealt[{r.pass, r.i}];
    by_cta[r.cta].push_back(&r);
    if (r.pass >= passes) bad.push_back(item_name(r.i) + ": pass " + std::to_string(r.pass) + " of " + std::to_string(passes));
    if (r.cta != r.i % c.ctas) bad.push_back(item_name(r.i) + " on CTA " + std::to_string(r.cta));
    const bool first = r.pass == 0, last = r.pass + 1 == passes;
    if (r.fp.resume != !first || r.fp.park != !last) bad.push_back(item_name(r.i) + ": wrong resume/park in pass " + std::to_string(r.pass));
  }
  for (uint32_t pass = 0; pass < passes; ++pass) {
    for (uint32_t i = 0; i < items; ++i) {
      const auto it = dealt.find({pass, i});
      const uint32_t times = it == dealt.end() ? 0 : it->second;
      if (times != 1) bad.push_back(item_name(i) + " dealt " + std::to_string(times) + " times in pass " + std::to_string(pass));
    }
  }
  for (const auto& [cta, list] : by_cta) {
    for (uint32_t k = 0; k < list.size(); ++k) {
      if (list[k]->n != k) bad.push_back("CTA " + std::to_string(cta) + ": its item " + std::to_string(k) + " counted " + std::to_string(list[k]->n));
      if (k > 0 && std::make_pair(list[k - 1]->pass, list[k - 1]->i) >= std::make_pair(list[k]->pass, list[k]->i)) {
        bad.push_back("CTA " + std::to_string(cta) + ": items out of order at " + item_name(list[k]->i));
      }
    }
  }

  // Tiles: exactly the visible ones of the allowed shards, once, in arrival order.
  std::map<uint32_t, std::map<std::pair<uint32_t, uint32_t>, uint32_t>> seen;  // item -> (shard, tile) -> times
  for (const ItemRun& r : runs) {
    for (uint32_t k = 0; k < r.tiles.size(); ++k) {
      const FlashKeyTile& t = r.tiles[k];
      const std::string where = item_name(r.i) + " pass " + std::to_string(r.pass) + " tile " + std::to_string(k);
      ++seen[r.i][{t.shard, t.tile}];
      const RowRange chunk = plan.ag.map.rows_of_channel(t.chunk);
      if (t.shard >= c.world || t.tile >= tiles_per_shard || t.g0 != t.shard * spr + t.tile * kFlashBlockN ||
          t.rows != std::min(kFlashBlockN, spr - t.tile * kFlashBlockN) || t.g0 < chunk.row0 ||
          t.g0 + t.rows > chunk.row0 + chunk.rows) {
        bad.push_back(where + ": inconsistent (shard " + std::to_string(t.shard) + ", tile " + std::to_string(t.tile) + ", chunk " + std::to_string(t.chunk) + ")");
      }
      if (passes == 2 && (t.shard == c.rank) != (r.pass == 0)) bad.push_back(where + ": shard " + std::to_string(t.shard) + " in the wrong pass");
      const bool opens = k == 0 || r.tiles[k - 1].chunk != t.chunk;
      if (t.first_of_chunk != opens) bad.push_back(where + ": first_of_chunk = " + std::to_string(t.first_of_chunk));
      if (k > 0 && !opens && r.tiles[k - 1].tile + 1 != t.tile) bad.push_back(where + ": tiles of a chunk out of row order");
      if (k > 0 && opens && arrival[r.tiles[k - 1].chunk] >= arrival[t.chunk]) bad.push_back(where + ": chunk " + std::to_string(t.chunk) + " out of arrival order");
    }
  }
  for (uint32_t i = 0; i < items; ++i) {
    const SpAttentionItem it = plan.item(i);
    const RowRange q = plan.q_rows(it.q_block);
    for (uint32_t s = 0; s < c.world; ++s) {
      for (uint32_t t = 0; t < tiles_per_shard; ++t) {
        const RowRange keys{s * spr + t * kFlashBlockN, std::min(kFlashBlockN, spr - t * kFlashBlockN)};
        const bool wanted = (c.only_shard < 0 || s == uint32_t(c.only_shard)) && ref_visible(plan, c.rank, q, keys);
        const auto& m = seen[i];
        const auto f = m.find({s, t});
        const uint32_t times = f == m.end() ? 0 : f->second;
        if (times != (wanted ? 1u : 0u)) {
          bad.push_back(item_name(i) + ": key tile " + std::to_string(t) + " of shard " + std::to_string(s) +
                        " visited " + std::to_string(times) + " times, expected " + (wanted ? "1" : "0"));
        }
      }
    }
  }
  return bad;
}

// Reference for SpAttentionPlan::item: sections of section_kv_heads kv heads, in each the query
// blocks (causal: the last first), in each block the section's q heads in order.
std::vector<std::pair<uint32_t, uint32_t>> ref_item_order(const SpAttentionPlan& plan) {
  std::vector<std::pair<uint32_t, uint32_t>> ref;
  const uint32_t group = plan.q_heads / plan.kv_heads;
  const uint32_t sec = plan.section_kv_heads == 0 ? plan.kv_heads : plan.section_kv_heads;
  const uint32_t blocks = (plan.seq_per_rank() + plan.bq - 1) / plan.bq;
  for (uint32_t kv0 = 0; kv0 < plan.kv_heads; kv0 += sec) {
    for (uint32_t b = 0; b < blocks; ++b) {
      const uint32_t block = plan.causal ? blocks - 1 - b : b;
      for (uint32_t h = kv0 * group; h < (kv0 + sec) * group; ++h) ref.emplace_back(h, block);
    }
  }
  return ref;
}

std::vector<WalkCase> cases() {
  std::vector<WalkCase> out;
  // (seq_per_rank, comm_rows, a CTA count seed). 257 and 129: the last query block's last query is
  // the first key of a key tile, so a causal skip that drops the diagonal shows.
  const std::vector<std::tuple<uint32_t, uint32_t, uint32_t>> shapes = {
      {128, 128, 128}, {384, 128, 128}, {384, 256, 384}, {200, 128, 128},
      {520, 256, 256}, {256, 512, 256}, {257, 128, 5},   {129, 256, 2}};
  for (uint32_t world : {1u, 2u, 3u, 4u, 5u, 7u, 8u}) {
    for (const auto& [spr, comm_rows, ctas_hint] : shapes) {
      for (bool causal : {false, true}) {
        for (SeqLayout layout : {SeqLayout::kContiguous, SeqLayout::kZigZag}) {
          if (layout == SeqLayout::kZigZag && spr % 2 != 0) continue;  // zig-zag halves a shard
          const uint32_t v = world * 7 + spr + (causal ? 3 : 0) + static_cast<uint32_t>(layout);  // varies the rest
          WalkCase c{world, spr, comm_rows, 8, 2, causal, layout,
                     v % 2 ? CommOrder::kRing : CommOrder::kFullMesh, v % 3 ? AgMethod::kPull : AgMethod::kPush,
                     v % 4 == 1, v % 5 == 0 ? 1u : 0u, -1, 1 + (ctas_hint + v) % 11, v % world};
          out.push_back(c);
          if (world > 1) {
            WalkCase lf = c;  // the local pass first, many CTAs
            lf.local_first = true;
            lf.ctas = 64;
            out.push_back(lf);
            WalkCase ring = c;  // a ring step over another rank's shard, GQA 4:1 in one-head sections
            ring.only_shard = static_cast<int32_t>((c.rank + 1) % world);
            ring.q_heads = 4;
            ring.kv_heads = 1;
            out.push_back(ring);
          }
        }
      }
    }
  }
  return out;
}

TEST(AttentionTileWalk, MatchesReference) {
  int checked = 0;
  for (const WalkCase& c : cases()) {
    const SpAttentionPlan plan = make_plan(c);
    ASSERT_EQ(check_sp_attention_plan(plan, 2), "") << describe(c);
    const std::vector<uint32_t> order = chunk_table(plan, c.rank);
    const std::vector<ItemRun> runs = run_walk(plan, c, order);
    const std::vector<std::string> bad = check_walk(plan, c, order, runs);
    EXPECT_TRUE(bad.empty()) << describe(c) << ": " << bad.size() << " problems, first: " << (bad.empty() ? "" : bad[0]);
    ++checked;
  }
  EXPECT_GT(checked, 200);
}

TEST(AttentionTileWalk, ItemsInSectionsHeaviestCausalFirst) {
  for (bool causal : {false, true}) {
    for (uint32_t sec : {0u, 1u, 2u, 4u}) {
      WalkCase c{2, 640, 128, 16, 4, causal, SeqLayout::kContiguous, CommOrder::kFullMesh, AgMethod::kPull,
                 false, sec, -1, 5, 0};
      const SpAttentionPlan plan = make_plan(c);
      const auto ref = ref_item_order(plan);
      ASSERT_EQ(ref.size(), plan.num_items());
      for (uint32_t i = 0; i < plan.num_items(); ++i) {
        const SpAttentionItem it = plan.item(i);
        EXPECT_EQ(std::make_pair(it.head, it.q_block), ref[i]) << describe(c) << ": item " << i;
      }
    }
  }
}

// The checker must catch a wrong walk: each of these breaks one thing in a right one.
TEST(AttentionTileWalk, CheckerCatchesBrokenWalks) {
  const WalkCase c{4, 512, 128, 4, 2, true, SeqLayout::kZigZag, CommOrder::kFullMesh, AgMethod::kPull,
                   false, 0, -1, 3, 1};
  const SpAttentionPlan plan = make_plan(c);
  const std::vector<uint32_t> order = chunk_table(plan, c.rank);
  const std::vector<ItemRun> right = run_walk(plan, c, order);
  ASSERT_TRUE(check_walk(plan, c, order, right).empty());

  // The item with the most chunks, and one of its chunks in the middle.
  size_t busiest = 0;
  auto chunks_of = [](const ItemRun& r) {
    std::vector<uint32_t> ch;
    for (const FlashKeyTile& t : r.tiles) {
      if (t.first_of_chunk) ch.push_back(t.chunk);
    }
    return ch;
  };
  for (size_t k = 0; k < right.size(); ++k) {
    if (chunks_of(right[k]).size() > chunks_of(right[busiest]).size()) busiest = k;
  }
  const std::vector<uint32_t> chunks = chunks_of(right[busiest]);
  ASSERT_GE(chunks.size(), 3u);

  // The checker must name the fault: some problem contains `says`.
  auto expect_caught = [&](const std::vector<ItemRun>& runs, const std::string& what, const std::string& says) {
    const std::vector<std::string> bad = check_walk(plan, c, order, runs);
    EXPECT_TRUE(std::any_of(bad.begin(), bad.end(), [&](const std::string& b) { return b.find(says) != std::string::npos; }))
        << "not caught: " << what << " (" << bad.size() << " other problems)";
  };
  {
    std::vector<ItemRun> runs = right;  // one chunk dropped
    auto& t = runs[busiest].tiles;
    t.erase(std::remove_if(t.begin(), t.end(), [&](const FlashKeyTile& k) { return k.chunk == chunks[1]; }), t.end());
    expect_caught(runs, "a dropped chunk", "visited 0 times, expected 1");
  }
  {
    std::vector<ItemRun> runs = right;  // a tile read twice
    runs[busiest].tiles.push_back(runs[busiest].tiles.back());
    expect_caught(runs, "a repeated tile", "visited 2 times, expected 1");
  }
  {
    std::vector<ItemRun> runs = right;  // a tile that no query of the item sees (the causal future)
    const size_t k = std::find_if(runs.begin(), runs.end(), [&](const ItemRun& r) { return plan.item(r.i).q_block == 0; }) - runs.begin();
    ASSERT_LT(k, runs.size());
    FlashKeyTile future{c.world - 1, 0, (c.world - 1) * plan.seq_per_rank(), kFlashBlockN, 0, true};
    future.chunk = plan.ag.map.channel_of_row(future.g0);
    runs[k].tiles.push_back(future);
    expect_caught(runs, "a tile the mask hides", "visited 1 times, expected 0");
  }
  {
    std::vector<ItemRun> runs = right;  // two chunks swapped
    auto& t = runs[busiest].tiles;
    std::stable_partition(t.begin(), t.end(), [&](const FlashKeyTile& k) { return k.chunk == chunks[2]; });
    expect_caught(runs, "chunks out of arrival order", "out of arrival order");
  }
  {
    std::vector<ItemRun> runs = right;  // an item on another CTA
    runs.back().cta = (runs.back().cta + 1) % c.ctas;
    expect_caught(runs, "an item on the wrong CTA", " on CTA ");
  }
  {
    std::vector<ItemRun> runs = right;  // an item never run
    runs.erase(runs.begin() + static_cast<long>(busiest));
    expect_caught(runs, "a missing item", "dealt 0 times");
  }
  {
    // The real cursor over a wrong chunk table (one chunk replaced by its neighbour): the walk
    // then drops one chunk and reads another twice.
    std::vector<uint32_t> wrong = order;
    wrong[order.size() / 2] = wrong[order.size() / 2 - 1];
    expect_caught(run_walk(plan, c, wrong), "a chunk table that drops a chunk", "visited 0 times, expected 1");
  }
}

}  // namespace
}  // namespace tilelink::test
