#!/usr/bin/env bash
# Scale-out checksumming with Slurm: one array task per rank writes its
# record next to the dumps; a job that starts only after every task of both
# arrays succeeded merges the records and compares the producer with the
# consumer.
#
#   examples/scale-out/slurm.sh KV_DIR PRODUCER_TP PRODUCER_PP CONSUMER_TP CONSUMER_PP
#   examples/scale-out/slurm.sh /shared/kv 4 1 8 1
#
# The dumps are KV_DIR/<side>/rank-<pp>-<tp>.safetensors; records go to
# KV_DIR/records/<side>/ (removed first: records of an earlier run are never
# merged into this one). kvaudit must be on PATH on every node (one static
# binary on the shared file system, `CGO_ENABLED=0 go build -o kvaudit
# ./cmd/kvaudit` in a clone, or the release archive installed). The compare
# job's output (slurm-<jobid>.out) is the verdict table and its exit status
# the verdict: 0 verified, 1 mismatch, 2 unverified, 3 invalid input
# (`sacct -j ID` or `scontrol show job ID`: FAILED with ExitCode 1:0 is a
# mismatch). If a checksum task fails, the compare job never starts
# (afterok): Slurm cancels it (--kill-on-invalid-dep, reason
# DependencyNeverSatisfied) rather than leaving it queued for ever; the
# failed task's slurm-<array>_<task>.out says why.
set -euo pipefail
usage="usage: slurm.sh KV_DIR PRODUCER_TP PRODUCER_PP CONSUMER_TP CONSUMER_PP"
kv=${1:?$usage}
producer_tp=${2:?$usage}
producer_pp=${3:?$usage}
consumer_tp=${4:?$usage}
consumer_pp=${5:?$usage}

rm -rf "$kv/records/producer" "$kv/records/consumer"
mkdir -p "$kv/records/producer" "$kv/records/consumer"

# submit_side SIDE TP_SIZE PP_SIZE: an array of one task per rank; prints
# the array's job id (--parsable prints ID;CLUSTER on a multi-cluster
# system: the cluster is cut off, as --dependency wants the id alone).
submit_side() {
  local side=$1 tp_size=$2 pp_size=$3 id
  id=$(sbatch --parsable --job-name="kvaudit-$side" --array="0-$((tp_size * pp_size - 1))" \
    --export=ALL,KV="$kv",SIDE="$side",TP_SIZE="$tp_size" --wrap='
      pp=$((SLURM_ARRAY_TASK_ID / TP_SIZE)); tp=$((SLURM_ARRAY_TASK_ID % TP_SIZE))
      exec kvaudit checksum --partial -o record --out "$KV/records/$SIDE" "$KV/$SIDE/rank-$pp-$tp.safetensors"')
  echo "${id%%;*}"
}

producer=$(submit_side producer "$producer_tp" "$producer_pp")
consumer=$(submit_side consumer "$consumer_tp" "$consumer_pp")
compare=$(sbatch --parsable --job-name=kvaudit-compare --dependency="afterok:$producer:$consumer" \
  --kill-on-invalid-dep=yes --export=ALL,KV="$kv" --wrap='
    exec kvaudit diff "$KV/records/producer" "$KV/records/consumer"')
compare=${compare%%;*}
echo "submitted: producer array $producer, consumer array $consumer, compare $compare after both"
