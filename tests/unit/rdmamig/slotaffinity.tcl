# Slot affinity (src/slotcompact.c, src/slotalloc.c): keys' memory moved
# into per-slot blocks by DEBUG SLOTCOMPACT, and every normal free /
# realloc / size path of Redis working on it (zmalloc routing).
#
# The same commands go to two cluster-mode servers: one with slot-affinity
# yes (relocating), a reference with slot-affinity no. Their DEBUG DIGEST
# must stay equal through relocation, overwrites, growth, deletion,
# lazyfree, expiry and DEBUG RELOAD.

# Cluster mode has db 0 only: the test framework must not SELECT.
set old_singledb $::singledb
set ::singledb 1

source tests/helpers/rdmamig.tcl

proc sa_info {level field} {
    getInfoProperty [r $level info slotalloc] $field
}

# CLUSTER SLOTBLOCKS reply (RESP2 flat array) as a Tcl dict.
proc sa_slotblocks {level slot} {
    r $level cluster slotblocks $slot
}

# Run one command on both servers (-1: reference, 0: relocating).
proc sa_both {args} {
    set a [r -1 {*}$args]
    set b [r 0 {*}$args]
    assert_equal $a $b
    return $b
}

# How many of keys exist (one EXISTS per key: they are in many slots).
proc sa_existing {level keys} {
    set n 0
    foreach k $keys { incr n [r $level exists $k] }
    return $n
}

# FLUSHALL both servers, and wait until the cron's sweep says no block
# page is resident any more.
proc sa_flush_until_no_blocks {} {
    r 0 flushall
    r -1 flushall
    wait_for_condition 100 100 {
        [sa_info 0 slotalloc_resident_bytes] == 0 && [sa_info 0 slotalloc_slack_bytes] == 0
    } else {
        fail "blocks still resident after FLUSHALL: [r 0 info slotalloc]"
    }
}

# The distinct slots of keys PREFIX:0 .. PREFIX:N-1.
proc sa_used_slots {prefix n} {
    set slots {}
    for {set i 0} {$i < $n} {incr i} { dict set slots [r 0 cluster keyslot $prefix:$i] 1 }
    dict keys $slots
}

proc sa_digests_equal {} {
    assert_equal [r -1 debug digest] [r 0 debug digest]
}

# Load string keys of every flavour into both servers: embstr (<= 44
# bytes), raw, a few 1MB values, integers (small ones are shared objects),
# some with a TTL. Returns the list of slots used.
proc sa_load {prefix n} {
    set slots {}
    for {set i 0} {$i < $n} {incr i} {
        set k "$prefix:$i:[randstring 0 12 alpha]"
        switch [expr {$i % 6}] {
            0 { set v [randstring 1 44 binary] }
            1 { set v [randstring 45 3000 binary] }
            2 { set v [expr {$i * 1000003}] }
            3 { set v [expr {$i % 100}] }
            4 { set v [randstring 20000 40000 alpha] }
            5 { set v [randstring 1 200 alpha] }
        }
        if {$i % 5 == 0} {
            sa_both set $k $v ex 100000
        } else {
            sa_both set $k $v
        }
        dict set slots [r 0 cluster keyslot $k] 1
    }
    for {set i 0} {$i < 4} {incr i} {
        set k "$prefix:big:$i"
        sa_both set $k [string repeat [format %c [expr {65 + $i}]] [expr {1024*1024 + $i*1000}]]
        if {$i % 2} { sa_both pexpire $k 10000000 }
        dict set slots [r 0 cluster keyslot $k] 1
    }
    dict keys $slots
}

# Sum CLUSTER SLOTBLOCKS over slots.
proc sa_blocks_total {slots} {
    set tot [dict create keys 0 keys_in_blocks 0 bytes 0 bytes_in_blocks 0]
    foreach s $slots {
        set d [sa_slotblocks 0 $s]
        assert_equal [r 0 cluster countkeysinslot $s] [dict get $d keys]
        foreach f {keys keys_in_blocks bytes bytes_in_blocks} {
            dict incr tot $f [dict get $d $f]
        }
    }
    return $tot
}

