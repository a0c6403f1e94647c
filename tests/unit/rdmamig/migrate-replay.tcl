# migration-write-replay (src/migdonor.c, "Recorded writes"; slotfreeze.c,
# slotFreezeRelax): once a donor's bytes have left, writes to the migrating
# slots run on the donor again, are recorded as the donor propagates them,
# and the recipient applies them (RDMAREPLAY) before the handover. What a
# user relies on:
#
# 1. On by default. While the recipient checks and links (the donor is held
#    there with migration-test-delay-patch), writes of every type, new
#    keys, deletes, TTL changes, expiries, a script, a transaction and a big
#    value are answered at once, none is postponed; afterwards the recipient
#    holds exactly what the donor held (per-key DEBUG DIGEST-VALUE, DUMP,
#    TTL), the donor none of it, and each replica what its master holds.
# 2. A migration that fails after such writes (CANCEL) leaves them all on
#    the donor, and the recipient holds nothing; moving the slots again
#    then moves them.
# 2b. During the transfer, a slot whose bytes have all left takes writes
#    again at once (recorded, replayed) while the slots not sent yet still
#    hold theirs, and reads that would change bytes not sent yet (a
#    compressed list's) wait too; a slot such a command waits for is sent
#    next; the reply's mean pause per slot is below the longest.
#    (With migration-write-copy-max-size 0: by default such writes copy
#    their key instead, 2d.)
# 2c. DEBUG DIGEST during the transfer waits until the bytes have left; a
#    held client that disconnects is not counted in the longest wait.
# 2d. migration-write-copy-max-size (1mb by default): during the transfer,
#    before any byte has left, writes of every type to keys not sent yet,
#    new keys, deletes, TTLs, expiries and a transaction are answered at
#    once (each key is copied out of the transfer); a key bigger than the
#    limit and a script still wait for their slot. Afterwards the
#    recipient holds exactly what the donor held, each replica what its
#    master holds, and both nodes' blocks hold nothing but their keys (the
#    old copies were freed). A migration cancelled after such writes
#    leaves them on the donor, its blocks sound; moved again, they arrive.
#    A bad value is refused.
# 3. With migration-write-replay no, those writes wait for the handover.
# 4. A CLIENT PAUSE WRITE on either node (a manual failover pauses writes
#    too) holds the migration's links, replay and deletes until it ends;
#    nothing crashes and nothing is lost.
# 5. RDMAREPLAY refuses bad input with a precise error and changes nothing.

source tests/helpers/rdmamig-migrate.tcl

