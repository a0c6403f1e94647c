# Slot affinity over every data type, with the background compaction cycle
# (src/slotcompact.c) doing the relocation.
#
# The same random workload goes to two cluster-mode servers: a reference
# with slot-affinity no, and one with slot-affinity yes whose background
# cycle relocates keys while they are written. Every command must answer
# the same on both, DEBUG DIGEST (plus XPENDING, which the digest does not
# cover) must stay equal through encoding conversions, big keys, TTLs,
# deletion, lazyfree, DEBUG RELOAD, BGSAVE + restart and AOF rewrite, and
# once the cycle is idle at least 99% of the keys' bytes must sit in their
# slots' blocks (CLUSTER SLOTBLOCKS). Eviction under maxmemory is checked
# per key on the relocating server alone (which keys LRU evicts is random).

set old_singledb $::singledb
set ::singledb 1

source tests/helpers/rdmamig.tcl

proc st_info {level field} {
    getInfoProperty [r $level info slotalloc] $field
}

# Run a command on the reference (-1) and the relocating server (0); both
# must give the same reply, errors included.
proc st_both {args} {
    set ea [catch {r -1 {*}$args} a]
    set eb [catch {r 0 {*}$args} b]
    assert_equal [list $ea $a] [list $eb $b]
    return $b
}

proc st_digests_equal {streams} {
    assert_equal [r -1 debug digest] [r 0 debug digest]
    # Consumer groups are not part of the digest.
    foreach k $streams {
        foreach g {g1 g2} {
            set ea [catch {r -1 xpending $k $g} a]
            set eb [catch {r 0 xpending $k $g} b]
            assert_equal [list $ea $a] [list $eb $b]
        }
    }
}

# How many of keys exist (one EXISTS each: they are in many slots).
proc st_existing {level keys} {
    set n 0
    foreach k $keys { incr n [r $level exists $k] }
    return $n
}

# Wait until the background cycle has nothing left to do.
proc st_wait_compacted {level} {
    wait_for_condition 600 50 {
        [st_info $level slotalloc_pending_slots] == 0 &&
        [st_info $level slotalloc_pending_keys] == 0 &&
        [st_info $level slotalloc_pending_big_keys] == 0
    } else {
        fail "background compaction never finished: [r $level info slotalloc]"
    }
}

# Slots of a list of keys (one CLUSTER KEYSLOT each).
proc st_slots {level keys} {
    set slots {}
    foreach k $keys { dict set slots [r $level cluster keyslot $k] 1 }
    dict keys $slots
}

# Assert that at least 99% of the bytes of the keys in these slots lie in
# the slots' blocks; returns "bytes_in_blocks bytes".
proc st_assert_in_blocks {level slots} {
    set bytes 0
    set in 0
    set outside {}
    foreach s $slots {
        set d [r $level cluster slotblocks $s]
        incr bytes [dict get $d bytes]
        incr in [dict get $d bytes_in_blocks]
        if {[dict get $d bytes] != [dict get $d bytes_in_blocks]} {
            # Which keys, for the failure message.
            set ks [lmap k [r $level cluster getkeysinslot $s 10] {
                list $k [r $level type $k] [r $level object encoding $k]
            }]
            lappend outside "slot $s: [dict get $d bytes_in_blocks] of [dict get $d bytes] bytes in blocks, keys $ks"
        }
    }
    assert {$bytes > 0}
    if {$in * 100 < $bytes * 99} {
        fail "only $in of $bytes key bytes are in their slots' blocks:\n[join $outside \n]"
    }
    list $in $bytes
}

# Assert that every byte of the keys in this slot lies in its blocks.
proc st_assert_slot_all_in_blocks {level slot} {
    set d [r $level cluster slotblocks $slot]
    assert_equal [dict get $d bytes] [dict get $d bytes_in_blocks] "slot $slot"
}

# Wait for the cycle to relocate these keys, assert that their bytes are
# in their slots' blocks, and return those slots.
proc st_relocated_slots {level keys} {
    st_wait_compacted $level
    set slots [st_slots $level $keys]
    st_assert_in_blocks $level $slots
    return $slots
}

# On both servers, 10 lists of n elements of 100 B with
# list-compress-depth 0 (prefix:0:i) and 10 with depth 1 (prefix:1:i);
# returns their names. Nodes hold ~8 KB (list-max-listpack-size -2), so
# 200 elements are several nodes.
proc st_make_lists {prefix n} {
    set keys {}
    foreach depth {0 1} {
        st_both config set list-compress-depth $depth
        for {set i 0} {$i < 10} {incr i} {
            set k "$prefix:$depth:$i"
            lappend keys $k
            st_both rpush $k {*}[lmap j [lrepeat $n 0] {string repeat [randstring 1 1 alpha] 100}]
        }
    }
    st_both config set list-compress-depth 0
    return $keys
}

proc st_rand_elem {} {
    # Mostly short (listpack / intset friendly), sometimes long enough to
    # convert a hash or sorted set to its hash table encoding.
    switch [randomInt 4] {
        0 { return [randomInt 1000] }
        1 { return [randstring 1 12 alpha] }
        2 { return [randstring 1 30 binary] }
        3 { return [randstring 60 200 alpha] }
    }
}

