#!/usr/bin/env bash
# A single-node Slurm cluster on this machine, from Debian's packages, for the Slurm tests
# (tests/slurm_*.rs) and `.ci/run`: `start` writes a slurm.conf for this host (the real CPU
# count and memory, a `debug` partition, proctrack/linuxproc, no cgroup plugins), creates a
# munge key when there is none, and starts munged, slurmctld and slurmd directly (no
# systemd); `stop` ends them; `status` says whether sbatch would be answered. Idempotent:
# `start` on a running cluster only checks it. Needs root (the daemons run as root here).
#
# There is no slurmdbd, so `sacct` has no accounting data: finished jobs are read with
# `squeue --states=all` while slurmctld remembers them (MinJobAge below).
set -euo pipefail

conf_dir=/etc/slurm
conf=$conf_dir/slurm.conf
state=/var/spool/slurmctld
spool=/var/spool/slurmd
logs=/var/log/slurm
runs=/run/slurm

answers() { timeout 5 sinfo -h -o '%T' >/dev/null 2>&1; }

node_ready() {
  local s
  s=$(timeout 5 sinfo -h -N -o '%T' 2>/dev/null | head -n1 || true)
  [ -n "$s" ] && [[ "$s" != *down* ]] && [[ "$s" != *unk* ]] && [[ "$s" != *not_responding* ]]
}

write_conf() {
  local host cpus mem
  host=$(hostname -s)
  cpus=$(nproc --all)
  # slurmd refuses a node with less memory than configured; leave it a margin.
  mem=$(awk '/MemTotal/ {printf "%d", $2 / 1024 * 0.95}' /proc/meminfo)
  mkdir -p "$conf_dir" "$state" "$spool" "$logs" "$runs"
  cat >"$conf.tmp" <<EOF
# Written by tune's scripts/slurm-local.sh: a one-node cluster on localhost.
ClusterName=tune-local
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CryptoType=crypto/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
StateSaveLocation=$state
SlurmdSpoolDir=$spool
SlurmctldPidFile=$runs/slurmctld.pid
SlurmdPidFile=$runs/slurmd.pid
SlurmctldLogFile=$logs/slurmctld.log
SlurmdLogFile=$logs/slurmd.log
SlurmctldPort=6817
SlurmdPort=6818
# Finished jobs stay visible to squeue --states=all for an hour (there is no sacct here).
MinJobAge=3600
KillWait=2
InactiveLimit=0
OverTimeLimit=0
SlurmctldTimeout=30
SlurmdTimeout=60
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
  if ! cmp -s "$conf.tmp" "$conf" 2>/dev/null; then
    mv "$conf.tmp" "$conf"
    return 0
  fi
  rm -f "$conf.tmp"
  return 1
}

start() {
  if [ "$(id -u)" != 0 ]; then
    echo "slurm-local: needs root to start munged, slurmctld and slurmd" >&2
    exit 1
  fi
  for b in munged slurmctld slurmd sinfo; do
    command -v "$b" >/dev/null 2>&1 || {
      echo "slurm-local: $b not found: apt-get install slurm-wlm munge" >&2
      exit 1
    }
  done
  local changed=0
  write_conf && changed=1
  if [ ! -s /etc/munge/munge.key ]; then
    mkdir -p /etc/munge
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
  fi
  chown munge:munge /etc/munge/munge.key 2>/dev/null || true
  chmod 400 /etc/munge/munge.key
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge 2>/dev/null || true
  if ! pgrep -x munged >/dev/null; then
    if id munge >/dev/null 2>&1; then
      runuser -u munge -- munged
    else
      munged --force
    fi
  fi
  if [ "$changed" = 1 ]; then
    # A new configuration: restart what runs with the old one.
    stop_daemons
  fi
  pgrep -x slurmctld >/dev/null || slurmctld
  pgrep -x slurmd >/dev/null || slurmd
  for _ in $(seq 1 60); do
    if answers && node_ready; then
      # A node left drained by an interrupted test would hold every job back.
      scontrol update nodename="$(hostname -s)" state=resume >/dev/null 2>&1 || true
      return 0
    fi
    sleep 0.5
  done
  echo "slurm-local: the cluster did not come up; see $logs/slurmctld.log and $logs/slurmd.log" >&2
  sinfo >&2 || true
  exit 1
}

stop_daemons() {
  for d in slurmd slurmctld; do
    if [ -s "$runs/$d.pid" ]; then
      kill "$(cat "$runs/$d.pid")" 2>/dev/null || true
    fi
  done
  for _ in $(seq 1 40); do
    pgrep -x slurmd >/dev/null || pgrep -x slurmctld >/dev/null || return 0
    sleep 0.25
  done
}

case "${1:-start}" in
  start) start ;;
  stop) stop_daemons ;;
  status)
    if answers && node_ready; then
      echo "slurm-local: up"
    else
      echo "slurm-local: down"
      exit 1
    fi
    ;;
  *)
    echo "usage: $0 start|stop|status" >&2
    exit 2
    ;;
esac