start_cluster 2 2 {overrides {cluster-enabled yes cluster-node-timeout 15000} tags {external:skip cluster rdmamig}} {
    # Node 0 serves 0-8191, node 1 8192-16383; node 2 replicates node 0,
    # node 3 node 1.
    mg_fast_clients

    test {migration-write-replay: on by default; a bad value is refused} {
        assert_equal yes [lindex [R 0 config get migration-write-replay] 1]
        catch {R 0 config set migration-write-replay maybe} err
        assert_match {*argument must be 'yes' or 'no'*} $err
        assert_equal yes [lindex [R 0 config get migration-write-replay] 1]
    }

    test {migration-write-replay: writes after the transfer are answered at once and reach the recipient and its replica} {
        wait_for_condition 100 100 {
            [s -2 master_link_status] eq {up} && [s -3 master_link_status] eq {up}
        } else {
            fail "replicas not in sync"
        }
        set W {0-999}
        set Wset [mg_slotset $W]
        set fill [mg_fill_for_writes 0 r $Wset]
        dict with fill {}
        set newkeys [mg_names r:new 30 $Wset]
        set doomed [lrange $keys 0 9]
        set written [lrange $keys 10 99]
        set postponed [mg_info 0 migration_postponed_commands]
        set totals [mg_info 0 migration_total_writes_replayed]

        # 4 s: room for the writes below on a loaded machine (a write still
        # running when the slots freeze again would be MOVED, not lost).
        mg_delay 0 patch 4000
        set rd [mg_migrate_deferred 0 1 $W]
        mg_wait_phase 0 patch
        set t0 [clock milliseconds]
        set w [mg_write_mixed 0 $keys $written $newkeys $doomed $short r $tag]
        set took [expr {[clock milliseconds] - $t0}]
        # Still in the patch phase: nothing waited for the handover.
        assert_equal patch [dict get [mg_status 0] phase]
        assert_equal $postponed [mg_info 0 migration_postponed_commands]

        # What the donor holds now is what the recipient must hold.
        set sent [dict get $w sent]
        set present [dict get $w present]
        set snap [mg_snapshot 0 $present]
        set gone [dict get $w gone]

        set reply [mg_deferred_reply $rd 0]
        puts "writes after the transfer answered in $took ms; reply $reply"
        mg_assert_reply $reply 1000 [dict get $reply keys]
        # Every write to the slots was replayed: each command above but the
        # PERSIST (its key may have had no TTL, then nothing changed), the
        # script's and the transaction's commands, the expiries' DELs. A
        # short key counts once: PEXPIRE 1 propagates as PEXPIREAT and its
        # expiry as DEL, but when a millisecond passed while the command ran
        # (a loaded machine: a CI run saw 226 of 227) the key is deleted at
        # once and that DEL is all there is.
        assert {[dict get $reply writes_replayed] >= $sent + [llength $doomed] + [llength $short] + 7}
        assert_equal [dict get $reply writes_replayed] [mg_info 0 migration_last_writes_replayed]
        assert_equal [expr {$totals + [dict get $reply writes_replayed]}] [mg_info 0 migration_total_writes_replayed]
        # The 4 s in patch were not part of the pause.
        assert {[dict get $reply write_pause_ms] < 3000}

        # (The replayed writes' memory is the keys' own, in their slots.)
        mg_assert_moved_with_writes $W $snap $gone $present $others
        assert_equal [R 1 dbsize] [R 3 dbsize]
        # Back, for the next test.
        mg_migrate 1 0 $W
        mg_wait_converged
        mg_assert_keys 0 $snap
    }

    test {migration-write-replay: a migration that fails after the writes leaves them on the donor} {
        set W {1000-1999}
        set Wset [mg_slotset $W]
        set keys [mg_fill 0 c 200 $Wset]
        set newkeys [mg_names c:new 20 $Wset]
        # CANCEL ends the delay: a long one costs nothing.
        mg_delay 0 patch 8000
        set rd [mg_migrate_deferred 0 1 $W]
        mg_wait_phase 0 patch
        mg_write_all 0 [lrange $keys 0 99] $newkeys
        R 0 del [lindex $keys 150]
        set snap [mg_snapshot 0 [concat [lrange $keys 0 149] [lrange $keys 151 end] $newkeys]]
        mg_cancel_deferred $rd
        mg_assert_cancelled_then_moved $W [concat $keys $newkeys] $snap [list [lindex $keys 150]]
    }

    test {migration-write-replay: a slot takes writes again once its own bytes have left; a slot a write waits for is sent next} {
        # Writes to keys not sent yet wait (rather than copy their key, 2d).
        R 0 config set migration-write-copy-max-size 0
        set W {3000-3004}
        set Wset [mg_slotset $W]
        set keys [mg_fill 0 sl 150 $Wset]
        # Each slot holds more than a chunk of the transfer: two strings of
        # 100 KB, and the chunks are 64 KB (migration-max-bandwidth 6mb
        # gives 10 ms of it, at least 64 KB; src/migdonor.c,
        # migChunkBytes). A chunk then completes at most one slot, and the
        # slots take writes again one by one.
        set big {}
        foreach slot [mg_expand $W] {
            foreach k [mg_names sl:big$slot 2 [mg_slotset $slot]] {
                R 0 set $k [string repeat [randstring 100 100 alpha] 1000]
                lappend big $k
            }
        }
        lappend keys {*}$big
        # The first and the last slot sent (slots go in ascending order).
        set bykey {}
        foreach k $keys { dict set bykey $k [mg_keyslot $k] }
        set sorted [lsort -integer -stride 2 -index 1 $bykey]
        set first [lindex $sorted 0]
        set last [lindex $sorted end-1]
        assert {[mg_keyslot $first] < [mg_keyslot $last]}
        set newfirst [lindex [mg_names sl:new 1 [mg_slotset [mg_keyslot $first]]] 0]
        # A compressed list in the last slot (see mg_make_key listcomp).
        set zl [lindex [mg_names sl:zl 1 [mg_slotset [mg_keyslot $last]]] 0]
        mg_make_key 0 $zl listcomp
        assert_match {*ql_compressed:1*} [R 0 debug object $zl]
        set zlrange [R 0 lrange $zl 0 -1]
        set postponed [mg_info 0 migration_postponed_commands]
        # 800 ms after each chunk that completed a slot (the chunks are
        # cut as without it).
        R 0 config set migration-max-bandwidth 6mb
        mg_delay 0 chunk 800
        set rd [mg_migrate_deferred 0 1 $W]
        wait_for_condition 400 10 {
            [mg_info 0 migration_frozen_slots] > 0 && [mg_info 0 migration_frozen_slots] < 5
        } else {
            fail "no slot took writes again during the transfer"
        }
        assert_equal transfer [dict get [mg_status 0] phase]
        # The first slot: answered at once, not postponed.
        set t0 [clock milliseconds]
        R 0 set $first first-after-send
        R 0 set $newfirst brand-new
        assert {[clock milliseconds] - $t0 < 400}
        assert_equal $postponed [mg_info 0 migration_postponed_commands]
        # The last slot: held until its own bytes have left, and so is a
        # read of its compressed list (it would decompress nodes in place);
        # it goes next, before the slots in between.
        set wr [redis_deferring_client -0]
        set t1 [clock milliseconds]
        $wr set $last last-after-send
        set zr [redis_deferring_client -0]
        $zr lrange $zl 0 -1
        wait_for_condition 50 20 {
            [mg_info 0 migration_postponed_commands] == $postponed + 2
        } else {
            fail "the write to a slot not sent yet, or the read of its compressed list, was not postponed"
        }
        assert_equal OK [$wr read]
        $wr close
        # At most two holds (the slot in progress, its chunk completed,
        # then this one), not the three slots still to go first: 2.4 s.
        set waited [expr {[clock milliseconds] - $t1}]
        puts "    the write to the last slot waited $waited ms"
        assert {$waited < 2400}
        assert_equal $zlrange [$zr read]
        $zr close
        assert {[mg_info 0 migration_frozen_slots] >= 2}
        assert_equal transfer [dict get [mg_status 0] phase]
        # (Snapshots read compressed lists with DEBUG DIGEST-VALUE: those
        # wait for their slot too.)
        set snap [mg_snapshot 0 [concat [lsearch -all -inline -not -exact [lsearch -all -inline -not -exact $keys $first] $last] [list $zl]]]
        set reply [mg_deferred_reply $rd 0]
        R 0 config set migration-max-bandwidth 0
        mg_assert_reply $reply 5 [expr {[llength $keys] + 1}]
        # More than a chunk per slot, each sent whole, in order but the last.
        assert {[dict get $reply bytes] > 5 * 65536}
        assert {[dict get $reply writes_replayed] >= 3}
        # The first slot was frozen for no hold, the last one sent for
        # four (after the first, the second, the wanted and the third).
        assert {[dict get $reply write_pause_ms] >= 3000}
        assert {[dict get $reply write_pause_mean_ms] < [dict get $reply write_pause_ms] - 1000}
        assert_equal [dict get $reply write_pause_mean_ms] [mg_info 0 migration_last_write_pause_mean_ms]
        # The write and the read held (and DEBUG DIGEST-VALUEs of the
        # snapshot, if some slot holds compressed lists) are counted.
        assert {[dict get $reply commands_held] >= 2}
        assert {[dict get $reply commands_held_max_ms] >= 300}
        assert_equal [dict get $reply commands_held] [mg_info 0 migration_last_commands_held]
        assert_equal [dict get $reply commands_held_max_ms] [mg_info 0 migration_last_commands_held_max_ms]
        assert_equal first-after-send [R 1 get $first]
        assert_equal brand-new [R 1 get $newfirst]
        assert_equal last-after-send [R 1 get $last]
        mg_assert_keys 1 $snap
        mg_assert_absent 0 [concat $keys [list $newfirst $zl]]
        mg_assert_owner 1 $W
        mg_wait_converged
        mg_assert_replicas_equal
        mg_migrate 1 0 $W
        mg_wait_converged
        foreach k $big { R 0 del $k }
        R 0 config set migration-write-copy-max-size 1mb
    }

    test {migration-write-copy-max-size: 1mb by default; 0 and units accepted, a bad value refused} {
        assert_equal 1048576 [lindex [R 0 config get migration-write-copy-max-size] 1]
        catch {R 0 config set migration-write-copy-max-size lots} err
        assert_match {*argument must be a memory value*} $err
        catch {R 0 config set migration-write-copy-max-size -1} err
        assert_match {*argument must be a memory value*} $err
        R 0 config set migration-write-copy-max-size 0
        assert_equal 0 [lindex [R 0 config get migration-write-copy-max-size] 1]
        R 0 config set migration-write-copy-max-size 1mb
        assert_equal 1048576 [lindex [R 0 config get migration-write-copy-max-size] 1]
    }

    test {migration-write-copy-max-size: writes to keys not sent yet are answered at once during the transfer; the recipient gets them, nothing leaks} {
        mg_wait_replicas_up
        R 0 config set migration-write-copy-max-size 1mb
        set W {3400-3599}
        set Wset [mg_slotset $W]
        # As mg_fill_for_writes, with names of its own.
        set keys [mg_fill 0 cw 300 $Wset]
        lappend keys {*}[mg_fill_big 0 cw $Wset]
        set others [mg_fill 0 cwo 50 [mg_slotset 2000-2999]]
        set short [mg_names cw:short 5 $Wset]
        foreach k $short { R 0 set $k v px 100000 }
        set tag [mg_tag $Wset]
        set newkeys [mg_names cw:new 30 $Wset]
        set doomed [lrange $keys 0 9]
        set written [lrange $keys 10 99]
        # The big keys (100,000 elements, a 2 MB string) are above the
        # limit: a write to one of them waits for its slot.
        set bigkey [lindex $keys 300]
        assert_equal hash [R 0 type $bigkey]
        set postponed [mg_info 0 migration_postponed_commands]
        set copied [mg_info 0 migration_total_keys_copied]

        # The donor sleeps once both ends registered the blocks, before the
        # first byte is written: every slot is frozen, every key in flight.
        # Then it waits in patch, where the snapshot below is taken.
        mg_delay 0 write 5000
        mg_delay 0 patch 4000
        set rd [mg_migrate_deferred 0 1 $W]
        mg_wait_transfer_frozen 0
        set frozen [mg_info 0 migration_frozen_slots]
        set t0 [clock milliseconds]
        set sent [mg_write_all 0 $written $newkeys]
        foreach k $doomed { R 0 del $k }
        R 0 pexpire [lindex $written 0] 500000
        R 0 persist [lindex $written 1]
        foreach k $short { R 0 pexpire $k 1 }
        after 20
        foreach k $short { assert_equal 0 [R 0 exists $k] }
        R 0 incrbyfloat cw:{$tag}:float 1.5
        R 0 multi
        R 0 set cw:{$tag}:tx1 a
        R 0 rename cw:{$tag}:tx1 cw:{$tag}:tx2
        R 0 exec
        R 0 set cw:{$tag}:big [string repeat x 3000000]
        set took [expr {[clock milliseconds] - $t0}]
        # Nothing has left yet, and nothing waited.
        assert_equal transfer [dict get [mg_status 0] phase]
        assert_equal $frozen [mg_info 0 migration_frozen_slots]
        assert_equal $postponed [mg_info 0 migration_postponed_commands]
        assert {$took < 4000}
        # A write to a key above the limit, and a script, wait for their slot.
        set wb [redis_deferring_client -0]
        $wb hset $bigkey cw-field cw-value
        set ws [redis_deferring_client -0]
        $ws eval {return redis.call('set', KEYS[1], 'from-a-script')} 1 cw:{$tag}:script
        wait_for_condition 100 20 {
            [mg_info 0 migration_postponed_commands] == $postponed + 2
        } else {
            fail "the write to the big key and the script were not held"
        }
        assert_equal 1 [$wb read]
        assert_equal OK [$ws read]
        $wb close
        $ws close
        mg_wait_phase 0 patch
        set present {}
        foreach k [concat $keys $newkeys [lmap x {float tx2 big script} {set _ cw:{$tag}:$x}]] {
            if {[lsearch -exact $doomed $k] < 0} { lappend present $k }
        }
        set snap [mg_snapshot 0 $present]
        set gone [concat $doomed $short [list cw:{$tag}:tx1]]

        set reply [mg_deferred_reply $rd 0]
        puts "    [llength $written] keys written, [llength $newkeys] made, in $took ms during the transfer; [mg_info 0 migration_last_keys_copied] keys ([mg_info 0 migration_last_bytes_copied] bytes) copied; reply $reply"
        mg_assert_reply $reply 200 [dict get $reply keys]
        # Every existing key written was copied once (the deleted ones
        # too: DEL is a write), and counted.
        set n [mg_info 0 migration_last_keys_copied]
        assert {$n >= [llength $written] + [llength $doomed]}
        assert_equal [expr {$copied + $n}] [mg_info 0 migration_total_keys_copied]
        assert {[mg_info 0 migration_last_bytes_copied] > 0}
        assert {[dict get $reply writes_replayed] >= $sent + [llength $doomed] + [llength $short] + 5}
        # The two held commands are the only ones.
        assert_equal 2 [dict get $reply commands_held]

        # (The old copies were freed once sent: the donor's blocks hold
        # nothing no key reaches.)
        mg_assert_moved_with_writes $W $snap $gone $present $others
        assert_equal 1 [R 1 hexists $bigkey cw-field]
        mg_migrate 1 0 $W
        mg_wait_converged
        mg_assert_keys 0 $snap
        mg_assert_slotalloc_sound 0
    }

    test {migration-write-copy-max-size: a migration cancelled after writes copied their keys leaves them on the donor; moved again, they arrive} {
        R 0 config set migration-write-copy-max-size 1mb
        set W {3600-3699}
        set Wset [mg_slotset $W]
        set keys [mg_fill 0 cc 150 $Wset]
        set newkeys [mg_names cc:new 20 $Wset]
        # The keys left alone, now: during the transfer a read of one that
        # is a compressed list would wait for its slot (copied keys are
        # read at once).
        set snap [mg_snapshot 0 [lrange $keys 121 end]]
        set postponed [mg_info 0 migration_postponed_commands]
        # CANCEL ends the delay: a long one costs nothing.
        mg_delay 0 write 8000
        set rd [mg_migrate_deferred 0 1 $W]
        mg_wait_transfer_frozen 0
        mg_write_all 0 [lrange $keys 0 99] $newkeys
        R 0 del [lindex $keys 120]
        # Keys 100-119 are copied by a write that changes nothing.
        foreach k [lrange $keys 100 119] { R 0 persist $k }
        assert_equal $postponed [mg_info 0 migration_postponed_commands]
        assert {[mg_info 0 migration_frozen_slots] > 0}
        set snap [dict merge $snap [mg_snapshot 0 [concat [lrange $keys 0 119] $newkeys]]]
        mg_cancel_deferred $rd
        assert {[mg_info 0 migration_last_keys_copied] >= 100}
        # (The old copies were freed by the rollback: the blocks are sound.)
        mg_assert_cancelled_then_moved $W [concat $keys $newkeys] $snap [list [lindex $keys 120]]
        mg_migrate 1 0 $W
        mg_wait_converged
    }

    test {DEBUG DIGEST during a transfer waits for the slots' bytes to leave (it would decompress lists in place); the migration succeeds} {
        set W {3200-3204}
        set keys [mg_fill 0 dg 40 [mg_slotset $W]]
        set zl [lindex [mg_names dg:zl 1 [mg_slotset $W]] 0]
        mg_make_key 0 $zl listcomp
        assert_match {*ql_compressed:1*} [R 0 debug object $zl]
        set snap [mg_snapshot 0 [concat $keys [list $zl]]]
        set digest [R 0 debug digest]
        set postponed [mg_info 0 migration_postponed_commands]
        # The donor sleeps once both ends registered the blocks, before the
        # first byte is written: every slot is still frozen.
        mg_delay 0 write 1500
        set rd [mg_migrate_deferred 0 1 $W]
        mg_wait_phase 0 transfer
        set dg [redis_deferring_client -0]
        $dg debug digest
        wait_for_condition 50 20 {
            [mg_info 0 migration_postponed_commands] == $postponed + 1
        } else {
            fail "DEBUG DIGEST was not held during the transfer"
        }
        set reply [mg_deferred_reply $rd 0]
        mg_assert_reply $reply 5 [llength [dict keys $snap]]
        # It ran once the bytes had left, before the handover: the keys
        # were all still there, as they were.
        assert_equal $digest [$dg read]
        $dg close
        mg_assert_keys 1 $snap
        mg_assert_absent 0 [dict keys $snap]
        mg_assert_owner 1 $W
        mg_wait_converged
        mg_assert_replicas_equal
        mg_migrate 1 0 $W
        mg_wait_converged
    }

    test {A held client that disconnects does not count in commands_held_max_ms} {
        R 0 config set migration-write-copy-max-size 0
        set W {3300-3304}
        set keys [mg_fill 0 hc 20 [mg_slotset $W]]
        set k [lindex [mg_names hc:str 1 [mg_slotset $W]] 0]
        R 0 set $k before
        set postponed [mg_info 0 migration_postponed_commands]
        mg_delay 0 write 1500
        set rd [mg_migrate_deferred 0 1 $W]
        mg_wait_phase 0 transfer
        set gone [redis_deferring_client -0]
        $gone set $k never-answered
        wait_for_condition 50 20 {
            [mg_info 0 migration_postponed_commands] == $postponed + 1
        } else {
            fail "the write was not held"
        }
        $gone close
        set reply [mg_deferred_reply $rd 0]
        # It was held (counted once), but its wait, which never ended with
        # a command run, is not the longest wait: about the whole freeze.
        assert_equal 1 [dict get $reply commands_held]
        assert {[dict get $reply write_pause_ms] >= 1400}
        assert {[dict get $reply commands_held_max_ms] < 500}
        assert_equal [dict get $reply commands_held_max_ms] [mg_info 0 migration_last_commands_held_max_ms]
        # Its write never ran: the key moved as it was.
        assert_equal before [R 1 get $k]
        mg_assert_owner 1 $W
        mg_wait_converged
        mg_migrate 1 0 $W
        mg_wait_converged
        R 0 config set migration-write-copy-max-size 1mb
    }

    test {migration-write-replay no: writes to the slots wait for the handover} {
        R 0 config set migration-write-replay no
        set W {2500-2599}
        set Wset [mg_slotset $W]
        set keys [mg_fill 0 n 50 $Wset]
        set k [lindex [mg_names n:w 1 $Wset] 0]
        set postponed [mg_info 0 migration_postponed_commands]
        mg_delay 0 patch 1000
        set rd [mg_migrate_deferred 0 1 $W]
        mg_wait_phase 0 patch
        set wr [redis_deferring_client -0]
        $wr set $k v
        wait_for_condition 50 20 {
            [mg_info 0 migration_postponed_commands] > $postponed
        } else {
            fail "the write was not postponed"
        }
        set reply [$rd read]
        $rd close
        mg_delay_reset 0
        R 0 config set migration-write-replay yes
        assert_equal 0 [dict get $reply writes_replayed]
        assert {[dict get $reply write_pause_ms] >= 900}
        # Held until the handover, then redirected: never lost, never an error.
        catch {$wr read} res
        $wr close
        assert_match "MOVED * *:[srv -1 port]" $res
        assert_equal 0 [R 1 exists $k]
        mg_wait_converged
        mg_migrate 1 0 $W
        mg_wait_converged
    }

    test {CLIENT PAUSE WRITE on both nodes during a migration (a manual failover pauses writes too): its links, replay and deletes wait, nothing crashes} {
        set W {3000-3099}
        set Wset [mg_slotset $W]
        set keys [mg_fill 0 p 200 $Wset]
        set newk [lindex [mg_names p:new 1 $Wset] 0]
        set size1 [R 1 dbsize]
        mg_delay 0 patch 1000
        mg_delay 0 delete 1000
        set rd [mg_migrate_deferred 0 1 $W]
        mg_wait_phase 0 patch
        set t0 [clock milliseconds]
        R 0 set $newk v
        # The recipient pauses writes: nothing may be linked (its RESTOREs
        # go to its replica) or replayed until the pause ends. Unpaused,
        # it would have linked everything 1.5 s after the patch began.
        R 1 client pause 4000 write
        set snap [mg_snapshot 0 [concat $keys [list $newk]]]
        after [expr {max(0, 1500 - ([clock milliseconds] - $t0))}]
        assert_equal $size1 [R 1 dbsize]
        assert {[dict get [mg_status 0] phase] in {patch handover}}
        mg_wait_phase 0 delete
        # The donor pauses writes: its deletes (DELs to its replica) wait.
        R 0 client pause 1500 write
        set reply [mg_deferred_reply $rd 0]
        assert {[dict get $reply writes_replayed] >= 1}
        mg_assert_keys 1 $snap
        mg_assert_absent 0 [concat $keys [list $newk]]
        mg_wait_converged
        mg_assert_replicas_equal
    }

    test {RDMAREPLAY: misuse is refused with a precise error and changes nothing} {
        set h1 [srv -1 host]; set p1 [srv -1 port]
        set before [list [mg_state 0] [mg_state 1]]
        mg_assert_err {no import session} {R 1 rdmareplay 0123456789abcdef 3 set k v}
        mg_assert_err {wrong number} {R 1 rdmareplay 0123456789abcdef 1}
        set in [lindex [mg_names m:in 1 [mg_slotset 5000]] 0]
        set out [lindex [mg_names m:out 1 [mg_slotset 5001]] 0]
        set c [redis $h1 $p1 0 $::tls]
        set failed [catch {
            set init [$c initrdmaserver 0 5000 transport tcp timeout 10000 \
                          version [mg_info 1 migration_protocol_version]]
            set sid [dict get $init session]
            mg_assert_err {connection that sent INITRDMASERVER} {R 1 rdmareplay $sid 3 set $in v}
            mg_assert_err {not an argument count} {$c rdmareplay $sid 0 set $in v}
            mg_assert_err {not an argument count} {$c rdmareplay $sid 4 set $in v}
            mg_assert_err {not an argument count} {$c rdmareplay $sid x set $in v}
            mg_assert_err {not a write command} {$c rdmareplay $sid 2 get $in}
            mg_assert_err {not a write command} {$c rdmareplay $sid 2 nosuchcommand $in}
            mg_assert_err {wrong number of arguments for 'set'} {$c rdmareplay $sid 2 set $in}
            mg_assert_err {names no key} {$c rdmareplay $sid 1 flushall}
            mg_assert_err {names a key of a slot this import does not hold} {$c rdmareplay $sid 3 set $out v}
            # The second command is bad: the first is not applied either.
            mg_assert_err {command 2} {$c rdmareplay $sid 3 set $in v 3 set $out v}
            mg_assert_err {before RDMADONE} {$c rdmareplay $sid 3 set $in v}
        } err]
        $c close
        mg_wait_idle 1
        if {$failed} { error $err }
        assert_equal $before [list [mg_state 0] [mg_state 1]]
    }
}
