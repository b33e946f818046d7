#!/bin/sh
# cluster_local.sh — a cluster in a box: N hosts on this machine, each a
# network namespace with a UTS (hostname) and mount namespace of its own,
# joined by veth pairs to a bridge in a namespace of its own, and a real
# multi-node Slurm on them (slurmctld on node 1, slurmd on nodes 2..N, one
# munge key). The filesystem is shared by every node, as NFS would be.
#
#   cluster_local.sh up N DIR          N >= 3 nodes PREFIX1..PREFIXN; state,
#                                      logs, slurm.conf and the hosts file in
#                                      DIR; waits until sinfo shows every
#                                      compute node idle, then prints the
#                                      environment to use (SLURM_CONF=...)
#   cluster_local.sh exec NODE CMD...  runs CMD on NODE (its network, its
#                                      hostname, DIR/hosts as /etc/hosts)
#   cluster_local.sh partition NODE on|off   cut NODE from the bridge / heal
#   cluster_local.sh loss NODE PERCENT  drop PERCENT % of NODE's packets in
#                                      each direction (nftables numgen
#                                      random; 0 removes the rule)
#   cluster_local.sh kill NODE         the node dies: kill -9 of every process
#                                      on it (slurmd, its jobs) but the
#                                      namespace holder
#   cluster_local.sh down DIR          ends every process of every node,
#                                      removes the namespaces and links
#   cluster_local.sh probe             exit 0 where a box can be made here,
#                                      77 (with the reason) where not
#
# Node K is PREFIXK (PREFIX from BF_CLUSTER_PREFIX, default bfnode) at
# 198.18.0.K/24 with no route out of the subnet; the bridge lives in the
# namespace PREFIX-br. Two boxes with different prefixes do not meet (each
# has its own bridge). Needs root, iproute2 (ip netns), util-linux (unshare,
# nsenter), nftables for partition and loss, slurm-wlm and munge for up.
# Exit status: 0 done, 77 where network namespaces are refused (a container
# without CAP_SYS_ADMIN) or the programs are missing, 64 usage, 1 otherwise.
set -eu

PATH=$PATH:/usr/sbin:/sbin
export PATH
prefix=${BF_CLUSTER_PREFIX:-bfnode}
subnet=198.18.0
rundir=/run/bf-cluster

usage() {
    echo "usage: $0 up N DIR | exec NODE CMD... | partition NODE on|off |" \
        "loss NODE PERCENT | down DIR" >&2
    exit 64
}
die() {
    echo "cluster_local: $*" >&2
    exit 1
}
skip() {
    echo "cluster_local: $* (skipped)" >&2
    exit 77
}

# The holder of NODE: a process that keeps its UTS and mount namespaces.
holder() {
    [ -f "$rundir/$1" ] || die "no node $1 (no $rundir/$1; is the box up?)"
    read -r hpid _ <"$rundir/$1"
    kill -0 "$hpid" 2>/dev/null || die "node $1's namespace holder (pid $hpid) is gone"
    echo "$hpid"
}

on_node() {
    node=$1
    shift
    hpid=$(holder "$node")
    exec nsenter -t "$hpid" --net --uts --mount --wd="$PWD" "$@"
}

# Kills every process whose network namespace is ns (TERM, then KILL).
kill_ns() {
    pids=$(ip netns pids "$1" 2>/dev/null || true)
    [ -n "$pids" ] || return 0
    # shellcheck disable=SC2086
    kill $pids 2>/dev/null || true
    i=0
    while [ $i -lt 30 ]; do
        pids=$(ip netns pids "$1" 2>/dev/null || true)
        [ -n "$pids" ] || return 0
        sleep 0.1
        i=$((i + 1))
    done
    # shellcheck disable=SC2086
    kill -9 $pids 2>/dev/null || true
    i=0
    while [ $i -lt 30 ] && [ -n "$(ip netns pids "$1" 2>/dev/null || true)" ]; do
        sleep 0.1
        i=$((i + 1))
    done
}

down() {
    dir=$1
    n=0
    p=$prefix
    if [ -f "$dir/cluster.env" ]; then
        # shellcheck disable=SC1091
        . "$dir/cluster.env"
        n=$BF_CLUSTER_N
        p=$BF_CLUSTER_PREFIX
    fi
    # slurmd first (it ends its job steps), then everything else per node
    k=$n
    while [ "$k" -ge 1 ]; do
        kill_ns "$p$k"
        rm -f "$rundir/$p$k"
        ip netns del "$p$k" 2>/dev/null || true
        k=$((k - 1))
    done
    # namespaces a partial 'up' left without cluster.env
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
        case $ns in
        "$p"[0-9]*)
            if [ -f "$rundir/$ns" ]; then
                read -r _ hdir <"$rundir/$ns" || true
                [ "$hdir" = "$dir" ] || continue
                kill_ns "$ns"
                rm -f "$rundir/$ns"
                ip netns del "$ns" 2>/dev/null || true
            fi
            ;;
        esac
    done
    kill_ns "$p-br"
    ip netns del "$p-br" 2>/dev/null || true
    rmdir "$rundir" 2>/dev/null || true
    rm -f "$dir/cluster.env"
}

