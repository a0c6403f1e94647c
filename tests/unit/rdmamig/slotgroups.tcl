# Slot groups (slot-affinity-group-slots; src/slotalloc.c and
# src/slotcompact.c, "Slot groups"): with slot-affinity yes, the G aligned
# slots of a group share one arena of blocks, so that small slots do not
# each pay a block's slack. Checked here:
# 1. the slots of a group share one arena, every key lies in it (DEBUG
#    SLOTCOMPACT CHECK), and CLUSTER SLOTBLOCKS says which arena;
# 2. the same small keys over many slots hold far fewer resident block
#    bytes in groups than one slot per arena, and CONFIG SET moves the keys
#    between the two layouts with nothing changed;
# 3. a migration of a range that splits groups, both ways: every key
#    identical, both nodes' blocks sound, only the split groups' slots
#    relocated, the donor's other slots of the split groups untouched, the
#    moved slots back in their groups' arenas on the recipient;
# 4. a migration of whole groups ships their arenas as they are: nothing
#    relocated on either node, every key identical, and back; so does the
#    part of a group a donor serves, the rest served elsewhere, and one of
#    those other slots assigned to the donor and written mid-migration
#    keeps its keys (the migration fails before the pins, or keeps the
#    blocks at the delete after);
# 5. a write to an empty slot of a group in transfer reaches the
#    recipient;
# 6. keys left in a group's arena by a change of groups that slot-affinity
#    no cut short are evacuated, and their slots can migrate again; with
#    slot-affinity yes, a group's first slot still migrates after a change
#    to groups of 1;
# 7. bad values are refused and change nothing.

source tests/helpers/rdmamig-migrate.tcl

# Small string keys, n of them, spread over node n's slots in slotset.
proc sg_small {n prefix count slotset} {
    set keys [mg_names $prefix $count $slotset]
    foreach k $keys { R $n set $k [string repeat x 20] }
    return $keys
}

# Wait until node n's background cycle has nothing left to relocate: a
# migration's relocated_keys counts what the node relocated meanwhile.
proc sg_settled {n} {
    R $n debug slotcompact all
    wait_for_condition 100 50 {
        [mg_slotalloc $n slotalloc_pending_slots] == 0 &&
        [mg_slotalloc $n slotalloc_pending_keys] == 0 &&
        [mg_slotalloc $n slotalloc_pending_big_keys] == 0
    } else {
        fail "node $n: slot compaction never settled: [R $n info slotalloc]"
    }
}

# Wait until every key of node n's slots in ranges lies in its blocks:
# what a migration of them needs to relocate nothing at its prepare. The
# compaction's pending counters at 0 (sg_settled) were not enough: right
# after them a CI run found 7 keys to relocate on the way back, and one
# run in 15 here 1 key on the way there (2026-11-30; cause not found: if
# such a key never reaches its blocks, this wait fails and names it).
proc sg_in_blocks {n ranges} {
    set slots [mg_slotset $ranges]
    wait_for_condition 100 50 {
        [llength [sg_stragglers $n $slots]] == 0
    } else {
        fail "node $n: keys outside their blocks: [sg_stragglers $n $slots]"
    }
}

proc sg_stragglers {n slots} {
    set out {}
    foreach s $slots {
        set d [R $n cluster slotblocks $s]
        if {[dict get $d keys] != [dict get $d keys_in_blocks]} {
            lappend out "slot $s: [dict get $d keys] keys, [dict get $d keys_in_blocks] in blocks"
        }
    }
    return $out
}

# Wait until the cron's sweep published node n's resident block bytes
# for the current layout (two sweeps after it settled), and return them.
proc sg_resident {n} {
    R $n debug slotcompact all
    after 3500
    mg_slotalloc $n slotalloc_resident_bytes
}

