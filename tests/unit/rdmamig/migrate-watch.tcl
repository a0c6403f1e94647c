# The prepare's manifests built while writes flow (src/migdonor.c,
# migDonorPrepareStep; slotfreeze.c, slotWatch). A donor builds each
# slot's manifest with the slots only watched, freezes them, and builds
# again only the manifests of the slots changed meanwhile. What a user
# relies on:
#
# 1. Writes to the migrating slots while the manifests are built are
#    answered at once (none is postponed): writes of every type, new keys
#    (one in a slot that held none), deletes (every key of one slot), TTL
#    changes, expiries, a script, a transaction, a big value. The recipient
#    then holds exactly what the donor held after them, the donor none of
#    it, each replica what its master holds. The slots written were built
#    again (INFO migration_last_manifests_rebuilt), and every manifest kept
#    is the one a fresh build gives (migration-test-delay-watch checks
#    them: migration_last_manifests_stale 0); the frozen part of the
#    prepare is short and the watch is no write pause.
# 2. A keyless write (a script naming no key) could touch any key: every
#    manifest is built again, and what it wrote arrives.
# 3. A migration cancelled while its slots are watched leaves everything on
#    the donor; a migration without writes keeps every manifest.

source tests/helpers/rdmamig-migrate.tcl

# Wait until node n's donor has built its manifests and waits before the
# freeze (migration-test-delay-watch), writes flowing; its log said so
# after line from_line.
proc mw_wait_watching {n from_line} {
    wait_for_log_messages -$n {"*migration-test-delay-watch: the manifests of*"} $from_line 1000 10
    assert_equal prepare [dict get [mg_status $n] phase]
    assert_equal 0 [mg_info $n migration_frozen_slots]
}

# A hash tag whose slot is in the slot set and holds no key on node n.
proc mw_empty_tag {n slotset} {
    for {set t 0} {$t < 200000} {incr t} {
        set s [mg_keyslot "e$t"]
        if {[dict exists $slotset $s] && [R $n cluster countkeysinslot $s] == 0} { return "e$t" }
    }
    fail "no empty slot in the slot set"
}

