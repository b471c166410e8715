#!/usr/bin/env bash
# Every `plan` and `tune --dry-run` command of a fixed list, one output file each, for checking
# that a change leaves the models' predictions and the search spaces byte-identical:
#   tests/cli/model_outputs.sh build/tilelink DIR_BEFORE   (at the old commit)
#   tests/cli/model_outputs.sh build/tilelink DIR_AFTER    (at the new one)
#   diff -r DIR_BEFORE DIR_AFTER
# No GPU needed. Exits 1 if a command fails.
set -u
tl=${1:?usage: model_outputs.sh path/to/tilelink OUTDIR}
out=${2:?usage: model_outputs.sh path/to/tilelink OUTDIR}
mkdir -p "$out"
status=0
run() {  # run NAME args...
  local name=$1
  shift
  CUDA_VISIBLE_DEVICES= "$tl" "$@" >"$out/$name.txt" 2>&1 || { echo "FAIL: tilelink $*"; status=1; }
}
for w in 1 2 4 8; do
  run plan_ag_gemm_w$w plan ag_gemm --world $w
  run plan_gemm_rs_w$w plan gemm_rs --world $w
  run plan_sp_attention_w$w plan sp_attention --world $w --seq 16384
done
run plan_ag_gemm_w6 plan ag_gemm --world 6 --m 6144 --n 12288
run plan_gemm_rs_w6 plan gemm_rs --world 6 --m 6144 --k 12288
run plan_sp_attention_w6 plan sp_attention --world 6 --seq 12288
run plan_ag_gemm_paper2 plan ag_gemm --world 8 --m 8192 --n 14336 --k 4096
run plan_ag_gemm_paper3 plan ag_gemm --world 8 --m 8192 --n 49152 --k 12288
run plan_ag_gemm_sm plan ag_gemm --world 8 --resource sm --blocks 8 --comm-rows 256 --order ring
run plan_ag_gemm_nodes plan ag_gemm --world 16 --nodes 2
run plan_gemm_rs_paper2 plan gemm_rs --world 8 --m 8192 --n 4096 --k 14336
run plan_gemm_rs_paper3 plan gemm_rs --world 8 --m 8192 --n 12288 --k 49152
run plan_gemm_rs_push plan gemm_rs --world 8 --scatter push --granularity row
run plan_gemm_rs_ce plan gemm_rs --world 8 --scatter ce --granularity rank
run plan_gemm_rs_ctas plan gemm_rs --world 8 --reduce-blocks 12 --band 2
run plan_gemm_rs_cost plan gemm_rs --world 8 --tflops 600 --nvlink-gbps 300 --sm-copy-gbps 40
for model in llama3-8b llama3-70b llama3-405b; do
  run plan_mlp_$model plan mlp --world 8 --model $model
done
run plan_mlp_gelu plan mlp --world 8 --model llama3-70b --activation gelu --resource sm --scatter push
for model in mixtral-8x7b mixtral-8x22b qwen1.5-moe deepseek-moe; do
  run plan_moe_ag_$model plan moe_ag --world 8 --model $model
  run plan_moe_$model plan moe --world 8 --model $model
done
run plan_moe_knobs plan moe --world 8 --model mixtral-8x7b --gather-blocks 4 --combine-blocks 8 --combine-rows 64
run plan_sp_attention_zigzag plan sp_attention --world 8 --seq 32768 --layout zigzag
run plan_sp_attention_nc plan sp_attention --world 8 --seq 32768 --non-causal --resource sm
run tune_ag_gemm tune ag_gemm --dry-run --world 8 --shapes paper
run tune_ag_gemm_w3 tune ag_gemm --dry-run --world 3 --m 3072 --n 6144 --k 2048
run tune_gemm_rs tune gemm_rs --dry-run --world 8 --shapes paper
run tune_mlp tune mlp --dry-run --world 8 --model llama3-70b
for model in mixtral-8x7b qwen1.5-moe deepseek-moe; do
  run tune_moe_$model tune moe --dry-run --world 8 --model $model
done
run tune_sp_attention tune sp_attention --dry-run --world 8 --seq 32768 --layout zigzag
run tune_sp_attention_w1 tune sp_attention --dry-run --world 1 --seq 8192
exit $status
