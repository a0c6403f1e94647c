# CLUSTER SETSLOTS (src/clustersetslots.c): CLUSTER SETSLOT for a batch of
# slots, all or none, one config save and at most one epoch bump.
#
# A 2-master cluster checks the command's documentation, every kind of bad
# input (the error names the culprit, and nothing changes), that MIGRATING
# and IMPORTING look exactly as SETSLOT makes them, a NODE handover of
# slots whose keys were moved with MIGRATE, and a master giving away its
# last slot. A 3-master cluster with one replica checks role errors and a
# 1000-slot handover: every node converges, the recipient's epoch is bumped
# once, and clients following MOVED find the keys. Timings are printed,
# never asserted.

source tests/support/cluster.tcl
source tests/helpers/rdmamig.tcl

# One line of CLUSTER NODES without the fields that change by themselves
# (ping sent, pong received, link state).
proc ss_node_line {line} {
    set f [split [string trim $line] " "]
    concat [lrange $f 0 3] [lindex $f 6] [lrange $f 8 end]
}

# CLUSTER NODES of node n, normalized and sorted.
proc ss_nodes {n} {
    set out {}
    foreach line [split [string trim [R $n cluster nodes]] "\n"] {
        lappend out [ss_node_line $line]
    }
    lsort $out
}

# The "myself" line of node n's CLUSTER NODES, normalized.
proc ss_myself {n} {
    foreach line [split [string trim [R $n cluster nodes]] "\n"] {
        if {[string match {* myself,*} $line]} { return [ss_node_line $line] }
    }
    fail "node $n has no myself line"
}

# Everything of node n's cluster state that SETSLOTS may change.
proc ss_state {n} {
    list [R $n cluster slots] [ss_nodes $n] \
        [CI $n cluster_current_epoch] [CI $n cluster_my_epoch]
}

proc ss_nodes_conf {n} {
    set dir [lindex [R $n config get dir] 1]
    set file [lindex [R $n config get cluster-config-file] 1]
    set fd [open "$dir/$file"]
    set conf [read $fd]
    close $fd
    return $conf
}

# A hash tag whose slot is in [lo, hi] and not in the list 'avoid'.
proc ss_tag_in {lo hi {avoid {}}} {
    for {set t 0} {$t < 100000} {incr t} {
        set s [R 0 cluster keyslot "{t$t}"]
        if {$s >= $lo && $s <= $hi && [lsearch -exact $avoid $s] < 0} {
            return [list "t$t" $s]
        }
    }
    fail "no hash tag with a slot in $lo-$hi"
}

# Slot states in a CLUSTER NODES line: "[slot->-id]" and "[slot-<-id]".
proc ss_open_slots {line} {
    regexp -all -inline {\[[0-9]+-[<>]-[0-9a-f]+\]} $line
}

proc ss_wait_converged {} {
    rdmamig_wait_config_consistent
    wait_for_cluster_state ok
}

# Masters' config epochs, once every node agrees on the current epoch and
# no two masters share a config epoch (the collision handling of a fresh
# cluster is over).
proc ss_wait_epochs_settled {nodes masters} {
    wait_for_condition 100 100 {
        [llength [lsort -unique [lmap n $nodes {CI $n cluster_current_epoch}]]] == 1 &&
        [llength [lsort -unique [lmap n $masters {CI $n cluster_my_epoch}]]] == [llength $masters]
    } else {
        fail "config epochs did not settle"
    }
}

