# RDMAMIGRATESLOTS (src/migdonor.c's delete; src/migsession.c, "Dropping
# slots on replicas and AOF"): the donor's replicas and AOF drop the moved
# slots with one RDMASLOTDROP per group of slots a delete slice completes,
# not a DEL per key.
#
# Node 2 replicates node 0, node 3 node 1. After a migration the donor's
# replica holds none of the moved keys and the digest of its master; it
# ran no DEL or UNLINK, and as many RDMASLOTDROP as the donor wrote to its
# AOF, whose ranges are exactly the migration's (SYNC, or ASYNC with
# lazyfree-lazy-server-del yes). Whole groups of slots (arenas) go
# wholesale on the replica: the keys that lie in their blocks unlinked, the
# blocks released at once, the others freed one by one (INFO
# migration_slot_drop_keys_*), and its used_memory comes back; a group
# spread over several commands is held (slotalloc_held_keys) until its
# last slot goes, or freed one by one if it stalls or is split. The donor restarted from that AOF has
# none of the keys, without the startup's stale-copy cleanup, and so after
# an AOF rewrite. A replica that did not announce "REPLCONF capa
# rdma-slot-drop" (a raw SYNC, as an older build's replica) makes the
# donor send a DEL per key again; such a replica gets no partial resync
# over an RDMASLOTDROP in the backlog, one that announced it does. Clients
# (and scripts) calling RDMASLOTDROP get an error and nothing changes. A
# donor killed in its delete: its replica, promoted, holds none of the
# moved keys, and the donor drops its own at its restart.

source tests/helpers/rdmamig-migrate.tcl

# Calls of command cmd on node n (INFO commandstats; 0 if never called).
proc rs_calls {n cmd} {
    if {[regexp "cmdstat_$cmd:calls=(\[0-9\]+)" [R $n info commandstats] -> calls]} {
        return $calls
    }
    return 0
}

