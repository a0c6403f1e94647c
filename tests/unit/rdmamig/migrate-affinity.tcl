# Block migration whatever slot-affinity says (docs/DESIGN.md, "Slot
# blocks", "Placement and migration").
#
# With slot-affinity no the keys live in the general heap and nothing is
# relocated in the background; RDMAMIGRATESLOTS still moves slots as
# blocks: the donor starts the allocator on first use, relocates the
# moving slots' keys at its prepare, ships the blocks and releases them;
# the recipient starts its allocator on INITRDMASERVER and adopts them.
# Checked here, on nodes started with slot-affinity no:
# 1. no address space is reserved until a migration needs it;
# 2. small slots (a few small keys each) and large slots (big keys of
#    every type, MBs each) move as blocks both ways, every key identical
#    (DUMP, DEBUG DIGEST-VALUE, TTL), the donor keeps no key and no block
#    byte, both nodes' blocks sound (DEBUG SLOTCOMPACT CHECK);
# 3. between a node with slot-affinity yes and one with no, both ways;
# 4. CONFIG SET slot-affinity no on a node whose keys are in blocks;
# 5. the moved keys take no more memory on the recipient, once back in its
#    heap, than they took on the donor.
# Every other migration test file also runs with slot-affinity no
# (utils/run-tests.sh, `ours`).

source tests/helpers/rdmamig-migrate.tcl

# The moving slots' keys on node n: a snapshot of them all.
proc ma_fill {n prefix small large} {
    set keys [mg_fill $n "$prefix:s" 300 [mg_slotset $small]]
    lappend keys {*}[mg_fill_big $n "$prefix:l" [mg_slotset $large] 20000]
    lappend keys {*}[mg_fill $n "$prefix:m" 100 [mg_slotset $large]]
    return $keys
}

# Migrate ranges from node 'from' to node 'to' and check everything a user
# relies on: the reply, the owner in every node's view, every key of snap
# identical on 'to' and absent on 'from', the two nodes' keys in total
# unchanged, nothing left in the donor's blocks, both nodes' blocks sound.
proc ma_check_migration {from to ranges snap} {
    set reply [mg_migrate_checked $from $to $ranges $snap]
    assert_equal {} [mg_open_slots $from]
    assert_equal {} [mg_open_slots $to]
    # The donor gave its copy back with the blocks: none of the moved
    # slots holds a block byte there (lazy frees may take a moment).
    foreach s [mg_expand $ranges] {
        wait_for_condition 50 100 {
            [dict get [R $from cluster slotblocks $s] block_bytes] == 0
        } else {
            fail "node $from still holds blocks of slot $s: [R $from cluster slotblocks $s]"
        }
    }
    mg_wait_converged
    mg_cluster_check $from
    return $reply
}

# Node n (slot-affinity no) moved what a migration left in blocks back to
# its heap.
proc ma_wait_evacuated {n} {
    wait_for_condition 200 100 {
        [mg_slotalloc $n slotalloc_used_bytes] == 0
    } else {
        fail "node $n kept keys in blocks: [R $n info slotalloc]"
    }
}