start_cluster 2 2 {overrides {cluster-enabled yes cluster-node-timeout 15000} tags {external:skip cluster rdmamig}} {
    mg_fast_clients

    test {manifests built while writes flow: writes are answered at once, the written slots are built again, every key arrives} {
        wait_for_condition 100 100 {
            [s -2 master_link_status] eq {up} && [s -3 master_link_status] eq {up}
        } else {
            fail "replicas not in sync"
        }
        set W {0-999}
        set Wset [mg_slotset $W]
        set fill [mg_fill_for_writes 0 w $Wset]
        dict with fill {}
        # Every key of one slot goes; another slot gets its first key.
        set lonely [lindex [lsort [mg_keys_in $keys $Wset]] 20]
        set doomed_slot [lmap k $keys { if {[mg_keyslot $k] == [mg_keyslot $lonely]} { set k } else continue }]
        set etag [mw_empty_tag 0 $Wset]
        set newkeys [concat [mg_names w:new 30 $Wset] [list w:{$etag}:first]]
        set written [lrange [mg_keys_not_in $keys [dict create [mg_keyslot $lonely] 1]] 10 99]
        set doomed [concat [lrange $keys 0 9] $doomed_slot]
        set doomed [lsort -unique $doomed]
        set written [lmap k $written { if {[lsearch -exact $doomed $k] < 0} { set k } else continue }]
        set postponed [mg_info 0 migration_postponed_commands]

        mg_delay 0 watch 4000
        set from [count_log_lines 0]
        set rd [mg_migrate_deferred 0 1 $W]
        mw_wait_watching 0 $from
        set t0 [clock milliseconds]
        R 0 expire [lindex $written 2] 7000
        R 0 expire [lindex $written 2] 9000
        set w [mg_write_mixed 0 $keys $written $newkeys $doomed $short w $tag]
        set took [expr {[clock milliseconds] - $t0}]
        # Nothing waited: still watching, no command postponed.
        assert_equal prepare [dict get [mg_status 0] phase]
        assert_equal 0 [mg_info 0 migration_frozen_slots]
        assert_equal $postponed [mg_info 0 migration_postponed_commands]

        set present [dict get $w present]
        set snap [mg_snapshot 0 $present]
        set gone [dict get $w gone]

        set reply [mg_deferred_reply $rd 0]
        puts "writes while the manifests were built answered in $took ms; reply $reply"
        mg_assert_reply $reply 1000 [dict get $reply keys]
        assert_equal [llength $present] [dict get $reply keys]
        set rebuilt [mg_info 0 migration_last_manifests_rebuilt]
        set frozen [mg_info 0 migration_last_prepare_frozen_ms]
        puts "manifests built again: $rebuilt; prepare frozen $frozen ms"
        assert_equal 0 [mg_info 0 migration_last_manifests_stale]
        # The written slots (at least those of the keys written, less the
        # one emptied) and not every slot holding keys.
        set wslots [dict create]
        foreach k $written { dict set wslots [mg_keyslot $k] 1 }
        assert {$rebuilt >= [dict size $wslots]}
        set kslots [dict create]
        foreach k $present { dict set kslots [mg_keyslot $k] 1 }
        assert {$rebuilt < [dict size $kslots]}
        assert {$frozen < 2000}
        # The 4 s watched were no write pause.
        assert {[dict get $reply write_pause_ms] < 3000}

        mg_assert_moved_with_writes $W $snap $gone $present $others
        # Back, for the next test.
        mg_migrate 1 0 $W
        mg_wait_converged
        mg_assert_keys 0 $snap
    }

    test {manifests built while writes flow: a keyless write builds every manifest again} {
        set W {3000-3199}
        set Wset [mg_slotset $W]
        set keys [mg_fill 0 k 100 $Wset]
        set tag [mg_tag $Wset]
        mg_delay 0 watch 2000
        set from [count_log_lines 0]
        set rd [mg_migrate_deferred 0 1 $W]
        mw_wait_watching 0 $from
        # A script naming no key may write any key this node serves.
        R 0 eval "redis.call('set', 'k:{$tag}:keyless', 'v')" 0
        set snap [mg_snapshot 0 [concat $keys [list k:{$tag}:keyless]]]
        set reply [mg_deferred_reply $rd 0]
        set kslots [dict create]
        foreach k [dict keys $snap] { dict set kslots [mg_keyslot $k] 1 }
        assert_equal [dict size $kslots] [mg_info 0 migration_last_manifests_rebuilt]
        assert_equal 0 [mg_info 0 migration_last_manifests_stale]
        mg_assert_keys 1 $snap
        mg_assert_absent 0 [dict keys $snap]
        mg_wait_converged
        mg_assert_replicas_equal
        mg_migrate 1 0 $W
        mg_wait_converged
        mg_assert_keys 0 $snap
    }

    test {manifests built while writes flow: a cancel while watching leaves the donor whole; a migration with no writes keeps every manifest} {
        set W {4000-4099}
        set Wset [mg_slotset $W]
        set keys [mg_fill 0 c 80 $Wset]
        set snap [mg_snapshot 0 $keys]
        mg_delay 0 watch 8000
        set from [count_log_lines 0]
        set rd [mg_migrate_deferred 0 1 $W]
        mw_wait_watching 0 $from
        R 0 set [lindex $keys 0] changed
        dict set snap [lindex $keys 0] [mg_key_state 0 [lindex $keys 0]]
        assert_equal OK [R 0 rdmamigrateslots cancel]
        catch {$rd read} err
        $rd close
        mg_delay_reset 0
        assert_match {*cancel*} $err
        mg_wait_idle 0
        mg_wait_idle 1
        mg_assert_owner 0 $W
        mg_assert_keys 0 $snap
        mg_assert_absent 1 $keys
        mg_assert_slotalloc_sound 0
        # With no write, every manifest built while watching is kept.
        set reply [mg_migrate 0 1 $W]
        assert_equal 0 [mg_info 0 migration_last_manifests_rebuilt]
        assert_equal [llength $keys] [dict get $reply keys]
        mg_assert_keys 1 $snap
        mg_wait_converged
        mg_migrate 1 0 $W
        mg_wait_converged
        mg_assert_keys 0 $snap
    }
}
