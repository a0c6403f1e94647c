# RDMAMIGRATESLOTS (src/migration.c): the handover is tied to the import
# session, and no interleaving at its edges loses a key (issue "Migration
# safety", findings 1, 2, 4 and 5; docs/DESIGN.md, "The handover").
#
# - A recipient that rolled back (CANCEL on it, its deadline, the donor's
#   connection lost) can no longer take the slots: the donor's handover is
#   refused and the donor keeps every key.
# - A migration refused by a busy recipient leaves the recipient's running
#   import alone (its cleanup names its own session, and it has none).
# - RDMARESOLVE tells a donor that lost the handover's reply what happened,
#   and fences the session: after it, the handover can no longer happen.
# - A recipient killed with AOF on after linking the keys and before the
#   handover comes back without them and without open slots.
# - Damaged value bytes fail the import (block checksums), both nodes roll
#   back.
# - Both builds must agree on the protocol version.
#
# Every test ends with each key of the moved slots present exactly once, on
# the slot's owner, with its value (digests).

source tests/helpers/rdmamig-migrate.tcl

# Node 0 donor, node 1 recipient, node 2 another master.
start_cluster 3 0 {overrides {cluster-enabled yes cluster-node-timeout 15000} tags {external:skip cluster rdmamig}} {
    set F {40-49}
    set Fset [mg_slotset $F]
    mg_fast_clients
    set fkeys [mg_fill 0 h 1000 $Fset]
    mg_fill 0 k 100 [mg_slotset 100-5460]
    mg_fill 1 r 50 [mg_slotset 5461-10922]
    mg_fill 2 q 50 [mg_slotset 10923-16383]
    mg_wait_converged

    # Every key of keys is on the owner of its slot (node 'owner' for all
    # of them), with the snapshot's value, and nowhere else.
    proc mg_assert_exactly_once {owner snap keys} {
        mg_wait_converged
        mg_assert_keys $owner $snap
        for {set j 0} {$j < 3} {incr j} {
            if {$j != $owner} { mg_assert_absent $j $keys }
        }
    }

    # The migration held before its handover ended; whichever way it
    # ended, the keys are on the slots' owner. Returns the owner.
    proc mg_handover_outcome {rd snap keys ranges} {
        set failed [catch {$rd read} reply]
        $rd close
        mg_delay_reset 0
        mg_wait_idle 0
        mg_wait_import_over
        mg_wait_converged
        set owner [expr {[lindex [mg_slot_owner 0 [lindex [mg_expand $ranges] 0]] 1] == [srv -1 port] ? 1 : 0}]
        if {$failed} {
            assert_equal 0 $owner "the migration failed ($reply) but node 1 owns the slots"
        } else {
            assert_equal 1 $owner "the migration succeeded but node 0 still owns the slots"
        }
        mg_assert_exactly_once $owner $snap $keys
        return $owner
    }

    # Brings F back to node 0 when a test moved it.
    proc mg_back_to_0 {ranges owner} {
        if {$owner == 1} { mg_migrate 1 0 $ranges }
        mg_wait_converged
    }

    test {Handover: CANCEL on the recipient before the donor's handover loses no key} {
        set snap [mg_snapshot 0 $fkeys]
        set rd [mg_start_held $F handover 3000]
        # The recipient has linked every key (invisible until it owns them).
        assert {[R 1 dbsize] >= 1000}
        assert_equal OK [R 1 rdmamigrateslots cancel]
        set owner [mg_handover_outcome $rd $snap $fkeys $F]
        assert_equal 0 $owner
        mg_back_to_0 $F $owner
    }

    test {Handover: CLUSTER SETSLOT(S) NODE on the recipient cannot take a running import's slots} {
        set snap [mg_snapshot 0 $fkeys]
        set rd [mg_start_held $F handover 3000]
        set me [R 1 cluster myid]
        mg_assert_err {being imported} {R 1 cluster setslots node $me {*}$F}
        mg_assert_err {being imported} {R 1 cluster setslot 45 node $me}
        # The migration itself completes.
        set owner [mg_handover_outcome $rd $snap $fkeys $F]
        assert_equal 1 $owner
        mg_back_to_0 $F $owner
    }

    test {Handover: a recipient that rolled back on its deadline refuses the handover} {
        set snap [mg_snapshot 0 $fkeys]
        # The donor gives the recipient its own remaining time plus 1 s;
        # held 4 s at the handover with a 2 s timeout, the recipient's
        # deadline passes first (the donor's check comes after its sleep).
        set rd [mg_start_held $F handover 4000 timeout 2500]
        set owner [mg_handover_outcome $rd $snap $fkeys $F]
        assert_equal 0 $owner
        mg_back_to_0 $F $owner
    }

    test {Handover: a migration refused by a busy recipient does not cancel its import} {
        set G 11000-11099
        set gkeys [mg_fill 2 g 20 [mg_slotset $G]]
        set snap [mg_snapshot 0 $fkeys]
        set rd [mg_start_held $F handover 3000]
        # Node 2 asks node 1, which is busy with node 0's import.
        mg_assert_err {already running|busy} {mg_migrate 2 1 $G}
        set owner [mg_handover_outcome $rd $snap $fkeys $F]
        assert_equal 1 $owner
        assert_equal ok [mg_info 0 migration_last_status]
        mg_back_to_0 $F $owner
        foreach k $gkeys { R 2 del $k }
    }

    test {Handover: CANCEL on the donor is refused once RDMAHANDOVER may be on its way} {
        set snap [mg_snapshot 0 $fkeys]
        set rd [mg_start_held $F handover 1000]
        # The recipient stopped: the donor's handover waits for it, past
        # the point where a CANCEL could still stop it.
        exec kill -STOP [srv -1 pid]
        # (The hold ends first; a CANCEL during it is still accepted.)
        after 1500
        set refused [catch {R 0 rdmamigrateslots cancel} err]
        exec kill -CONT [srv -1 pid]
        assert_equal 1 $refused "CANCEL answered: $err"
        assert_match {*handover has begun*} $err
        # Whichever way it ends, the keys are on the owner.
        mg_back_to_0 $F [mg_handover_outcome $rd $snap $fkeys $F]
    }

    test {RDMARESOLVE: an unknown session is not-owned, or left to the cluster's view; bad input is refused} {
        mg_assert_err {syntax|wrong number} {R 1 rdmaresolve}
        mg_assert_err {session} {R 1 rdmaresolve nosuchsession 0-x}
        # Node 1 owns 5461-10922, not 40-49.
        assert_equal not-owned [R 1 rdmaresolve 0123456789abcdef0123456789abcdef 40-49]
        # Slots it owns under no record of that session: not its to tell.
        mg_assert_err {no record} {R 1 rdmaresolve 0123456789abcdef0123456789abcdef 6000-6001}
        mg_assert_err {no import} {R 1 rdmahandover 0123456789abcdef0123456789abcdef}
    }

    test {RDMARESOLVE fences a live import: the handover can no longer happen} {
        set snap [mg_snapshot 0 $fkeys]
        set rd [mg_start_held $F handover 3000]
        set sid [dict get [mg_status 1] session]
        assert_match {[0-9a-f]*} $sid
        # Another connection (the donor, reconnecting) resolves the
        # session first: the recipient rolls back, the donor's handover is
        # then refused.
        assert_equal not-owned [R 1 rdmaresolve $sid {*}$F]
        set owner [mg_handover_outcome $rd $snap $fkeys $F]
        assert_equal 0 $owner
        # The session is remembered: asked again, the same answer.
        assert_equal not-owned [R 1 rdmaresolve $sid {*}$F]
    }

    test {RDMARESOLVE after a handover says owned} {
        set snap [mg_snapshot 0 $fkeys]
        set rd [mg_start_held $F delete 1000]
        set sid [dict get [mg_status 0] session]
        assert_equal owned [R 1 rdmaresolve $sid {*}$F]
        set owner [mg_handover_outcome $rd $snap $fkeys $F]
        assert_equal 1 $owner
        assert_equal owned [R 1 rdmaresolve $sid {*}$F]
        mg_back_to_0 $F $owner
    }

    test {INITRDMASERVER: a donor of another protocol version is refused} {
        mg_assert_err {VERSION.*protocol|protocol.*version} {R 1 initrdmaserver 0 40-49 transport tcp}
        mg_assert_err {protocol version 999} {R 1 initrdmaserver 0 40-49 transport tcp version 999}
        assert_equal idle [dict get [mg_status 1] state]
        assert {[mg_info 1 migration_protocol_version] >= 2}
    }

    test {RDMAMIGRATESLOTS: damaged value bytes fail the import with a checksum error, both roll back} {
        set S 77
        set big [lindex [mg_names big60k 1 [mg_slotset $S]] 0]
        R 0 set $big [string repeat x 61440]
        set digest [R 0 debug digest-value $big]
        # Two random bytes of the slot's blocks, seed after seed, until they
        # land in the value itself (on 68b7647 the migration then succeeded
        # and the value's digest changed); where they land depends on the
        # block layout, and a seed that hits the allocator's metadata fails
        # the adoption instead. Every attempt must fail and roll back.
        set checksum 0
        for {set seed 5} {$seed < 45 && !$checksum} {incr seed} {
            mg_corrupt 1 "random 0 $seed 2"
            catch {mg_migrate 0 1 $S} err
            mg_corrupt 1 ""
            assert_match {*migration failed*} $err
            mg_wait_idle 0
            mg_wait_import_over
            assert_equal $digest [R 0 debug digest-value $big]
            assert_equal 0 [R 1 cluster countkeysinslot $S]
            mg_assert_owner 0 $S
            if {[string match {*checksum*} $err]} {
                assert_match {*checksum*} [mg_info 1 migration_last_error]
                set checksum 1
            }
        }
        assert_equal 1 $checksum
        R 0 del $big
    }

    test {RDMAMIGRATESLOTS: a recipient killed with AOF on, after linking and before the handover, comes back without the keys} {
        set snap [mg_snapshot 0 $fkeys]
        mg_appendonly 1 yes
        set rd [mg_start_held $F handover 3000]
        assert {[R 1 dbsize] >= 1000}
        exec kill -9 [srv -1 pid]
        set failed [catch {$rd read} reply]
        $rd close
        mg_delay_reset 0
        assert_equal 1 $failed "the migration succeeded without its recipient: $reply"
        mg_wait_idle 0
        restart_server -1 true false
        mg_fast_clients
        mg_wait_converged
        assert_equal {} [mg_open_slots 1]
        mg_assert_exactly_once 0 $snap $fkeys
        mg_cluster_check 0
        mg_appendonly 1 no
    }

    test {Handover: after every fault, the migration still succeeds both ways} {
        set snap [mg_snapshot 0 $fkeys]
        mg_assert_reply [mg_migrate 0 1 $F] [llength [mg_expand $F]] [llength $fkeys]
        mg_assert_exactly_once 1 $snap $fkeys
        mg_migrate 1 0 $F
        mg_assert_exactly_once 0 $snap $fkeys
        mg_cluster_check 0
    }
}
