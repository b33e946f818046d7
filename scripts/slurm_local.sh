#!/bin/sh
# slurm_local.sh — a throwaway single-node Slurm cluster on this machine, for
# tests: its own munge key and munged, its own slurm.conf, slurmctld and slurmd
# on localhost, everything (state, spool, logs, sockets) under one folder.
#
#   scripts/slurm_local.sh start DIR   bring it up; prints the line
#                                      SLURM_CONF=DIR/slurm.conf to use with
#                                      sbatch/squeue/scontrol/scancel
#   scripts/slurm_local.sh stop DIR    end its daemons (by their pid files)
#
# Needs slurm-wlm (slurmctld, slurmd, 22.05) and munge; run as root (SlurmUser
# is the invoking user). Ports: SLURM_LOCAL_PORT (default 6917) for slurmctld
# and the next one for slurmd; SLURM_LOCAL_MAX_ARRAY (default 1001) its
# MaxArraySize; SLURM_LOCAL_EPILOG (default none) an Epilog script slurmd
# runs after each job (the job is COMPLETING until it ends). Exit status 0 when the node is idle, 2 when a
# program is missing, 1 on any other failure (the logs under DIR say why).
set -eu

usage() {
    echo "usage: $0 start|stop DIR" >&2
    exit 64
}
[ $# -eq 2 ] || usage
cmd=$1
dir=$2

stop_pidfile() {
    if [ -f "$1" ]; then
        pid=$(cat "$1" 2>/dev/null || true)
        if [ -n "$pid" ] && kill "$pid" 2>/dev/null; then
            i=0
            while kill -0 "$pid" 2>/dev/null && [ $i -lt 50 ]; do
                sleep 0.1
                i=$((i + 1))
            done
            kill -9 "$pid" 2>/dev/null || true
        fi
        rm -f "$1"
    fi
}

if [ "$cmd" = stop ]; then
    # slurmd first: it ends the job steps it still runs
    stop_pidfile "$dir/slurmd.pid"
    stop_pidfile "$dir/slurmctld.pid"
    stop_pidfile "$dir/munged.pid"
    exit 0
fi
[ "$cmd" = start ] || usage

for p in munged slurmctld slurmd sinfo sbatch; do
    if ! command -v "$p" >/dev/null 2>&1 && ! [ -x "/usr/sbin/$p" ]; then
        echo "slurm_local: $p not found (apt-get install slurm-wlm munge)" >&2
        exit 2
    fi
done
PATH=$PATH:/usr/sbin
export PATH

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
chmod 0700 "$dir"
mkdir -p "$dir/ctld" "$dir/spool" "$dir/munge"
chmod 0700 "$dir/munge"
user=$(id -un)
host=$(hostname -s)
cpus=$(nproc)
port=${SLURM_LOCAL_PORT:-6917}

# munge: a private key and socket, so nothing on the machine is touched
key=$dir/munge/munge.key
if ! [ -s "$key" ]; then
    if command -v mungekey >/dev/null 2>&1; then
        mungekey -c -f -k "$key" >/dev/null
    else
        dd if=/dev/urandom of="$key" bs=1024 count=1 2>/dev/null
    fi
fi
chmod 0600 "$key"
sock=$dir/munge/munge.sock
stop_pidfile "$dir/munged.pid"
munged --force --key-file="$key" --socket="$sock" --pid-file="$dir/munged.pid" \
    --log-file="$dir/munged.log" --seed-file="$dir/munge/munge.seed" ||
    { echo "slurm_local: munged did not start (see $dir/munged.log)" >&2; exit 1; }

conf=$dir/slurm.conf
cat >"$conf" <<EOF
ClusterName=bflocal
SlurmctldHost=localhost
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=$user
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$sock
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
ReturnToService=2
StateSaveLocation=$dir/ctld
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MinJobAge=600
MaxArraySize=${SLURM_LOCAL_MAX_ARRAY:-1001}
MaxJobCount=${SLURM_LOCAL_MAX_JOBS:-10000}
KillWait=5
InactiveLimit=0
${SLURM_LOCAL_EPILOG:+Epilog=$SLURM_LOCAL_EPILOG}
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=256 State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
SLURM_CONF=$conf
export SLURM_CONF

stop_pidfile "$dir/slurmd.pid"
stop_pidfile "$dir/slurmctld.pid"
# -i: ignore state a previous run left; -c: start clean
slurmctld -f "$conf" -c -i ||
    { echo "slurm_local: slurmctld did not start (see $dir/slurmctld.log)" >&2; exit 1; }
slurmd -f "$conf" -N "$host" ||
    { echo "slurm_local: slurmd did not start (see $dir/slurmd.log)" >&2; exit 1; }

i=0
while :; do
    state=$(sinfo -h -N -n "$host" -o %T 2>/dev/null || true)
    case $state in
    idle*) break ;;
    esac
    i=$((i + 1))
    if [ $i -ge 150 ]; then
        echo "slurm_local: node $host is '${state:-unknown}' after 30 s, not idle" \
            "(see $dir/slurmctld.log and $dir/slurmd.log)" >&2
        exit 1
    fi
    sleep 0.2
done
echo "SLURM_CONF=$conf"