start_server {overrides {cluster-enabled yes slot-affinity no} tags {external:skip cluster rdmamig}} {
# slot-affinity-cpu 0: no background compaction, so that what moves is
# what DEBUG SLOTCOMPACT moved (slotaffinity-types.tcl covers the cycle).
# Each slot its own arena (slot-affinity-group-slots 1): the exact
# CLUSTER SLOTBLOCKS replies and the per-slot slack below are of that
# layout; slotgroups.tcl tests groups.
start_server {overrides {cluster-enabled yes slot-affinity yes slot-affinity-cpu 0 slot-affinity-group-slots 1} tags {external:skip cluster rdmamig}} {
    rdmamig_own_all_slots -1
    rdmamig_own_all_slots 0

    test {Slot affinity: configuration and INFO slotalloc} {
        assert_equal {slot-affinity yes} [r 0 config get slot-affinity]
        assert_equal {slot-affinity no} [r -1 config get slot-affinity]
        assert_equal [expr {64*1024*1024*1024}] [lindex [r 0 config get slot-affinity-reserve] 1]
        assert_equal 65536 [lindex [r 0 config get slot-affinity-min-block] 1]
        assert_equal 4194304 [lindex [r 0 config get slot-affinity-max-block] 1]
        assert_error {*immutable*} {r 0 config set slot-affinity-reserve 1gb}
        assert_error {*immutable*} {r 0 config set slot-affinity-max-block 8mb}
        # The section is in the default set and in 'all', once.
        assert_equal 1 [regexp -all {# Slotalloc} [r 0 info]]
        assert_equal 1 [regexp -all {# Slotalloc} [r 0 info all]]
        assert_equal 1 [regexp -all {# Slotalloc} [r 0 info everything]]
        assert_equal 0 [regexp -all {# Slotalloc} [r 0 info memory]]
        assert_equal 1 [sa_info 0 slotalloc_enabled]
        assert_equal 0 [sa_info -1 slotalloc_enabled]
        assert_equal [expr {64*1024*1024*1024}] [sa_info 0 slotalloc_range_bytes]
        assert_equal 0 [sa_info -1 slotalloc_range_bytes]
        foreach f {slotalloc_blocks slotalloc_reserved_bytes slotalloc_used_bytes
                   slotalloc_free_bytes slotalloc_relocated_keys
                   slotalloc_relocated_bytes slotalloc_compaction_usec} {
            assert {[string is integer -strict [sa_info 0 $f]]}
        }
    }

    test {Slot affinity: argument errors} {
        assert_error {*out of range slot*} {r 0 cluster slotblocks 16384}
        assert_error {*out of range slot*} {r 0 cluster slotblocks -1}
        assert_error {*out of range slot*} {r 0 cluster slotblocks abc}
        assert_error {*wrong number of arguments*} {r 0 cluster slotblocks}
        assert_error {*out of range slot*} {r 0 debug slotcompact 16384}
        assert_error {*out of range slot*} {r 0 debug slotcompact foo}
        assert_error {*slot-affinity is disabled*} {r -1 debug slotcompact all}
        # An empty slot: nothing anywhere.
        assert_equal {blocks 0 block_bytes 0 keys 0 keys_in_blocks 0 bytes 0 bytes_in_blocks 0 arena 1234 arena_slots 1 arena_mixed 0} \
            [r 0 cluster slotblocks 1234]
        assert_equal 0 [r 0 debug slotcompact 1234]
    }

    set slots [sa_load k 1200]

    test {Slot affinity: DEBUG SLOTCOMPACT ALL keeps every value (digest)} {
        set before [r 0 debug digest]
        assert_equal $before [r -1 debug digest]
        set used_before [s 0 used_memory]
        set moved [r 0 debug slotcompact all]
        # Every string key was born in its blocks (values of up to 4 KB that
        # are not shared integers: slotCompactNewString) or had at least its
        # name moved.
        set born [sa_info 0 slotalloc_born_keys]
        assert {$moved > 0 && $born > 0}
        assert_equal [r 0 dbsize] [expr {$moved + $born}]
        assert_equal $before [r 0 debug digest]
        assert_equal $moved [sa_info 0 slotalloc_relocated_keys]
        assert {[sa_info 0 slotalloc_blocks] > 0}
        assert {[sa_info 0 slotalloc_used_bytes] > 1200*16 + 4*1024*1024}
        # What moved: at least the 1 MB values (smaller ones were born in
        # the blocks, which they share).
        assert {[sa_info 0 slotalloc_relocated_bytes] >= 4*1024*1024}
        # Accounting follows the moved memory: used_memory counts blocks'
        # usable sizes, so it changes by far less than what moved.
        set delta [expr {[s 0 used_memory] - $used_before}]
        assert {abs($delta) < [sa_info 0 slotalloc_used_bytes] / 4}
        # Nothing is left to move.
        assert_equal 0 [r 0 debug slotcompact all]
    }

    test {Slot affinity: CLUSTER SLOTBLOCKS says the keys live in blocks} {
        set tot [sa_blocks_total $slots]
        assert_equal [r 0 dbsize] [dict get $tot keys]
        assert {[dict get $tot bytes_in_blocks] >= 0.99 * [dict get $tot bytes]}
        assert_equal [dict get $tot keys] [dict get $tot keys_in_blocks]
        # The reference has nothing in blocks, but the same keys.
        set s [lindex $slots 0]
        set d [r -1 cluster slotblocks $s]
        assert_equal 0 [dict get $d bytes_in_blocks]
        assert_equal [r 0 cluster countkeysinslot $s] [dict get $d keys]
        # MEMORY USAGE sees block memory through the same size queries: for
        # a slot holding one key, it differs from the reference's by what
        # the key's allocations differ in usable size (block size classes
        # are not jemalloc's).
        set checked 0
        foreach s $slots {
            if {[r 0 cluster countkeysinslot $s] != 1} continue
            set k [lindex [r 0 cluster getkeysinslot $s 1] 0]
            set bm [dict get [r 0 cluster slotblocks $s] bytes]
            set br [dict get [r -1 cluster slotblocks $s] bytes]
            assert_equal [expr {[r 0 memory usage $k] - [r -1 memory usage $k]}] \
                [expr {$bm - $br}]
            if {[incr checked] == 50} break
        }
        assert_equal 50 $checked
    }

    test {Slot affinity: RESP3 map reply} {
        r 0 hello 3
        set d [r 0 cluster slotblocks [lindex $slots 0]]
        r 0 hello 2
        assert_equal {blocks block_bytes keys keys_in_blocks bytes bytes_in_blocks arena arena_slots arena_mixed} [dict keys $d]
        assert {[dict get $d blocks] >= 1}
    }

    test {Slot affinity: reads, overwrite, APPEND and SETRANGE growth on block memory} {
        set keys [r 0 keys k:*]
        set i 0
        foreach k $keys {
            assert_equal [r -1 get $k] [r 0 get $k]
            switch [expr {$i % 5}] {
                0 { sa_both append $k [randstring 1 30 alpha] }
                1 { sa_both append $k [randstring 100 5000 alpha] }
                2 { sa_both setrange $k [expr {[r 0 strlen $k] + 7}] "grown" }
                3 { sa_both set $k [randstring 1 100 alpha] }
                4 { sa_both getrange $k 0 10 }
            }
            incr i
        }
        # Growing 1MB values reallocates huge blocks.
        foreach k [r 0 keys k:big:*] {
            sa_both append $k [string repeat z 70000]
            sa_both setrange $k 3000000 end
        }
        sa_digests_equal
        # Integers: INCR replaces the value object.
        sa_both set counter 12345678901
        r 0 debug slotcompact [r 0 cluster keyslot counter]
        sa_both incrby counter 5
        sa_digests_equal
    }

    test {Slot affinity: relocate again after the changes} {
        set before [r 0 debug digest]
        assert {[r 0 debug slotcompact all] > 0}
        assert_equal $before [r 0 debug digest]
        set tot [sa_blocks_total [concat $slots [r 0 cluster keyslot counter]]]
        assert {[dict get $tot bytes_in_blocks] >= 0.99 * [dict get $tot bytes]}
        sa_digests_equal
    }

    test {Slot affinity: EXPIRE, PERSIST, TTLs and expiry of relocated keys} {
        set keys [lrange [r 0 keys k:*] 0 199]
        set i 0
        set expiring {}
        foreach k $keys {
            switch [expr {$i % 3}] {
                0 { sa_both pexpire $k 50; lappend expiring $k }
                1 { sa_both expire $k 100000 }
                2 { sa_both persist $k }
            }
            incr i
        }
        # Active expiry deletes some; EXISTS deletes the rest (lazy expiry).
        # (50 ms, not 1: a PEXPIRE whose deadline has already passed when
        # the command checks it deletes the key at once, without counting
        # it in expired_keys, which happened on a loaded machine.)
        wait_for_condition 100 50 {
            [sa_existing 0 $expiring] == 0 && [sa_existing -1 $expiring] == 0
        } else {
            fail "keys did not expire"
        }
        assert {[s 0 expired_keys] >= [llength $expiring]}
        sa_digests_equal
        # A relocated key whose name is shared with the expires dict.
        # (5000 bytes: a smaller value would be born in its blocks.)
        sa_both set ttlkey [string repeat v 5000] ex 1000
        assert_equal 1 [r 0 debug slotcompact [r 0 cluster keyslot ttlkey]]
        assert_range [r 0 ttl ttlkey] 900 1000
        sa_both pexpire ttlkey 1
        wait_for_condition 50 50 {
            [r 0 exists ttlkey] == 0 && [r -1 exists ttlkey] == 0
        } else {
            fail "ttlkey did not expire"
        }
        sa_digests_equal
    }

    test {Slot affinity: DEL, UNLINK and lazyfree-lazy-user-del free block memory} {
        r 0 config set lazyfree-lazy-user-del yes
        r -1 config set lazyfree-lazy-user-del yes
        set keys [r 0 keys k:*]
        set i 0
        foreach k $keys {
            if {$i % 4 == 0} { sa_both del $k }
            if {$i % 4 == 1} { sa_both unlink $k }
            incr i
        }
        sa_both unlink k:big:0
        sa_both del k:big:1
        wait_lazyfree_done r
        sa_digests_equal
        r 0 config set lazyfree-lazy-user-del no
        r -1 config set lazyfree-lazy-user-del no
    }

    test {Slot affinity: keys of every type are relocated by DEBUG SLOTCOMPACT} {
        r 0 debug slotcompact all
        sa_both rpush list a b c [string repeat x 100]
        sa_both hset hash f1 v1 f2 [string repeat y 100]
        sa_both sadd set 1 2 3 foo
        sa_both zadd zset 1 a 2 b
        sa_both xadd stream 1-1 f v
        foreach k {list hash set zset stream} {
            set slot [r 0 cluster keyslot $k]
            set d [r 0 cluster slotblocks $slot]
            assert {[dict get $d keys_in_blocks] < [dict get $d keys]}
            assert_equal 1 [r 0 debug slotcompact $slot]
            set d [r 0 cluster slotblocks $slot]
            assert_equal [dict get $d keys] [dict get $d keys_in_blocks]
            assert_equal [dict get $d bytes] [dict get $d bytes_in_blocks]
            assert_equal [r -1 type $k] [r 0 type $k]
        }
        sa_digests_equal
        foreach k {list hash set zset stream} { sa_both del $k }
    }

    test {Slot affinity: DEBUG RELOAD of relocated keys} {
        r 0 debug slotcompact all
        set before [r 0 debug digest]
        r 0 debug reload
        assert_equal $before [r 0 debug digest]
        sa_digests_equal
        # Loaded keys are born in jemalloc; relocate them again.
        assert {[r 0 debug slotcompact all] > 0}
        assert_equal $before [r 0 debug digest]
    }

    test {Slot affinity: BGSAVE and BGREWRITEAOF children read block memory} {
        set before [r 0 debug digest]
        r 0 bgsave
        waitForBgsave r
        r 0 debug reload nosave
        assert_equal $before [r 0 debug digest]
        assert {[r 0 debug slotcompact all] > 0}
        r 0 config set appendonly yes
        waitForBgrewriteaof r
        r 0 debug loadaof
        assert_equal $before [r 0 debug digest]
        r 0 config set appendonly no
        assert {[r 0 debug slotcompact all] > 0}
        assert_equal $before [r 0 debug digest]
    }

    test {Slot affinity: INFO says what the blocks hold in RAM, and their slack} {
        # Small keys over many slots: each slot's block has a header page
        # and a slab page per size class in use, mostly empty. That slack
        # is RSS that used_memory does not show (as jemalloc's own is not):
        # INFO must.
        sa_flush_until_no_blocks
        set mem0 [s 0 used_memory]
        set ref0 [s -1 used_memory]
        for {set i 0} {$i < 3000} {incr i} { sa_both set rs:$i [string repeat x 20] }
        r 0 debug slotcompact all
        set used [sa_info 0 slotalloc_used_bytes]
        assert {$used > 3000 * 20}
        # Published at the end of each full sweep of the cron: the first
        # one that saw every slot compacted. At least a header page and a
        # slab page per slot holding keys.
        set nslots [llength [sa_used_slots rs 3000]]
        wait_for_condition 100 100 {
            [sa_info 0 slotalloc_resident_bytes] >= $used + 2 * 4096 * $nslots &&
            [sa_info 0 slotalloc_slack_bytes] == [sa_info 0 slotalloc_resident_bytes] - $used
        } else {
            fail "resident bytes not published: [r 0 info slotalloc]"
        }
        # used_memory grew by the data only, as the reference's did (a
        # block's size classes differ from jemalloc's: ~7 % more for 32 B
        # strings), far less than the slack.
        set grown [expr {[s 0 used_memory] - $mem0}]
        set ref_grown [expr {[s -1 used_memory] - $ref0}]
        assert_range $grown [expr {$ref_grown * 0.8}] [expr {$ref_grown * 1.25}]
        assert {[sa_info 0 slotalloc_slack_bytes] > $grown}
        # Gone with the keys.
        sa_flush_until_no_blocks
        sa_load sa 60
        r 0 debug slotcompact all
        sa_digests_equal
    }

    test {Slot affinity: FLUSHALL ASYNC frees block memory on the lazyfree thread} {
        assert {[sa_info 0 slotalloc_used_bytes] > 0}
        r 0 flushall async
        r -1 flushall async
        wait_lazyfree_done r
        assert_equal 0 [r 0 dbsize]
        assert_equal 0 [sa_info 0 slotalloc_used_bytes]
        assert_equal 0 [sa_info 0 slotalloc_live_allocs]
        # Empty blocks are kept one per slot at most, and given back to the
        # OS by the cron within a second or so.
        assert {[sa_info 0 slotalloc_blocks] == [sa_info 0 slotalloc_cached_empty_blocks]}
        wait_for_condition 50 100 {
            [sa_info 0 slotalloc_blocks] == 0 && [sa_info 0 slotalloc_reserved_bytes] == 0
        } else {
            fail "emptied blocks were not released"
        }
        sa_digests_equal
    }

    test {Slot affinity: used_memory returns to its baseline (no accounting drift)} {
        # Warm up so that every size class and block exists, then measure
        # repeated cycles of set, relocate, grow, delete. Client buffers
        # must not move under the measure: no reply buffer resizing, and
        # no big arguments (the query buffer would shrink later in cron):
        # the 2MB value is built by SETRANGE on the server.
        r 0 debug replybuffer resizing 0
        set k drift
        set slot [r 0 cluster keyslot $k]
        # The first INFO allocates its command's latency histogram after
        # replying: call it once before taking the baseline.
        for {set round 0} {$round < 3} {incr round} {
            if {$round == 1} { s 0 used_memory; set base [s 0 used_memory] }
            for {set i 0} {$i < 300} {incr i} {
                r 0 set $k [string repeat a [expr {100 + ($i * 37) % 3000}]]
                r 0 set $k:{$k} [expr {$i * 100000}]
                r 0 debug slotcompact $slot
                r 0 append $k [string repeat b [expr {($i * 53) % 3000}]]
                r 0 setrange $k 9000 x
                if {$i % 3} { r 0 expire $k 1000 }
                r 0 del $k $k:{$k}
            }
            r 0 setrange big:{$k} 2000000 c
            r 0 debug slotcompact $slot
            r 0 append big:{$k} xyz
            r 0 del big:{$k}
        }
        assert_equal 0 [sa_info 0 slotalloc_used_bytes]
        # 600 cycles: a drift of even one chunk per cycle would show.
        wait_for_condition 20 100 {
            abs([s 0 used_memory] - $base) < 1024
        } else {
            fail "used_memory drifted: [s 0 used_memory], baseline $base"
        }
        r 0 debug replybuffer resizing 1
    }

    test {Slot affinity: new string keys are born in their blocks} {
        # Earlier tests' keys are in their blocks: what moves below is ours.
        r 0 debug slotcompact all
        set born [sa_info 0 slotalloc_born_keys]
        set pending [sa_info 0 slotalloc_pending_keys]
        set relocated [sa_info 0 slotalloc_relocated_keys]
        # SET of every encoding, with and without a TTL, GETSET, MSET, and
        # the SET family's other forms.
        # (At least 8 bytes: the overwrite of b1 below must fit in place.)
        sa_both set born:emb:{b1} [randstring 8 44 binary]
        sa_both set born:raw:{b2} [randstring 45 4096 binary]
        sa_both set born:int:{b3} 123456789012
        sa_both set born:ttl:{b4} [randstring 1 100 alpha] px 100000000
        sa_both getset born:getset:{b5} [randstring 1 100 alpha]
        sa_both mset born:m1:{b6} v1 born:m2:{b6} [randstring 100 200 alpha]
        sa_both setnx born:nx:{b8} nx
        sa_both setex born:ex:{b9} 100000 ex
        sa_both set born:get:{b10} g get
        # Not born: a shared integer (the keyspace holds the shared object),
        # a value over 4 KB, a key that exists (overwritten in place or
        # relocated as before), and types other than strings.
        sa_both set born:shared:{b11} 7
        sa_both set born:big:{b12} [string repeat x 5000]
        sa_both set born:emb:{b1} again
        sa_both hset born:hash:{b13} f v
        assert_equal [expr {$born + 10}] [sa_info 0 slotalloc_born_keys]
        foreach k [r 0 keys born:*] {
            if {$k eq "born:hash:{b13}"} continue
            assert_equal [r -1 object encoding $k] [r 0 object encoding $k]
            assert_equal [r -1 get $k] [r 0 get $k]
            assert_equal [r -1 ttl $k] [r 0 ttl $k]
        }
        sa_digests_equal
        # Nothing of a born key is left to relocate: the name and value are
        # in the slot's blocks; only the other keys' allocations move.
        foreach k {emb:{b1} raw:{b2} int:{b3} ttl:{b4} getset:{b5} m2:{b6}} {
            set d [sa_slotblocks 0 [r 0 cluster keyslot born:$k]]
            assert_equal [dict get $d keys] [dict get $d keys_in_blocks]
        }
        assert_equal [expr {$pending + 3}] [sa_info 0 slotalloc_pending_keys]
        assert_equal 3 [r 0 debug slotcompact all]
        assert_equal [expr {$relocated + 3}] [sa_info 0 slotalloc_relocated_keys]
        set c [r 0 debug slotcompact check]
        assert_equal {} [dict get $c problem]
        assert_equal 0 [dict get $c unreached]
        # The reference node, slot-affinity no, has no blocks to be born in.
        assert_equal 0 [sa_info -1 slotalloc_born_keys]
        # Born keys are ordinary keys: they expire, are deleted, come back
        # from a reload.
        r 0 debug reload
        r -1 debug reload
        sa_digests_equal
        sa_both pexpire born:ttl:{b4} 1
        wait_for_condition 50 50 {
            [r 0 exists born:ttl:{b4}] == 0 && [r -1 exists born:ttl:{b4}] == 0
        } else {
            fail "a born key did not expire"
        }
        foreach k [r 0 keys born:*] { sa_both del $k }
        sa_digests_equal
        assert_equal 0 [sa_info 0 slotalloc_used_bytes]
    }

    test {Slot affinity: CONFIG SET slot-affinity no stops relocation, memory keeps working} {
        sa_both set a:{x} [string repeat q 300]
        r 0 debug slotcompact [r 0 cluster keyslot a:{x}]
        r 0 config set slot-affinity no
        assert_equal 0 [sa_info 0 slotalloc_enabled]
        assert_error {*slot-affinity is disabled*} {r 0 debug slotcompact all}
        sa_both append a:{x} more
        sa_digests_equal
        r 0 config set slot-affinity yes
        assert_equal 1 [sa_info 0 slotalloc_enabled]
        sa_both del a:{x}
        assert_equal 0 [sa_info 0 slotalloc_used_bytes]
    }
}
}

start_server {overrides {slot-affinity yes} tags {external:skip rdmamig}} {
    test {Slot affinity: invalid block sizes are refused at startup} {
        set dir [tmpdir slotaffinity]
        set port [find_available_port $::baseport $::portcount]
        catch {exec src/redis-server --port $port --dir $dir \
                   --slot-affinity-min-block 100kb} out
        assert_match {*slot-affinity-min-block*must be a power of two*} $out
        catch {exec src/redis-server --port $port --dir $dir --cluster-enabled yes \
                   --slot-affinity-min-block 8mb --slot-affinity-max-block 1mb} out
        assert_match {*must not be larger than slot-affinity-max-block*} $out
    }

    test {Slot affinity: inactive without cluster mode} {
        assert_equal 0 [sa_info 0 slotalloc_enabled]
        assert_equal 0 [sa_info 0 slotalloc_range_bytes]
        assert_error {*cluster mode*} {r debug slotcompact all}
        assert_error {*cluster support disabled*} {r cluster slotblocks 0}
    }
}

start_server {overrides {cluster-enabled yes slot-affinity no} tags {external:skip cluster rdmamig}} {
    test {Slot affinity: CONFIG SET slot-affinity yes starts the allocator} {
        assert_equal 0 [sa_info 0 slotalloc_range_bytes]
        r config set slot-affinity yes
        assert_equal 1 [sa_info 0 slotalloc_enabled]
        assert {[sa_info 0 slotalloc_range_bytes] > 0}
        rdmamig_own_all_slots 0
        r config set slot-affinity-cpu 0
        # A new key is born in its blocks: nothing is left to relocate.
        set born [sa_info 0 slotalloc_born_keys]
        r set foo bar
        assert_equal [expr {$born + 1}] [sa_info 0 slotalloc_born_keys]
        assert_equal 0 [r debug slotcompact all]
        assert_equal 1 [dict get [r cluster slotblocks [r cluster keyslot foo]] keys_in_blocks]
        r del foo
        assert_equal 0 [sa_info 0 slotalloc_used_bytes]
    }
}

start_server {overrides {cluster-enabled yes} tags {external:skip cluster rdmamig}} {
    rdmamig_own_all_slots 0

    test {Slot affinity: on by default in cluster mode, in groups of 256} {
        assert_equal {slot-affinity yes} [r config get slot-affinity]
        assert_equal {slot-affinity-group-slots 256} [r config get slot-affinity-group-slots]
        assert_equal 1 [sa_info 0 slotalloc_enabled]
        # The reserved range is address space only (64 GB by default).
        assert_equal [expr {64 << 30}] [sa_info 0 slotalloc_range_bytes]
        # A key is born in the arena its slot's group of 256 shares.
        r set foo bar
        set slot [r cluster keyslot foo]
        set d [r cluster slotblocks $slot]
        assert_equal 1 [dict get $d keys_in_blocks]
        assert_equal [expr {$slot & ~255}] [dict get $d arena]
        r del foo
    }
}

# Stock MIGRATE of relocated keys: DUMP reads block memory on the donor,
# the donor's delete gives it back, the recipient relocates what it got.
start_cluster 2 0 {overrides {cluster-enabled yes slot-affinity yes} tags {external:skip cluster rdmamig}} {
    test {Slot affinity: MIGRATE a slot of relocated keys to another node} {
        # A hash tag whose slot node 0 serves (0..8191).
        set tag 0
        while {[R 0 cluster keyslot "{$tag}"] >= 8192} { incr tag }
        set slot [R 0 cluster keyslot "{$tag}"]
        R 0 config set slot-affinity-cpu 0
        R 1 config set slot-affinity-cpu 0
        set keys {}
        for {set i 0} {$i < 300} {incr i} {
            set k "m$i:{$tag}"
            R 0 set $k [randstring 1 [expr {$i % 3 ? 100 : 5000}] alpha]
            if {$i % 4 == 0} { R 0 expire $k 100000 }
            lappend keys $k
        }
        R 0 set "big:{$tag}" [string repeat b 2000000]
        lappend keys "big:{$tag}"
        # Values of up to 4 KB were born in their blocks; the rest moves.
        set born [getInfoProperty [R 0 info slotalloc] slotalloc_born_keys]
        assert {$born >= 200}
        assert_equal [expr {301 - $born}] [R 0 debug slotcompact $slot]
        set digests {}
        foreach k $keys { lappend digests [R 0 debug digest-value $k] }
        assert {[getInfoProperty [R 0 info slotalloc] slotalloc_used_bytes] > 2000000}

        set id0 [R 0 cluster myid]
        set id1 [R 1 cluster myid]
        R 1 cluster setslot $slot importing $id0
        R 0 cluster setslot $slot migrating $id1
        foreach k $keys {
            R 0 migrate [srv -1 host] [srv -1 port] $k 0 10000
        }
        R 0 cluster setslot $slot node $id1
        R 1 cluster setslot $slot node $id1

        assert_equal 0 [R 0 cluster countkeysinslot $slot]
        assert_equal 0 [getInfoProperty [R 0 info slotalloc] slotalloc_used_bytes]
        wait_for_condition 50 100 {
            [getInfoProperty [R 0 info slotalloc] slotalloc_blocks] == 0
        } else {
            fail "the donor kept the slot's blocks"
        }
        set got {}
        foreach k $keys { lappend got [R 1 debug digest-value $k] }
        assert_equal $digests $got
        assert_equal 301 [R 1 debug slotcompact $slot]
        set got {}
        foreach k $keys { lappend got [R 1 debug digest-value $k] }
        assert_equal $digests $got
        set d [R 1 cluster slotblocks $slot]
        assert_equal 301 [dict get $d keys_in_blocks]
    }
}

set ::singledb $old_singledb
