#!/usr/bin/env bash
# A real two-node Slurm cluster on this one machine, to try the Slurm launcher (and for the tests):
# munge, one slurmctld and two slurmd started as nodes n1 and n2 (both 127.0.0.1, their own ports), in one
# partition `local`. Needs root and Debian's slurm-wlm + munge (`install` gets them with apt).
#
#   sudo infra/slurm/local-cluster.sh install   # apt-get install slurm-wlm munge (once)
#   sudo infra/slurm/local-cluster.sh start     # prints SLURM_CONF=... for sbatch/srun/squeue
#   sudo infra/slurm/local-cluster.sh stop
#
# Then: export SLURM_CONF=...; dlrmflow train --launcher slurm --launcher.nodes 2 --launcher.nproc-per-node 1
#       --launcher.gpus-per-node 0 --launcher.partition local ...
# The node names must resolve (the launcher uses them as rendezvous hosts): `start` adds n1 and n2 to
# /etc/hosts. State lives in $DLRMFLOW_SLURM_DIR (default /tmp/dlrmflow-slurm).
set -euo pipefail

DIR=${DLRMFLOW_SLURM_DIR:-/tmp/dlrmflow-slurm}
MUNGED_OURS=/run/munge/dlrmflow-started   # munged was started by this script (any DIR's cluster)
CONF=$DIR/slurm.conf
NODES=(n1 n2)
CTLD_PORT=${DLRMFLOW_SLURM_PORT:-16817}
CPUS=$(nproc)
MEM_MB=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2 ))

die() { echo "local-cluster: $*" >&2; exit 1; }

install() {
    command -v apt-get >/dev/null || die "apt-get not found: install slurm-wlm and munge with your package manager"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
}

write_conf() {
    mkdir -p "$DIR/ctld" "$DIR/log"
    cat > "$CONF" <<EOF
ClusterName=dlrmflow
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
StateSaveLocation=$DIR/ctld
SlurmdSpoolDir=$DIR/spool-%n
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
SlurmdTimeout=30
KillWait=5
InactiveLimit=0
# sbatch --wait polls every 2 s only while that is under MinJobAge/2 (else 8 s, then 32 s): a finished job is
# seen within 2 s here, its record kept 4 s
MinJobAge=4
EOF
    local port=$((CTLD_PORT + 1))
    for n in "${NODES[@]}"; do
        echo "NodeName=$n NodeAddr=127.0.0.1 NodeHostname=$n Port=$port CPUs=$CPUS RealMemory=$MEM_MB State=UNKNOWN" >> "$CONF"
        port=$((port + 1))
    done
    echo "PartitionName=local Nodes=$(IFS=,; echo "${NODES[*]}") Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4" >> "$CONF"
}

start() {
    [ "$(id -u)" = 0 ] || die "needs root (slurmd runs jobs as their users)"
    command -v slurmctld >/dev/null && command -v munged >/dev/null || die "slurm-wlm and munge are not installed: run '$0 install'"
    stop >/dev/null 2>&1 || true
    for n in "${NODES[@]}"; do
        grep -qE "^127\.0\.0\.1\s.*\b$n\b" /etc/hosts || echo "127.0.0.1 $n" >> /etc/hosts
    done
    if [ ! -s /etc/munge/munge.key ]; then
        dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
        chmod 400 /etc/munge/munge.key
    fi
    chown -R munge:munge /etc/munge 2>/dev/null || true
    mkdir -p /run/munge && chown munge:munge /run/munge 2>/dev/null || true
    # a munged started here is stopped with the last cluster of this script (stop_munged); one that ran before stays
    pgrep -x munged >/dev/null || { { runuser -u munge -- munged 2>/dev/null || munged --force; } && touch "$MUNGED_OURS"; }
    write_conf
    export SLURM_CONF=$CONF
    slurmctld -f "$CONF"
    for n in "${NODES[@]}"; do slurmd -f "$CONF" -N "$n"; done
    for _ in $(seq 60); do
        if [ "$(sinfo -h -p local -t idle -o '%D' 2>/dev/null)" = "${#NODES[@]}" ]; then
            echo "SLURM_CONF=$CONF"
            return 0
        fi
        sleep 0.5
    done
    sinfo >&2 || true
    die "the nodes did not come up idle in 30 s: see $DIR/log/"
}

stop() {
    export SLURM_CONF=$CONF
    # scancel waits for a controller: only when ours runs
    if pgrep -f "slurmctld -f $CONF" >/dev/null; then scancel --quiet --partition local 2>/dev/null || true; fi
    for f in "$DIR"/slurmd-*.pid "$DIR"/slurmctld.pid; do
        [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true
    done
    for _ in $(seq 20); do
        pgrep -f "slurm(ctld|d) -f $CONF" >/dev/null || { stop_munged; return 0; }
        sleep 0.25
    done
    pkill -9 -f "slurm(ctld|d) -f $CONF" || true
    stop_munged
}

stop_munged() {   # once no cluster (of any DIR) runs: another one started by this script may still use it
    [ -f "$MUNGED_OURS" ] && ! pgrep -r R,S,D -x slurmctld >/dev/null || return 0   # a zombie has ended
    pkill -x munged 2>/dev/null || true
    rm -f "$MUNGED_OURS"
}

case "${1:-}" in
    install) install ;;
    start) start ;;
    stop) stop ;;
    *) die "usage: $0 install|start|stop" ;;
esac