[ $# -ge 1 ] || usage
cmd=$1
shift
case $cmd in
exec)
    [ $# -ge 2 ] || usage
    on_node "$@"
    ;;
down)
    [ $# -eq 1 ] || usage
    [ -d "$1" ] || die "no folder $1"
    dir=$(cd "$1" && pwd)
    down "$dir"
    exit 0
    ;;
partition)
    [ $# -eq 2 ] || usage
    node=$1
    holder "$node" >/dev/null
    k=${node#"$prefix"}
    command -v nft >/dev/null 2>&1 || skip "nft not found (apt-get install nftables)"
    # cut at the bridge (the switch port goes dark; the node's own stack
    # sees silence, not errors): a bridge-family table in the bridge's
    # namespace dropping every frame from or to the node's port
    t=bfbox_cut_$k
    case $2 in
    on)
        ip netns exec "$prefix-br" nft -f - <<EOF
table bridge $t {
    chain cut { type filter hook forward priority 0; iifname "v$k" drop; oifname "v$k" drop; }
}
EOF
        ;;
    off) ip netns exec "$prefix-br" nft delete table bridge "$t" 2>/dev/null || true ;;
    *) usage ;;
    esac
    exit 0
    ;;
kill)
    [ $# -eq 1 ] || usage
    hpid=$(holder "$1")
    pids=$(ip netns pids "$1" | grep -vx "$hpid" || true)
    # shellcheck disable=SC2086
    [ -z "$pids" ] || kill -9 $pids 2>/dev/null || true
    exit 0
    ;;
loss)
    [ $# -eq 2 ] || usage
    node=$1
    pct=$2
    case $pct in
    '' | *[!0-9]*) die "loss: PERCENT must be a whole number 0..100, got '$pct'" ;;
    esac
    [ "$pct" -le 100 ] || die "loss: PERCENT must be 0..100, got $pct"
    hpid=$(holder "$node")
    command -v nft >/dev/null 2>&1 || skip "nft not found (apt-get install nftables)"
    nsenter -t "$hpid" --net nft delete table netdev bfbox_loss 2>/dev/null || true
    [ "$pct" -gt 0 ] || exit 0
    # netdev ingress and egress of the node's eth0: the drop is silent to
    # the node's TCP (a lost packet, retransmitted), not a local error
    nsenter -t "$hpid" --net nft -f - <<EOF
table netdev bfbox_loss {
    chain in { type filter hook ingress device "eth0" priority 0; numgen random mod 100 < $pct drop; }
    chain out { type filter hook egress device "eth0" priority 0; numgen random mod 100 < $pct drop; }
}
EOF
    exit 0
    ;;
probe)
    [ "$(id -u)" -eq 0 ] || skip "needs root (network namespaces)"
    for p in ip unshare nsenter nft munged slurmctld slurmd sinfo sbatch srun scontrol scancel; do
        command -v "$p" >/dev/null 2>&1 ||
            skip "$p not found (apt-get install iproute2 util-linux nftables slurm-wlm munge)"
    done
    probe=bfprobe$$
    err=$(ip netns add "$probe" 2>&1) || skip "ip netns add refused: $err"
    ok=1
    err=$(nsenter --net="/run/netns/$probe" unshare --uts --mount hostname "$probe" 2>&1) || ok=0
    ip netns del "$probe" 2>/dev/null || true
    [ $ok -eq 1 ] || skip "UTS/mount namespaces refused: $err"
    exit 0
    ;;
up) ;;
*) usage ;;
esac

# ------------------------------------------------------------------ up N DIR
[ $# -eq 2 ] || usage
n=$1
case $n in
'' | *[!0-9]*) die "N must be a number >= 3, got '$n'" ;;
esac
if [ "$n" -lt 3 ] || [ "$n" -gt 250 ]; then die "N must be 3..250, got $n"; fi
[ "$(id -u)" -eq 0 ] || skip "needs root (network namespaces)"
for p in ip unshare nsenter munged slurmctld slurmd sinfo sbatch srun scontrol; do
    command -v "$p" >/dev/null 2>&1 || skip "$p not found (apt-get install iproute2 util-linux slurm-wlm munge)"
done
mkdir -p "$2"
dir=$(cd "$2" && pwd)
chmod 0755 "$dir"

for k in $(seq 1 "$n") -br; do
    if ip netns list 2>/dev/null | awk '{print $1}' | grep -qx "$prefix$k"; then
        die "namespace $prefix$k exists (another box is up: '$0 down DIR' first, or set BF_CLUSTER_PREFIX)"
    fi
done
# probe: may this process make network namespaces at all?
if ! ip netns add "$prefix-br" 2>"$dir/netns.err"; then
    skip "ip netns add refused: $(cat "$dir/netns.err")"