# One random command for key k of type t. Only commands whose effect does
# not depend on randomness or time inside the server.
proc st_random_op {t k} {
    global st_xid
    set e [st_rand_elem]
    set e2 [st_rand_elem]
    set r [randomInt 10]
    switch $t {
        str {
            switch $r {
                0 - 1 { st_both set $k $e }
                2 { st_both set $k [randstring 45 3000 alpha] }
                3 { st_both append $k $e }
                4 { st_both incrby $k [randomInt 100] }
                5 { st_both setrange $k [randomInt 100] $e }
                6 { st_both set $k [randomInt 10000] ex [expr {100000 + [randomInt 1000]}] }
                7 { st_both getdel $k }
                8 { st_both persist $k }
                9 { st_both set $k [randstring 5000 20000 alpha] }
            }
        }
        list {
            switch $r {
                0 - 1 - 2 { st_both rpush $k $e $e2 }
                3 { st_both lpush $k $e [randstring 100 9000 alpha] }
                4 { st_both lpop $k }
                5 { st_both rpop $k 2 }
                6 { st_both linsert $k before $e $e2 }
                7 { st_both lset $k 0 $e }
                8 { st_both ltrim $k 0 [randomInt 300] }
                9 { st_both lrem $k 1 $e }
            }
        }
        set {
            switch $r {
                0 - 1 - 2 { st_both sadd $k [randomInt 100000] [randomInt 100000] }
                3 - 4 { st_both sadd $k $e $e2 }
                5 { st_both srem $k $e }
                6 { st_both smove $k $k $e }
                7 { st_both sadd $k {*}[lmap x [lrepeat 20 0] {randomInt 1000000}] }
                8 { st_both expire $k [expr {100000 + [randomInt 1000]}] }
                9 { st_both scard $k }
            }
        }
        hash {
            switch $r {
                0 - 1 - 2 { st_both hset $k $e $e2 }
                3 { st_both hset $k f[randomInt 300] [randstring 1 100 alpha] }
                4 { st_both hdel $k $e }
                5 { st_both hincrby $k counter [randomInt 50] }
                6 { st_both hsetnx $k $e $e2 }
                7 { st_both hdel $k f[randomInt 300] }
                8 { st_both hlen $k }
                9 { st_both expire $k [expr {100000 + [randomInt 1000]}] }
            }
        }
        zset {
            switch $r {
                0 - 1 - 2 { st_both zadd $k [randomInt 1000] $e }
                3 { st_both zincrby $k 1.5 $e }
                4 { st_both zrem $k $e }
                5 { st_both zremrangebyrank $k 0 [randomInt 3] }
                6 { st_both zadd $k [randomInt 100] m[randomInt 200] }
                7 { st_both zadd $k 1 [randstring 70 120 alpha] }
                8 { st_both zrange $k 0 -1 withscores }
                9 { st_both zpopmin $k }
            }
        }
        stream {
            if {![info exists st_xid($k)]} { set st_xid($k) 0 }
            switch $r {
                0 - 1 - 2 - 3 {
                    incr st_xid($k)
                    st_both xadd $k $st_xid($k)-1 f $e g $e2
                }
                4 { st_both xdel $k [randomInt [expr {$st_xid($k) + 1}]]-1 }
                5 { st_both xtrim $k maxlen [expr {50 + [randomInt 100]}] }
                6 { st_both xgroup create $k g[expr {1 + [randomInt 2]}] 0 mkstream }
                7 { st_both xreadgroup group g1 c[randomInt 3] count 3 streams $k > }
                8 { st_both xack $k g1 [randomInt [expr {$st_xid($k) + 1}]]-1 }
                9 { st_both xgroup delconsumer $k g1 c[randomInt 3] }
            }
        }
    }
}

set st_types {str list set hash zset stream}

