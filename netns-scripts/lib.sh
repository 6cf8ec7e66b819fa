# shellcheck shell=bash
# shellcheck disable=SC2034 # variables for the scripts that source this file
# Shared by the netns-scripts: names, state directory, checks and the plan reader.
# Sourced, not run. Every script sets PROG and USAGE before sourcing this file.
#
# Environment:
#   OVERLAY_NETNS_PREFIX  testbed name, prefix of every namespace (default: ovn)
#   OVERLAY_NETNS_STATE   state directory (default: /run/overlay-netns/PREFIX)
#   OVERLAY_BIN_DIR       where overlay-node and overlay-netns are (default: target/release)

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(dirname "$SCRIPT_DIR")
PREFIX=${OVERLAY_NETNS_PREFIX:-ovn}
STATE=${OVERLAY_NETNS_STATE:-/run/overlay-netns/$PREFIX}
BIN_DIR=${OVERLAY_BIN_DIR:-$REPO_DIR/target/release}
NODE_BIN=$BIN_DIR/overlay-node
HELPER_BIN=$BIN_DIR/overlay-netns
ROUTER_NS=$PREFIX-router
SWITCH_NS=$PREFIX-switch
# Routing table and rule priorities in the router namespace.
WAN_TABLE=100
PARTITION_PREF=100
WAN_PREF=1000

die() {
    echo "$PROG: error: $*" >&2
    exit 1
}

info() {
    echo "$PROG: $*"
}

usage() {
    echo "usage: $USAGE" >&2
    exit 2
}

# The prefix names namespaces and is matched as "PREFIX-" by down: letters and digits only.
if [[ ! $PREFIX =~ ^[a-z0-9]{1,12}$ ]]; then
    die "OVERLAY_NETNS_PREFIX must be 1 to 12 lower-case letters or digits, got '$PREFIX'"
fi

need_root() {
    [[ $EUID -eq 0 ]] ||
        die "must run as root (network namespaces, veths and qdiscs need CAP_SYS_ADMIN and CAP_NET_ADMIN); run it with sudo"
}

# need_tools TOOL...: every tool is on PATH.
need_tools() {
    local t
    for t in "$@"; do
        if ! command -v "$t" >/dev/null 2>&1; then
            case $t in
                ip | tc) die "missing '$t': install iproute2 (e.g. apt-get install iproute2)" ;;
                setsid) die "missing 'setsid': install util-linux" ;;
                *) die "missing '$t'" ;;
            esac
        fi
    done
}

need_bins() {
    local b
    for b in "$NODE_BIN" "$HELPER_BIN"; do
        [[ -x $b ]] ||
            die "$(basename "$b") is not built at $b: run 'cargo build --release' in $REPO_DIR (or set OVERLAY_BIN_DIR)"
    done
}

need_up() {
    [[ -f $STATE/up-complete ]] ||
        die "no testbed '$PREFIX' is up (no $STATE/up-complete): run netns-scripts/up TOPOLOGY.toml first"
}

# Namespaces of this testbed, one per line (also those of a crashed or half-built one).
our_namespaces() {
    ip netns list 2>/dev/null | awk -v p="$PREFIX-" 'index($1, p) == 1 { print $1 }'
}

node_ns() {
    echo "$PREFIX-$1"
}

# Whether PID is a running (not zombie) process.
pid_running() {
    local state
    [[ -r /proc/$1/stat ]] || return 1
    state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)
    [[ -n $state && $state != Z ]]
}