fi
cat >"$dir/cluster.env" <<EOF
BF_CLUSTER_N=$n
BF_CLUSTER_PREFIX=$prefix
EOF
mkdir -p "$rundir"
# shellcheck disable=SC2154 # rc is set inside the trap
trap 'rc=$?; if [ $rc -ne 0 ]; then echo "cluster_local: up failed; tearing down" >&2; down "$dir"; fi' EXIT

# hosts file: every node by name (bind-mounted over /etc/hosts on each node)
{
    echo "127.0.0.1 localhost"
    for k in $(seq 1 "$n"); do echo "$subnet.$k $prefix$k"; done
} >"$dir/hosts"

ip -n "$prefix-br" link set lo up
ip -n "$prefix-br" link add br0 type bridge
ip -n "$prefix-br" link set br0 up
for k in $(seq 1 "$n"); do
    node=$prefix$k
    ip netns add "$node"
    ip -n "$prefix-br" link add "v$k" type veth peer name eth0 netns "$node"
    ip -n "$prefix-br" link set "v$k" master br0 up
    ip -n "$node" link set lo up
    ip -n "$node" addr add "$subnet.$k/24" dev eth0
    ip -n "$node" link set eth0 up
    # the holder keeps the node's hostname and its /etc/hosts; 'exec' joins it
    # (nsenter, not 'ip netns exec': that remounts /sys without the cgroup
    # filesystem slurmd needs)
    # DIR/tmp is each node's own local disk (Slurm's TmpFS: PMIx keeps its
    # per-step folders there, which must not be shared between nodes)
    mkdir -p "$dir/local/$node" "$dir/tmp"
    # shellcheck disable=SC2016 # the inner sh expands its own arguments
    setsid nsenter --net="/run/netns/$node" unshare --uts --mount --propagation slave \
        sh -c 'hostname "$1" && mount --bind "$2" /etc/hosts &&
            mount --bind "$3" "$4" && exec sleep 2147483647' \
        sh "$node" "$dir/hosts" "$dir/local/$node" "$dir/tmp" </dev/null >"$dir/holder-$node.log" 2>&1 &
    echo "$! $dir" >"$rundir/$node"
done
# every holder has its hostname
for k in $(seq 1 "$n"); do
    i=0
    while [ "$(nsenter -t "$(holder "$prefix$k")" --uts hostname 2>/dev/null)" != "$prefix$k" ]; do
        i=$((i + 1))
        [ $i -lt 50 ] || die "node $prefix$k did not come up (see $dir/holder-$prefix$k.log)"
        sleep 0.1
    done
done

# munge: one key for the whole box, one munged (on node 1) whose socket in
# DIR every node reaches through the shared filesystem
mkdir -p "$dir/munge" "$dir/ctld"
for k in $(seq 2 "$n"); do mkdir -p "$dir/spool/$prefix$k"; done
chmod 0700 "$dir/munge"
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
(on_node "${prefix}1" munged --force --key-file="$key" --socket="$sock" \
    --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munge/munge.seed") ||
    die "munged did not start (see $dir/munged.log)"

cpus=${BF_CLUSTER_CPUS:-2}
conf=$dir/slurm.conf
{
    cat <<EOF
ClusterName=bfbox
SlurmctldHost=${prefix}1($subnet.1)
SlurmUser=root
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
SlurmdTimeout=10
MessageTimeout=5
StateSaveLocation=$dir/ctld
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MinJobAge=600
KillWait=5
InactiveLimit=0
TmpFS=$dir/tmp
MaxArraySize=${BF_CLUSTER_MAX_ARRAY:-1001}
EOF
    for k in $(seq 2 "$n"); do
        echo "NodeName=$prefix$k NodeAddr=$subnet.$k CPUs=$cpus RealMemory=512 State=UNKNOWN"
    done
    echo "PartitionName=box Nodes=${prefix}[2-$n] Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO"
} >"$conf"
SLURM_CONF=$conf
export SLURM_CONF

(on_node "${prefix}1" slurmctld -f "$conf" -c -i) ||
    die "slurmctld did not start (see $dir/slurmctld.log)"
for k in $(seq 2 "$n"); do
    (on_node "$prefix$k" slurmd -f "$conf" -N "$prefix$k") ||
        die "slurmd on $prefix$k did not start (see $dir/slurmd-$prefix$k.log)"
done

i=0
while :; do
    idle=$( (on_node "${prefix}1" sinfo -h -N -o '%N %T') 2>/dev/null | grep -c ' idle' || true)
    [ "$idle" -eq $((n - 1)) ] && break
    i=$((i + 1))
    if [ $i -ge 300 ]; then
        (on_node "${prefix}1" sinfo -N) >&2 || true
        die "$idle of $((n - 1)) nodes idle after 60 s (see $dir/slurmctld.log, $dir/slurmd-*.log)"
    fi
    sleep 0.2
done
trap - EXIT
echo "SLURM_CONF=$conf"
echo "BF_CLUSTER_DIR=$dir"
echo "BF_CLUSTER_PREFIX=$prefix"
echo "BF_CLUSTER_NODES=$(seq -s ' ' -f "$prefix%g" 1 "$n")"