start_cluster 2 0 {tags {external:skip cluster rdmamig}} {
    set id0 [R 0 cluster myid]
    set id1 [R 1 cluster myid]

    test {CLUSTER SETSLOTS: CLUSTER HELP, COMMAND DOCS and COMMAND INFO describe it} {
        assert_match "*SETSLOTS (IMPORTING|MIGRATING|NODE) <node-id> <slot|start-end>*" \
            [join [R 0 cluster help] "\n"]
        set docs [dict get [R 0 command docs cluster|setslots] cluster|setslots]
        assert_match "*rdma-migration*" [dict get $docs summary]
        assert_match "*IMPORTING*MIGRATING*NODE*STABLE*slot-or-range*" [dict get $docs arguments]
        set info [lindex [R 0 command info cluster|setslots] 0]
        assert_equal cluster|setslots [lindex $info 0]
        assert_equal -4 [lindex $info 1]
        assert {[lsearch [lindex $info 2] admin] >= 0}
        assert {[lsearch [lindex $info 6] @admin] >= 0}
        assert {[lsearch [lindex $info 6] @dangerous] >= 0}
    }

    test {CLUSTER SETSLOTS: bad input gets a precise error and changes nothing} {
        # Node 0 serves 0-8191, node 1 8192-16383. A key in one of node 0's
        # slots makes NODE refuse to give that slot away.
        lassign [ss_tag_in 200 8191] tag keyslot
        R 0 set "{$tag}k" v
        set unknown [string repeat 0123456789 4]
        set cases [list \
            [list migrating $id1 16384]          "*Slot 16384 in '16384' is out of range: slots are 0-16383*" \
            [list migrating $id1 -1]             "*Slot -1 in '-1' is out of range*" \
            [list migrating $id1 0-16384]        "*Slot 16384 in '0-16384' is out of range*" \
            [list migrating $id1 a-b]            "*Invalid slot or range 'a-b'*" \
            [list migrating $id1 1-2-3]          "*Invalid slot or range '1-2-3'*" \
            [list migrating $id1 1-]             "*Invalid slot or range '1-'*" \
            [list migrating $id1 5-3]            "*Invalid range '5-3': the start slot is greater than the end slot*" \
            [list migrating $id1 0-100 16384]    "*Slot 16384 in '16384'*" \
            [list migrating $id1 0-100 50-150]   "*Slot 50 is given twice, in '0-100' and in '50-150'*" \
            [list migrating $id1 7 8 7]          "*Slot 7 is given twice, in '7' and in '7'*" \
            [list migrating $unknown 1]          "*I don't know about node $unknown*" \
            [list migrating $id1]                "*CLUSTER SETSLOTS MIGRATING needs a node id and at least one slot or range*" \
            [list node $id1]                     "*CLUSTER SETSLOTS NODE needs a node id*" \
            [list stable]                        "*wrong number of arguments*" \
            [list]                               "*wrong number of arguments*" \
            [list importing $id1 0-10 100]       "*I'm already the owner of hash slot 0 (in '0-10'), so I can't set it IMPORTING*" \
            [list importing $id1 9000 1]         "*I'm already the owner of hash slot 1 (in '1')*" \
            [list migrating $id1 0-10 8191-8192] "*I'm not the owner of hash slot 8192 (in '8191-8192'), so I can't set it MIGRATING*" \
            [list migrating $id0 0-10]           "*I can't migrate hash slots to myself*" \
            [list importing $id0 9000]           "*I can't import hash slots from myself*" \
            [list stable $id1 0-10]              "*STABLE takes no node id*" \
            [list frobnicate $id1 0-10]          "*Invalid CLUSTER SETSLOTS action 'frobnicate'*" \
            [list node $id1 0-10 $keyslot]       "*Can't assign hash slot $keyslot (in '$keyslot') to a different node while I still hold 1 keys in it*" \
        ]
        set before [ss_state 0]
        set conf [ss_nodes_conf 0]
        foreach {args pattern} $cases {
            assert_error $pattern {R 0 cluster setslots {*}$args}
            assert_equal $before [ss_state 0] "after 'CLUSTER SETSLOTS $args'"
        }
        assert_equal $conf [ss_nodes_conf 0]
        assert_equal {} [ss_open_slots [ss_myself 0]]
        R 0 del "{$tag}k"
    }

    test {CLUSTER SETSLOTS MIGRATING/IMPORTING: ranges and single slots, shown as SETSLOT shows them} {
        set slots {0 1 2 7 100 101 102 103 104 105}
        assert_equal OK [R 0 cluster setslots migrating $id1 0-2 7 100-105]
        assert_equal OK [R 1 cluster setslots IMPORTING $id0 100-105 0-2 7]
        set batched0 [ss_myself 0]
        set batched1 [ss_myself 1]
        assert_equal [llength $slots] [llength [ss_open_slots $batched0]]
        assert_equal [llength $slots] [llength [ss_open_slots $batched1]]
        foreach s $slots {
            assert {[string first "\[$s->-$id1\]" $batched0] >= 0}
            assert {[string first "\[$s-<-$id0\]" $batched1] >= 0}
        }
        # The config is on disk by the time the reply arrives.
        assert {[string first "\[7->-$id1\]" [ss_nodes_conf 0]] >= 0}
        assert {[string first "\[7-<-$id0\]" [ss_nodes_conf 1]] >= 0}

        # STABLE on ranges (and a slot without state) clears it all.
        assert_equal OK [R 0 cluster setslots stable 0-2 7 100-105 3000]
        assert_equal OK [R 1 cluster setslots stable 0-10 100-199]
        assert_equal {} [ss_open_slots [ss_myself 0]]
        assert_equal {} [ss_open_slots [ss_myself 1]]

        # The same states set one slot at a time with SETSLOT.
        foreach s $slots {
            R 0 cluster setslot $s migrating $id1
            R 1 cluster setslot $s importing $id0
        }
        assert_equal $batched0 [ss_myself 0]
        assert_equal $batched1 [ss_myself 1]
        R 0 cluster setslots stable 0-105
        R 1 cluster setslots stable 0-105
        assert_equal {} [ss_open_slots [ss_myself 0]]
        assert_equal {} [ss_open_slots [ss_myself 1]]
    }

    test {CLUSTER SETSLOTS NODE: slots whose keys moved with MIGRATE, then MOVED} {
        # Keys in three of node 0's slots, plus a range of empty slots.
        set keys {}
        set used {}
        for {set i 0} {$i < 3} {incr i} {
            lassign [ss_tag_in 0 2900 $used] tag s
            lappend used $s
            for {set j 0} {$j < 20} {incr j} {
                R 0 set "{$tag}:$j" "$tag/$j"
                lappend keys "{$tag}:$j" $s "$tag/$j"
            }
        }
        set ranges [concat $used 3000-3999]
        assert_equal OK [R 1 cluster setslots importing $id0 {*}$ranges]
        assert_equal OK [R 0 cluster setslots migrating $id1 {*}$ranges]
        # Still holding keys: NODE refuses, and changes nothing.
        set before [ss_state 0]
        assert_error "*still hold 20 keys*" {R 0 cluster setslots node $id1 {*}$ranges}
        assert_equal $before [ss_state 0]
        foreach {k s v} $keys {
            assert_equal OK [R 0 migrate [srv -1 host] [srv -1 port] $k 0 5000]
        }
        assert_equal OK [R 1 cluster setslots node $id1 {*}$ranges]
        assert_equal OK [R 0 cluster setslots node $id1 {*}$ranges]
        assert_equal {} [ss_open_slots [ss_myself 0]]
        assert_equal {} [ss_open_slots [ss_myself 1]]
        ss_wait_converged
        foreach {k s v} $keys {
            assert_error "MOVED $s [srv -1 host]:[srv -1 port]" {R 0 get $k}
            assert_equal $v [R 1 get $k]
        }
        set r [lsearch -inline -index 0 [R 0 cluster slots] 3000]
        assert_equal {3000 3999} [lrange $r 0 1]
        assert_equal [srv -1 port] [lindex $r 2 1]
    }

    test {CLUSTER SETSLOTS NODE: a master that gives away its last slot becomes a replica} {
        # Node 0 first: once node 1 claims the slots, its broadcast can
        # reach node 0 before the test's next command and make it a replica
        # by the cluster bus (then SETSLOTS is refused there).
        assert_equal OK [R 0 cluster setslots node $id1 0-16383]
        assert_equal OK [R 1 cluster setslots node $id1 0-16383]
        wait_for_condition 100 100 {
            [lindex [R 0 role] 0] eq {slave} &&
            [string match "*myself,slave $id1 *" [ss_myself 0]]
        } else {
            fail "node 0 did not become a replica of node 1"
        }
        ss_wait_converged
        assert_error "*only with masters*" {R 0 cluster setslots stable 1}
    }
}