# Reads $STATE/plan (written by up from `overlay-netns plan`) into:
#   TOPO_NAME, NODE_COUNT, CLUSTER_COUNT
#   CLUSTER_NAME[i] CLUSTER_NODES[i] CLUSTER_SUBNET[i] CLUSTER_GW[i]
#   NODES (names, in order), NODE_CLUSTER[name] NODE_NUM[name] NODE_IP[name] NODE_PORT[name]
#   LINK_LAT["a b"] LINK_BW["a b"] (ms, Mbit/s or -)
read_plan() {
    local file=$STATE/plan kind a b c d e
    CLUSTER_NAME=() CLUSTER_NODES=() CLUSTER_SUBNET=() CLUSTER_GW=() NODES=()
    declare -gA NODE_CLUSTER=() NODE_NUM=() NODE_IP=() NODE_PORT=() LINK_LAT=() LINK_BW=()
    while read -r kind a b c d e; do
        case $kind in
            topology) TOPO_NAME=$a NODE_COUNT=$b CLUSTER_COUNT=$c ;;
            cluster)
                CLUSTER_NAME[a]=$b CLUSTER_NODES[a]=$c CLUSTER_SUBNET[a]=$d CLUSTER_GW[a]=$e
                ;;
            node)
                NODES+=("$a")
                NODE_CLUSTER[$a]=$b NODE_NUM[$a]=$c NODE_IP[$a]=$d NODE_PORT[$a]=$e
                ;;
            link) LINK_LAT["$a $b"]=$c LINK_BW["$a $b"]=$d ;;
            *) die "unexpected line in $file: $kind $a $b $c $d $e" ;;
        esac
    done <"$file"
}

# The kernel keeps one ARP table for all namespaces, bounded by gc_thresh3 (1024 entries by
# default). Every node resolves its gateway and the members of its cluster it talks to: 120
# nodes in clusters of 30 need about 3,700 entries. Past the bound the kernel logs
# "neighbor table overflow" and a node's sends fail (UDP SndbufErrors): to the node, a seed
# that never answers. NEIGH_SAVED keeps the host's values from before any testbed raised
# them, for down to put back.
NEIGH_SAVED=/run/overlay-netns/neigh-thresholds
NEIGH_KEYS=(gc_thresh1 gc_thresh2 gc_thresh3)

