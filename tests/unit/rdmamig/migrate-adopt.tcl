# RDMAMIGRATESLOTS (src/migrecipient.c, migRecipientBeforeLink; src/
# migsession.c, "Adopting slots on replicas and AOF"): the recipient's
# replicas and AOF adopt each imported slot's blocks with one RDMASLOTADOPT,
# not a RESTORE per key.
#
# Node 2 replicates node 0, node 3 node 1; node 1 (the recipient) has its
# AOF on. After a migration the recipient's replica holds every moved key
# as its master does (per key: type, encoding, value digest, DUMP, TTL; and
# the database digest), having run no RESTORE and one RDMASLOTADOPT per
# non-empty slot, as many as the recipient's AOF holds; with slot-affinity
# no its blocks are evacuated to the heap afterwards, as the recipient's.
# Writes replayed during the migration follow the adoptions. The recipient
# restarted from its AOF holds every key, and so after an AOF rewrite
# (which writes no RDMASLOTADOPT); redis-check-aof finds such an AOF valid,
# reports one cut inside an RDMASLOTADOPT, and its --fix leaves a file that
# loads every slot adopted before the cut. A replica that did not announce "REPLCONF
# capa rdma-slot-adopt" (a raw SYNC, as an older build's) makes the
# recipient send RESTOREs again, and its replica still ends equal; one
# that attaches in the middle of the link gets RESTOREs for the slots
# linked after its fork (and so does the real replica), never an
# RDMASLOTADOPT; such a replica gets no partial resync over an
# RDMASLOTADOPT in the backlog; one with the capability that reconnects
# during the link continues from the backlog (where the block images are
# blocks of their own). A
# migration rolled back after the link leaves the replica without the
# keys, as its master. Clients and scripts calling RDMASLOTADOPT get an
# error and nothing changes.

source tests/helpers/rdmamig-migrate.tcl

# Calls of command cmd on node n (INFO commandstats; 0 if never called).
proc ad_calls {n cmd} {
    if {[regexp "cmdstat_$cmd:calls=(\[0-9\]+)" [R $n info commandstats] -> calls]} {
        return $calls
    }
    return 0
}

