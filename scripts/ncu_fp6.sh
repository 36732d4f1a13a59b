#!/usr/bin/env bash
# ncu summary of the MXFP6 linear for a few launch shapes (device call helper). Args: N K M, then
# "warps:split" pairs. Writes $OUT/ncu_<N>x<K>_m<M>_<w>_<s>.txt.
set -u
n=$1 k=$2 m=$3; shift 3
metrics=gpu__time_duration.sum,smsp__cycles_elapsed.avg.per_second,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_fmaheavy_cycles_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio,smsp__average_warp_latency_issue_stalled_math_pipe_throttle.ratio,smsp__average_warp_latency_issue_stalled_wait.ratio,smsp__average_warp_latency_issue_stalled_barrier.ratio,smsp__average_warp_latency_issue_stalled_short_scoreboard.ratio,smsp__average_warp_latency_issue_stalled_mio_throttle.ratio,smsp__average_warp_latency_issue_stalled_not_selected.ratio,smsp__average_warp_latency_issue_stalled_selected.ratio,smsp__average_warp_latency_issue_stalled_lg_throttle.ratio,smsp__average_warp_latency_issue_stalled_dispatch_stall.ratio,smsp__average_warp_latency_issue_stalled_membar.ratio,smsp__average_warp_latency_issue_stalled_sleeping.ratio,smsp__average_warp_latency_issue_stalled_no_instruction.ratio
for cfg in "$@"; do
  w=${cfg%:*} s=${cfg#*:}
  MXFUSE_FP6_WARPS=$w MXFUSE_FP6_SPLIT=$s ncu --clock-control none -k regex:fp6_linear -s 2 -c 1 \
    --metrics $metrics .venv/bin/python benchmarks/profile_mxfp6_linear.py "$n" "$k" "$m" \
    > "$OUT/ncu_${n}x${k}_m${m}_${w}_${s}.txt" 2>&1
  echo "== $n x $k m=$m warps=$w split=$s"
  grep -E "duration|per_second|dram__|inst_executed|issue_active|pipe_|warps_active|stalled" "$OUT/ncu_${n}x${k}_m${m}_${w}_${s}.txt" | awk '{print $1, $(NF)}'
done