start_cluster 3 1 {tags {external:skip cluster rdmamig}} {
    set id0 [R 0 cluster myid]
    set id1 [R 1 cluster myid]
    set id2 [R 2 cluster myid]
    set id3 [R 3 cluster myid]

    test {CLUSTER SETSLOTS: masters only, and only toward masters} {
        wait_for_condition 100 100 {
            [string match "*myself,slave *" [ss_myself 3]]
        } else {
            fail "node 3 is not a replica"
        }
        set before [ss_state 3]
        assert_error "*Please use SETSLOTS only with masters*" {R 3 cluster setslots stable 0-10}
        assert_equal $before [ss_state 3]
        set before [ss_state 0]
        assert_error "*Target node $id3 is not a master*" {R 0 cluster setslots migrating $id3 0-10}
        assert_error "*Target node $id3 is not a master*" {R 0 cluster setslots node $id3 0-10}
        assert_error "*Target node $id3 is not a master*" {R 0 cluster setslots importing $id3 6000}
        assert_equal $before [ss_state 0]
    }

    test {CLUSTER SETSLOTS NODE: 1000 slots change owner, every node converges, one epoch bump} {
        # Node 0 serves 0-5461. The recipient, node 1, must not hold the
        # highest config epoch already, or nothing would be bumped.
        ss_wait_epochs_settled {0 1 2 3} {0 1 2}
        if {[CI 1 cluster_my_epoch] == [CI 1 cluster_current_epoch]} {
            R 2 cluster bumpepoch
            ss_wait_epochs_settled {0 1 2 3} {0 1 2}
        }
        set epoch [CI 1 cluster_current_epoch]
        set bumps [count_log_message -1 "New configEpoch set to"]

        # Keys in a few of the slots, moved with MIGRATE.
        set keys {}
        set used {}
        for {set i 0} {$i < 5} {incr i} {
            lassign [ss_tag_in 0 999 $used] tag s
            lappend used $s
            for {set j 0} {$j < 10} {incr j} {
                R 0 set "{$tag}:$j" "$tag/$j"
                lappend keys "{$tag}:$j" $s "$tag/$j"
            }
        }
        # A client that still believes node 0 serves them.
        set rc [redis_cluster "[srv -2 host]:[srv -2 port]"]
        foreach {k s v} $keys { assert_equal $v [$rc get $k] }

        set ranges {0-99 100 101-899 900-998 999}
        assert_equal OK [R 1 cluster setslots importing $id0 {*}$ranges]
        assert_equal OK [R 0 cluster setslots migrating $id1 {*}$ranges]
        assert_equal 1000 [llength [ss_open_slots [ss_myself 0]]]
        assert_equal 1000 [llength [ss_open_slots [ss_myself 1]]]
        foreach {k s v} $keys {
            assert_equal OK [R 0 migrate [srv -1 host] [srv -1 port] $k 0 5000]
        }
        assert_equal OK [R 1 cluster setslots node $id1 {*}$ranges]
        assert_equal OK [R 0 cluster setslots node $id1 {*}$ranges]

        # One bump on the recipient, for the whole batch.
        assert_equal [expr {$epoch + 1}] [CI 1 cluster_current_epoch]
        assert_equal [expr {$epoch + 1}] [CI 1 cluster_my_epoch]
        assert_equal [expr {$bumps + 1}] [count_log_message -1 "New configEpoch set to"]
        assert_equal 1 [count_log_message -1 "configEpoch updated after importing 1000 slots"]
        assert_equal {} [ss_open_slots [ss_myself 0]]
        assert_equal {} [ss_open_slots [ss_myself 1]]

        # Everyone agrees: node 1 serves 0-999, node 0 1000-5461.
        ss_wait_converged
        wait_for_condition 100 100 {
            [llength [lsort -unique [lmap n {0 1 2 3} {CI $n cluster_current_epoch}]]] == 1
        } else {
            fail "the new epoch did not reach every node"
        }
        assert_equal [expr {$epoch + 1}] [CI 2 cluster_current_epoch]
        foreach n {0 1 2 3} {
            set slots [R $n cluster slots]
            set r [lsearch -inline -index 0 $slots 0]
            assert_equal {0 999} [lrange $r 0 1]
            assert_equal [srv -1 port] [lindex $r 2 1]
            set r [lsearch -inline -index 0 $slots 1000]
            assert_equal {1000 5461} [lrange $r 0 1]
            assert_equal [srv 0 port] [lindex $r 2 1]
        }

        # MOVED from the old owner and from a bystander; the cluster client
        # follows it.
        foreach {k s v} $keys {
            assert_error "MOVED $s [srv -1 host]:[srv -1 port]" {R 0 get $k}
            assert_error "MOVED $s [srv -1 host]:[srv -1 port]" {R 2 get $k}
            assert_equal $v [$rc get $k]
            assert_equal 0 [R 0 cluster countkeysinslot $s]
        }
        $rc close
    }

    test {CLUSTER SETSLOTS: 1000 slots in one batch vs 1000 SETSLOT calls (info only)} {
        # The whole state dance of a stock move (IMPORTING, MIGRATING, NODE
        # on both sides) for 1000 empty slots each way.
        set t0 [clock microseconds]
        for {set s 1000} {$s < 2000} {incr s} {
            R 1 cluster setslot $s importing $id0
            R 0 cluster setslot $s migrating $id1
        }
        set t1 [clock microseconds]
        for {set s 1000} {$s < 2000} {incr s} {
            R 1 cluster setslot $s node $id1
            R 0 cluster setslot $s node $id1
        }
        set t2 [clock microseconds]
        R 1 cluster setslots importing $id0 2000-2999
        R 0 cluster setslots migrating $id1 2000-2999
        set t3 [clock microseconds]
        R 1 cluster setslots node $id1 2000-2999
        R 0 cluster setslots node $id1 2000-2999
        set t4 [clock microseconds]
        puts [format "CLUSTER SETSLOT, 1000 slots one by one on both nodes: IMPORTING+MIGRATING %.1f ms, NODE %.1f ms" \
            [expr {($t1 - $t0) / 1000.0}] [expr {($t2 - $t1) / 1000.0}]]
        puts [format "CLUSTER SETSLOTS, 1000 slots in one batch on both nodes: IMPORTING+MIGRATING %.2f ms, NODE %.2f ms" \
            [expr {($t3 - $t2) / 1000.0}] [expr {($t4 - $t3) / 1000.0}]]
        ss_wait_converged
        set r [lsearch -inline -index 0 [R 2 cluster slots] 0]
        assert_equal {0 2999} [lrange $r 0 1]
        assert_equal [srv -1 port] [lindex $r 2 1]
    }
}
