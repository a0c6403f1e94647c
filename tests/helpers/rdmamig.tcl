# Helpers shared by our Tcl units (tests/unit/rdmamig/*.tcl); sourced by
# them, relative to the tree's root, which is where ./runtest runs.

# Make the cluster-mode server at stack level 'level' own every slot, then
# wait until it reports cluster_state:ok.
proc rdmamig_own_all_slots {level} {
    r $level cluster addslotsrange 0 16383
    wait_for_condition 300 100 {
        [regexp {cluster_state:ok} [r $level cluster info]]
    } else {
        fail "cluster never became ok"
    }
}