start_cluster 2 0 {overrides {cluster-enabled yes cluster-node-timeout 15000 slot-affinity yes slot-affinity-group-slots 64} tags {external:skip cluster rdmamig}} {
    # Node 0 serves 0-8191, node 1 8192-16383.
    mg_fast_clients

    test {Slot groups: the slots of a group share one arena, and every key lies in it} {
        set keys [sg_small 0 sg 3000 [mg_slotset {0-8191}]]
        lappend keys {*}[mg_fill 0 sgm 300 [mg_slotset {100-300}]]
        # Node 1 holds keys too (DEBUG DIGEST of an empty node is not that
        # of its keys' XOR: mg_pair_digest needs both non-empty).
        set keys1 [sg_small 1 sg1 200 [mg_slotset {8192-16383}]]
        R 0 debug slotcompact all
        foreach s {0 63 64 100 127 130 8191} {
            set d [R 0 cluster slotblocks $s]
            assert_equal [expr {$s & ~63}] [dict get $d arena]
            assert_equal 64 [dict get $d arena_slots]
            assert_equal [dict get $d keys] [dict get $d keys_in_blocks]
        }
        set c [R 0 debug slotcompact check]
        assert_equal 0 [dict get $c misplaced]
        assert_equal 0 [dict get $c dead]
        assert_equal {} [dict get $c problem]
        mg_assert_slotalloc_sound 0
        assert_equal 64 [lindex [R 0 config get slot-affinity-group-slots] 1]
        # INFO says it too (redis-cli's rebalance reads it: cliPickSlots).
        assert_equal 64 [mg_slotalloc 0 slotalloc_group_slots]
    }

    test {Slot groups: small keys over many slots hold far fewer resident bytes, and CONFIG SET moves them} {
        set digest [R 0 debug digest]
        set grouped [sg_resident 0]
        R 0 config set slot-affinity-group-slots 1
        set single [sg_resident 0]
        # ~2,900 slots holding keys: at least a header and a slab page
        # each on their own, a few pages per group of 64 in groups.
        assert {$single > 2 * 4096 * 2000}
        assert {$grouped * 5 < $single}
        foreach s {0 63 100} {
            set d [R 0 cluster slotblocks $s]
            assert_equal $s [dict get $d arena]
            assert_equal [dict get $d keys] [dict get $d keys_in_blocks]
        }
        mg_assert_slotalloc_sound 0
        R 0 config set slot-affinity-group-slots 64
        assert {[sg_resident 0] * 5 < $single}
        assert_equal 128 [dict get [R 0 cluster slotblocks 130] arena]
        mg_assert_slotalloc_sound 0
        assert_equal $digest [R 0 debug digest]
    }

    test {Slot groups: a migration that splits groups, both ways} {
        # 100-300 splits groups 64-127 and 256-319 at both ends.
        set ranges {100-300}
        set moved [mg_keys_in $keys [mg_slotset $ranges]]
        set stay [mg_keys_not_in $keys [mg_slotset $ranges]]
        set staysnap [mg_snapshot 0 [lrange $stay 0 299]]
        sg_settled 0
        mg_migrate_checked 0 1 $ranges [mg_snapshot 0 $moved]
        mg_assert_keys 0 $staysnap
        # Only the split groups' slots were relocated: groups 128-191 and
        # 192-255 moved whole, their arenas shipped as they were.
        set edges [mg_keys_in $keys [mg_slotset {100-127 256-300}]]
        assert_equal [llength $edges] [mg_info 0 migration_last_relocated_keys]
        # INFO names the slots given an arena of their own (28 + 45).
        assert_equal 73 [mg_info 0 migration_last_isolated_slots]
        # The moved slots are back in their groups' arenas on the
        # recipient, the background cycle moves their keys there.
        wait_for_condition 100 100 {
            [dict get [R 1 cluster slotblocks 100] arena] == 64 &&
            [dict get [R 1 cluster slotblocks 300] arena] == 256 &&
            [dict get [R 1 cluster slotblocks 300] keys] ==
                [dict get [R 1 cluster slotblocks 300] keys_in_blocks]
        } else {
            fail "node 1: slots not back in their groups: [R 1 cluster slotblocks 300]"
        }
        R 1 debug slotcompact all
        mg_assert_slotalloc_sound 1
        # The donor's slots of the split groups kept theirs.
        assert_equal 64 [dict get [R 0 cluster slotblocks 99] arena]
        assert_equal 256 [dict get [R 0 cluster slotblocks 301] arena]
        mg_wait_converged
        # And back, with a few keys written on the recipient.
        foreach k [lrange $moved 0 19] { mg_touch 1 $k }
        mg_migrate_checked 1 0 $ranges [mg_snapshot 1 $moved]
        mg_wait_converged
        mg_cluster_check 0
    }

    test {Slot groups: whole groups move without relocation, and come back} {
        # Groups 1024-1087 and 1088-1151, with keys of every type, TTLs
        # and big ones.
        set ranges {1024-1151}
        set gkeys [mg_keys_in $keys [mg_slotset $ranges]]
        lappend gkeys {*}[mg_fill 0 sgw 400 [mg_slotset $ranges]]
        lappend gkeys {*}[mg_fill_big 0 sgbig [mg_slotset {1100}] 20000]
        sg_settled 0
        sg_in_blocks 0 $ranges
        mg_assert_slotalloc_sound 0
        mg_migrate_checked 0 1 $ranges [mg_snapshot 0 $gkeys]
        assert_equal 0 [mg_info 0 migration_last_relocated_keys]
        assert_equal 0 [mg_info 0 migration_last_isolated_slots]
        # On the recipient, the groups are in their own arenas already:
        # only the values that travelled as DUMP payloads (big hash
        # tables, skiplists, streams) are in the heap, for the background
        # cycle to place.
        foreach s {1024 1087 1088 1100 1151} {
            assert_equal [expr {$s & ~63}] [dict get [R 1 cluster slotblocks $s] arena]
        }
        R 1 debug slotcompact all
        assert_equal {} [sg_stragglers 1 {1024 1087 1088 1100 1151}]
        # The donor let go of the groups' blocks whole.
        foreach s {1024 1100} {
            assert_equal 0 [dict get [R 0 cluster slotblocks $s] blocks]
        }
        mg_wait_converged
        # And back, after writes on the recipient.
        foreach k [lrange $gkeys 0 29] { mg_touch 1 $k }
        sg_settled 1
        sg_in_blocks 1 $ranges
        mg_migrate_checked 1 0 $ranges [mg_snapshot 1 $gkeys]
        assert_equal 0 [mg_info 1 migration_last_relocated_keys]
        mg_wait_converged
        mg_cluster_check 0
    }

    # A group the cluster's layout splits (3 masters own 0-5460,
    # 5461-10922, 10923-16383; here half of a group moved away first)
    # leaves, on the node keeping the rest, slots it does not serve: with
    # no key, and none to come, they do not keep the rest from moving as
    # its arena, whole, with nothing relocated (migDonorIdleSlots).
    test {Slot groups: the part of a group a donor serves moves whole} {
        set ranges {4224-4287}
        set hkeys [mg_keys_in $keys [mg_slotset $ranges]]
        lappend hkeys {*}[mg_fill 0 sgh 300 [mg_slotset $ranges]]
        sg_settled 0
        mg_migrate_checked 0 1 {4224-4255} [mg_snapshot 0 [mg_keys_in $hkeys [mg_slotset {4224-4255}]]]
        mg_wait_converged
        assert {[mg_info 0 migration_last_relocated_keys] > 0}
        assert_equal 32 [mg_info 0 migration_last_isolated_slots]
        set rest [mg_keys_in $hkeys [mg_slotset {4256-4287}]]
        sg_settled 0
        sg_in_blocks 0 {4256-4287}
        assert_equal {4224 64 0} [lmap f {arena arena_slots arena_mixed} {
            dict get [R 0 cluster slotblocks 4224] $f
        }]
        mg_migrate_checked 0 1 {4256-4287} [mg_snapshot 0 $rest]
        assert_equal 0 [mg_info 0 migration_last_relocated_keys]
        assert_equal 0 [mg_info 0 migration_last_isolated_slots]
        # The arena went wholesale.
        assert_equal 0 [dict get [R 0 cluster slotblocks 4256] blocks]
        mg_assert_slotalloc_sound 0
        mg_wait_converged
        # And back as one group: node 1 serves all of it now.
        sg_settled 1
        sg_in_blocks 1 $ranges
        mg_migrate_checked 1 0 $ranges [mg_snapshot 1 $hkeys]
        assert_equal 0 [mg_info 1 migration_last_relocated_keys]
        mg_wait_converged
        mg_cluster_check 0
    }

    # The other side of that: an operator assigns one of those idle slots
    # back to the donor while the rest of its group is moving, and a client
    # writes it there. Held at the watch (the prepare, after the pins), the
    # group no longer moves whole: the migration fails, "try again", and
    # the next one isolates the moving slots. Held at the transfer or the
    # delete (the units formed), the pinned arena takes no new allocation
    # and the delete keeps the blocks of an arena a slot of which holds a
    # key. Either way every key is where it belongs, unchanged, and the
    # written slot then moves like any other, and back.
    foreach {phase group} {watch 4352 transfer 4416 delete 4480} {
        test "Slot groups: an idle slot of a group moving whole, assigned to the donor and written in $phase, keeps its keys" {
            set mid [expr {$group + 31}]
            set first "$group-$mid"
            set second "[expr {$mid + 1}]-[expr {$group + 63}]"
            set gk [mg_keys_in $keys [mg_slotset "$group-[expr {$group + 63}]"]]
            # The first half's last 4 slots get no new key, so that one of
            # them is empty on node 1.
            lappend gk {*}[mg_fill 0 sgo$group 200 [mg_slotset "$group-[expr {$mid - 4}] $second"]]
            set fk [mg_keys_in $gk [mg_slotset $first]]
            mg_migrate_checked 0 1 $first [mg_snapshot 0 $fk]
            mg_wait_converged
            set x [lsearch -inline -not [lmap s [mg_expand $first] {
                expr {[R 1 cluster countkeysinslot $s] ? {} : $s}
            }] {}]
            assert {$x ne {}}
            set rest [mg_keys_in $gk [mg_slotset $second]]
            sg_settled 0
            sg_in_blocks 0 $second
            set snap [mg_snapshot 0 $rest]
            set id0 [R 0 cluster myid]
            if {$phase eq {watch}} {
                # The watch is a stage of the prepare, told by the log.
                set from [count_log_lines 0]
                mg_delay_reset 0
                mg_delay 0 watch 1500
                set rd [mg_migrate_deferred 0 1 $second]
                wait_for_log_messages 0 {"*migration-test-delay-watch: the manifests of*"} $from 1000 10
            } else {
                set rd [mg_start_held $second $phase 1500]
            }
            R 1 cluster setslot $x node $id0
            R 0 cluster setslot $x node $id0
            set xk [mg_names sgx$group 3 [mg_slotset $x]]
            assert_equal OK [R 0 set [lindex $xk 0] written]
            mg_make_key 0 [lindex $xk 1] hashlp
            mg_make_key 0 [lindex $xk 2] listbig
            set xsnap [mg_snapshot 0 $xk]
            if {$phase eq {watch}} {
                mg_held_error $rd {shares arena .* with slots that do not move.*try again}
                mg_assert_owner 0 $second
                mg_assert_keys 0 $snap
                mg_assert_slotalloc_sound 0
                mg_wait_converged
                # Tried again: the moving slots are isolated first.
                mg_migrate_checked 0 1 $second $snap
                assert {[mg_info 0 migration_last_relocated_keys] > 0}
            } else {
                mg_assert_reply [mg_deferred_reply $rd 0] 32 [llength $rest]
                mg_assert_owner 1 $second
                mg_assert_keys 1 $snap
                mg_assert_absent 0 $rest
            }
            mg_assert_keys 0 $xsnap
            assert_equal written [R 0 get [lindex $xk 0]]
            assert_equal 3 [R 0 cluster countkeysinslot $x]
            # Kept out of the pinned arena, the slot's keys go to its
            # blocks once the migration is over.
            wait_for_condition 100 100 {
                [llength [sg_stragglers 0 [list $x]]] == 0
            } else {
                fail "slot $x: keys never placed: [sg_stragglers 0 [list $x]]"
            }
            mg_assert_slotalloc_sound 0
            mg_assert_slotalloc_sound 1
            mg_wait_converged
            mg_assert_owner 0 $x
            # The slot written moves like any other, and back.
            sg_settled 0
            mg_migrate_checked 0 1 $x $xsnap
            mg_wait_converged
            mg_migrate_checked 1 0 $x [mg_snapshot 1 $xk]
            mg_wait_converged
            mg_cluster_check 0
        }
    }

    # An empty slot of a group that moves whole shares the arena being
    # sent, and has no manifest: a write to it during the transfer is held
    # until the group's blocks have left, then replayed on the recipient
    # (or redirected there once the handover is done).
    test {Slot groups: a write to an empty slot of a group in transfer reaches the recipient} {
        set ranges {2048-2111}
        set gkeys [mg_keys_in $keys [mg_slotset $ranges]]
        lappend gkeys {*}[mg_fill 0 sge 200 [mg_slotset {2048-2100}]]
        # An empty slot of the group (the first test's keys are spread).
        set e [lsearch -inline -not [lmap s [mg_expand {2101-2111}] {
            expr {[R 0 cluster countkeysinslot $s] ? {} : $s}
        }] {}]
        assert {$e ne {}}
        set empty [lindex [mg_names sge:empty 1 [mg_slotset $e]] 0]
        R 0 debug slotcompact all
        set snap [mg_snapshot 0 $gkeys]
        mg_delay 0 write 1500
        set rd [mg_migrate_deferred 0 1 $ranges]
        mg_wait_phase 0 transfer
        after 200
        set wr [redis_deferring_client 0]
        $wr set $empty written
        set reply [mg_deferred_reply $rd 0]
        # Done on the donor (then replayed), or held past the handover and
        # redirected: a cluster client follows the MOVED.
        if {[catch {$wr read} r]} {
            assert_match "MOVED *" $r
            assert_equal OK [R 1 set $empty written]
        } else {
            assert_equal OK $r
        }
        $wr close
        mg_assert_reply $reply [llength [mg_expand $ranges]] [llength $gkeys]
        mg_assert_owner 1 $ranges
        mg_assert_keys 1 $snap
        assert_equal written [R 1 get $empty]
        assert_equal 0 [R 0 cluster countkeysinslot $e]
        mg_assert_slotalloc_sound 0
        mg_assert_slotalloc_sound 1
        mg_wait_converged
    }

    # A change of groups moves each slot's keys in the background; turning
    # slot-affinity off before that ended leaves keys in an arena their
    # slots no longer map to. With groups of 1 every arena id is in use, so
    # a migration of the slot that kept that arena cannot isolate it: it is
    # refused, with a reason, until the evacuation has taken the leftovers
    # back to the heap (slotCompactEvacuateCron walks an arena's slots that
    # left it). Before that walk the leftovers stayed for good, and the
    # slot could never move again.
    test {Slot groups: keys left in a group's arena when slot-affinity goes off are evacuated, and the slot moves} {
        set ranges {4096-4159}
        set gkeys [mg_keys_in $keys [mg_slotset $ranges]]
        lappend gkeys {*}[sg_small 0 sgl 300 [mg_slotset $ranges]]
        sg_settled 0
        sg_in_blocks 0 $ranges
        set digest [R 0 debug digest]
        set cpu [lindex [R 0 config get slot-affinity-cpu] 1]
        # No background cycle between the two changes: the relocation the
        # first one queues is dropped by the second.
        R 0 config set slot-affinity-cpu 0
        R 0 config set slot-affinity-group-slots 1
        R 0 config set slot-affinity no
        assert_equal 1 [mg_slotalloc 0 slotalloc_group_slots]
        set d [R 0 cluster slotblocks 4096]
        assert_equal {4096 1 1} [list [dict get $d arena] [dict get $d arena_slots] [dict get $d arena_mixed]]
        assert_equal 0 [dict get [R 0 cluster slotblocks 4097] keys_in_blocks]
        # Every slot in an arena of its own, also those the migrations
        # above brought back (an import that had DUMP payloads once left
        # them asked for, out of every later change of groups).
        set odd {}
        foreach s [mg_expand {0-2047}] {
            set a [dict get [R 0 cluster slotblocks $s] arena]
            if {$a != $s} { lappend odd "$s:$a" }
        }
        assert_equal {} $odd
        # Refused with what to wait for; nothing changed.
        catch {R 0 rdmamigrateslots [srv -1 host] [srv -1 port] 4096 transport tcp} err
        assert_match {*slot 4096 is alone in an arena that still holds keys of slots that left it*arena_mixed 0*} $err
        mg_assert_owner 0 {4096}
        assert_equal $digest [R 0 debug digest]
        # The evacuation takes every leftover to the heap: with slot-affinity
        # no the node ends holding no live allocation in blocks.
        R 0 config set slot-affinity-cpu $cpu
        wait_for_condition 200 100 {
            [dict get [R 0 cluster slotblocks 4096] arena_mixed] == 0 &&
            [mg_slotalloc 0 slotalloc_live_allocs] == 0
        } else {
            fail "leftovers never evacuated: [R 0 cluster slotblocks 4096] [R 0 info slotalloc]"
        }
        assert {[mg_slotalloc 0 slotalloc_evacuated_keys] >= [llength $gkeys]}
        assert_equal $digest [R 0 debug digest]
        mg_assert_slotalloc_sound 0
        # And the group moves, and back.
        mg_migrate_checked 0 1 $ranges [mg_snapshot 0 $gkeys]
        mg_wait_converged
        mg_migrate_checked 1 0 $ranges [mg_snapshot 1 $gkeys]
        mg_wait_converged
        # Back to groups of 64: slot-affinity yes maps them again.
        R 0 config set slot-affinity-group-slots 64
        R 0 config set slot-affinity yes
        sg_settled 0
        assert_equal 4096 [dict get [R 0 cluster slotblocks 4100] arena]
        mg_assert_slotalloc_sound 0
    }

    # The same change with slot-affinity yes: the background cycle moves
    # the keys of the slots that left each group's arena, but the arena
    # stays marked as holding leftovers until it empties, and with groups
    # of 1 no arena id is free to isolate its first slot. The migration
    # (and CLUSTER SLOTBLOCKS) then finds, by a walk of the slot's keys,
    # that the arena holds nothing else any more.
    test {Slot groups: after a change to groups of 1, a group's first slot still moves} {
        set lead [mg_keys_in $gkeys [mg_slotset {4096}]]
        assert {[llength $lead] > 0}
        R 0 config set slot-affinity-group-slots 1
        sg_settled 0
        sg_in_blocks 0 {4096-4159}
        assert_equal 4097 [dict get [R 0 cluster slotblocks 4097] arena]
        mg_migrate_checked 0 1 {4096} [mg_snapshot 0 $lead]
        mg_wait_converged
        mg_migrate_checked 1 0 {4096} [mg_snapshot 1 $lead]
        mg_wait_converged
        # Another group's first slot, seen by CLUSTER SLOTBLOCKS.
        assert {[R 0 cluster countkeysinslot 4160] > 0}
        assert_equal {4160 1 0} [lmap f {arena arena_slots arena_mixed} {
            dict get [R 0 cluster slotblocks 4160] $f
        }]
        mg_assert_slotalloc_sound 0
        R 0 config set slot-affinity-group-slots 64
        sg_settled 0
        assert_equal 4096 [dict get [R 0 cluster slotblocks 4100] arena]
    }

    # migration_last_relocated_keys counts the keys of the moving slots
    # the prepare relocated, not what the background cycle relocated
    # elsewhere meanwhile: here the sparse-block sweep drains a block of
    # a slot that stays, during the prepare's 4 s wait before the freeze
    # (a full sweep takes 3.2 s). Counting every relocation on the node
    # made "whole groups move without relocation" above fail once in a
    # while, with 3 keys no test had put outside their blocks.
    test {Slot groups: a prepare counts only its own slots' relocations} {
        R 0 config set slot-affinity-group-slots 1
        sg_settled 0
        set S 6000
        while {[R 0 cluster countkeysinslot $S] != 0} { incr S }
        lassign [mg_names sgsparse 3 [mg_slotset $S]] big1 big2 small
        # Slot S with two blocks, the first one nearly empty: a 64 KB
        # block holding small, a 128 KB one holding big2.
        R 0 set $big1 [string repeat a 40000]
        R 0 set $small small
        R 0 debug slotcompact $S
        R 0 set $big2 [string repeat b 40000]
        R 0 debug slotcompact $S
        R 0 del $big1
        assert_equal 2 [dict get [R 0 cluster slotblocks $S] blocks]
        mg_fill 0 sgtally 40 [mg_slotset {7100-7107}]
        set moved {}
        foreach s [mg_expand {7100-7107}] {
            lappend moved {*}[R 0 cluster getkeysinslot $s 1000]
        }
        sg_settled 0
        sg_in_blocks 0 {7100-7107}
        set before [mg_slotalloc 0 slotalloc_relocated_keys]
        mg_delay 0 watch 4000
        mg_migrate_checked 0 1 {7100-7107} [mg_snapshot 0 $moved]
        mg_delay_reset 0
        # The sweep drained the sparse block meanwhile (relocating small)...
        assert_equal 1 [dict get [R 0 cluster slotblocks $S] blocks]
        assert {[mg_slotalloc 0 slotalloc_relocated_keys] > $before}
        assert_equal small [R 0 get $small]
        # ... which is not the migration's.
        assert_equal 0 [mg_info 0 migration_last_relocated_keys]
        assert_equal 0 [mg_info 0 migration_last_relocated_bytes]
        mg_wait_converged
        mg_migrate_checked 1 0 {7100-7107} [mg_snapshot 1 $moved]
        mg_wait_converged
        R 0 del $big2 $small
        R 0 config set slot-affinity-group-slots 64
        sg_settled 0
        mg_assert_slotalloc_sound 0
    }

    test {Slot groups: bad values are refused and change nothing} {
        foreach v {0 3 48 32768 -1 abc} {
            assert_error {*slot-affinity-group-slots*} {R 0 config set slot-affinity-group-slots $v}
        }
        assert_equal 64 [lindex [R 0 config get slot-affinity-group-slots] 1]
        assert_equal 64 [dict get [R 0 cluster slotblocks 127] arena]
    }
}
