# The donor's delete phase (src/migdonor.c, migDonorDeleteSlice): slots
# whose every key lies in their blocks are unlinked without a free per
# allocation, and their blocks are released wholesale once the lazyfree
# thread has freed whatever was queued before (expiry and eviction may queue
# objects of those slots after the thaw). What a user relies on:
#
# 1. used_memory on the donor comes back to about what it was before the
#    keys were written, and not a byte more after a round trip of the same
#    keys (nothing leaked, nothing counted twice); its slot blocks are gone
#    (CLUSTER SLOTBLOCKS, INFO slotalloc), their pages returned to the OS
#    by the time the command replies (slotalloc_retired_bytes); every key
#    is on the recipient, identical.
# 2. The same while keys of the moved slots expire on the donor, freed by
#    the lazyfree thread (lazyfree-lazy-expire yes, big hashes), between the
#    handover and the delete (migration-test-delay-delete): no crash, no
#    leak, and the slots that hold a key travelling as DUMP (a skiplist) are
#    deleted key by key alongside.

source tests/helpers/rdmamig-migrate.tcl

# slot-affinity yes: what is shown here is the release of the blocks the
# donor's keys lived in for good (with `no`, migrate-affinity.tcl).
start_cluster 2 0 {overrides {cluster-enabled yes cluster-node-timeout 15000 slot-affinity yes} tags {external:skip cluster rdmamig}} {
    # Node 0 serves 0-8191, node 1 8192-16383.
    mg_fast_clients

    proc mr_info {n field} {
        getInfoProperty [R $n info everything] $field
    }

    # Strings, hash tables, lists and sets (all zero-copy or BLK_PATH_DICT)
    # in the slot set; returns the key names.
    proc mr_fill {n prefix count slotset} {
        set keys [mg_names $prefix $count $slotset]
        set i 0
        foreach k $keys {
            switch [expr {$i % 4}] {
                0 { R $n set $k [string repeat v [expr {10 + $i % 300}]] }
                1 {
                    set args {}
                    for {set f 0} {$f < 20} {incr f} { lappend args field$f [string repeat x 100] }
                    R $n hset $k {*}$args
                }
                2 { R $n rpush $k a b c [string repeat l 200] }
                3 { R $n sadd $k {*}[lmap m {1 2 3 4 5 6 7 8} {string repeat $m 80}] }
            }
            incr i
        }
        return $keys
    }

    # Slot slot's arena on node n comes to hold no block. Once the
    # migration is over, a slot of a group the range split (256-299 of
    # 0-299) maps back to its group's arena (slotCompactRegroup), which may
    # keep the cached empty block the prepare's isolation left for up to a
    # second (slotCompactCron's trim). A block with anything live in it
    # stays, and so did, before slotAllocDrainBlock released them, empty
    # blocks the sparse sweep had drained (1 run in 10).
    proc mr_wait_no_blocks {n slot} {
        wait_for_condition 30 100 {
            [dict get [R $n cluster slotblocks $slot] blocks] == 0
        } else {
            fail "slot $slot keeps blocks: [R $n cluster slotblocks $slot]"
        }
    }

    test {Migration delete: the donor's blocks go wholesale and used_memory comes back} {
        set M {0-299}
        set Mset [mg_slotset $M]
        set before [mr_info 0 used_memory]
        set keys [mr_fill 0 w 2000 $Mset]
        R 0 debug slotcompact all
        set filled [mr_info 0 used_memory]
        assert {$filled - $before > 1000000}
        set snap [mg_snapshot 0 $keys]
        set slot [mg_keyslot [lindex $keys 0]]
        assert {[dict get [R 0 cluster slotblocks $slot] blocks] > 0}

        set reserved [mr_info 0 slotalloc_reserved_bytes]
        set reply [mg_migrate 0 1 $M]
        mg_assert_reply $reply 300 [llength $keys]
        assert_equal 0 [dict get $reply keys_serialized]
        mg_assert_keys 1 $snap
        mg_assert_absent 0 $keys
        assert_equal 0 [mr_info 0 slotalloc_used_bytes]
        mr_wait_no_blocks 0 $slot
        # The blocks' pages went back to the OS (on the lazyfree thread)
        # before the reply: none is left waiting.
        assert {[mr_info 0 slotalloc_reserved_bytes] < $reserved}
        assert_equal 0 [mr_info 0 slotalloc_retired_bytes]
        # What the keys held is uncounted exactly once: what stays is the
        # keyspace's grown tables and the like, and it does not grow when
        # the same keys come back and leave again.
        set fill [expr {$filled - $before}]
        set after [mr_info 0 used_memory]
        assert {$after < $before + $fill / 4 && $after > $before - $fill / 10}
        mg_wait_converged
        mg_migrate 1 0 $M
        assert_equal [llength $keys] [R 0 dbsize]
        mg_wait_converged
        mg_migrate 0 1 $M
        set again [mr_info 0 used_memory]
        assert {abs($again - $after) < $fill / 10}
        assert_equal 0 [mr_info 0 slotalloc_used_bytes]
        mg_assert_keys 1 $snap
        mg_wait_converged
    }

    test {Migration delete: keys expiring on the donor before the delete, freed by the lazyfree thread} {
        set M {300-399}
        set Mset [mg_slotset $M]
        R 0 config set lazyfree-lazy-expire yes
        R 0 config set lazyfree-lazy-server-del yes
        set before [mr_info 0 used_memory]
        set keys [mr_fill 0 e 600 $Mset]
        # Big hashes (freed by the lazyfree thread when they expire) with a
        # TTL that ends while the donor thread sleeps before the delete.
        set big [mg_names ebig 20 $Mset]
        foreach k $big {
            set args {}
            for {set f 0} {$f < 2000} {incr f} { lappend args f$f $f }
            R 0 hset $k {*}$args
        }
        # One skiplist: its slot is deleted key by key.
        set zkey [lindex [mg_names ez 1 $Mset] 0]
        for {set i 0} {$i < 200} {incr i} { R 0 zadd $zkey $i m$i }
        R 0 debug slotcompact all
        set snap [mg_snapshot 0 [concat $keys $zkey]]
        foreach k $big { R 0 pexpire $k 1500 }
        mg_delay 0 delete 3000
        set t0 [clock milliseconds]
        set reply [mg_migrate 0 1 $M]
        mg_delay_reset 0
        assert {[clock milliseconds] - $t0 >= 3000}
        assert {[dict get $reply keys_serialized] >= 1}
        mg_assert_keys 1 $snap
        mg_assert_absent 0 [concat $keys $big $zkey]
        # The big hashes expired on the donor (or were unlinked), and the
        # lazyfree thread is done with them.
        wait_for_condition 100 50 {
            [mr_info 0 lazyfree_pending_objects] == 0
        } else { fail "lazyfree still has objects" }
        foreach k $big { assert_equal 0 [R 1 exists $k] }
        set after [mr_info 0 used_memory]
        assert {$after < $before + 1000000}
        assert_equal 0 [mr_info 0 slotalloc_used_bytes]
        # The skiplist's slot, deleted key by key, keeps no (cached empty)
        # block either.
        mr_wait_no_blocks 0 [mg_keyslot $zkey]
        R 0 config set lazyfree-lazy-expire no
        R 0 config set lazyfree-lazy-server-del no
        assert_equal PONG [R 0 ping]
        mg_wait_converged
    }
}
