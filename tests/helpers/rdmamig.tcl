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

# Upstream's wait_for_cluster_propagation gives the nodes 5 s to agree on
# the cluster config; with the whole suite running beside on two CPUs,
# gossip can take longer than that. 20 s, the same check.
proc rdmamig_wait_config_consistent {} {
    wait_for_condition 200 100 {
        [cluster_config_consistent] eq 1
    } else {
        fail "cluster config did not reach a consistent state in 20 s"
    }
}

# start_cluster's setup (upstream's cluster_helper.tcl) waits with
# wait_for_cluster_propagation too: in our files it gets the same 20 s (a
# CI run lost migrate-handover.tcl whole when its cluster took longer than
# 5 s to agree while migrate-faults.tcl killed nodes beside it).
proc wait_for_cluster_propagation {} {
    rdmamig_wait_config_consistent
}