start_cluster 2 0 {overrides {cluster-enabled yes cluster-node-timeout 15000 slot-affinity no} tags {external:skip cluster rdmamig}} {
    # Node 0 serves 0-8191, node 1 8192-16383.
    mg_fast_clients
    set small {100-299}
    set large {400-403}
    set ranges "$small $large"

    test {slot-affinity no: no slot blocks until a migration needs them} {
        set keys [ma_fill 0 a $small $large]
        mg_wait_converged
        foreach n {0 1} {
            assert_equal {slot-affinity no} [R $n config get slot-affinity]
            assert_equal 0 [mg_slotalloc $n slotalloc_enabled]
            assert_equal 0 [mg_slotalloc $n slotalloc_range_bytes]
        }
        # Nothing of the keys is in blocks.
        foreach s [lrange [mg_expand $large] 0 1] {
            set d [R 0 cluster slotblocks $s]
            assert {[dict get $d keys] > 0}
            assert_equal 0 [dict get $d keys_in_blocks]
        }
    }

    test {slot-affinity no on both nodes: small and large slots move as blocks, and back} {
        set snap [mg_snapshot 0 $keys]
        set reply [ma_check_migration 0 1 $ranges $snap]
        # The prepare relocated the keys: they travelled as blocks, not
        # re-created from DUMP payloads (only skiplists and streams are).
        assert {[dict get $reply keys_zero_copy] > [llength $keys] / 2}
        assert {[mg_slotalloc 0 slotalloc_relocated_keys] >= [dict get $reply keys_zero_copy]}
        # INFO says what the prepare relocated, and how long it took.
        assert {[mg_info 0 migration_last_relocated_keys] >= [dict get $reply keys_zero_copy]}
        assert {[mg_info 0 migration_last_relocated_bytes] > 1000000}
        assert {[mg_info 0 migration_last_relocate_ms] <= [dict get $reply prepare_ms]}
        foreach n {0 1} {
            # The allocator runs now; relocation in the background does not.
            assert_equal 0 [mg_slotalloc $n slotalloc_enabled]
            assert {[mg_slotalloc $n slotalloc_range_bytes] > 0}
        }
        assert_equal 0 [mg_slotalloc 0 slotalloc_used_bytes]
        # What the donor's prepare relocated was never moved back meanwhile.
        assert_equal 0 [mg_slotalloc 0 slotalloc_evacuated_keys]
        # The recipient moves what it adopted back to the heap, in the
        # background, and gives the blocks back.
        wait_for_condition 200 100 {
            [mg_slotalloc 1 slotalloc_used_bytes] == 0 &&
            [mg_slotalloc 1 slotalloc_pending_slots] == 0
        } else {
            fail "node 1 kept keys in blocks: [R 1 info slotalloc]"
        }
        assert {[mg_slotalloc 1 slotalloc_evacuated_keys] >= [llength $keys] / 2}
        assert {[mg_slotalloc 1 slotalloc_evacuated_bytes] > 1000000}
        wait_for_condition 50 100 {
            [mg_slotalloc 1 slotalloc_reserved_bytes] == 0
        } else {
            fail "node 1 still holds blocks: [R 1 info slotalloc]"
        }
        # Settled, the blocks cost no RAM on either node: nothing resident,
        # no slack (INFO's figures, from the cron's sweep).
        wait_for_condition 100 100 {
            [mg_slotalloc 0 slotalloc_resident_bytes] == 0 &&
            [mg_slotalloc 1 slotalloc_resident_bytes] == 0 &&
            [mg_slotalloc 0 slotalloc_slack_bytes] == 0 &&
            [mg_slotalloc 1 slotalloc_slack_bytes] == 0
        } else {
            fail "blocks still resident: [R 0 info slotalloc] [R 1 info slotalloc]"
        }
        mg_assert_keys 1 $snap
        mg_assert_slotalloc_sound 1
        # Written on the recipient: changed keys, new keys; then back.
        set shuffled [lshuffle $keys]
        foreach k [lrange $shuffled 0 49] { mg_touch 1 $k }
        set new [mg_fill 1 an 50 [mg_slotset $small]]
        set keys [concat $shuffled $new]
        set snap [mg_snapshot 1 $keys]
        ma_check_migration 1 0 $ranges $snap
        assert_equal 0 [mg_slotalloc 1 slotalloc_used_bytes]
        ma_wait_evacuated 0
        mg_assert_keys 0 $snap
    }

    test {slot-affinity yes on the donor, no on the recipient, and back} {
        # Each slot its own arena on the donor: the ranges below split
        # groups of any larger size, and a split group is relocated at the
        # prepare (slotgroups.tcl), which is not what is counted here.
        set group [lindex [R 0 config get slot-affinity-group-slots] 1]
        R 0 config set slot-affinity-group-slots 1
        R 0 config set slot-affinity yes
        assert_equal 1 [mg_slotalloc 0 slotalloc_enabled]
        R 0 debug slotcompact all
        set keys [concat $keys [ma_fill 0 b $small $large]]
        R 0 debug slotcompact all
        # Every key is in its blocks before the migration. (The prepare may
        # still move some: out of a block the sparse sweep started to drain
        # meanwhile, a cron's doing; that is why it is not counted here.)
        foreach s [mg_expand $ranges] {
            set d [R 0 cluster slotblocks $s]
            assert_equal [dict get $d keys] [dict get $d keys_in_blocks]
        }
        set snap [mg_snapshot 0 $keys]
        ma_check_migration 0 1 $ranges $snap
        assert {[mg_info 0 migration_last_relocated_keys] < [llength $keys] / 2}
        # Back from the node with no into the one with yes.
        set snap [mg_snapshot 1 $keys]
        ma_check_migration 1 0 $ranges $snap
        # The keys came as blocks, and background compaction places the
        # few that came as DUMP payloads (skiplists, streams): the node
        # with yes has every key in its slot's blocks again.
        foreach s [mg_expand $large] {
            wait_for_condition 100 100 {
                [dict get [R 0 cluster slotblocks $s] keys] ==
                [dict get [R 0 cluster slotblocks $s] keys_in_blocks]
            } else {
                fail "slot $s: not every key is in its blocks: [R 0 cluster slotblocks $s]"
            }
        }
        R 0 config set slot-affinity-group-slots $group
    }

    test {CONFIG SET slot-affinity no with keys in blocks: they still move, and back} {
        R 0 config set slot-affinity no
        # Writes now go to the heap; the blocks keep what was there.
        set shuffled [lshuffle $keys]
        foreach k [lrange $shuffled 0 99] { mg_touch 0 $k }
        set keys [concat $keys [mg_fill 0 c 100 [mg_slotset $ranges]]]
        set snap [mg_snapshot 0 $keys]
        ma_check_migration 0 1 $ranges $snap
        set snap [mg_snapshot 1 $keys]
        ma_check_migration 1 0 $ranges $snap
    }

    # Keys go into blocks and back into the heap by their allocations'
    # usable sizes; the blocks' size classes are jemalloc's, so a migration
    # leaves each allocation in the class it had. Hashes of ten fields whose
    # names take 8 bytes (jemalloc's smallest class): with 16 bytes as the
    # blocks' smallest class each name came back 8 bytes larger, for good.
    test {slot-affinity no: the recipient holds the moved keys in the memory the donor did} {
        R 0 config set slot-affinity no
        # (Neither node is empty before or after: mg_pair_digest.)
        foreach k [mg_names x 10 [mg_slotset 9000-9099]] { R 1 set $k $k }
        set slots {2000-2099}
        set hkeys [mg_names y 1000 [mg_slotset $slots]]
        set v [string repeat v 70]
        foreach k $hkeys {
            R 0 hset $k field0 $v field1 $v field2 $v field3 $v field4 $v \
                field5 $v field6 $v field7 $v field8 $v field9 $v
        }
        assert_equal hashtable [R 0 object encoding [lindex $hkeys 0]]
        set before 0
        foreach k $hkeys { incr before [R 0 memory usage $k samples 0] }
        set snap [mg_snapshot 0 $hkeys]
        ma_check_migration 0 1 $slots $snap
        ma_wait_evacuated 1
        set after 0
        foreach k $hkeys { incr after [R 1 memory usage $k samples 0] }
        # Not one allocation larger; smaller where relocation finished a
        # table's rehash (10 fields: 4% less). With the 16-byte smallest
        # class this was 1.2% more.
        assert_lessthan_equal $after $before
        assert {$after >= $before * 0.9}
        set snap [mg_snapshot 1 $hkeys]
        ma_check_migration 1 0 $slots $snap
    }
}

# A node whose allocator cannot start (a range smaller than a block)
# refuses block migration with the reason, and changes nothing.
start_cluster 2 0 {overrides {cluster-enabled yes cluster-node-timeout 15000 slot-affinity no slot-affinity-reserve 1mb slot-affinity-min-block 4mb} tags {external:skip cluster rdmamig}} {
    test {slot-affinity no: a node whose allocator cannot start refuses, and changes nothing} {
        foreach k [mg_names z 20 [mg_slotset 0-99]] { R 0 set $k $k }
        set before [list [mg_state 0] [mg_state 1]]
        mg_assert_err {no slot blocks on this node: cannot reserve the slot allocator's address space} {
            R 0 rdmamigrateslots [srv -1 host] [srv -1 port] 0-99 transport tcp
        }
        assert_equal $before [list [mg_state 0] [mg_state 1]]
        assert_equal 0 [mg_slotalloc 0 slotalloc_range_bytes]
    }
}
