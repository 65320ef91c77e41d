#!/usr/bin/env bash
# Scale-out checksumming with Slurm: one array task per rank writes its
# record next to the dumps; a dependent job merges the records and compares
# the producer with the consumer.
#
#   examples/scale-out/slurm.sh /shared/kv 8 1   # KV dir, tp_size, pp_size
#
# The dumps are /shared/kv/<side>/rank-<pp>-<tp>.safetensors; records go to
# /shared/kv/records/<side>/.
set -euo pipefail
kv=${1:?usage: slurm.sh KV_DIR TP_SIZE PP_SIZE}
tp_size=${2:?}
pp_size=${3:?}
ranks=$((tp_size * pp_size))

submit_side() {
  local side=$1
  sbatch --parsable --job-name="kvaudit-$side" --array="0-$((ranks - 1))" \
    --export=ALL,KV="$kv",SIDE="$side",TP_SIZE="$tp_size" --wrap='
      pp=$((SLURM_ARRAY_TASK_ID / TP_SIZE)); tp=$((SLURM_ARRAY_TASK_ID % TP_SIZE))
      kvaudit checksum --partial -o record --out "$KV/records/$SIDE" "$KV/$SIDE/rank-$pp-$tp.safetensors"'
}

producer=$(submit_side producer)
consumer=$(submit_side consumer)
sbatch --job-name=kvaudit-compare --dependency="afterok:$producer:$consumer" \
  --export=ALL,KV="$kv" --wrap='
    kvaudit diff "$KV/records/producer" "$KV/records/consumer" -o json > "$KV/verdict.json"
    kvaudit diff "$KV/records/producer" "$KV/records/consumer"'
echo "submitted: producer array $producer, consumer array $consumer, compare after both"