# How many times command name is in node n's AOF increments.
proc ad_aof_count {n name} {
    set dir [lindex [R $n config get dir] 1]
    set adir [lindex [R $n config get appenddirname] 1]
    set pat "\$[string length $name]\r\n$name\r\n"
    set count 0
    foreach f [glob -nocomplain $dir/$adir/*.incr.aof] {
        set fd [open $f rb]
        set data [read $fd]
        close $fd
        set pos 0
        while {[set i [string first $pat $data $pos]] >= 0} {
            incr count
            set pos [expr {$i + 1}]
        }
    }
    return $count
}

# The number of slots of ranges holding keys on node n.
proc ad_nonempty_slots {n ranges} {
    set count 0
    foreach s [mg_expand $ranges] {
        if {[R $n cluster countkeysinslot $s] > 0} { incr count }
    }
    return $count
}

# Node n (a replica, READONLY) holds every key of the snapshot as it was.
proc ad_assert_replica_keys {n snap} {
    R $n readonly
    mg_assert_keys $n $snap
}

# A raw SYNC to node n (as attach_to_replication_stream does to node 0): a
# replica that announced no capability. Close it with
# close_replication_stream. With rdbvar, the RDB it received is stored in
# the caller's variable of that name.
proc ad_attach_stream {n {rdbvar {}}} {
    if {$rdbvar ne {}} { upvar 1 $rdbvar rdb }
    set rdb {}
    R $n config set repl-ping-replica-period 3600
    set s [socket [srv -$n host] [srv -$n port]]
    fconfigure $s -translation binary
    puts -nonewline $s "SYNC\r\n"
    flush $s
    while 1 {
        set count [gets $s]
        if {[string range $count 0 0] ne {}} break
    }
    if {[string range $count 0 0] ne {$}} { error "SYNC to node $n: '$count'" }
    set count [string range $count 1 end]
    while {$count} {
        set buf [read $s $count]
        append rdb $buf
        set count [expr {$count - [string length $buf]}]
    }
    return $s
}

# Closes stream s of node n (from ad_attach_stream) after reading every
# command it holds (waits 1 s for more). Returns them, each a list of
# arguments (the name in lower case).
proc ad_close_stream {n s} {
    set cmds {}
    while {[set cmd [read_from_replication_stream $s]] ne {}} { lappend cmds $cmd }
    close $s
    R $n config set repl-ping-replica-period 10
    return $cmds
}

# Node 0 migrates ranges to node 1, whose link waits delay ms between
# slots (migration-test-delay-link); once the link began, script runs in
# the caller's frame. Returns the migration's reply.
proc ad_migrate_during_link {ranges delay script} {
    R 1 config set migration-test-delay-link $delay
    set rd [mg_migrate_deferred 0 1 $ranges]
    mg_wait_phase 1 link
    uplevel 1 $script
    set reply [mg_deferred_reply $rd 0]
    R 1 config set migration-test-delay-link 0
    return $reply
}

# A replica that received rdb and then the commands cmds (a stream from
# ad_attach_stream and ad_read_stream) holds a data set of DEBUG DIGEST
# digest: the RDB loaded on a server of its own, the commands run there.
proc ad_assert_stream_replays {rdb cmds digest} {
    start_server {} {
        set dir [lindex [r config get dir] 1]
        set fd [open $dir/stream.rdb wb]
        puts -nonewline $fd $rdb
        close $fd
        r config set dbfilename stream.rdb
        r debug reload nosave
        foreach cmd $cmds {
            if {[lindex $cmd 0] ne {ping}} { r {*}$cmd }
        }
        assert_equal $digest [r debug digest]
    }
}

# Restarts node n, waits until it has loaded its AOF and the cluster
# agrees again.
proc ad_restart {n} {
    restart_server -$n true false
    wait_for_condition 300 100 {
        [s -$n loading] eq 0
    } else {
        fail "node $n did not finish loading"
    }
    mg_fast_clients
    mg_wait_converged
}

# Node 1 restarted from its AOF has the digest it had, and its replica
# (node 3) catches up with it again.
proc ad_restart_recipient {digest} {
    ad_restart 1
    assert_equal $digest [R 1 debug digest]
    wait_for_condition 100 100 {
        [s -3 master_link_status] eq {up}
    } else {
        fail "node 3 did not reconnect to node 1"
    }
    mg_wait_converged
    mg_assert_replicas_equal
}

# With slot-affinity no, node n's blocks go back to the heap (as the
# recipient's: the evacuation); with yes, they are sound.
proc ad_assert_blocks_settle {n} {
    if {[lindex [R $n config get slot-affinity] 1] eq {no}} {
        wait_for_condition 200 100 {
            [mg_slotalloc $n slotalloc_used_bytes] == 0
        } else {
            fail "node $n kept keys in blocks: [R $n info slotalloc]"
        }
    } else {
        mg_assert_slotalloc_sound $n
    }
}

start_cluster 2 2 {overrides {cluster-enabled yes cluster-node-timeout 15000} tags {external:skip cluster rdmamig}} {
    set F {100-399 1000-1199}
    set Fset [mg_slotset $F]
    mg_fast_clients
    mg_wait_replicas_up
    mg_appendonly 1 yes

    test {RDMASLOTADOPT: the recipient's replica adopts each moved slot with one command, no RESTORE} {
        set fkeys [mg_fill 0 f 600 $Fset]
        lappend fkeys {*}[mg_fill_big 0 f [mg_slotset 1000] 20000]
        mg_fill 0 k 100 [mg_slotset 2000-8191]
        mg_fill 1 r 100 [mg_slotset 8192-16383]
        mg_wait_converged
        wait_for_ofs_sync [Rn 1] [Rn 3]
        set snap [mg_snapshot 0 $fkeys]
        set nslots [mg_units 0 $F]
        set restore [ad_calls 3 restore]
        set adopt [ad_calls 3 rdmaslotadopt]
        set aof [ad_aof_count 1 RDMASLOTADOPT]
        set aof_restore [ad_aof_count 1 RESTORE]
        set reply [mg_migrate 0 1 $F]
        mg_assert_reply $reply [llength [mg_expand $F]] [llength $fkeys]
        mg_assert_keys 1 $snap
        mg_assert_replicas_equal
        ad_assert_replica_keys 3 $snap
        mg_assert_counts 3 [mg_expected_counts $F $fkeys]
        assert_equal $restore [ad_calls 3 restore]
        assert_equal [expr {$adopt + $nslots}] [ad_calls 3 rdmaslotadopt]
        assert_equal [expr {$aof + $nslots}] [ad_aof_count 1 RDMASLOTADOPT]
        assert_equal $aof_restore [ad_aof_count 1 RESTORE]
        ad_assert_blocks_settle 1
        ad_assert_blocks_settle 3
        mg_cluster_check 0
    }

    # What an operator runs on such an AOF (README, "Checking an AOF"):
    # redis-check-aof checks its framing and accepts the records; a file
    # cut inside a record's block images is reported, and --fix leaves the
    # records before the cut, which load. (The images' checksums are
    # checked at load: the damaged-AOF tests below.)
    test {redis-check-aof: an AOF holding RDMASLOTADOPT is valid; cut inside one, --fix keeps the slots adopted before it} {
        set digest [R 1 debug digest]
        set size [R 1 dbsize]
        set counts [mg_expected_counts $F $fkeys]
        set dir [lindex [R 1 config get dir] 1]
        set adir [lindex [R 1 config get appenddirname] 1]
        set manifest $dir/$adir/[lindex [R 1 config get appendfilename] 1].manifest
        set f [lindex [glob $dir/$adir/*.incr.aof] 0]
        assert_match {*All AOF files and manifest are valid*} [exec src/redis-check-aof $manifest]
        set fd [open $f rb]
        set orig [read $fd]
        close $fd
        # The last RDMASLOTADOPT: the slots it names (its lead, and its
        # MEMBERS' with slot groups) lose their keys with the cut.
        set at [string last "\$13\r\nRDMASLOTADOPT\r\n" $orig]
        set start [string last "*" $orig $at]
        set args [lindex [mg_resp_parse [string range $orig $start end]] 0]
        assert_equal RDMASLOTADOPT [string toupper [lindex $args 0]]
        set lost [list [lindex $args 1]]
        set m [lsearch -exact $args MEMBERS]
        if {$m >= 0} {
            for {set i [expr {$m + 2}]} {$i < [llength $args]} {incr i 3} {
                lappend lost [lindex $args $i]
            }
        }
        set cut [expr {$start + ([string length $orig] - $start) / 2}]
        set fd [open $f wb]
        puts -nonewline $fd [string range $orig 0 [expr {$cut - 1}]]
        close $fd
        catch {exec src/redis-check-aof $manifest} out
        assert_match {*is not valid*} $out
        assert_match {*Successfully truncated AOF*} [exec src/redis-check-aof --fix $manifest << "y\n"]
        assert_match {*All AOF files and manifest are valid*} [exec src/redis-check-aof $manifest]
        assert_lessthan [file size $f] $cut
        R 1 debug loadaof
        set gone 0
        foreach s $lost {
            incr gone [dict get $counts $s]
            assert_equal 0 [R 1 cluster countkeysinslot $s]
            dict set counts $s 0
        }
        assert_morethan $gone 0
        mg_assert_counts 1 $counts
        assert_equal [expr {$size - $gone}] [R 1 dbsize]
        mg_assert_slotalloc_sound 1
        # The whole file again: every key, as before.
        set fd [open $f wb]
        puts -nonewline $fd $orig
        close $fd
        R 1 debug loadaof
        assert_equal $digest [R 1 debug digest]
        mg_assert_keys 1 $snap
    }

    test {RDMASLOTADOPT: the recipient restarted from its AOF holds every key, and so after an AOF rewrite} {
        set digest [R 1 debug digest]
        set size [R 1 dbsize]
        ad_restart 1
        assert_equal $size [R 1 dbsize]
        assert_equal $digest [R 1 debug digest]
        mg_assert_keys 1 $snap
        R 1 bgrewriteaof
        waitForBgrewriteaof [Rn 1]
        assert_equal 0 [ad_aof_count 1 RDMASLOTADOPT]
        ad_restart_recipient $digest
        # Back to node 0, for the next tests.
        mg_migrate 1 0 $F
        mg_wait_converged
        mg_assert_keys 0 $snap
    }

    test {RDMASLOTADOPT: writes replayed during the migration follow the adoptions on the replica} {
        set W {3000-3999}
        set Wset [mg_slotset $W]
        set fill [mg_fill_for_writes 0 w $Wset]
        dict with fill {}
        set newkeys [mg_names w:new 30 $Wset]
        set doomed [lrange $keys 0 9]
        set written [lrange $keys 10 99]
        wait_for_ofs_sync [Rn 1] [Rn 3]
        set restore [ad_calls 3 restore]
        set adopt [ad_calls 3 rdmaslotadopt]
        set nslots [mg_units 0 $W]
        mg_delay 0 patch 4000
        set rd [mg_migrate_deferred 0 1 $W]
        mg_wait_phase 0 patch
        set w [mg_write_mixed 0 $keys $written $newkeys $doomed $short w $tag]
        set present [dict get $w present]
        set wsnap [mg_snapshot 0 $present]
        set reply [mg_deferred_reply $rd 0]
        mg_delay_reset 0
        assert {[dict get $reply writes_replayed] > 0}
        mg_assert_keys 1 $wsnap
        mg_assert_absent 1 [dict get $w gone]
        mg_assert_replicas_equal
        ad_assert_replica_keys 3 $wsnap
        mg_assert_absent 3 [dict get $w gone]
        assert_equal $restore [ad_calls 3 restore]
        assert_equal [expr {$adopt + $nslots}] [ad_calls 3 rdmaslotadopt]
        # The recipient's AOF: every key back.
        set digest [R 1 debug digest]
        ad_restart_recipient $digest
        mg_migrate 1 0 $W
        mg_wait_converged
    }

    test {RDMASLOTADOPT: a replica without the capability (a raw SYNC) gets RESTOREs, and the real replica ends equal} {
        wait_for_ofs_sync [Rn 1] [Rn 3]
        set restore [ad_calls 3 restore]
        set adopt [ad_calls 3 rdmaslotadopt]
        set nkeys [llength [mg_keys_in $fkeys $Fset]]
        set repl [ad_attach_stream 1]
        set reply [mg_migrate 0 1 $F]
        mg_assert_reply $reply [llength [mg_expand $F]] $nkeys
        mg_assert_keys 1 $snap
        mg_assert_replicas_equal
        ad_assert_replica_keys 3 $snap
        assert_equal [expr {$restore + $nkeys}] [ad_calls 3 restore]
        assert_equal $adopt [ad_calls 3 rdmaslotadopt]
        close_replication_stream $repl
        R 1 config set repl-ping-replica-period 10
        mg_wait_converged
        mg_migrate 1 0 $F
        mg_wait_converged
    }

    # Node 3 (with the capability) is attached at RDMADONE, so the slots go
    # as RDMASLOTADOPTs and no RESTORE payload is made; a raw SYNC (without
    # it) attaches while the link waits between slots
    # (migration-test-delay-link). The slots linked before the SYNC's fork
    # are in its RDB and went to node 3 as RDMASLOTADOPTs; every later one
    # goes to both as RESTOREs, serialized on the main thread. The raw
    # stream holds no RDMASLOTADOPT, and its RDB plus the commands after it
    # make the recipient's data set.
    test {RDMASLOTADOPT: a replica without the capability that attaches during the link gets RESTOREs from there on} {
        set L {4000-4015}
        set Lset [mg_slotset $L]
        mg_fill 0 l 320 $Lset
        # With the keys of the first test there.
        set lkeys {}
        foreach slot [mg_expand $L] {
            lappend lkeys {*}[R 0 cluster getkeysinslot $slot 1000]
        }
        mg_wait_converged
        set lsnap [mg_snapshot 0 $lkeys]
        set nslots [ad_nonempty_slots 0 $L]
        wait_for_ofs_sync [Rn 1] [Rn 3]
        set restore [ad_calls 3 restore]
        set adopt [ad_calls 3 rdmaslotadopt]
        set serialized [count_log_message -1 "serialized by the main thread"]
        set reply [ad_migrate_during_link $L 300 {
            set repl [ad_attach_stream 1 rdb]
        }]
        set cmds [ad_close_stream 1 $repl]
        mg_assert_reply $reply [llength [mg_expand $L]] [llength $lkeys]
        mg_assert_keys 1 $lsnap
        mg_assert_replicas_equal
        ad_assert_replica_keys 3 $lsnap
        # What the raw stream got after its fork: RESTOREs only.
        set names [lmap cmd $cmds {lindex $cmd 0}]
        assert_equal 0 [llength [lsearch -all -exact $names rdmaslotadopt]]
        set restored {}
        foreach cmd $cmds {
            if {[lindex $cmd 0] eq {restore}} { lappend restored [lindex $cmd 1] }
        }
        set rslots [lsort -unique -integer [lmap k $restored {mg_keyslot $k}]]
        set adopted [expr {[ad_calls 3 rdmaslotadopt] - $adopt}]
        # Slots before the fork adopted, slots after it restored: some of each.
        assert_range $adopted 1 [expr {$nslots - 1}]
        assert {[llength $rslots] > 0}
        assert_equal $nslots [expr {$adopted + [llength $rslots]}]
        # Every key of a restored slot, once, to the stream and to node 3.
        set want [lmap k $lkeys { if {[mg_keyslot $k] in $rslots} { set k } else continue }]
        assert_equal [lsort $want] [lsort $restored]
        assert_equal [expr {$restore + [llength $restored]}] [ad_calls 3 restore]
        assert_equal [expr {$serialized + 1}] [count_log_message -1 "serialized by the main thread"]
        ad_assert_stream_replays $rdb $cmds [R 1 debug digest]
        mg_migrate 1 0 $L
        mg_wait_converged
    }

    # Held after RDMADONE (every key linked, the slots sent to node 3 as
    # RDMASLOTADOPTs), then cancelled: the recipient's rollback deletes the
    # keys with a DEL each, and its replica ends as it: without them.
    test {RDMASLOTADOPT: a migration rolled back after the link leaves the recipient's replica without the keys} {
        wait_for_ofs_sync [Rn 1] [Rn 3]
        set adopt [ad_calls 3 rdmaslotadopt]
        set size1 [R 1 dbsize]
        set rd [mg_start_held $F handover 3000]
        assert {[R 1 dbsize] > $size1}
        assert_equal OK [R 0 rdmamigrateslots cancel]
        mg_held_error $rd {migration failed in handover.*cancel}
        mg_wait_idle 1
        mg_assert_owner 0 $F
        assert_equal $size1 [R 1 dbsize]
        mg_assert_replicas_equal
        assert_equal $size1 [R 3 dbsize]
        assert {[ad_calls 3 rdmaslotadopt] > $adopt}
        mg_assert_absent 3 $fkeys
        mg_assert_keys 0 $snap
    }

    # One more migration puts RDMASLOTADOPTs in node 1's backlog, after
    # $ofs1: a PSYNC from before it without the capability gets a full
    # resync; with it, or from after it, the replica continues.
    test {RDMASLOTADOPT: no partial resync over it in the backlog for a replica without capa rdma-slot-adopt} {
        # Room for the migration's RDMASLOTADOPTs in the backlog.
        R 1 config set repl-backlog-size 200mb
        set ofs1 [s -1 master_repl_offset]
        set replid1 [s -1 master_replid]
        set adopt [ad_calls 3 rdmaslotadopt]
        # Slot groups: whole groups go as units (RDMASLOTADOPT ... MEMBERS),
        # which a replica without capa rdma-unit-adopt does not understand.
        set units [expr {[mg_units 0 $F] < [ad_nonempty_slots 0 $F]}]
        mg_migrate 0 1 $F
        mg_assert_replicas_equal
        assert {[ad_calls 3 rdmaslotadopt] > $adopt}
        set now [s -1 master_repl_offset]
        foreach {capa from want} [list {eof psync2 rdma-slot-drop} [expr {$ofs1 + 1}] FULLRESYNC \
                                      {eof psync2 rdma-slot-drop rdma-slot-adopt rdma-unit-adopt} [expr {$ofs1 + 1}] CONTINUE \
                                      {eof psync2 rdma-slot-drop rdma-slot-adopt} [expr {$ofs1 + 1}] \
                                          [expr {$units ? "FULLRESYNC" : "CONTINUE"}] \
                                      {eof psync2 rdma-slot-drop} [expr {$now + 1}] CONTINUE] {
            assert_match "$want*" [mg_psync_reply 1 $capa $replid1 $from]
        }
        assert_equal 1 [count_log_message -1 "does not understand RDMASLOTADOPT ("]
        assert_equal $units [count_log_message -1 "does not understand RDMASLOTADOPT MEMBERS"]
        mg_wait_converged
    }

    test {RDMASLOTADOPT from a client or a script is refused, nothing changes} {
        # Node 1 holds the keys of F now.
        set k [lindex $fkeys 0]
        foreach n {1 3} { set before($n) [R $n debug digest] }
        foreach args {{100 1 0 1 0 65536 0 x y} {5000 1 0 1 0 65536 0 x y} {x y z w a b c d e}} {
            assert_error {*RDMASLOTADOPT is internal*} {R 1 rdmaslotadopt {*}$args}
        }
        assert_error {*wrong number of arguments*} {R 1 rdmaslotadopt 100 1 0 1}
        assert_error {*not allowed from script*} {R 1 eval {return redis.call('rdmaslotadopt','100','1','0','1','0','65536','0','x','y')} 0}
        assert_error {*} {R 3 rdmaslotadopt 100 1 0 1 0 65536 0 x y}
        R 1 multi
        R 1 rdmaslotadopt 100 1 0 1 0 65536 0 x y
        assert_error {*RDMASLOTADOPT is internal*} {R 1 exec}
        foreach n {1 3} { assert_equal $before($n) [R $n debug digest] }
        assert_equal 1 [R 1 exists $k]
    }

    # The recipient sends each slot's block images to its replicas as
    # replication buffer blocks of their own (feedReplicationBufferBlock,
    # no copy). Its replica, disconnected twice while the link (held 15 ms
    # per slot) sends them, continues each time from the backlog (partial
    # resync): it ends with its master's data, having run each slot's
    # RDMASLOTADOPT once.
    test {RDMASLOTADOPT: a replica that reconnects during the link continues from the backlog and ends equal} {
        mg_migrate 1 0 $F
        mg_wait_converged
        wait_for_ofs_sync [Rn 1] [Rn 3]
        set nslots [mg_units 0 $F]
        set adopt [ad_calls 3 rdmaslotadopt]
        set partial [s -1 sync_partial_ok]
        set full [s -1 sync_full]
        R 1 config set migration-test-delay-link 15
        set rd [mg_migrate_deferred 0 1 $F]
        mg_wait_phase 1 link
        for {set i 0} {$i < 2} {incr i} {
            after 500
            assert_equal 1 [R 1 client kill type replica]
            wait_for_condition 100 50 {
                [s -1 sync_partial_ok] == $partial + $i + 1
            } else {
                fail "node 3 did not continue from node 1's backlog"
            }
        }
        assert_equal link [dict get [mg_status 1] phase]
        set reply [mg_deferred_reply $rd 0]
        R 1 config set migration-test-delay-link 0
        mg_assert_reply $reply [llength [mg_expand $F]] [llength $fkeys]
        mg_assert_replicas_equal
        ad_assert_replica_keys 3 $snap
        assert_equal $full [s -1 sync_full]
        assert_equal [expr {$adopt + $nslots}] [ad_calls 3 rdmaslotadopt]
    }

    # A replica that cannot run its master's RDMASLOTADOPT must not go on
    # without the slot's keys (a failover would lose them): it drops the
    # link without keeping its master for a partial resync, and the full
    # sync brings every key. Here its slot allocator's range (restarted
    # with slot-affinity-reserve 1mb) has no room for a unit holding a
    # 2 MB string.
    test {RDMASLOTADOPT: a replica that cannot adopt resyncs in full and ends equal} {
        mg_migrate 1 0 $F
        mg_wait_converged
        wait_for_ofs_sync [Rn 1] [Rn 3]
        set big [lindex [mg_names adopt:big 1 [mg_slotset 100]] 0]
        R 0 set $big [string repeat x 2000000]
        set cfg [srv -3 config_file]
        set fd [open $cfg a]
        puts $fd "slot-affinity-reserve 1mb"
        close $fd
        ad_restart 3
        assert_equal 1048576 [lindex [R 3 config get slot-affinity-reserve] 1]
        wait_for_condition 100 100 {
            [s -3 master_link_status] eq {up}
        } else {
            fail "node 3 did not reconnect to node 1"
        }
        wait_for_ofs_sync [Rn 1] [Rn 3]
        set full [s -1 sync_full]
        set partial [s -1 sync_partial_ok]
        mg_migrate 0 1 $F
        wait_for_condition 300 100 {
            [s -1 sync_full] > $full && [s -3 master_link_status] eq {up}
        } else {
            fail "node 3 did not resync in full: [s -1 sync_full] full syncs"
        }
        assert_equal $partial [s -1 sync_partial_ok]
        assert {[count_log_message -3 "cannot run its master's RDMASLOTADOPT"] >= 1}
        mg_wait_converged
        mg_assert_replicas_equal
        ad_assert_replica_keys 3 $snap
        assert_equal 2000000 [R 3 strlen $big]
    }
}

# --- a damaged RDMASLOTADOPT (the AOF here) --------------------------------

# Node n's AOF increment f rewritten with cmds, loaded again (DEBUG
# LOADAOF): the node must stay up.
proc ad_load_damaged_aof {n f cmds} {
    set fd [open $f wb]
    puts -nonewline $fd [ad_resp_write $cmds]
    close $fd
    # Not the test suite's default (it panics on any error of a master's
    # or the AOF's command, to catch bugs).
    R $n config set propagation-error-behavior ignore
    R $n debug loadaof
    assert_equal PONG [R $n ping]
}

proc ad_resp_write {cmds} {
    set out {}
    foreach args $cmds {
        append out "*[llength $args]\r\n"
        foreach a $args { append out "\$[string length $a]\r\n$a\r\n" }
    }
    return $out
}

# Node 1, with its AOF on and no replica, imports F: its AOF gets one
# RDMASLOTADOPT per slot. Four of them are damaged on disk, each another
# way (a byte of a block image, the manifest's address, the key count, the
# list of ranges), and the AOF loaded again (DEBUG LOADAOF; with
# propagation-error-behavior ignore, the default): the node stays up, logs
# each refusal, holds no key of those four slots and every key of
# the others. Then the same for units of slot groups (MEMBERS).
start_cluster 2 0 {overrides {cluster-enabled yes cluster-node-timeout 15000} tags {external:skip cluster rdmamig}} {
    set F {100-199}
    set Fset [mg_slotset $F]
    mg_fast_clients
    mg_appendonly 1 yes

    test {RDMASLOTADOPT: a damaged command (in the AOF) is refused, the node stays up, nothing of its slot is adopted} {
        set fkeys [mg_fill 0 f 400 $Fset]
        mg_fill 1 r 50 [mg_slotset 8192-16383]
        mg_migrate 0 1 $F
        mg_wait_converged
        set counts [mg_expected_counts $F $fkeys]
        mg_assert_counts 1 $counts
        set dir [lindex [R 1 config get dir] 1]
        set adir [lindex [R 1 config get appenddirname] 1]
        set files [glob $dir/$adir/*.incr.aof]
        assert_equal 1 [llength $files]
        set f [lindex $files 0]
        set fd [open $f rb]
        set cmds [mg_resp_parse [read $fd]]
        close $fd
        set damaged {}
        set i 0
        set out {}
        foreach args $cmds {
            if {[string toupper [lindex $args 0]] eq {RDMASLOTADOPT} && $i < 4} {
                lappend damaged [lindex $args 1]
                switch $i {
                    0 {
                        # A byte of the first block's image (its last:
                        # values, not allocator metadata, which is checked
                        # before the sum).
                        set b [lindex $args 9]
                        set pos [expr {[string length $b] - 1}]
                        binary scan [string index $b $pos] c v
                        set b [string replace $b $pos $pos [binary format c [expr {$v ^ 0x5a}]]]
                        lset args 9 $b
                    }
                    1 { lset args 3 [expr {[lindex $args 3] + 64}] }
                    2 { lset args 2 [expr {[lindex $args 2] + 1}] }
                    3 {
                        set r [lindex $args 8]
                        lset args 8 [string range $r 0 end-16]
                    }
                }
                incr i
            }
            lappend out $args
        }
        assert_equal 4 [llength $damaged]
        ad_load_damaged_aof 1 $f $out
        foreach s $damaged {
            assert_equal 0 [R 1 cluster countkeysinslot $s]
            dict set counts $s 0
        }
        mg_assert_counts 1 $counts
        assert_equal 4 [count_log_message -1 "RDMASLOTADOPT: slot .*nothing of it was adopted"]
        assert_equal 1 [count_log_message -1 "checksum mismatch\\|bad allocator metadata"]
        assert_equal 2 [count_log_message -1 "bad manifest"]
        mg_assert_slotalloc_sound 1
    }

    # Slot groups: a group that moves whole reaches the AOF as one
    # RDMASLOTADOPT with MEMBERS. Damaged three ways (a member's manifest
    # address, a member given twice, a member count that does not match),
    # each AOF load refuses the whole unit: none of its slots' keys is
    # adopted, and every other slot's is.
    test {RDMASLOTADOPT: a damaged unit of slots (MEMBERS, in the AOF) is refused whole} {
        set affinity [lindex [R 0 config get slot-affinity] 1]
        set group [lindex [R 0 config get slot-affinity-group-slots] 1]
        foreach n {0 1} {
            R $n config set slot-affinity yes
            R $n config set slot-affinity-group-slots 16
        }
        # A fresh AOF increment (the test before rewrote the file under
        # the server, which still appends where its old one ended).
        R 1 bgrewriteaof
        waitForBgrewriteaof [Rn 1]
        set U {8192-8223}
        set ukeys [mg_fill 1 u 300 [mg_slotset $U]]
        R 1 debug slotcompact all
        mg_migrate 1 0 $U
        mg_wait_converged
        mg_migrate 0 1 $U
        mg_wait_converged
        set counts [mg_expected_counts $U $ukeys]
        mg_assert_counts 1 $counts
        # The slots of the test before, as its load left them.
        foreach s [mg_expand $F] { dict set counts $s [R 1 cluster countkeysinslot $s] }
        set dir [lindex [R 1 config get dir] 1]
        set adir [lindex [R 1 config get appenddirname] 1]
        set f [lindex [glob $dir/$adir/*.incr.aof] 0]
        set fd [open $f rb]
        set cmds [mg_resp_parse [read $fd]]
        close $fd
        # The last two units: 8192-8207 and 8208-8223.
        set units {}
        for {set j 0} {$j < [llength $cmds]} {incr j} {
            set args [lindex $cmds $j]
            if {[string toupper [lindex $args 0]] eq {RDMASLOTADOPT} &&
                [lsearch -exact [string tolower $args] members] != -1} { lappend units $j }
        }
        assert {[llength $units] >= 2}
        foreach {how j} [list manifest [lindex $units end-1] twice [lindex $units end]] {
            set args [lindex $cmds $j]
            set m [lsearch -exact [string tolower $args] members]
            switch $how {
                manifest { lset args end [expr {[lindex $args end] + 64}] }
                twice { lset args [expr {$m + 2}] [lindex $args 1] }
            }
            lset cmds $j $args
        }
        ad_load_damaged_aof 1 $f $cmds
        foreach s [mg_expand $U] {
            assert_equal 0 [R 1 cluster countkeysinslot $s]
            dict set counts $s 0
        }
        mg_assert_counts 1 $counts
        assert_equal 1 [count_log_message -1 "RDMASLOTADOPT: slot .*: slot .*: bad manifest"]
        assert_equal 1 [count_log_message -1 "RDMASLOTADOPT: slot .* is given twice"]
        mg_assert_slotalloc_sound 1
        foreach n {0 1} {
            R $n config set slot-affinity-group-slots $group
            R $n config set slot-affinity $affinity
        }
    }
}

# Node 1 imports F with no replica, no backlog and no AOF, so RDMADONE
# finds no one to tell about the keys; its link waits 500 ms between slots
# (migration-test-delay-link), and meanwhile node 2 becomes its replica: a
# full sync snapshots the slots linked so far, and every key linked after
# the fork must follow it down the stream. The new replica ends with every
# moved key and its master's digest.
start_cluster 2 1 {overrides {cluster-enabled yes cluster-node-timeout 15000} tags {external:skip cluster rdmamig}} {
    set F {100-107}
    set Fset [mg_slotset $F]
    mg_fast_clients

    test {RDMASLOTADOPT: a replica that attaches while the recipient links gets the keys linked after its full sync} {
        set fkeys [mg_fill 0 f 160 $Fset]
        mg_fill 1 r 50 [mg_slotset 8192-16383]
        mg_wait_converged
        assert_equal no [lindex [R 1 config get appendonly] 1]
        assert_equal 0 [s -1 connected_slaves]
        set snap [mg_snapshot 0 $fkeys]
        # The full sync forks at once, in the middle of the link.
        R 1 config set repl-diskless-sync-delay 0
        set reply [ad_migrate_during_link $F 500 {
            R 2 cluster replicate [R 1 cluster myid]
        }]
        mg_assert_reply $reply [llength [mg_expand $F]] [llength $fkeys]
        wait_for_condition 100 100 {
            [s -2 master_link_status] eq {up}
        } else {
            fail "node 2 never synced with node 1"
        }
        wait_for_ofs_sync [Rn 1] [Rn 2]
        assert_equal [R 1 dbsize] [R 2 dbsize]
        assert_equal [R 1 debug digest] [R 2 debug digest]
        ad_assert_replica_keys 2 $snap
        verify_log_message -1 "*a replica or the AOF started during the import*" 0
    }

    # The other order: a replica without the capability (a raw SYNC) is
    # attached at RDMADONE, so the recipient thread makes a RESTORE payload
    # per key and keeps no images; node 2 (with the capability) attaches
    # during the link. Both get RESTOREs only, every key once, and both end
    # with the recipient's data set.
    test {RDMASLOTADOPT: a capable replica that attaches during the link, one without the capability attached before, get RESTOREs} {
        set G {200-207}
        set gkeys [mg_fill 0 g 160 [mg_slotset $G]]
        set gsnap [mg_snapshot 0 $gkeys]
        R 2 cluster replicate [R 0 cluster myid]
        wait_for_condition 100 100 {
            [s -2 master_link_status] eq {up} && [s -1 connected_slaves] == 0
        } else {
            fail "node 2 never synced with node 0"
        }
        mg_wait_converged
        set adopt [ad_calls 2 rdmaslotadopt]
        set restore [ad_calls 2 restore]
        set repl [ad_attach_stream 1 rdb]
        R 1 config set repl-diskless-sync-delay 0
        set reply [ad_migrate_during_link $G 500 {
            R 2 cluster replicate [R 1 cluster myid]
        }]
        set cmds [ad_close_stream 1 $repl]
        mg_assert_reply $reply [llength [mg_expand $G]] [llength $gkeys]
        mg_assert_keys 1 $gsnap
        wait_for_condition 100 100 {
            [s -2 master_link_status] eq {up}
        } else {
            fail "node 2 never synced with node 1"
        }
        wait_for_ofs_sync [Rn 1] [Rn 2]
        assert_equal [R 1 debug digest] [R 2 debug digest]
        ad_assert_replica_keys 2 $gsnap
        assert_equal $adopt [ad_calls 2 rdmaslotadopt]
        assert {[ad_calls 2 restore] > $restore}
        set names [lmap cmd $cmds {lindex $cmd 0}]
        assert_equal 0 [llength [lsearch -all -exact $names rdmaslotadopt]]
        set restored [lmap cmd $cmds {
            if {[lindex $cmd 0] ne {restore}} continue
            lindex $cmd 1
        }]
        assert_equal [lsort $gkeys] [lsort $restored]
        ad_assert_stream_replays $rdb $cmds [R 1 debug digest]
    }
}
