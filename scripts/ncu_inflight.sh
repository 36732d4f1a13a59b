#!/usr/bin/env bash
# ncu sections (memory workload, warp states, scheduler) of the MXFP6 linear with one and two row
# tiles per ring item, and of the read floor with as many and with more bytes in flight per SM
# (device call helper). Args: N K (M = 1). Writes $OUT/ncu_inflight_*.txt; prints the key lines.
set -u
n=$1 k=$2
sms=$(.venv/bin/python -c "import torch; print(torch.cuda.get_device_properties(0).multi_processor_count)")
sections="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats"
sections+=" --section SchedulerStats --section Occupancy"
keys='Duration|DRAM Throughput|Memory Throughput|Mem Busy|Max Bandwidth|L1/TEX Hit|L2 Hit'
keys+='|Active Warps Per Scheduler|Eligible Warps|Issued Warp|No Eligible|Warp Cycles Per Issued'
keys+='|Achieved Occupancy|Stall'
run() {  # name, ncu args...
  local name=$1; shift
  ncu --clock-control none "$@" > "$OUT/ncu_inflight_${name}.txt" 2>&1
  echo "== $name"
  grep -E "$keys" "$OUT/ncu_inflight_${name}.txt" | sed 's/  */ /g' | head -30
}
for irt in 1 2; do
  MXFUSE_FP6_ITEM_RT=$irt run "fp6_${n}x${k}_item_rt${irt}" -k regex:fp6_linear -s 2 -c 1 $sections \
    .venv/bin/python benchmarks/profile_mxfp6_linear.py "$n" "$k" 1
done
for gu in "1 4" "8 4" "2 8"; do
  set -- $gu
  g=$(( $1 * sms )) u=$2
  for via in ld cp; do
    run "floor_${n}x${k}_${via}_g${g}_u${u}" -k regex:read_stream -s 2 -c 1 $sections \
      .venv/bin/python benchmarks/floor/profile_floor.py "$n" "$k" "$g" "$u" "$via"
  done
done
# Extra counters, separately: a metric this ncu does not know fails only this run.
extra=gpu__time_duration.sum,smsp__inst_executed_op_ldgsts.sum
extra+=,l1tex__m_xbar2l1tex_read_bytes.sum.per_second,lts__t_sectors_srcunit_tex_op_read.sum
extra+=,smsp__average_warp_latency_issue_stalled_lg_throttle.ratio
extra+=,smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio
for irt in 1 2; do
  MXFUSE_FP6_ITEM_RT=$irt ncu --clock-control none -k regex:fp6_linear -s 2 -c 1 \
    --metrics "$extra" \
    .venv/bin/python benchmarks/profile_mxfp6_linear.py "$n" "$k" 1 > "$OUT/ncu_inflight_fp6_metrics_rt${irt}.txt" 2>&1
  echo "== metrics item_rt=$irt"; grep -E "__" "$OUT/ncu_inflight_fp6_metrics_rt${irt}.txt" | sed 's/  */ /g' | tail -8
done
