#!/usr/bin/env bash
# A private Slurm cluster on this machine: one controller and two compute nodes (n1, n2), for the
# Slurm back end's tests (CI's Slurm stage, meta_tests/test_slurm_backend.py). Real Slurm, from
# Debian's packages (`apt-get install -y slurm-wlm munge`: slurmctld, slurmd, munge); nothing faked.
#
#   bash scripts/slurm-local-cluster.sh start [DIR]   # prints `export SLURM_CONF=DIR/slurm.conf`
#   bash scripts/slurm-local-cluster.sh stop  [DIR]   # stops every daemon it started; nothing left
#   bash scripts/slurm-local-cluster.sh status [DIR]
#
# DIR (default $SLURM_LOCAL_CLUSTER_DIR, else /tmp/conformance-slurm) holds the configuration, a
# munge key and socket of its own, the daemons' state, pid files and logs; nothing is written
# under /etc. Debian's Slurm 22.05 is built with MULTIPLE_SLURMD, so both nodes run on this host
# as `slurmd -N n1` / `slurmd -N n2`, each with its own Port on NodeAddr=127.0.0.1; they share
# one hostname, and a job tells them apart by SLURMD_NODENAME / SLURM_NODEID.
# ProctrackType=proctrack/linuxproc (a step's processes are every descendant, the ranks that
# torchrun starts in sessions of their own included), TaskPlugin=task/none, no accounting.
# SLURM_LOCAL_HIDE_ON_N2=PATH starts n2 in a mount namespace of its own with an empty tmpfs over
# PATH: a node that cannot see a shared folder (the refusal's meta test).
set -euo pipefail
action=${1:-}
dir=${2:-${SLURM_LOCAL_CLUSTER_DIR:-/tmp/conformance-slurm}}
NODES=(n1 n2)

need() {
  local missing=()
  for tool in slurmctld slurmd munged sbatch srun scontrol squeue scancel sinfo; do
    command -v "$tool" > /dev/null || [ -x "/usr/sbin/$tool" ] || missing+=("$tool")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "slurm-local-cluster: missing ${missing[*]}: install Slurm and munge first" \
         "(Debian/Ubuntu, as root: apt-get update && apt-get install -y slurm-wlm munge)" >&2
    exit 3
  fi
}

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

pid_alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2> /dev/null; }

write_config() {
  local ctl_port n1_port n2_port host cpus mem
  ctl_port=$(free_port); n1_port=$(free_port); n2_port=$(free_port)
  host=$(hostname); cpus=$(nproc); mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2 ))
  cat > "$dir/slurm.conf" <<EOF
# Written by scripts/slurm-local-cluster.sh: a private cluster of two nodes on this host.
ClusterName=conformance
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctl_port
SlurmUser=$(id -un)
SlurmdUser=$(id -un)
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/linear
SchedulerType=sched/builtin
ReturnToService=2
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=300
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=n1 NodeAddr=127.0.0.1 NodeHostname=$host Port=$n1_port CPUs=$cpus RealMemory=$mem State=UNKNOWN
NodeName=n2 NodeAddr=127.0.0.1 NodeHostname=$host Port=$n2_port CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=conformance Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP
EOF
}

start_munge() {
  mkdir -p "$dir/munge"
  chmod 700 "$dir/munge"
  if [ ! -f "$dir/munge/munge.key" ]; then
    head -c 1024 /dev/urandom > "$dir/munge/munge.key"
    chmod 400 "$dir/munge/munge.key"
  fi
  # munged checks that its socket's folder is not writable by others; the clients need to reach it
  chmod 755 "$dir/munge"
  /usr/sbin/munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" --seed-file="$dir/munge/munged.seed"
}

start() {
  need
  if pid_alive "$dir/slurmctld.pid"; then
    echo "slurm-local-cluster: already running in $dir (stop it first)" >&2
    echo "export SLURM_CONF=$dir/slurm.conf"
    return 0
  fi
  mkdir -p "$dir/state" "$dir/spool/n1" "$dir/spool/n2"
  write_config
  export SLURM_CONF=$dir/slurm.conf
  start_munge
  /usr/sbin/slurmctld -c -f "$SLURM_CONF"   # -c: a new cluster, no state from an earlier one
  /usr/sbin/slurmd -f "$SLURM_CONF" -N n1
  if [ -n "${SLURM_LOCAL_HIDE_ON_N2:-}" ]; then
    mkdir -p "$SLURM_LOCAL_HIDE_ON_N2"
    unshare --mount --propagation private sh -c \
      'mount -t tmpfs conformance-hidden "$1" && exec /usr/sbin/slurmd -f "$2" -N n2' sh "$SLURM_LOCAL_HIDE_ON_N2" "$SLURM_CONF"
  else
    /usr/sbin/slurmd -f "$SLURM_CONF" -N n2
  fi
  # both nodes idle, or say what the controller says
  for _ in $(seq 1 100); do
    if [ "$(sinfo -h -N -o '%N %t' 2> /dev/null | grep -c ' idle$')" -eq ${#NODES[@]} ]; then
      echo "slurm-local-cluster: controller and nodes ${NODES[*]} up in $dir" >&2
      echo "export SLURM_CONF=$dir/slurm.conf"
      return 0
    fi
    sleep 0.1
  done
  echo "slurm-local-cluster: the nodes did not come up idle in 10 s:" >&2
  sinfo -N >&2 || true
  tail -n 20 "$dir"/*.log >&2 || true
  stop
  exit 1
}

stop_pid() {  # TERM, then KILL after 5 s; returns once the process is gone
  local file=$1 pid
  [ -f "$file" ] || return 0
  pid=$(cat "$file")
  if kill -0 "$pid" 2> /dev/null; then
    kill -TERM "$pid" 2> /dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2> /dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2> /dev/null || true
  fi
  rm -f "$file"
}

stop() {
  if [ -f "$dir/slurm.conf" ] && pid_alive "$dir/slurmctld.pid"; then
    SLURM_CONF=$dir/slurm.conf scancel --full --quiet --partition=conformance 2> /dev/null || true
  fi
  for node in "${NODES[@]}"; do stop_pid "$dir/slurmd.$node.pid"; done
  # a job step's slurmstepd outlives its slurmd: end those of this cluster's spool folders
  for pid in $(pgrep -f "slurmstepd" 2> /dev/null || true); do
    if tr '\0' ' ' < "/proc/$pid/environ" 2> /dev/null | grep -q "SLURM_CONF=$dir/slurm.conf"; then
      kill -KILL "$pid" 2> /dev/null || true
    fi
  done
  stop_pid "$dir/slurmctld.pid"
  stop_pid "$dir/munge/munged.pid"
  echo "slurm-local-cluster: stopped ($dir)" >&2
}

status() {
  local up=0
  for f in slurmctld.pid slurmd.n1.pid slurmd.n2.pid munge/munged.pid; do
    if pid_alive "$dir/$f"; then echo "running: $f ($(cat "$dir/$f"))"; up=1; else echo "not running: $f"; fi
  done
  [ "$up" -eq 1 ] && SLURM_CONF=$dir/slurm.conf sinfo -N || true
}

case "$action" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: bash scripts/slurm-local-cluster.sh start|stop|status [DIR]" >&2; exit 2 ;;
esac