# raise_neigh_limits: makes room in the ARP table for the plan read by read_plan (never
# lowers a limit the host already has).
raise_neigh_limits() {
    local biggest=0 i need k cur want changed=()
    for i in "${!CLUSTER_NODES[@]}"; do
        ((CLUSTER_NODES[i] > biggest)) && biggest=${CLUSTER_NODES[i]}
    done
    # Every node: its cluster and the gateway; the router: every node; and slack.
    need=$((NODE_COUNT * (biggest + 2) + 256))
    # Enough room already (the default 1024 holds the 12-node netns test): touch nothing.
    (($(cat /proc/sys/net/ipv4/neigh/default/gc_thresh3) >= 2 * need)) && return 0
    mkdir -p "$(dirname "$NEIGH_SAVED")"
    if [[ ! -s $NEIGH_SAVED ]]; then
        for k in "${NEIGH_KEYS[@]}"; do
            echo "$k $(cat "/proc/sys/net/ipv4/neigh/default/$k")"
        done >"$NEIGH_SAVED"
    fi
    for i in 0 1 2; do
        k=${NEIGH_KEYS[i]}
        want=$((need << i)) # GC starts at need, is eager at 2x, hard limit 4x
        cur=$(cat "/proc/sys/net/ipv4/neigh/default/$k")
        if ((cur < want)); then
            echo "$want" >"/proc/sys/net/ipv4/neigh/default/$k"
            changed+=("$k $cur -> $want")
        fi
    done
    if ((${#changed[@]})); then
        info "raised the host's ARP table limits for $NODE_COUNT nodes (${changed[*]}); down puts them back"
    fi
}

# restore_neigh_limits: puts back the values saved by raise_neigh_limits once no testbed
# is up any more (any namespace called *-router is a testbed's).
restore_neigh_limits() {
    local k v
    [[ -s $NEIGH_SAVED ]] || return 0
    if ip netns list 2>/dev/null | awk '{ print $1 }' | grep -q -- '-router$'; then
        return 0
    fi
    while read -r k v; do
        case $k in gc_thresh1 | gc_thresh2 | gc_thresh3) ;; *) continue ;; esac
        [[ $v =~ ^[0-9]+$ ]] && echo "$v" >"/proc/sys/net/ipv4/neigh/default/$k"
    done <"$NEIGH_SAVED"
    rm -f "$NEIGH_SAVED"
    info "put the host's ARP table limits back"
}

# cluster_index NAME: prints the index of cluster NAME, or dies naming the clusters.
cluster_index() {
    local i
    for i in "${!CLUSTER_NAME[@]}"; do
        if [[ ${CLUSTER_NAME[i]} == "$1" ]]; then
            echo "$i"
            return
        fi
    done
    die "no cluster '$1' in topology $TOPO_NAME (clusters: ${CLUSTER_NAME[*]})"
}

# start_bg NS PIDFILE LOG CMD...: starts CMD in namespace NS in its own session, detached,
# stdin from /dev/null, output appended to LOG; the process writes its own pid to PIDFILE
# before it execs CMD, so PIDFILE holds CMD's pid.
start_bg() {
    local ns=$1 pidfile=$2 log=$3
    shift 3
    rm -f "$pidfile"
    # shellcheck disable=SC2016 # $0 and $@ belong to the inner shell
    setsid -f ip netns exec "$ns" sh -c 'echo $$ >"$0"; exec "$@"' "$pidfile" "$@" \
        </dev/null >>"$log" 2>&1
    # Up to 30 s: on a host saturated by the nodes already started (a join storm of a
    # hundred processes on two cores) a fork and exec can take seconds.
    local i
    for ((i = 0; i < 600; i++)); do
        [[ -s $pidfile ]] && return 0
        sleep 0.05
    done
    die "could not start $1 in namespace $ns within 30 s (see $log)"
}

# The CPU cgroup `run --cpus` puts the nodes in (v2 or v1 layout), named after the testbed.
cpu_cgroup_dir() {
    if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
        echo "/sys/fs/cgroup/overlay-netns-$PREFIX"
    else
        echo "/sys/fs/cgroup/cpu/overlay-netns-$PREFIX"
    fi
}

# limit_cpus CORES: moves this shell into the testbed's CPU cgroup, capped at CORES cores
# (cgroup v2 cpu.max, or v1 CFS quota), so every node started after it shares that much
# CPU: a host with fewer cores than its nodes need, on demand.
limit_cpus() {
    local cores=$1 quota dir
    [[ $cores =~ ^[0-9]+([.][0-9]+)?$ ]] || die "--cpus takes a number of cores (e.g. 0.5), got '$cores'"
    quota=$(awk -v c="$cores" 'BEGIN { printf "%d", c * 100000 }')
    ((quota >= 1000)) || die "--cpus must be at least 0.01 cores, got '$cores'"
    dir=$(cpu_cgroup_dir)
    if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
        grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control ||
            echo +cpu >/sys/fs/cgroup/cgroup.subtree_control ||
            die "cannot enable the cpu controller of cgroup v2"
        mkdir -p "$dir" || die "cannot create the cgroup $dir"
        echo "$quota 100000" >"$dir/cpu.max" || die "cannot set $dir/cpu.max"
    elif [[ -d /sys/fs/cgroup/cpu ]]; then
        mkdir -p "$dir" || die "cannot create the cgroup $dir"
        if ! echo 100000 >"$dir/cpu.cfs_period_us" || ! echo "$quota" >"$dir/cpu.cfs_quota_us"; then
            die "cannot set the CFS quota of $dir"
        fi
    else
        die "no CPU cgroup controller under /sys/fs/cgroup (neither v2 nor v1)"
    fi
    echo $$ >"$dir/cgroup.procs" || die "cannot move into the cgroup $dir"
    info "nodes started now share at most $cores cores (cgroup $dir)"
}

# wait_for_line FILE PATTERN SECONDS: waits until FILE has a line matching PATTERN (ERE).
wait_for_line() {
    local file=$1 pattern=$2 limit=$3 i
    for ((i = 0; i < limit * 10; i++)); do
        if grep -Eq -- "$pattern" "$file" 2>/dev/null; then
            return 0
        fi
        sleep 0.1
    done
    return 1
}
