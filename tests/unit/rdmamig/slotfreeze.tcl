# Frozen slots (src/slotfreeze.c), the write fence of a slot migration:
# writes to a frozen slot wait (never fail) until it thaws, reads and other
# slots are served, expiry and eviction leave its keys alone, and a freeze
# never outlives its deadline.

set old_singledb $::singledb
set ::singledb 1

source tests/helpers/rdmamig.tcl

proc sf_info {field} {
    getInfoProperty [r info migration] $field
}

# Two keys in different slots.
proc sf_keys {} {
    list "a{frozen}" "b{other}"
}

start_server {overrides {cluster-enabled yes} tags {external:skip cluster rdmamig}} {
    rdmamig_own_all_slots 0
    lassign [sf_keys] fk ok
    set fslot [r cluster keyslot $fk]

    test {SLOTFREEZE: argument errors} {
        assert_error "*wrong number of arguments*" {r debug slotfreeze}
        assert_error "*syntax*" {r debug slotfreeze 0 1}
        assert_error "*syntax*" {r debug slotfreeze 1000}
        assert_error "*out of range*" {r debug slotfreeze 1000 16384}
        assert_error "*out of range*" {r debug slotfreeze 1000 10-5}
        assert_error "*Invalid*" {r debug slotfreeze 1000 x-5}
        assert_equal 0 [sf_info migration_frozen_slots]
    }

    test {SLOTFREEZE: writes to a frozen slot wait, reads and other slots do not} {
        r set $fk before
        r debug slotfreeze 10000 $fslot
        assert_equal 1 [sf_info migration_frozen_slots]
        set rd [redis_deferring_client]
        $rd set $fk after
        # Reads of the frozen slot and writes elsewhere are served.
        assert_equal before [r get $fk]
        assert_equal OK [r set $ok x]
        after 200
        assert_equal before [r get $fk]
        wait_for_blocked_clients_count 1 50 100
        # Thawing lets the write through; it succeeds.
        assert {[r debug slotfreeze off] >= 200}
        assert_equal OK [$rd read]
        assert_equal after [r get $fk]
        assert {[sf_info migration_postponed_commands] >= 1}
        $rd close
    }

    test {SLOTFREEZE: MULTI/EXEC, scripts and FLUSHALL wait too} {
        r debug slotfreeze 10000 $fslot
        set rd [redis_deferring_client]
        $rd multi
        $rd read
        $rd incr $fk:n
        $rd read
        $rd exec
        set rd2 [redis_deferring_client]
        $rd2 eval {return redis.call('set', KEYS[1], 'script')} 1 $fk
        set rd3 [redis_deferring_client]
        $rd3 flushall
        # A script declaring no writes but no key either may read any key,
        # a compressed list of the frozen slot too (slotFreezeReadChanges):
        # it waits.
        set rd4 [redis_deferring_client]
        $rd4 eval "#!lua flags=no-writes\nreturn 'keyless'" 0
        wait_for_blocked_clients_count 4 50 100
        # A script declaring no writes and a key of another slot, and a
        # write elsewhere, still run (a script without flags may write
        # anything: it waits).
        assert_equal before2 [r eval "#!lua flags=no-writes\nreturn 'before2'" 1 $ok]
        r set $ok y
        r debug slotfreeze off
        assert_equal 1 [lindex [$rd read] 0]
        assert_equal OK [$rd2 read]
        assert_equal OK [$rd3 read]
        assert_equal keyless [$rd4 read]
        # FLUSHALL ran after the thaw: the key written meanwhile is gone.
        assert_equal 0 [r exists $ok]
        $rd close; $rd2 close; $rd3 close; $rd4 close
    }

    test {SLOTFREEZE: reads that would change a frozen slot's bytes wait (compressed lists), other reads do not} {
        # A list made with list-compress-depth 1 keeps compressing its inner
        # nodes after the setting changes back; reading such a node
        # decompresses it in place (new allocations, a rewritten pointer).
        r config set list-compress-depth 1
        set elems {}
        for {set i 0} {$i < 3000} {incr i} { lappend elems "compressible-element-$i" }
        r rpush $fk:zl {*}$elems
        r config set list-compress-depth 0
        r rpush $fk:plain a b c
        assert_match {*ql_compressed:1*} [r debug object $fk:zl]
        set digest [r debug digest-value $fk:zl]
        set postponed [sf_info migration_postponed_commands]
        r debug slotfreeze 10000 $fslot
        set rd [redis_deferring_client]
        $rd lrange $fk:zl 1000 1002
        set rd2 [redis_deferring_client]
        $rd2 debug digest-value $fk:zl
        set rd3 [redis_deferring_client]
        $rd3 eval_ro {return redis.call('lrange', KEYS[1], 0, -1)} 1 $fk:plain
        set rd4 [redis_deferring_client]
        $rd4 multi
        $rd4 read
        $rd4 lindex $fk:zl 2000
        $rd4 read
        $rd4 exec
        wait_for_blocked_clients_count 4 50 100
        assert_equal [expr {$postponed + 4}] [sf_info migration_postponed_commands]
        # Other reads of the frozen slot, and scripts of other slots, run.
        assert_equal {a b c} [r lrange $fk:plain 0 -1]
        assert_equal {x} [r eval_ro {return {'x'}} 1 $ok]
        # So do reads of the compressed list that leave it as it is.
        assert_equal 1 [r exists $fk:zl]
        assert_equal 3000 [r llen $fk:zl]
        assert_equal list [r type $fk:zl]
        assert_equal [r debug digest-value $fk:plain] [r debug digest-value $fk:plain]
        r dump $fk:zl
        assert_equal 4 [s blocked_clients]
        r debug slotfreeze off
        assert_equal {compressible-element-1000 compressible-element-1001 compressible-element-1002} [$rd read]
        assert_equal $digest [$rd2 read]
        assert_equal {a b c} [$rd3 read]
        assert_equal {compressible-element-2000} [$rd4 read]
        $rd close; $rd2 close; $rd3 close; $rd4 close
        r del $fk:zl $fk:plain
    }

    test {SLOTFREEZE: DEBUG DIGEST, RELOAD and POPULATE wait for a frozen slot, DEBUG OBJECT and QUICKLIST do not} {
        # DEBUG DIGEST reads every value, and so decompresses a compressed
        # list's nodes in place; DEBUG RELOAD empties the keyspace and
        # loads it again, as FLUSHALL would.
        r config set list-compress-depth 1
        set elems {}
        for {set i 0} {$i < 3000} {incr i} { lappend elems "compressible-element-$i" }
        r rpush $fk:zl {*}$elems
        r config set list-compress-depth 0
        assert_match {*ql_compressed:1*} [r debug object $fk:zl]
        set digest [r debug digest]
        set postponed [sf_info migration_postponed_commands]
        r debug slotfreeze 10000 $fslot
        set rd [redis_deferring_client]
        $rd debug digest
        set rd2 [redis_deferring_client]
        $rd2 debug reload
        set rd3 [redis_deferring_client]
        $rd3 debug populate 10 dbgpop
        wait_for_blocked_clients_count 3 50 100
        assert_equal [expr {$postponed + 3}] [sf_info migration_postponed_commands]
        # Neither DEBUG OBJECT nor DEBUG QUICKLIST without detail
        # decompresses anything: they run.
        assert_match {*ql_compressed:1*} [r debug object $fk:zl]
        assert_match {*printed*} [r debug quicklist $fk:zl]
        assert_equal 3 [s blocked_clients]
        assert_equal 0 [r exists dbgpop:0]
        r debug slotfreeze off
        assert_equal $digest [$rd read]
        assert_equal OK [$rd2 read]
        assert_equal OK [$rd3 read]
        assert_equal 1 [r exists dbgpop:0]
        $rd close; $rd2 close; $rd3 close
        r del $fk:zl
        for {set i 0} {$i < 10} {incr i} { r del dbgpop:$i }
    }

    test {SLOTFREEZE: expired keys of a frozen slot are not deleted until it thaws} {
        r debug set-active-expire 1
        r set $fk v px 100
        r set $ok v px 100
        r debug slotfreeze 10000 $fslot
        after 300
        # Reported missing, but kept: no deletion while frozen.
        assert_equal {} [r get $fk]
        assert_equal 0 [r exists $fk]
        wait_for_condition 50 100 {
            [r dbsize] == 1
        } else {
            fail "the expired key of the other slot was not removed"
        }
        assert_equal 1 [r dbsize]
        r debug slotfreeze off
        wait_for_condition 50 100 {
            [r dbsize] == 0
        } else {
            fail "the expired key of the thawed slot was not removed"
        }
    }

    test {SLOTFREEZE: eviction skips keys of a frozen slot} {
        r flushall
        for {set i 0} {$i < 200} {incr i} {
            r set "f$i{frozen}" [string repeat x 1000]
        }
        r debug slotfreeze 20000 $fslot
        r config set maxmemory-policy allkeys-random
        r config set maxmemory [expr {[s used_memory] + 300000}]
        for {set i 0} {$i < 2000} {incr i} {
            r set "o$i{other}" [string repeat y 1000]
        }
        assert {[s evicted_keys] > 0}
        for {set i 0} {$i < 200} {incr i} {
            assert_equal 1 [r exists "f$i{frozen}"]
        }
        r config set maxmemory 0
        r debug slotfreeze off
        r flushall
    }

    test {SLOTFREEZE: a freeze ends at its deadline} {
        r debug slotfreeze 300 $fslot
        set rd [redis_deferring_client]
        $rd set $fk late
        assert_equal OK [$rd read]
        assert_equal 0 [sf_info migration_frozen_slots]
        assert_equal late [r get $fk]
        verify_log_message 0 "*reached its deadline*" 0
        $rd close
    }
}

set ::singledb $old_singledb