start_server {overrides {cluster-enabled yes slot-affinity no} tags {external:skip cluster rdmamig}} {
start_server {overrides {cluster-enabled yes slot-affinity yes slot-affinity-cpu 100} tags {external:skip cluster rdmamig}} {
    rdmamig_own_all_slots -1
    rdmamig_own_all_slots 0

    set keys {}
    set streams {}
    foreach t $st_types {
        for {set i 0} {$i < 40} {incr i} {
            lappend keys [list $t "$t:$i"]
            if {$t eq "stream"} { lappend streams "$t:$i" }
        }
    }
    set slots [st_slots 0 [lmap tk $keys {lindex $tk 1}]]

    test {Slot affinity types: encoding conversions of relocated values} {
        # Small encodings first, relocated; then converted in place.
        st_both set enc:int 12345
        st_both set enc:embstr hello
        st_both set enc:raw [string repeat r 100]
        st_both rpush enc:list a b c
        st_both sadd enc:intset 1 2 3
        st_both sadd enc:sethash 1 2 3
        st_both hset enc:hashlp f v
        st_both hset enc:hashht f v
        st_both zadd enc:zsetlp 1 a
        st_both zadd enc:zsetsl 1 a
        st_both xadd enc:stream 1-1 f v
        st_both set enc:str2int 99
        st_wait_compacted 0
        st_both sadd enc:sethash notanumber
        st_both hset enc:hashht g [string repeat h 100]
        st_both zadd enc:zsetsl 2 [string repeat z 100]
        st_both rpush enc:list {*}[lrepeat 200 [string repeat l 100]]
        st_both append enc:str2int x
        st_both append enc:embstr [string repeat e 100]
        foreach {k enc} {enc:int int enc:embstr raw enc:raw raw enc:list quicklist
                         enc:intset intset enc:sethash hashtable enc:hashlp listpack
                         enc:hashht hashtable enc:zsetlp listpack enc:zsetsl skiplist
                         enc:stream stream enc:str2int raw} {
            assert_equal $enc [r 0 object encoding $k]
        }
        set encslots [st_relocated_slots 0 [r 0 keys enc:*]]
        lappend slots {*}$encslots
        st_digests_equal enc:stream
        lappend streams enc:stream
    }

    test {Slot affinity types: a small hash table left half rehashed is rehashed when relocated} {
        # Ten fields of 100 bytes, added one by one: the tenth dictAdd is
        # one step into the rehash the ninth began (8 -> 16 buckets), and
        # only later operations on the key would finish it. The relocation
        # finishes it, so a migration's prepare (writes to the slot
        # waiting) does not have to; the reference server keeps it half
        # done, and both answer the same.
        foreach k {rh:hash rh:set} {
            for {set i 0} {$i < 10} {incr i} {
                if {$k eq "rh:hash"} {
                    st_both hset $k f$i [string repeat v 100]
                } else {
                    st_both sadd $k [string repeat m 70]$i
                }
            }
        }
        st_wait_compacted 0
        foreach k {rh:hash rh:set} {
            assert_equal hashtable [r 0 object encoding $k]
            assert_match {*rehashing target*} [r -1 debug htstats-key $k]
            assert_no_match {*rehashing target*} [r 0 debug htstats-key $k]
            assert_equal [r -1 debug digest-value $k] [r 0 debug digest-value $k]
        }
        st_assert_in_blocks 0 [st_slots 0 {rh:hash rh:set}]
        assert_equal [lsort [r -1 hgetall rh:hash]] [lsort [r 0 hgetall rh:hash]]
        assert_equal [lsort [r -1 smembers rh:set]] [lsort [r 0 smembers rh:set]]
        lappend slots {*}[st_slots 0 {rh:hash rh:set}]
    }

    test {Slot affinity types: writes to relocated hash tables, sets and sorted sets stay in their blocks} {
        # YCSB's update (one existing field of a hash table gets a new
        # value) is written over the old value when it fits (same length)
        # or allocated in the key's slot blocks (slotCompactReplaceSds);
        # a new field, set member or sorted-set node is allocated there
        # too, and so is a table shrunk by a deletion
        # (slotCompactPlaceBegin/End). None of these queues the key for
        # the cycle; a write that converts an encoding still does.
        set pkeys {}
        set fields {}
        for {set f 0} {$f < 10} {incr f} { lappend fields field$f [string repeat v 100] }
        set nodes {}
        for {set j 1} {$j <= 200} {incr j} { lappend nodes $j m$j }
        for {set i 0} {$i < 20} {incr i} {
            lappend pkeys "pl:$i"
            st_both hset "pl:$i" {*}$fields n 10 fl 1.5
            lappend pkeys "ps:$i"
            st_both sadd "ps:$i" {*}[lmap j {1 2 3 4 5 6 7 8} {string cat member $j}]
            lappend pkeys "pz:$i"
            st_both zadd "pz:$i" {*}$nodes
        }
        set pslots [st_relocated_slots 0 $pkeys]
        assert_equal {hashtable hashtable skiplist} [lmap k {pl:0 ps:0 pz:0} {r 0 object encoding $k}]

        r 0 config set slot-affinity-cpu 0
        try {
            set placed [st_info 0 slotalloc_placed_writes]
            # Same length: over the old value, no memory allocated.
            set used [st_info 0 slotalloc_used_bytes]
            set allocs [st_info 0 slotalloc_live_allocs]
            for {set i 0} {$i < 20} {incr i} { st_both hset pl:$i field5 [string repeat z 100] }
            assert_equal [list $used $allocs] [list [st_info 0 slotalloc_used_bytes] [st_info 0 slotalloc_live_allocs]]
            assert_equal [expr {$placed + 20}] [st_info 0 slotalloc_placed_writes]
            assert_equal 0 [st_info 0 slotalloc_pending_keys]

            # Updates (longer, much shorter, counters) and new entries that
            # grow the tables: 309 placed writes a key (one per field or
            # member; hsetnx and a zincrby by 0 write nothing).
            set placed [st_info 0 slotalloc_placed_writes]
            for {set i 0} {$i < 20} {incr i} {
                st_both hset pl:$i field3 [string repeat u 100] field7 [string repeat w 300]
                st_both hset pl:$i field8 short
                st_both hincrby pl:$i n 5
                st_both hincrbyfloat pl:$i fl 0.25
                st_both hsetnx pl:$i field1 ignored
                st_both hset pl:$i {*}[concat {*}[lmap j [lrepeat 300 0] {list f[incr ::pf_n] y}]]
                st_both sadd ps:$i newmember [string repeat s 80]
                st_both zadd pz:$i 1000.5 newnode
                st_both zadd pz:$i -5 m100
                st_both zincrby pz:$i 0 m101
            }
            assert_equal [expr {$placed + 20 * 309}] [st_info 0 slotalloc_placed_writes]
            # A table left mid-rehash by its growth queues its key: the
            # cycle finishes the rehash, so a migration's prepare does not.
            r 0 config set slot-affinity-cpu 100
            st_wait_compacted 0
            r 0 config set slot-affinity-cpu 0
            st_assert_in_blocks 0 $pslots

            # Updates and new entries with no table growth: nothing queued.
            set placed [st_info 0 slotalloc_placed_writes]
            for {set i 0} {$i < 20} {incr i} {
                st_both hset pl:$i field3 [string repeat q 120]
                st_both hset pl:$i brandnew x
                st_both sadd ps:$i onemore
                st_both zadd pz:$i 2000 newnode2
                st_both zadd pz:$i 7.5 m50
            }
            assert_equal [expr {$placed + 20 * 5}] [st_info 0 slotalloc_placed_writes]
            assert_equal 0 [st_info 0 slotalloc_pending_keys]
            st_assert_in_blocks 0 $pslots

            # Deletions (HDEL, SREM, ZREM, ZPOPMIN) free in the blocks and
            # would put a shrunk table there: nothing queued either; one
            # that finds nothing to delete is no write.
            set placed [st_info 0 slotalloc_placed_writes]
            for {set i 0} {$i < 20} {incr i} {
                assert_equal 1 [st_both hdel pl:$i brandnew]
                assert_equal 1 [st_both srem ps:$i onemore]
                assert_equal 1 [st_both zrem pz:$i newnode2]
                st_both zpopmin pz:$i
                assert_equal 0 [st_both srem ps:$i nosuchmember]
            }
            assert_equal [expr {$placed + 20 * 4}] [st_info 0 slotalloc_placed_writes]
            assert_equal 0 [st_info 0 slotalloc_pending_keys]
            st_assert_in_blocks 0 $pslots
            foreach k $pkeys {
                assert_equal [r -1 debug digest-value $k] [r 0 debug digest-value $k]
            }
            assert_equal [list 15 1.75] [r 0 hmget pl:7 n fl]
            # ZPOPMIN took m100 (-5).
            assert_equal {m1 1} [r 0 zrange pz:3 0 0 withscores]
        } finally {
            r 0 config set slot-affinity-cpu 100
        }

        # Deleting most of a set shrinks its table, in its blocks; the
        # rehash that starts is left for the cycle to finish (the key is
        # queued, as for a table grown by an add).
        st_both sadd ps:shrink {*}[lmap j [lrepeat 300 0] {string cat s [incr ::ps_n]}]
        st_wait_compacted 0
        r 0 config set slot-affinity-cpu 0
        try {
            set placed [st_info 0 slotalloc_placed_writes]
            set members [lsort [r -1 smembers ps:shrink]]
            assert_equal 290 [st_both srem ps:shrink {*}[lrange $members 0 289]]
            assert_equal [expr {$placed + 290}] [st_info 0 slotalloc_placed_writes]
            assert_equal 1 [st_info 0 slotalloc_pending_keys]
            assert_equal [lrange $members 290 end] [lsort [r 0 smembers ps:shrink]]
        } finally {
            r 0 config set slot-affinity-cpu 100
        }
        st_wait_compacted 0
        lappend pslots {*}[st_slots 0 {ps:shrink}]
        st_assert_in_blocks 0 $pslots

        # A conversion still goes through the heap and the cycle.
        st_both hset pl:conv f v
        st_both sadd ps:conv 1 2 3
        st_wait_compacted 0
        r 0 config set slot-affinity-cpu 0
        try {
            st_both hset pl:conv g [string repeat h 100]
            st_both sadd ps:conv notanumber
            assert_equal 2 [st_info 0 slotalloc_pending_keys]
        } finally {
            r 0 config set slot-affinity-cpu 100
        }
        st_wait_compacted 0
        lappend pslots {*}[st_slots 0 {pl:conv ps:conv}]
        st_assert_in_blocks 0 $pslots
        st_digests_equal {}
        lappend slots {*}$pslots
    }

    test {Slot affinity types: string overwrites of relocated keys stay in their blocks} {
        # SET and every setKey() caller over a string that lives in its
        # slot blocks write the new bytes over the old value
        # (slotCompactOverwriteString): an embedded string when they fit
        # its allocation, a raw one in place or in the slot's blocks. The
        # key is not queued for the cycle, OBJECT ENCODING, TTLs and every
        # reply are those of slot-affinity no.
        set skeys {}
        for {set i 0} {$i < 20} {incr i} {
            lappend skeys ss:$i sr:$i
            st_both set ss:$i [string repeat e 20]
            st_both set sr:$i [string repeat r 100]
        }
        set sslots [st_relocated_slots 0 $skeys]
        assert_equal {embstr raw} [lmap k {ss:0 sr:0} {r 0 object encoding $k}]

        r 0 config set slot-affinity-cpu 0
        try {
            # Same lengths: over the old values, no memory allocated.
            set placed [st_info 0 slotalloc_placed_writes]
            set used [st_info 0 slotalloc_used_bytes]
            set allocs [st_info 0 slotalloc_live_allocs]
            for {set i 0} {$i < 20} {incr i} {
                st_both set ss:$i [string repeat f 20]
                st_both set sr:$i [string repeat s 100]
            }
            assert_equal [list $used $allocs] [list [st_info 0 slotalloc_used_bytes] [st_info 0 slotalloc_live_allocs]]
            assert_equal [expr {$placed + 40}] [st_info 0 slotalloc_placed_writes]
            assert_equal 0 [st_info 0 slotalloc_pending_keys]

            # SET GET (longer: a new string in the slot), SETEX, SET
            # KEEPTTL, GETSET, MSET: one placed write each.
            set placed [st_info 0 slotalloc_placed_writes]
            for {set i 0} {$i < 20} {incr i} {
                assert_equal [string repeat s 100] [st_both set sr:$i [string repeat t 300] get]
                st_both setex ss:$i 1000 [string repeat g 20]
                st_both set ss:$i [string repeat h 19] keepttl
                assert_equal [string repeat h 19] [st_both getset ss:$i [string repeat i 20]]
                st_both mset sr:$i [string repeat u 250]
                st_both mset ss:$i [string repeat j 18]
            }
            assert_equal [expr {$placed + 20 * 6}] [st_info 0 slotalloc_placed_writes]
            assert_equal 0 [st_info 0 slotalloc_pending_keys]
            assert_equal {embstr raw} [lmap k {ss:0 sr:0} {st_both object encoding $k}]
            st_both setex ss:1 1000 [string repeat k 20]
            st_both set ss:1 [string repeat l 20] keepttl
            assert_range [r 0 ttl ss:1] 990 1000
            assert_equal -1 [r 0 ttl ss:0]
            assert_equal [string repeat j 18] [r 0 get ss:0]
            assert_equal [string repeat u 250] [r 0 get sr:19]

            # Another encoding (a short string over a raw one, an integer
            # past the shared ones) takes the usual path: a new object in
            # the heap, its key queued for the cycle.
            st_both set sr:0 short
            st_both set sr:1 12345
            assert_equal {embstr int} [lmap k {sr:0 sr:1} {st_both object encoding $k}]
            assert_equal 2 [st_info 0 slotalloc_pending_keys]
            foreach k $skeys {
                assert_equal [r -1 debug digest-value $k] [r 0 debug digest-value $k]
            }
        } finally {
            r 0 config set slot-affinity-cpu 100
        }
        st_wait_compacted 0
        st_assert_in_blocks 0 $sslots
        st_digests_equal {}
        lappend slots {*}$sslots
    }

    test {Slot affinity types: pushes and pops of relocated lists stay in their blocks} {
        # LPUSH/RPUSH (and LMOVE, LPUSHX, ...) grow a list that lives in its
        # slot blocks there, new quicklist nodes included, and pops shrink
        # it there (t_list.c in a placement scope); the popped element
        # itself is the client's, in the heap. Also with compressed nodes
        # (list-compress-depth 1: LZF buffers made and dropped).
        set lkeys [st_make_lists pq 200]
        set lslots [st_relocated_slots 0 $lkeys]
        r 0 config set slot-affinity-cpu 0
        try {
            set placed [st_info 0 slotalloc_placed_writes]
            foreach k $lkeys {
                # 300 pushes at both ends (new head and tail nodes), pops
                # of 250 (nodes emptied and freed), moves within the key.
                for {set j 0} {$j < 150} {incr j} {
                    st_both lpush $k [string repeat h 100]
                    st_both rpush $k [string repeat t 100]
                }
                for {set j 0} {$j < 125} {incr j} {
                    st_both lpop $k
                    st_both rpop $k
                }
                st_both lmove $k $k left right
                st_both rpoplpush $k $k
                st_both lpushx $k 12345
                st_both rpush $k 1 2 3
            }
            # Every push and pop of an element is a placed write; LMOVE
            # and RPOPLPUSH are two each, RPUSH of three elements three.
            assert_equal [expr {$placed + 20 * (300 + 250 + 2 + 2 + 1 + 3)}] [st_info 0 slotalloc_placed_writes]
            assert_equal 0 [st_info 0 slotalloc_pending_keys]
            st_assert_in_blocks 0 $lslots
            foreach k $lkeys {
                assert_equal [r -1 debug digest-value $k] [r 0 debug digest-value $k]
                assert_equal [r -1 lrange $k 0 -1] [r 0 lrange $k 0 -1]
            }
            # Popping a list empty deletes it, in place or not.
            st_both del pq:0:9
            st_both rpush pq:0:9 a b
            st_both lpop pq:0:9 2
            assert_equal 0 [st_both exists pq:0:9]
        } finally {
            r 0 config set slot-affinity-cpu 100
        }
        st_wait_compacted 0
        st_digests_equal {}
        lappend slots {*}$lslots
    }

    test {Slot affinity types: list edits and range deletions of relocated keys stay in their blocks} {
        # LSET, LINSERT, LREM, LTRIM and pops of a count edit a list that
        # lives in its slot blocks there, nodes decompressed and compressed
        # again included (list-compress-depth 1); ZREMRANGEBYSCORE, RANK and
        # LEX delete from a sorted set's skiplist there, and the table they
        # shrink is allocated there. None of them queues its key.
        set lkeys [st_make_lists pe 400]
        set zkeys {}
        set nodes {}
        for {set j 1} {$j <= 200} {incr j} { lappend nodes $j [format member:%04d:%s $j [string repeat z 40]] }
        set lexnodes {}
        for {set j 1} {$j <= 200} {incr j} { lappend lexnodes 0 [format lex:%04d:%s $j [string repeat x 40]] }
        for {set i 0} {$i < 10} {incr i} {
            lappend zkeys "pr:$i" "pv:$i"
            st_both zadd "pr:$i" {*}$nodes
            st_both zadd "pv:$i" {*}$lexnodes
        }
        set eslots [st_relocated_slots 0 [concat $lkeys $zkeys]]
        assert_equal skiplist [r 0 object encoding pr:0]

        r 0 config set slot-affinity-cpu 0
        try {
            set placed [st_info 0 slotalloc_placed_writes]
            foreach k $lkeys {
                # Same length, shorter and longer values, at both ends and
                # in a middle node.
                st_both lset $k 0 [string repeat s 100]
                st_both lset $k 200 [string repeat m 50]
                st_both lset $k -1 [string repeat l 300]
                st_both lset $k 150 pivot
                st_both linsert $k before pivot [string repeat b 100]
                st_both linsert $k after pivot [string repeat a 200]
                st_both lset $k 100 dup
                st_both lset $k 300 dup
                assert_equal 2 [st_both lrem $k 0 dup]
                st_both ltrim $k 5 -6
                st_both lpop $k 3
                st_both rpop $k 3
            }
            foreach k $zkeys {
                if {[string match pr:* $k]} {
                    assert_equal 20 [st_both zremrangebyscore $k 1 20]
                    assert_equal 10 [st_both zremrangebyrank $k 0 9]
                    # 20 of 200 left: the table shrinks.
                    assert_equal 150 [st_both zremrangebyrank $k 0 -21]
                } else {
                    assert_equal 20 [st_both zremrangebylex $k {[lex:0001} {(lex:0021}]
                    assert_equal 80 [st_both zremrangebylex $k - {(lex:0101}]
                }
            }
            # One placed write per command: 12 per list, 3 per scored and 2
            # per lexical sorted set.
            assert_equal [expr {$placed + 20 * 12 + 10 * 3 + 10 * 2}] [st_info 0 slotalloc_placed_writes]
            assert_equal 0 [st_info 0 slotalloc_pending_keys]
            st_assert_in_blocks 0 $eslots
            foreach k [concat $lkeys $zkeys] {
                assert_equal [r -1 debug digest-value $k] [r 0 debug digest-value $k]
            }
            foreach k $lkeys { assert_equal [r -1 lrange $k 0 -1] [r 0 lrange $k 0 -1] }
            foreach k $zkeys { assert_equal [r -1 zrange $k 0 -1 withscores] [r 0 zrange $k 0 -1 withscores] }
            # Reads of compressed lists decompress nodes and compress them
            # again: in the lists' blocks too, so that every byte of the
            # compressed lists is there after these reads, with nothing
            # queued (before, a read moved those nodes to the heap, where
            # they waited for the key's next queued write).
            foreach k $lkeys {
                if {![string match pe:1:* $k]} continue
                r 0 lrange $k 0 -1
                r 0 lindex $k 200
                r 0 lpos $k nosuchelement
                st_assert_slot_all_in_blocks 0 [r 0 cluster keyslot $k]
            }
            r 0 debug digest
            assert_equal 0 [st_info 0 slotalloc_pending_keys]
            # Misses answer as with slot-affinity no and change nothing.
            set k [lindex $lkeys 0]
            assert_match {*out of range*} [st_both lset $k 100000 x]
            assert_equal -1 [st_both linsert $k before nosuchpivot x]
            assert_equal 0 [st_both lrem $k 0 nosuchelement]
            assert_equal 0 [st_both zremrangebyscore pr:0 1000 2000]
            assert_equal [r -1 debug digest-value $k] [r 0 debug digest-value $k]
            # Trimming or removing everything deletes the key.
            st_both ltrim [lindex $lkeys 1] 1 0
            assert_equal 0 [st_both exists [lindex $lkeys 1]]
            assert_equal 20 [st_both zremrangebyrank pr:1 0 -1]
            assert_equal 0 [st_both exists pr:1]
        } finally {
            r 0 config set slot-affinity-cpu 100
        }
        st_wait_compacted 0
        st_digests_equal {}
        lappend slots {*}$eslots
    }

    test {Slot affinity types: XADD to relocated streams stays in their blocks} {
        # XADD grows a stream that lives in its slot blocks there: entries
        # appended to the last listpack, new listpacks and rax nodes (a
        # placement scope around streamAppendItem), and its trim (MAXLEN)
        # too, after which the key is signalled again in case the trim
        # allocated outside the blocks.
        set xkeys {}
        for {set i 0} {$i < 10} {incr i} {
            set k "px:$i"
            lappend xkeys $k
            for {set j 1} {$j <= 300} {incr j} { st_both xadd $k $j-1 f v$j g [string repeat w [expr {$j % 50}]] }
            st_both xgroup create $k grp 0
            st_both xreadgroup group grp c1 count 20 streams $k >
        }
        set xslots [st_relocated_slots 0 $xkeys]
        r 0 config set slot-affinity-cpu 0
        try {
            set placed [st_info 0 slotalloc_placed_writes]
            foreach k $xkeys {
                # 150 entries: new listpacks (100 entries a node) and rax
                # nodes.
                for {set j 301} {$j <= 450} {incr j} { st_both xadd $k $j-1 f v$j h [string repeat z 30] }
            }
            assert_equal [expr {$placed + 10 * 150}] [st_info 0 slotalloc_placed_writes]
            assert_equal 0 [st_info 0 slotalloc_pending_keys]
            # With a trim (exact MAXLEN): two placed writes per XADD.
            set placed [st_info 0 slotalloc_placed_writes]
            foreach k $xkeys {
                for {set j 451} {$j <= 470} {incr j} { st_both xadd $k maxlen 400 $j-1 f v$j }
                assert_equal 400 [st_both xlen $k]
            }
            assert_equal [expr {$placed + 10 * 20 * 2}] [st_info 0 slotalloc_placed_writes]
            assert_equal 0 [st_info 0 slotalloc_pending_keys]
            st_assert_in_blocks 0 $xslots
            foreach k $xkeys {
                assert_equal [r -1 xrange $k - +] [r 0 xrange $k - +]
                assert_equal [r -1 xinfo stream $k] [r 0 xinfo stream $k]
            }
            # Writes that upstream does not signal (groups, consumers,
            # claims: the heap's, not the blocks') queue the stream for
            # the cycle, right after placed XADDs that left it in place
            # (the random workload lost a group that way).
            set xid 1000
            foreach {cmd} {
                {xgroup create $k g9 0}
                {xgroup createconsumer $k grp c9}
                {xclaim $k grp c8 0 5-1 force}
                {xautoclaim $k grp c7 0 0-0 count 2}
            } {
                incr xid
                foreach k $xkeys { st_both xadd $k $xid-1 f v }
                assert_equal 0 [st_info 0 slotalloc_pending_keys]
                foreach k $xkeys { st_both {*}[subst $cmd] }
                assert_equal [llength $xkeys] [st_info 0 slotalloc_pending_keys] $cmd
                r 0 config set slot-affinity-cpu 100
                st_wait_compacted 0
                r 0 config set slot-affinity-cpu 0
            }
            foreach s $xslots { st_assert_slot_all_in_blocks 0 $s }
            # A claim that changes nothing (an ID in no PEL) queues nothing.
            foreach k $xkeys { st_both xclaim $k grp c8 0 999999-1 }
            assert_equal 0 [st_info 0 slotalloc_pending_keys]
        } finally {
            r 0 config set slot-affinity-cpu 100
        }
        st_digests_equal $xkeys
        lappend streams {*}$xkeys
        lappend slots {*}$xslots
    }

    test {Slot affinity types: random workload over every type, relocated in the background} {
        set relocated [st_info 0 slotalloc_relocated_keys]
        for {set n 0} {$n < 6000} {incr n} {
            set tk [lindex $keys [randomInt [llength $keys]]]
            st_random_op {*}$tk
        }
        # The workload converted encodings along the way.
        set encodings {}
        foreach tk $keys {
            set k [lindex $tk 1]
            if {[r 0 exists $k]} {
                dict set encodings "[r 0 type $k]/[r 0 object encoding $k]" 1
            }
        }
        foreach e {string/raw list/quicklist set/hashtable hash/hashtable
                   zset/skiplist stream/stream} {
            assert {[dict exists $encodings $e]}
        }
        st_wait_compacted 0
        assert {[st_info 0 slotalloc_relocated_keys] > $relocated}
        st_digests_equal $streams
        st_assert_in_blocks 0 $slots
        # Placed writes and relocation left no stale pointer, nothing in
        # another slot's blocks, no allocation no key reaches.
        set c [r 0 debug slotcompact check]
        assert_equal {} [dict get $c problem]
        assert_equal 0 [dict get $c unreached]
    }

    test {Slot affinity types: big keys of 100k+ elements are relocated in steps} {
        set bigkeys {big:hash big:set big:intset big:zset big:list big:stream}
        set big [st_info 0 slotalloc_relocated_big_keys]
        set script {
            local t = ARGV[1]
            for i = 1, tonumber(ARGV[2]) do
                if t == 'hash' then redis.call('hset', KEYS[1], 'field:' .. i, 'value:' .. i)
                elseif t == 'set' then redis.call('sadd', KEYS[1], 'member:' .. i)
                elseif t == 'intset' then redis.call('sadd', KEYS[1], i)
                elseif t == 'zset' then redis.call('zadd', KEYS[1], i % 1000, 'member:' .. i)
                elseif t == 'list' then redis.call('rpush', KEYS[1], 'element:' .. i)
                else redis.call('xadd', KEYS[1], i .. '-1', 'f', i) end
            end
            return redis.call('type', KEYS[1])['ok']
        }
        foreach k $bigkeys {
            st_both eval $script 1 $k [lindex [split $k :] 1] 100000
        }
        st_both xgroup create big:stream g1 0
        st_both xreadgroup group g1 c1 count 1000 streams big:stream >
        lappend streams big:stream
        # Writes while the cycle steps through them.
        for {set n 0} {$n < 300} {incr n} {
            st_both hset big:hash field:[randomInt 200000] [st_rand_elem]
            st_both srem big:set member:[randomInt 100000]
            st_both zincrby big:zset 1 member:[randomInt 100000]
            st_both lpop big:list
            st_both rpush big:list [st_rand_elem]
            st_both xdel big:stream [expr {1 + [randomInt 100000]}]-1
        }
        st_wait_compacted 0
        # The hash, the two sets and the sorted set (more elements than
        # active-defrag-max-scan-fields) were walked in steps; the list and
        # the stream have fewer nodes than that and move in one go. (Writes
        # during the walk used to queue them for another walk; now they
        # are placed in the blocks and do not.)
        assert {[st_info 0 slotalloc_relocated_big_keys] >= $big + 4}
        st_digests_equal $streams
        foreach k $bigkeys {
            set d [r 0 cluster slotblocks [r 0 cluster keyslot $k]]
            assert {[dict get $d bytes_in_blocks] * 100 >= [dict get $d bytes] * 99}
        }
        lappend slots {*}[st_slots 0 $bigkeys]
        st_assert_in_blocks 0 $slots
    }

    test {Slot affinity types: keys with short TTLs expire on both servers} {
        set short {}
        for {set i 0} {$i < 60} {incr i} {
            set t [lindex $st_types [expr {$i % 6}]]
            set k "ttl:$t:$i"
            switch $t {
                str { st_both set $k [randstring 1 500 alpha] }
                list { st_both rpush $k a b [randstring 100 300 alpha] }
                set { st_both sadd $k 1 2 x }
                hash { st_both hset $k f [randstring 70 100 alpha] }
                zset { st_both zadd $k 1 a 2 b }
                stream { st_both xadd $k 1-1 f v }
            }
            st_both pexpire $k [expr {50 + [randomInt 100]}]
            lappend short $k
        }
        wait_for_condition 100 50 {
            [r -1 dbsize] == [r 0 dbsize] &&
            [st_existing 0 $short] == 0 && [st_existing -1 $short] == 0
        } else {
            fail "short-TTL keys did not expire"
        }
        st_wait_compacted 0
        st_digests_equal $streams
    }

    test {Slot affinity types: DEL, UNLINK and lazyfree of relocated values} {
        set used [st_info 0 slotalloc_used_bytes]
        st_both config set lazyfree-lazy-user-del yes
        st_both unlink big:hash
        st_both unlink big:zset
        st_both del big:list
        st_both del big:set
        st_both config set lazyfree-lazy-user-del no
        wait_lazyfree_done r
        foreach tk [lrange $keys 0 9] { st_both del [lindex $tk 1] }
        assert {[st_info 0 slotalloc_used_bytes] < $used}
        st_wait_compacted 0
        st_digests_equal $streams
    }

    test {Slot affinity types: DEBUG RELOAD, then the cycle relocates the loaded keys} {
        set digest [r 0 debug digest]
        r -1 debug reload
        r 0 debug reload
        assert_equal $digest [r 0 debug digest]
        st_digests_equal $streams
        st_wait_compacted 0
        st_assert_in_blocks 0 $slots
        assert_equal $digest [r 0 debug digest]
    }

    test {Slot affinity types: BGSAVE and restart} {
        set digest [r 0 debug digest]
        r 0 bgsave
        waitForBgsave [srv 0 client]
        restart_server 0 true false
        assert_equal $digest [r 0 debug digest]
        wait_for_condition 300 100 {
            [regexp {cluster_state:ok} [r 0 cluster info]]
        } else {
            fail "cluster not ok after restart"
        }
        r 0 config set slot-affinity-cpu 100
        st_wait_compacted 0
        st_assert_in_blocks 0 $slots
        st_digests_equal $streams
    }

    test {Slot affinity types: AOF rewrite and reload} {
        set digest [r 0 debug digest]
        r 0 config set appendonly yes
        waitForBgrewriteaof [srv 0 client]
        r 0 bgrewriteaof
        waitForBgrewriteaof [srv 0 client]
        r 0 debug loadaof
        assert_equal $digest [r 0 debug digest]
        st_wait_compacted 0
        st_assert_in_blocks 0 $slots
        r 0 config set appendonly no
        st_digests_equal $streams
    }

    test {Slot affinity types: sparse blocks are emptied and released} {
        # One slot (hash tag) with many keys, then 9 in 10 deleted: the
        # survivors are spread over all its blocks.
        set script {
            for i = 1, tonumber(ARGV[1]) do
                redis.call('set', KEYS[1] .. ':' .. i, string.rep('v', 100 + i % 300))
            end
            return 1
        }
        st_both eval $script 1 "{sparse}" 40000
        st_wait_compacted 0
        set slot [r 0 cluster keyslot "{sparse}"]
        set before [r 0 cluster slotblocks $slot]
        assert {[dict get $before blocks] >= 4}
        set script {
            for i = 1, tonumber(ARGV[1]) do
                if i % 10 ~= 0 then redis.call('del', KEYS[1] .. ':' .. i) end
            end
            return 1
        }
        st_both eval $script 1 "{sparse}" 40000
        set released [st_info 0 slotalloc_sparse_blocks_released]
        wait_for_condition 300 100 {
            [dict get [r 0 cluster slotblocks $slot] block_bytes] * 3 <
                [dict get $before block_bytes]
        } else {
            fail "sparse blocks were not released: [r 0 cluster slotblocks $slot]"
        }
        assert {[st_info 0 slotalloc_sparse_blocks_released] > $released}
        set after [r 0 cluster slotblocks $slot]
        assert_equal 4000 [dict get $after keys]
        assert_equal 4000 [dict get $after keys_in_blocks]
        st_wait_compacted 0
        st_digests_equal $streams
    }

    test {Slot affinity types: FLUSHALL ASYNC leaves no live allocation in blocks} {
        st_both flushall async
        wait_lazyfree_done r
        wait_for_condition 100 50 {
            [st_info 0 slotalloc_live_allocs] == 0 &&
            [st_info 0 slotalloc_used_bytes] == 0
        } else {
            fail "block memory left after FLUSHALL ASYNC: [r 0 info slotalloc]"
        }
        st_digests_equal {}
    }
}
}

# Eviction of relocated keys of every type under maxmemory: LRU picks keys
# at random, so this is checked per key instead of against a reference.
proc st_expected {t i} {
    set v [string repeat [format %03d [expr {$i % 1000}]] 1000]
    switch $t {
        str { return $v }
        list { return [list a $v b] }
        set { return [lsort [list x $v y]] }
        hash { return [list f1 $v f2 x] }
        zset { return [list $v 1] }
    }
}

start_server {overrides {cluster-enabled yes slot-affinity yes slot-affinity-cpu 100} tags {external:skip cluster rdmamig}} {
    rdmamig_own_all_slots 0

    test {Slot affinity types: eviction under maxmemory frees relocated keys} {
        r config set maxmemory-policy allkeys-lru
        r config set maxmemory [expr {[s used_memory] + 8*1024*1024}]
        set types {str list set hash zset}
        set n 0
        for {set batch 0} {$batch < 12} {incr batch} {
            for {set j 0} {$j < 500} {incr j; incr n} {
                set t [lindex $types [expr {$n % 5}]]
                set v [st_expected $t $n]
                switch $t {
                    str { r set ev:$n $v }
                    list { r rpush ev:$n {*}$v }
                    set { r sadd ev:$n {*}$v }
                    hash { r hset ev:$n {*}$v }
                    zset { r zadd ev:$n 1 [lindex $v 0] }
                }
            }
            st_wait_compacted 0
        }
        assert {[s evicted_keys] > 0}
        set maxmemory [lindex [r config get maxmemory] 1]
        assert {[s used_memory] <= $maxmemory * 1.1}
        # No more eviction while the survivors are counted: any command may
        # evict, and background compaction allocates a copy of a value
        # before it frees the old one.
        r config set maxmemory 0
        set left 0
        for {set i 0} {$i < $n} {incr i} {
            set t [lindex $types [expr {$i % 5}]]
            if {![r exists ev:$i]} continue
            incr left
            switch $t {
                str { assert_equal [st_expected $t $i] [r get ev:$i] }
                list { assert_equal [st_expected $t $i] [r lrange ev:$i 0 -1] }
                set { assert_equal [st_expected $t $i] [lsort [r smembers ev:$i]] }
                hash { assert_equal [lsort [st_expected $t $i]] [lsort [r hgetall ev:$i]] }
                zset { assert_equal [st_expected $t $i] [r zrange ev:$i 0 -1 withscores] }
            }
        }
        assert {$left > 0 && $left < $n}
        assert_equal $left [r dbsize]
        set slots {}
        for {set i 0} {$i < $n} {incr i 37} {
            if {[r exists ev:$i]} { dict set slots [r cluster keyslot ev:$i] 1 }
        }
        st_assert_in_blocks 0 [dict keys $slots]
        # What is left in blocks is what the surviving keys own.
        assert {[st_info 0 slotalloc_used_bytes] < $maxmemory}
        r flushall
        wait_for_condition 100 50 {
            [st_info 0 slotalloc_live_allocs] == 0
        } else {
            fail "block memory left after FLUSHALL"
        }
    }
}

set ::singledb $old_singledb
