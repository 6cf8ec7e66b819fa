# shellcheck shell=bash
# partition and heal: blackhole rules in the router namespace, one per direction, and the
# list of cut pairs in STATE/partitions (one "A B" line per pair, A before B in file order).

# rule_args I J: the rule matching packets from cluster I to cluster J.
rule_args() {
    echo "from ${CLUSTER_SUBNET[$1]} to ${CLUSTER_SUBNET[$2]} pref $PARTITION_PREF blackhole"
}

# cut I J / restore I J: one unordered pair of clusters.
cut() {
    local i=$1 j=$2 line
    line="${CLUSTER_NAME[i]} ${CLUSTER_NAME[j]}"
    if grep -qxF "$line" "$STATE/partitions"; then
        info "$line: already cut"
        return
    fi
    # shellcheck disable=SC2046 # rule_args is a list of words
    ip -n "$ROUTER_NS" rule add $(rule_args "$i" "$j")
    # shellcheck disable=SC2046
    ip -n "$ROUTER_NS" rule add $(rule_args "$j" "$i")
    echo "$line" >>"$STATE/partitions"
    info "cut ${CLUSTER_NAME[i]} <-/-> ${CLUSTER_NAME[j]}"
}

restore() {
    local i=$1 j=$2 line
    line="${CLUSTER_NAME[i]} ${CLUSTER_NAME[j]}"
    # shellcheck disable=SC2046
    while ip -n "$ROUTER_NS" rule del $(rule_args "$i" "$j") 2>/dev/null; do :; done
    # shellcheck disable=SC2046
    while ip -n "$ROUTER_NS" rule del $(rule_args "$j" "$i") 2>/dev/null; do :; done
    if grep -qxF "$line" "$STATE/partitions"; then
        grep -vxF "$line" "$STATE/partitions" >"$STATE/partitions.new" || true
        mv "$STATE/partitions.new" "$STATE/partitions"
        info "healed ${CLUSTER_NAME[i]} <---> ${CLUSTER_NAME[j]}"
    else
        info "$line: not cut"
    fi
}

# for_pairs A B|all ACTION: runs ACTION on the pair, or on A and every other cluster.
for_pairs() {
    local a b j
    a=$(cluster_index "$1")
    if [[ $2 == all ]]; then
        for j in "${!CLUSTER_NAME[@]}"; do
            ((j == a)) || "$3" "$((a < j ? a : j))" "$((a < j ? j : a))"
        done
        return
    fi
    b=$(cluster_index "$2")
    ((a != b)) || die "a cluster cannot be cut from itself"
    "$3" "$((a < b ? a : b))" "$((a < b ? b : a))"
}

# set_loss I J (with $pct and $mode set): the loss of one unordered pair, both ways. In
# STATE/loss one "A B PERCENT" line per lossy pair (A before B in file order), which the
# emulator reads; in netem mode the netem qdiscs of I->J and J->I are changed as well.
set_loss() {
    local i=$1 j=$2 line
    line="${CLUSTER_NAME[i]} ${CLUSTER_NAME[j]}"
    if [[ $mode == netem ]]; then
        tc -n "$ROUTER_NS" qdisc change dev "r$j" parent "1:$((i + 1))" handle "$((i + 10)):" \
            netem delay "${LINK_LAT["$i $j"]}ms" loss "$pct%" limit 100000
        tc -n "$ROUTER_NS" qdisc change dev "r$i" parent "1:$((j + 1))" handle "$((j + 10)):" \
            netem delay "${LINK_LAT["$j $i"]}ms" loss "$pct%" limit 100000
    fi
    { grep -v "^$line " "$STATE/loss" || true; } >"$STATE/loss.new"
    if awk -v p="$pct" 'BEGIN { exit !(p > 0) }'; then
        echo "$line $pct" >>"$STATE/loss.new"
        info "loss ${CLUSTER_NAME[i]} <-> ${CLUSTER_NAME[j]}: $pct%"
    else
        info "loss ${CLUSTER_NAME[i]} <-> ${CLUSTER_NAME[j]}: none"
    fi
    mv "$STATE/loss.new" "$STATE/loss"
}
