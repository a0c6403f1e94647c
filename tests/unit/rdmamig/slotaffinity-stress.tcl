# Slot affinity under a random string workload: every string command that
# frees, grows, shrinks, converts or copies a value (SET variants, APPEND,
# SETRANGE, SETBIT, BITFIELD, INCR*, GETSET/GETDEL/GETEX, RENAME, COPY,
# MSET, PFADD, EXPIRE/PERSIST, DEL/UNLINK) runs against relocated keys of a
# slot-affinity server and against a reference without slot affinity, with
# DEBUG SLOTCOMPACT ALL in between. Replies and DEBUG DIGEST must match,
# and block memory must be empty once everything is deleted.

set old_singledb $::singledb
set ::singledb 1

source tests/helpers/rdmamig.tcl

# One command on both servers (-1 reference, 0 slot affinity); replies and
# errors must be the same.
proc sas_both {args} {
    set ea [catch {r -1 {*}$args} a]
    set eb [catch {r 0 {*}$args} b]
    assert_equal $ea $eb
    assert_equal $a $b
    return $b
}

proc sas_pick {l} { lindex $l [expr {int(rand() * [llength $l])}] }

proc sas_value {} {
    switch [expr {int(rand() * 5)}] {
        0 { return [randstring 1 40 alpha] }
        1 { return [randstring 41 400 alpha] }
        2 { return [expr {int(rand() * 20000)}] }
        3 { return [randstring 1000 20000 alpha] }
        4 { return [expr {int(rand() * 1000000000000)}] }
    }
}

start_server {overrides {cluster-enabled yes slot-affinity no} tags {external:skip cluster rdmamig}} {
start_server {overrides {cluster-enabled yes slot-affinity yes slot-affinity-cpu 0} tags {external:skip cluster rdmamig}} {
    rdmamig_own_all_slots -1
    rdmamig_own_all_slots 0

    test {Slot affinity stress: random string commands on relocated keys} {
        # Keys in 8 hash tags (8 slots) so that multi-key commands work.
        set keys {}
        foreach t {a b c d e f g h} {
            for {set i 0} {$i < 12} {incr i} { lappend keys "k$i:{$t}" }
        }
        set relocated 0
        for {set op 0} {$op < 6000} {incr op} {
            set k [sas_pick $keys]
            regexp {\{(.)\}} $k -> tag
            set k2 "k[expr {int(rand() * 12)}]:{$tag}"
            switch [expr {int(rand() * 24)}] {
                0 - 1 - 2 { sas_both set $k [sas_value] }
                3 { sas_both set $k [sas_value] ex 100000 }
                4 { sas_both set $k [sas_value] keepttl get }
                5 { sas_both append $k [sas_value] }
                6 { sas_both setrange $k [expr {int(rand() * 3000)}] [sas_value] }
                7 { sas_both setbit $k [expr {int(rand() * 40000)}] 1 }
                8 { sas_both bitfield $k set u8 [expr {int(rand() * 5000)}] 255 }
                9 { sas_both incrby $k [expr {int(rand() * 100)}] }
                10 { sas_both incrbyfloat $k 1.5 }
                11 { sas_both getset $k [sas_value] }
                12 { sas_both getdel $k }
                13 { sas_both getex $k persist }
                14 { sas_both rename $k $k2 }
                15 { sas_both copy $k $k2 replace }
                16 { sas_both mset $k [sas_value] $k2 [sas_value] }
                17 { sas_both pfadd $k [randstring 1 10 alpha] [randstring 1 10 alpha] }
                18 { sas_both expire $k [expr {1 + int(rand() * 100000)}] }
                19 { sas_both persist $k }
                20 { sas_both del $k }
                21 { sas_both unlink $k $k2 }
                22 { sas_both setnx $k [sas_value] }
                23 { sas_both get $k }
            }
            if {$op % 250 == 249} {
                incr relocated [r 0 debug slotcompact all]
                assert_equal [r -1 debug digest] [r 0 debug digest]
            }
        }
        assert {$relocated > 100}
        assert_equal [r -1 debug digest] [r 0 debug digest]
        # What was just relocated lives in blocks.
        r 0 debug slotcompact all
        set bytes 0
        set in 0
        foreach t {a b c d e f g h} {
            set d [r 0 cluster slotblocks [r 0 cluster keyslot "x{$t}"]]
            incr bytes [dict get $d bytes]
            incr in [dict get $d bytes_in_blocks]
        }
        assert {$in >= 0.99 * $bytes}
    }

    test {Slot affinity stress: the blocks hold what the keys own, nothing else} {
        # Every allocation a key reaches in the blocks is a live one of its
        # own slot; every live one is reached (no leak, no stale pointer).
        set c [r 0 debug slotcompact check]
        assert_equal {} [dict get $c problem]
        assert_equal 0 [dict get $c unreached]
        assert {[dict get $c allocs] > 0}
    }

    test {Slot affinity stress: everything deleted leaves no block memory} {
        foreach k [r 0 keys *] { sas_both del $k }
        assert_equal 0 [r 0 dbsize]
        assert_equal 0 [getInfoProperty [r 0 info slotalloc] slotalloc_used_bytes]
        assert_equal 0 [getInfoProperty [r 0 info slotalloc] slotalloc_live_allocs]
    }
}
}

set ::singledb $old_singledb
