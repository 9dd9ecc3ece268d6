#!/usr/bin/env bash
# Install (apt) and start a single-node SLURM cluster on this machine, for looper's SLURM
# executor tests and CI. Idempotent: a cluster that already answers `scontrol ping` and has
# its node idle/mixed/allocated is left alone. Needs root (apt, munge key, daemons).
#
#   scripts/slurm_up.sh            install if missing, configure, start, wait until usable
#   scripts/slurm_up.sh --down     stop the daemons this script started (by pid file)
#
# Layout: slurm.conf in /etc/slurm, state in /var/spool/slurm{ctld,d}, logs in
# /var/log/slurm, pid files in /run. No accounting (sacct does not work; use scontrol).
# Memory: where the cgroup v1 memory controller is writable (this container), task/cgroup
# with ConstrainRAMSpace enforces --mem and a job over it ends JobState=OUT_OF_MEMORY. Else
# (cgroup v2 without systemd, read-only cgroups) jobacct_gather/linux + OverMemoryKill
# polls every second and kills a job over its --mem: it ends FAILED, ExitCode 0:9, and its
# output says "Exceeded job memory limit" (the executor maps both to out of memory).
# One partition, "debug" (LOOPER_SLURM_PARTITION), default and up.
set -euo pipefail

PARTITION="${LOOPER_SLURM_PARTITION:-debug}"
CONF_DIR=/etc/slurm
LOG_DIR=/var/log/slurm

log() { echo "slurm_up: $*" >&2; }

stop_pidfile() {
  local f=$1
  if [ -f "$f" ]; then
    local pid; pid=$(cat "$f" 2>/dev/null || true)
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill "$pid" 2>/dev/null || true; fi
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    rm -f "$f"
  fi
}

if [ "${1:-}" = "--down" ]; then
  stop_pidfile /run/slurmctld.pid
  stop_pidfile /run/slurmd.pid
  exit 0
fi

if [ "$(id -u)" != 0 ]; then
  log "must run as root (installs packages, writes /etc/slurm, starts munged, slurmctld, slurmd)"
  exit 2
fi

# 1. install
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
  log "installing slurm-wlm and munge with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q slurm-wlm munge >/dev/null
fi

mkdir -p "$CONF_DIR" "$LOG_DIR" /var/spool/slurmctld /var/spool/slurmd /run/munge /var/lib/munge /var/log/munge

# 2. munge (authentication between the SLURM daemons and clients)
if [ ! -s /etc/munge/munge.key ]; then
  log "creating /etc/munge/munge.key"
  mkdir -p /etc/munge
  dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
fi
chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge 2>/dev/null || true
chmod 0700 /etc/munge; chmod 0400 /etc/munge/munge.key; chmod 0755 /run/munge
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  log "starting munged"
  runuser -u munge -- /usr/sbin/munged --force 2>/dev/null || /usr/sbin/munged --force
  for _ in $(seq 1 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
fi

# 3. slurm.conf from this node's own facts
HOST=$(hostname -s)
read -r CPUS MEM < <(slurmd -C | awk '/^NodeName/ {
  for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } print v["CPUs"], v["RealMemory"] }')
MEM=$(( MEM * 92 / 100 ))  # a bit below what slurmd -C reports, so the node is never drained for it
GRES_TYPES=""; NODE_GRES=""
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  NGPU=$(nvidia-smi -L | grep -c '^GPU')
  GRES_TYPES="GresTypes=gpu"; NODE_GRES="Gres=gpu:${NGPU}"
  : > "$CONF_DIR/gres.conf"
  for i in $(seq 0 $((NGPU - 1))); do echo "NodeName=$HOST Name=gpu File=/dev/nvidia$i" >> "$CONF_DIR/gres.conf"; done
fi
if [ -w /sys/fs/cgroup/memory ] && [ ! -f /sys/fs/cgroup/cgroup.controllers ] \
   && mkdir -p /sys/fs/cgroup/memory/slurm 2>/dev/null && [ "${LOOPER_SLURM_NO_CGROUP:-}" != 1 ]; then
  TRACK="ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup
JobAcctGatherParams=NoOverMemoryKill"
  CGROUP_CONF="CgroupPlugin=cgroup/v1
CgroupMountpoint=/sys/fs/cgroup
ConstrainRAMSpace=yes
ConstrainSwapSpace=no
ConstrainCores=no
ConstrainDevices=no"
else
  TRACK="ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherParams=OverMemoryKill"
  CGROUP_CONF="CgroupPlugin=autodetect"
fi
CONF=$(cat <<CONF
# written by looper scripts/slurm_up.sh: a single-node cluster
ClusterName=looper
SlurmctldHost=$HOST
AuthType=auth/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
$TRACK
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=1
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
KillWait=5
MinJobAge=600
SlurmctldTimeout=30
SlurmdTimeout=60
InactiveLimit=0
DefMemPerCPU=1024
$GRES_TYPES
NodeName=$HOST CPUs=$CPUS RealMemory=$MEM $NODE_GRES State=UNKNOWN
PartitionName=$PARTITION Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
CONF
)
if [ ! -f "$CONF_DIR/slurm.conf" ] || [ "$(cat "$CONF_DIR/slurm.conf")" != "$CONF" ] \
   || [ "$(cat "$CONF_DIR/cgroup.conf" 2>/dev/null)" != "$CGROUP_CONF" ]; then
  log "writing $CONF_DIR/slurm.conf and cgroup.conf"
  echo "$CONF" > "$CONF_DIR/slurm.conf"
  echo "$CGROUP_CONF" > "$CONF_DIR/cgroup.conf"
  CHANGED=1
else
  CHANGED=0
fi

running() { [ -f "$1" ] && kill -0 "$(cat "$1" 2>/dev/null)" 2>/dev/null; }

if [ "$CHANGED" = 1 ]; then
  stop_pidfile /run/slurmctld.pid
  stop_pidfile /run/slurmd.pid
fi

# 4. daemons
if ! running /run/slurmctld.pid; then
  log "starting slurmctld"
  /usr/sbin/slurmctld
fi
if ! running /run/slurmd.pid; then
  log "starting slurmd"
  /usr/sbin/slurmd
fi

# 5. wait until the controller answers and the node takes jobs
for _ in $(seq 1 150); do
  if scontrol ping 2>/dev/null | grep -q "is UP"; then
    state=$(sinfo -h -n "$HOST" -o %T 2>/dev/null | head -n 1 || true)
    case "$state" in
      idle*|mixed*|allocated*|completing*) log "cluster up: node $HOST $state, partition $PARTITION"; exit 0 ;;
      down*|drain*|fail*) scontrol update NodeName="$HOST" State=RESUME >/dev/null 2>&1 || true ;;
    esac
  fi
  sleep 0.2
done
log "the cluster did not come up within 30 s; see $LOG_DIR/slurmctld.log and $LOG_DIR/slurmd.log"
tail -n 5 "$LOG_DIR/slurmctld.log" "$LOG_DIR/slurmd.log" >&2 || true
exit 1