# The RDMASLOTDROP commands in node n's AOF increments, oldest first, each
# as the list of its arguments after the name.
proc rs_aof_slotdrops {n} {
    set dir [lindex [R $n config get dir] 1]
    set adir [lindex [R $n config get appenddirname] 1]
    set drops {}
    foreach f [lsort -dictionary [glob -nocomplain $dir/$adir/*.incr.aof]] {
        set fd [open $f rb]
        set data [read $fd]
        close $fd
        foreach cmd [mg_resp_parse $data] {
            if {[string toupper [lindex $cmd 0]] eq {RDMASLOTDROP}} {
                lappend drops [lrange $cmd 1 end]
            }
        }
    }
    return $drops
}

# count hashes of 20 fields on node n in the slot set (born in the heap,
# on its replicas too); returns their names.
proc rs_fill_hashes {n prefix count slotset} {
    set keys [mg_names $prefix $count $slotset]
    foreach k $keys {
        set args {}
        for {set f 0} {$f < 20} {incr f} { lappend args f$f [string repeat h 100] }
        R $n hset $k {*}$args
    }
    return $keys
}

# Node 1 gives ranges (slot 100 first, holding big keys) to node 0; once
# its delete has begun in slot 100, its writes are paused so that its
# delete slices wait. Returns the migration's deferred client.
proc rs_migrate_paused_in_delete {ranges big} {
    set rd [mg_migrate_deferred 1 0 $ranges]
    wait_for_condition 5000 1 {
        [R 1 cluster countkeysinslot 100] < $big
    } else {
        fail "node 1 did not start its delete"
    }
    R 1 client pause 60000 write
    return $rd
}

# An INFO field of node n.
proc rs_info {n field} {
    getInfoProperty [R $n info everything] $field
}

# The slots the RDMASLOTDROP commands drops name, sorted, each once.
proc rs_drop_slots {drops} {
    set slots {}
    foreach d $drops { lappend slots {*}[mg_expand [lrange $d 1 end]] }
    lsort -integer -unique $slots
}

start_cluster 2 2 {overrides {cluster-enabled yes cluster-node-timeout 15000} tags {external:skip cluster rdmamig}} {
    set F {100-399 1000-1199}
    set Fset [mg_slotset $F]
    mg_fast_clients
    mg_wait_replicas_up
    mg_appendonly 0 yes
    mg_appendonly 1 yes

    test {RDMASLOTDROP: the donor's replica drops the moved slots with one command per delete slice, no DEL} {
        set fkeys [mg_fill 0 f 600 $Fset]
        mg_fill 0 k 100 [mg_slotset 2000-8191]
        mg_fill 1 r 100 [mg_slotset 8192-16383]
        mg_wait_converged
        wait_for_ofs_sync [Rn 0] [Rn 2]
        set snap [mg_snapshot 0 $fkeys]
        set del [rs_calls 2 del]
        set unlink [rs_calls 2 unlink]
        set drop [rs_calls 2 rdmaslotdrop]
        set aof [llength [rs_aof_slotdrops 0]]
        set reply [mg_migrate 0 1 $F]
        mg_assert_reply $reply [llength [mg_expand $F]] [llength $fkeys]
        mg_assert_keys 1 $snap
        mg_assert_replicas_equal
        mg_assert_absent 2 $fkeys
        mg_assert_counts 2 [dict map {s c} [mg_expected_counts $F $fkeys] {expr 0}]
        assert_equal $del [rs_calls 2 del]
        assert_equal $unlink [rs_calls 2 unlink]
        set drops [lrange [rs_aof_slotdrops 0] $aof end]
        set n [llength $drops]
        # One per slice: a handful for 600 keys. Never one per key.
        assert {$n >= 1 && $n < 60}
        assert_equal [expr {$drop + $n}] [rs_calls 2 rdmaslotdrop]
        assert_equal [lsort -integer [mg_expand $F]] [rs_drop_slots $drops]
        foreach d $drops { assert_equal SYNC [lindex $d 0] }
        # Slot by slot in order: the first names the migration's first slot.
        assert_equal 100 [lindex [split [lindex $drops 0 1] -] 0]
        mg_cluster_check 0
    }

    # Two whole groups of slots (slot-affinity-group-slots 256, the
    # default) with every kind of key, big ones too, compacted on the
    # replica: the donor sends one RDMASLOTDROP per delete slice, and the
    # replica unlinks the keys that lie in their blocks, holds them, and
    # releases each group's blocks at once when its last slot goes
    # (migDropSlots); the keys it holds outside
    # them are freed one by one. Then back, from the recipient, with
    # lazyfree-lazy-server-del yes (ASYNC): its replica's keys are the
    # adopted blocks' (RDMASLOTADOPT).
    test {RDMASLOTDROP: the replica releases whole groups of slots wholesale, used_memory comes back} {
        set W {2048-2559}
        # Also run with slot-affinity no (keys in the heap: nothing goes
        # wholesale but what an import left in blocks) and in groups of 1
        # (each slot its own arena, named whole per slice).
        set yes [expr {[lindex [R 2 config get slot-affinity] 1] eq {yes}}]
        set G [lindex [R 0 config get slot-affinity-group-slots] 1]
        set cpu [lindex [R 2 config get slot-affinity-cpu] 1]
        set Wslots [mg_expand $W]
        set Wset [mg_slotset $W]
        wait_for_ofs_sync [Rn 0] [Rn 2]
        set mem0 [rs_info 2 used_memory]
        set wkeys [mg_fill 0 w 1500 $Wset]
        lappend wkeys {*}[mg_fill_big 0 w $Wset 20000]
        wait_for_ofs_sync [Rn 0] [Rn 2]
        if {$yes} { R 2 debug slotcompact all }
        # Hashes written after that stay in the replica's heap (new
        # non-string keys are born there; its background relocation off).
        R 2 config set slot-affinity-cpu 0
        lappend wkeys {*}[rs_fill_hashes 0 wh 50 $Wset]
        wait_for_ofs_sync [Rn 0] [Rn 2]
        set mem1 [rs_info 2 used_memory]
        assert {$mem1 - $mem0 > 2000000}
        set nkeys 0
        set inblocks 0
        foreach slot $Wslots {
            set b [R 2 cluster slotblocks $slot]
            incr nkeys [dict get $b keys]
            incr inblocks [dict get $b keys_in_blocks]
        }
        if {$yes} { assert {$inblocks > $nkeys / 2 && $inblocks <= $nkeys - 50} }
        set whole [rs_info 2 migration_slot_drop_keys_wholesale]
        set freed [rs_info 2 migration_slot_drop_keys_freed]
        set aof [llength [rs_aof_slotdrops 0]]
        set snap [mg_snapshot 0 $wkeys]
        set reply [mg_migrate 0 1 $W]
        mg_assert_reply $reply [llength $Wslots] $nkeys
        mg_assert_keys 1 $snap
        mg_assert_replicas_equal
        assert_equal [expr {$whole + $inblocks}] [rs_info 2 migration_slot_drop_keys_wholesale]
        assert_equal [expr {$freed + $nkeys - $inblocks}] [rs_info 2 migration_slot_drop_keys_freed]
        set drops [lrange [rs_aof_slotdrops 0] $aof end]
        assert {[llength $drops] >= 1}
        assert_equal $Wslots [rs_drop_slots $drops]
        assert_equal 0 [rs_info 2 slotalloc_held_keys]
        foreach slot {2048 2303 2304 2559} {
            assert_equal 0 [dict get [R 2 cluster slotblocks $slot] blocks]
        }
        assert {[rs_info 2 used_memory] < $mem0 + ($mem1 - $mem0) / 10}
        # The retired blocks' pages go back to the OS (serverCron queues
        # the purge on the lazyfree thread), not kept committed for good.
        wait_for_condition 50 100 {
            [rs_info 2 slotalloc_retired_bytes] == 0
        } else {
            fail "the replica keeps [rs_info 2 slotalloc_retired_bytes] bytes of retired blocks"
        }
        mg_assert_slotalloc_sound 2
        R 2 config set slot-affinity-cpu $cpu
        mg_wait_converged

        set whole [rs_info 3 migration_slot_drop_keys_wholesale]
        set freed [rs_info 3 migration_slot_drop_keys_freed]
        set aof [llength [rs_aof_slotdrops 1]]
        R 1 config set lazyfree-lazy-server-del yes
        mg_migrate 1 0 $W
        R 1 config set lazyfree-lazy-server-del no
        foreach d [lrange [rs_aof_slotdrops 1] $aof end] { assert_equal ASYNC [lindex $d 0] }
        mg_assert_keys 0 $snap
        mg_assert_replicas_equal
        assert {[rs_info 3 migration_slot_drop_keys_wholesale] - $whole >= $inblocks}
        assert_equal $nkeys [expr {[rs_info 3 migration_slot_drop_keys_wholesale] - $whole +
                                   [rs_info 3 migration_slot_drop_keys_freed] - $freed}]
        foreach slot {2048 2559} {
            assert_equal 0 [dict get [R 3 cluster slotblocks $slot] blocks]
        }
        mg_assert_slotalloc_sound 3
        mg_wait_converged

        # Once more with the delete a second after the handover, so that
        # the replica's view has the recipient's claim (the first time it
        # may not have had it: then it holds every key in blocks, as the
        # view lags): every key in blocks is held and goes wholesale.
        if {$yes} { R 2 debug slotcompact all }
        set inblocks 0
        foreach slot $Wslots { incr inblocks [dict get [R 2 cluster slotblocks $slot] keys_in_blocks] }
        set whole [rs_info 2 migration_slot_drop_keys_wholesale]
        set freed [rs_info 2 migration_slot_drop_keys_freed]
        set released [rs_info 2 slotalloc_held_released_keys]
        set aof [llength [rs_aof_slotdrops 0]]
        R 0 config set migration-test-delay-delete 1000
        mg_migrate 0 1 $W
        R 0 config set migration-test-delay-delete 0
        mg_assert_keys 1 $snap
        mg_assert_replicas_equal
        assert_equal $nkeys [expr {[rs_info 2 migration_slot_drop_keys_wholesale] - $whole +
                                   [rs_info 2 migration_slot_drop_keys_freed] - $freed}]
        set drops [lrange [rs_aof_slotdrops 0] $aof end]
        assert_equal $Wslots [rs_drop_slots $drops]
        if {$yes} {
            assert_equal $inblocks [expr {[rs_info 2 migration_slot_drop_keys_wholesale] - $whole}]
            assert_equal $inblocks [expr {[rs_info 2 slotalloc_held_released_keys] - $released}]
        }
        assert_equal 0 [rs_info 2 slotalloc_held_keys]
        foreach slot {2048 2559} {
            assert_equal 0 [dict get [R 2 cluster slotblocks $slot] blocks]
        }
        mg_assert_slotalloc_sound 2
        mg_wait_converged

        # A group the migration splits (2048-2099 of 2048-2303), node 1 to
        # node 0, node 3's view current (the delete waits a second): the
        # rest of the group stays, so node 3 holds nothing and frees every
        # key one by one. (In groups of 1 there is no group to split.)
        if {$G > 1} {
            set S {2048-2099}
            set skeys 0
            foreach slot [mg_expand $S] { incr skeys [R 3 cluster countkeysinslot $slot] }
            assert {$skeys > 0}
            set whole [rs_info 3 migration_slot_drop_keys_wholesale]
            set freed [rs_info 3 migration_slot_drop_keys_freed]
            R 1 config set migration-test-delay-delete 1000
            mg_migrate 1 0 $S
            R 1 config set migration-test-delay-delete 0
            mg_assert_replicas_equal
            assert_equal 0 [rs_info 3 slotalloc_held_keys]
            assert_equal $whole [rs_info 3 migration_slot_drop_keys_wholesale]
            assert_equal [expr {$freed + $skeys}] [rs_info 3 migration_slot_drop_keys_freed]
            mg_assert_slotalloc_sound 3
            mg_wait_converged
            mg_migrate 0 1 $S
            mg_assert_replicas_equal
            mg_wait_converged
        }
    }

    test {RDMASLOTDROP: the donor restarted from its AOF holds none of the moved keys, and so after an AOF rewrite} {
        set digest [R 0 debug digest]
        set size [R 0 dbsize]
        restart_server 0 true false
        mg_fast_clients
        assert_equal $size [R 0 dbsize]
        assert_equal $digest [R 0 debug digest]
        mg_assert_absent 0 $fkeys
        # The AOF dropped them, not the startup's cleanup of stale copies.
        assert_equal 0 [count_log_message 0 "Slot migration: deleted"]
        R 0 bgrewriteaof
        # The replica's full sync may hold the rewrite back (scheduled).
        wait_for_condition 300 100 {
            [status [Rn 0] aof_rewrite_scheduled] == 0 &&
            [status [Rn 0] aof_rewrite_in_progress] == 0
        } else {
            fail "node 0's AOF rewrite did not end"
        }
        assert_equal {} [rs_aof_slotdrops 0]
        restart_server 0 true false
        mg_fast_clients
        assert_equal $digest [R 0 debug digest]
        assert_equal 0 [count_log_message 0 "Slot migration: deleted"]
        wait_for_condition 100 100 {
            [s -2 master_link_status] eq {up}
        } else {
            fail "node 2 did not reconnect to node 0"
        }
        mg_wait_converged
        mg_assert_replicas_equal
    }

    test {RDMASLOTDROP: ASYNC with lazyfree-lazy-server-del yes} {
        R 1 config set lazyfree-lazy-server-del yes
        wait_for_ofs_sync [Rn 1] [Rn 3]
        set del [rs_calls 3 del]
        set unlink [rs_calls 3 unlink]
        set drop [rs_calls 3 rdmaslotdrop]
        set aof [llength [rs_aof_slotdrops 1]]
        set snap [mg_snapshot 1 $fkeys]
        set ofs1 [s -1 master_repl_offset]
        set replid1 [s -1 master_replid]
        mg_migrate 1 0 $F
        mg_assert_keys 0 $snap
        mg_assert_replicas_equal
        mg_assert_absent 3 $fkeys
        assert_equal $del [rs_calls 3 del]
        assert_equal $unlink [rs_calls 3 unlink]
        set drops [lrange [rs_aof_slotdrops 1] $aof end]
        assert {[llength $drops] >= 1}
        assert_equal [expr {$drop + [llength $drops]}] [rs_calls 3 rdmaslotdrop]
        assert_equal [lsort -integer [mg_expand $F]] [rs_drop_slots $drops]
        foreach d $drops { assert_equal ASYNC [lindex $d 0] }
        R 1 config set lazyfree-lazy-server-del no
        mg_wait_converged
    }

    # Node 1's backlog holds the RDMASLOTDROP of the previous test, after
    # $ofs1: a PSYNC from before it without the capability gets a full
    # resync; with it, or from after it, the replica continues.
    test {RDMASLOTDROP: no partial resync over it in the backlog for a replica without capa rdma-slot-drop} {
        set now [s -1 master_repl_offset]
        foreach {capa from want} [list {eof psync2} [expr {$ofs1 + 1}] FULLRESYNC \
                                      {eof psync2 rdma-slot-drop} [expr {$ofs1 + 1}] CONTINUE \
                                      {eof psync2} [expr {$now + 1}] CONTINUE] {
            assert_match "$want*" [mg_psync_reply 1 $capa $replid1 $from]
        }
        assert_equal 1 [count_log_message -1 "does not understand RDMASLOTDROP"]
        mg_wait_converged
    }

    test {RDMASLOTDROP: a replica without the capability (a raw SYNC) gets a DEL per key again} {
        wait_for_ofs_sync [Rn 0] [Rn 2]
        set del [rs_calls 2 del]
        set drop [rs_calls 2 rdmaslotdrop]
        set nkeys [llength [mg_keys_in $fkeys $Fset]]
        set repl [attach_to_replication_stream]
        set reply [mg_migrate 0 1 $F]
        mg_assert_reply $reply [llength [mg_expand $F]] $nkeys
        mg_assert_replicas_equal
        mg_assert_absent 2 $fkeys
        assert_equal [expr {$del + $nkeys}] [rs_calls 2 del]
        assert_equal $drop [rs_calls 2 rdmaslotdrop]
        close_replication_stream $repl
        R 0 config set repl-ping-replica-period 10
        mg_wait_converged
    }

    test {RDMASLOTDROP from a client or a script is refused, nothing changes} {
        # Node 1 holds the keys of F now.
        set k [lindex $fkeys 0]
        foreach n {1 3} {
            set before($n) [R $n debug digest]
        }
        foreach args {{sync 100} {async 0-16383} {bogus 100} {sync 99999} {sync 100-50} {sync x}} {
            assert_error {*RDMASLOTDROP is internal*} {R 1 rdmaslotdrop {*}$args}
        }
        assert_error {*wrong number of arguments*} {R 1 rdmaslotdrop sync}
        assert_error {*not allowed from script*} {R 1 eval {return redis.call('rdmaslotdrop','sync','100-399')} 0}
        # On a replica: refused too (READONLY first, or ours).
        assert_error {*} {R 3 rdmaslotdrop sync 100-399}
        R 1 multi
        R 1 rdmaslotdrop sync 100-399
        assert_error {*RDMASLOTDROP is internal*} {R 1 exec}
        foreach n {1 3} {
            assert_equal $before($n) [R $n debug digest]
        }
        assert_equal 1 [R 1 exists $k]
    }

    # Node 1 gives F to node 0 (slot 100 with 100k keys: many delete
    # slices, an RDMASLOTDROP each), paused once its delete is into slot
    # 100 (whether node 3's view has the claim by then or not, it holds:
    # the rest of the group is node 0's, or the view lags). Node 3 dropped slot 100 whole with the first
    # command; its keys in blocks are held unlinked (slotalloc_held_keys)
    # while the other slots of its group (0-255) still hold keys; once no
    # key joined for 5 s they are freed one by one (the group might never
    # go whole). Unpaused, the migration ends, the rest goes wholesale and
    # nothing stays held or committed. In groups of 1 slot 100 goes
    # wholesale at once; with slot-affinity no its keys are in the heap.
    test {RDMASLOTDROP: a group dropped over several commands is held, freed one by one if it stalls} {
        set tag [mg_tag [mg_slotset 100]]
        R 1 eval {for i = 1, 100000 do redis.call('set', '{' .. KEYS[1] .. '}:' .. i, i) end} 1 $tag
        set yes [expr {[lindex [R 3 config get slot-affinity] 1] eq {yes}}]
        set G [lindex [R 1 config get slot-affinity-group-slots] 1]
        set big [R 1 cluster countkeysinslot 100]
        wait_for_ofs_sync [Rn 1] [Rn 3]
        if {$yes} { R 3 debug slotcompact all }
        set inblocks [dict get [R 3 cluster slotblocks 100] keys_in_blocks]
        if {$yes} { assert_equal $big $inblocks }
        set freed [rs_info 3 slotalloc_held_freed_keys]
        set released [rs_info 3 slotalloc_held_released_keys]
        set rd [rs_migrate_paused_in_delete $F $big]
        set rest 0
        for {set t 101} {$t < 256} {incr t} { incr rest [R 1 cluster countkeysinslot $t] }
        wait_for_ofs_sync [Rn 1] [Rn 3]
        assert_equal 0 [R 3 cluster countkeysinslot 100]
        if {$yes && $G > 1 && $rest > 0} {
            assert_equal $inblocks [rs_info 3 slotalloc_held_keys]
            assert_equal $released [rs_info 3 slotalloc_held_released_keys]
            wait_for_condition 100 100 {
                [rs_info 3 slotalloc_held_keys] == 0
            } else {
                fail "node 3 still holds [rs_info 3 slotalloc_held_keys] keys"
            }
            assert_equal $inblocks [expr {[rs_info 3 slotalloc_held_freed_keys] - $freed}]
        } elseif {$yes && $G > 1} {
            puts "(node 1's delete was past slot 100's group when paused: nothing to check)"
        } else {
            assert_equal 0 [rs_info 3 slotalloc_held_keys]
            if {$yes} {
                assert_equal $inblocks [expr {[rs_info 3 slotalloc_held_released_keys] - $released}]
            }
        }
        R 1 client unpause
        mg_deferred_reply $rd 1
        mg_assert_replicas_equal
        assert_equal 0 [rs_info 3 slotalloc_held_keys]
        foreach slot {100 255} {
            assert_equal 0 [dict get [R 3 cluster slotblocks $slot] blocks]
        }
        wait_for_condition 50 100 {
            [rs_info 3 slotalloc_retired_bytes] == 0
        } else {
            fail "node 3 keeps [rs_info 3 slotalloc_retired_bytes] bytes of retired blocks"
        }
        mg_assert_slotalloc_sound 3
        mg_wait_converged
        mg_migrate 0 1 $F
        mg_assert_replicas_equal
        mg_wait_converged
    }

    # Node 1 gives F (slot 100 with 100k keys: many delete slices, one
    # RDMASLOTDROP each) to node 0 and is killed in its
    # delete, once it deleted keys of slot 100 (its writes paused first,
    # so that its slices wait; when it is caught with keys of slot 100
    # left, node 3 has dropped the slot whole already, ahead of its
    # master). Node 3
    # takes over without a key of F (what it had not dropped yet, it drops
    # at once); node 1 comes back, drops its stale copies at startup and
    # replicates node 3.
    test {RDMASLOTDROP: the donor killed in its delete, its replica takes over without the slots' stale keys} {
        set big [R 1 cluster countkeysinslot 100]
        set zeros [dict map {s c} [mg_expected_counts $F $fkeys] {expr 0}]
        dict set zeros 100 0
        wait_for_ofs_sync [Rn 1] [Rn 3]
        # Each slice that deleted keys of slot 100 ended with an
        # RDMASLOTDROP naming it.
        set rd [rs_migrate_paused_in_delete $F $big]
        set left [R 1 cluster countkeysinslot 100]
        if {$left > 0} {
            # Caught in the slot: the replica dropped it whole already.
            wait_for_ofs_sync [Rn 1] [Rn 3]
            assert_equal 0 [R 3 cluster countkeysinslot 100]
        }
        mg_kill_donor_takeover 1 3 $rd
        mg_assert_counts 3 $zeros
        mg_assert_absent 3 $fkeys
        # What it held of slot 100's group goes once it dropped the rest.
        wait_for_condition 50 100 {
            [rs_info 3 slotalloc_held_keys] == 0
        } else {
            fail "node 3 still holds [rs_info 3 slotalloc_held_keys] keys"
        }
        mg_assert_slotalloc_sound 3
        mg_restart_as_replica 1
        mg_wait_converged
        mg_assert_owner 0 $F
        assert_equal $big [R 0 cluster countkeysinslot 100]
        mg_assert_counts 1 $zeros
        wait_for_ofs_sync [Rn 3] [Rn 1]
        assert_equal [R 3 debug digest] [R 1 debug digest]
        mg_cluster_check 0
    }
}
