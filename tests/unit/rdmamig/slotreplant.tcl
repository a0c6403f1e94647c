# The slot migration's data path (src/slotblocks.c) inside one process:
# DEBUG SLOTREPLANT builds a slot's manifest, copies its blocks, drops its
# keys and adopts them back from the copy, the way a recipient adopts a
# donor's blocks. Every key must come back identical (DEBUG DIGEST-VALUE,
# TTL), block memory must not leak, and a copy with random bytes
# overwritten (a lying or broken donor) must give an error or keys that
# work, never a crash.

set old_singledb $::singledb
set ::singledb 1

source tests/helpers/rdmamig.tcl

proc sr_info {field} {
    getInfoProperty [r info slotalloc] $field
}

# Keys of every type and encoding behind one hash tag. Returns their names.
proc sr_load {tag} {
    set keys {}
    proc sr_key {name} { upvar keys keys tag tag; set k "$name:{$tag}"; lappend keys $k; return $k }
    r set [sr_key embstr] hello
    r set [sr_key raw] [string repeat r 300]
    r set [sr_key sharedint] 7
    r set [sr_key int] 1234567890
    r set [sr_key ttl] withttl px 100000000
    r rpush [sr_key list] a b c
    r config set list-compress-depth 1
    for {set i 0} {$i < 3000} {incr i} { lappend elems "compressible-element-$i" }
    r rpush [sr_key zlist] {*}$elems
    r config set list-compress-depth 0
    r rpush [sr_key plainlist] [string repeat p 20000] small
    r sadd [sr_key intset] 1 2 3 100000
    r sadd [sr_key hset] a b c
    r hset [sr_key hashlp] f1 v1 f2 v2
    r hset [sr_key hashht] f [string repeat h 100]
    r zadd [sr_key zsetlp] 1 a 2.5 b -3 c
    r zadd [sr_key zsetsl] 1 [string repeat z 100]
    r xadd [sr_key stream] 1-1 f v
    r xgroup create "stream:{$tag}" g 0
    r xreadgroup group g c1 streams "stream:{$tag}" >
    r expire "hashlp:{$tag}" 100000
    return $keys
}

proc sr_snapshot {keys} {
    set snap {}
    foreach k $keys {
        dict set snap $k [list [r debug digest-value $k] [r type $k] [expr {[r pttl $k] > 0}]]
    }
    return $snap
}

start_server {overrides {cluster-enabled yes slot-affinity yes} tags {external:skip cluster rdmamig}} {
    rdmamig_own_all_slots 0

    test {SLOTREPLANT: argument errors change nothing} {
        assert_error "*out of range*" {r debug slotreplant 16384}
        assert_error "*out of range*" {r debug slotreplant -1}
        assert_error "*no keys*" {r debug slotreplant 0}
        r set foo bar
        assert_error "*syntax*" {r debug slotreplant [r cluster keyslot foo] corrupt 1}
        assert_error "*CORRUPT*" {r debug slotreplant [r cluster keyslot foo] corrupt 1 -5}
        assert_equal bar [r get foo]
        r del foo
    }

    test {SLOTREPLANT: every type comes back identical from the copied blocks} {
        set keys [sr_load a]
        set slot [r cluster keyslot "{a}"]
        set before [sr_snapshot $keys]
        set digest [r debug digest]
        assert_equal [llength $keys] [r debug slotreplant $slot]
        assert_equal $before [sr_snapshot $keys]
        assert_equal $digest [r debug digest]
        # Zero-copy keys are in the slot's blocks straight away; the
        # serialized ones (hash tables, skiplist, stream) after compaction.
        r debug slotcompact $slot
        set d [r cluster slotblocks $slot]
        assert_equal [dict get $d keys] [dict get $d keys_in_blocks]
        assert_equal [dict get $d bytes] [dict get $d bytes_in_blocks]
        # The keys work: writes, reads, growth, encoding conversions.
        r rpush "list:{a}" d
        r lpop "zlist:{a}"
        r sadd "intset:{a}" notanint
        r hset "hashlp:{a}" f3 [string repeat x 200]
        r zadd "zsetlp:{a}" 4 [string repeat y 200]
        r append "embstr:{a}" " world"
        r incr "int:{a}"
        assert_equal {a b c d} [r lrange "list:{a}" 0 -1]
        assert_equal "hello world" [r get "embstr:{a}"]
        assert_equal 1234567891 [r get "int:{a}"]
        assert_equal 1 [r xack "stream:{a}" g 1-1]
        assert_equal [llength $keys] [r debug slotreplant $slot]
    }

    test {SLOTREPLANT: nothing of the copy is leaked} {
        r flushall
        wait_for_condition 100 50 {
            [sr_info slotalloc_live_allocs] == 0 && [sr_info slotalloc_used_bytes] == 0
        } else {
            fail "block memory left: [r info slotalloc]"
        }
    }

    test {SLOTREPLANT: random corruption of the copy never crashes the node} {
        set errors 0
        set ok 0
        for {set seed 1} {$seed <= 40} {incr seed} {
            r flushall
            set keys [sr_load b]
            set slot [r cluster keyslot "{b}"]
            if {[catch {r debug slotreplant $slot corrupt $seed [expr {1 + $seed * 3}]} reply]} {
                assert_match "*ERR*" $reply
                incr errors
            } else {
                incr ok
            }
            assert_equal PONG [r ping]
            # Whatever was accepted must be usable.
            r debug digest
            foreach k [r keys *] {
                switch [r type $k] {
                    string { r get $k; r append $k x }
                    list { r lrange $k 0 -1; r rpush $k x; r lpop $k }
                    set { r smembers $k; r sadd $k x }
                    hash { r hgetall $k; r hset $k x y }
                    zset { r zrange $k 0 -1 withscores; r zadd $k 1 x }
                    stream { r xrange $k - + }
                }
            }
            r debug slotcompact $slot
        }
        # Both outcomes were seen: the checks reject bad structure, and
        # bytes outside any structure (free space, values) go unnoticed.
        assert {$errors > 0}
        r flushall
        wait_for_condition 100 50 {
            [sr_info slotalloc_live_allocs] == 0
        } else {
            fail "block memory left after the corruption rounds: [r info slotalloc]"
        }
    }
}

set ::singledb $old_singledb
