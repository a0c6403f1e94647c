# migration-max-bandwidth (src/migdonor.c, migPace): the block bytes per
# second a donor sends. What a user relies on:
#
# 1. 0 (no limit) is the default; sizes take units (2mb); a bad value is
#    refused and changes nothing. INFO migration_max_bandwidth shows it
#    (redis-cli sizes its TIMEOUT with it).
# 2. A limited migration sends at about the limit: its transfer lasts at
#    least bytes / limit (less one chunk), and not much longer; the reply,
#    STATUS and INFO report the time it waited (throttled_ms), which is 0
#    without a limit. Every key arrives intact, none is left behind.
# 3. CONFIG SET applies to a running migration: lifting the limit
#    mid-transfer lets it finish at once.
#    A write to a slot not sent yet waits for that slot only, not for the
#    limit: the slot goes next at once.
# 4. A limit that cannot send the slots' bytes before the TIMEOUT fails
#    the migration at once with an error that says so and what to change,
#    before anything is sent; both nodes stay as they were. A limit
#    lowered mid-transfer that runs into the TIMEOUT rolls back with an
#    error that names the limit.

source tests/helpers/rdmamig-migrate.tcl

# Strings of 100 KB in the slot set: 'count' of them.
proc mb_fill_strings {n prefix count slotset} {
    set keys [mg_names $prefix $count $slotset]
    set val [string repeat [randstring 100 100 alpha] 1000]
    foreach k $keys { R $n set $k $val }
    return $keys
}

# Node 0 still owns ranges and holds the snapshot; node 1 none of it.
proc mb_assert_nothing_moved {ranges keys snap} {
    mg_wait_idle 0
    mg_wait_idle 1
    mg_assert_keys 0 $snap
    mg_assert_absent 1 $keys
    mg_wait_converged
    mg_assert_owner 0 $ranges
    mg_assert_slotalloc_sound 0
    mg_assert_slotalloc_sound 1
}

# Wait until node 0's running migration has waited more than ms for the
# limit (STATUS throttled_ms).
proc mb_wait_throttled {ms} {
    wait_for_condition 200 20 {
        [dict get [mg_status 0] throttled_ms] > $ms
    } else {
        fail "the transfer never waited $ms ms: [mg_status 0]"
    }
}

start_cluster 2 0 {overrides {cluster-enabled yes cluster-node-timeout 15000} tags {external:skip cluster rdmamig}} {
    mg_fast_clients

    test {migration-max-bandwidth: 0 by default, units accepted, a bad value refused and nothing changed} {
        assert_equal 0 [lindex [R 0 config get migration-max-bandwidth] 1]
        assert_equal 0 [mg_info 0 migration_max_bandwidth]
        R 0 config set migration-max-bandwidth 2mb
        assert_equal 2097152 [lindex [R 0 config get migration-max-bandwidth] 1]
        assert_equal 2097152 [mg_info 0 migration_max_bandwidth]
        foreach bad {fast -1 12qb} {
            catch {R 0 config set migration-max-bandwidth $bad} err
            assert_match {*ERR*migration-max-bandwidth*} $err
            assert_equal 2097152 [lindex [R 0 config get migration-max-bandwidth] 1]
        }
        R 0 config set migration-max-bandwidth 0
        assert_equal 0 [mg_info 0 migration_max_bandwidth]
    }

    test {migration-max-bandwidth 0: nothing waits (throttled_ms 0)} {
        set ranges {100-199}
        set slotset [mg_slotset $ranges]
        set keys [concat [mb_fill_strings 0 free 10 $slotset] [mg_fill 0 freek 100 $slotset]]
        set snap [mg_snapshot 0 $keys]
        set reply [mg_migrate 0 1 $ranges]
        mg_assert_reply $reply 100 [llength $keys]
        assert_equal 0 [dict get $reply throttled_ms]
        assert_equal 0 [mg_info 0 migration_last_throttled_ms]
        mg_assert_moved_and_back $ranges $keys $snap
    }

    test {migration-max-bandwidth 2mb: the transfer goes at about that pace, every key arrives} {
        set ranges {200-299}
        set slotset [mg_slotset $ranges]
        set keys [concat [mb_fill_strings 0 bw 40 $slotset] [mg_fill 0 bwk 200 $slotset]]
        set snap [mg_snapshot 0 $keys]
        set limit 2097152
        R 0 config set migration-max-bandwidth 2mb
        set rd [mg_migrate_deferred 0 1 $ranges]
        # STATUS shows the waits while it runs.
        mb_wait_throttled 200
        set reply [$rd read]
        $rd close
        R 0 config set migration-max-bandwidth 0
        mg_assert_reply $reply 100 [llength $keys]
        set bytes [dict get $reply bytes]
        set due [expr {$bytes * 1000 / $limit}]
        set transfer [dict get $reply transfer_ms]
        set throttled [dict get $reply throttled_ms]
        puts "    $bytes bytes at $limit B/s: transfer $transfer ms (due $due), waited $throttled ms"
        assert {$bytes > 4000000}
        # One chunk (64 KB here, 31 ms) goes before the first wait.
        assert_morethan_equal $transfer [expr {$due - 100}]
        assert_lessthan $transfer [expr {$due + 3000}]
        assert_morethan $throttled [expr {$due / 2}]
        assert_lessthan_equal $throttled $transfer
        assert_equal $throttled [mg_info 0 migration_last_throttled_ms]
        assert_equal $throttled [dict get [mg_status 0] throttled_ms]
        mg_assert_moved_and_back $ranges $keys $snap
    }

    test {migration-max-bandwidth: CONFIG SET 0 mid-transfer lets the migration finish at once} {
        set ranges {300-399}
        set slotset [mg_slotset $ranges]
        set keys [concat [mb_fill_strings 0 live 40 $slotset] [mg_fill 0 livek 100 $slotset]]
        set snap [mg_snapshot 0 $keys]
        # 256 KB/s: about 16 s for these 4 MB.
        R 0 config set migration-max-bandwidth 256kb
        set t0 [clock milliseconds]
        set rd [mg_migrate_deferred 0 1 $ranges]
        mb_wait_throttled 500
        R 0 config set migration-max-bandwidth 0
        set reply [$rd read]
        $rd close
        set took [expr {[clock milliseconds] - $t0}]
        puts "    limit lifted after [dict get $reply throttled_ms] ms of waits; migration took $took ms"
        mg_assert_reply $reply 100 [llength $keys]
        assert_lessthan $took 8000
        mg_assert_moved_and_back $ranges $keys $snap
    }

    test {migration-max-bandwidth: a write waiting for a slot not sent yet does not wait for the limit} {
        set ranges {600-699}
        set slotset [mg_slotset $ranges]
        set keys [concat [mb_fill_strings 0 urg 40 $slotset] [mg_fill 0 urgk 100 $slotset]]
        # The last slots in order: at 32 KB/s, their bytes would leave
        # after about two minutes; and the limit alone would make a write
        # wait for the next chunk of 64 KB, 2 s apart.
        set late {}
        foreach slot {697 698 699} {
            set k [lindex [mg_names urglate$slot 1 [mg_slotset $slot]] 0]
            R 0 set $k before
            lappend late $k
        }
        set snap [mg_snapshot 0 $keys]
        R 0 config set migration-max-bandwidth 32kb
        set rd [mg_migrate_deferred 0 1 $ranges timeout 600000]
        mb_wait_throttled 300
        set waits {}
        foreach k $late {
            set t0 [clock milliseconds]
            R 0 set $k after
            lappend waits [expr {[clock milliseconds] - $t0}]
        }
        set st [mg_status 0]
        R 0 config set migration-max-bandwidth 0
        set reply [$rd read]
        $rd close
        puts "    the writes waited $waits ms; the transfer was still paced after them ([dict get $st phase], [dict get $st bytes] of [dict get $st bytes_total] bytes sent)"
        foreach w $waits { assert_lessthan $w 700 }
        # The rest still went at the limit.
        assert_equal transfer [dict get $st phase]
        assert_lessthan [dict get $st bytes] [expr {[dict get $st bytes_total] / 4}]
        mg_assert_reply $reply 100 [expr {[llength $keys] + 3}]
        foreach k $late {
            assert_equal after [R 1 get $k]
            lappend keys $k
            dict set snap $k [mg_key_state 1 $k]
        }
        mg_assert_moved_and_back $ranges $keys $snap
    }

    test {migration-max-bandwidth too low for the TIMEOUT: refused at once, nothing moves} {
        set ranges {400-499}
        set slotset [mg_slotset $ranges]
        set keys [concat [mb_fill_strings 0 slow 40 $slotset] [mg_fill 0 slowk 100 $slotset]]
        set snap [mg_snapshot 0 $keys]
        set totals [mg_totals 0]
        # 100 KB/s: 40 s for 4 MB, with a TIMEOUT of 5 s.
        R 0 config set migration-max-bandwidth 100kb
        set t0 [clock milliseconds]
        mg_assert_err {migration failed in transfer: migration-max-bandwidth 102400 bytes/s needs [0-9]+ ms to send the [0-9]+ bytes of these slots, more than the [0-9]+ ms the TIMEOUT leaves: raise the limit \(0: none\) or the TIMEOUT; both nodes are back to STABLE} {
            R 0 rdmamigrateslots [srv -1 host] [srv -1 port] {*}$ranges transport tcp timeout 5000
        }
        set took [expr {[clock milliseconds] - $t0}]
        R 0 config set migration-max-bandwidth 0
        assert_lessthan $took 3000
        assert_equal failed [mg_info 0 migration_last_status]
        # The data connection's handshake, no block data.
        assert_lessthan [expr {[mg_info 0 migration_tcp_bytes_sent] -
                               [dict get $totals migration_tcp_bytes_sent]}] 4096
        mb_assert_nothing_moved $ranges $keys $snap
    }

    test {migration-max-bandwidth lowered mid-transfer into the TIMEOUT: rolled back, the error names the limit} {
        set ranges {500-599}
        set slotset [mg_slotset $ranges]
        set keys [concat [mb_fill_strings 0 low 20 $slotset] [mg_fill 0 lowk 100 $slotset]]
        set snap [mg_snapshot 0 $keys]
        # 1 MB/s: about 2 s for these 2 MB, inside a TIMEOUT of 6 s...
        R 0 config set migration-max-bandwidth 1mb
        set rd [mg_migrate_deferred 0 1 $ranges timeout 6000]
        mb_wait_throttled 200
        # ...then 64 KB/s: 30 s for what is left.
        R 0 config set migration-max-bandwidth 64kb
        catch {$rd read} err
        $rd close
        R 0 config set migration-max-bandwidth 0
        assert_match {*migration failed in transfer: timed out after * ms (migration-max-bandwidth held the transfer back for * ms of it)*} $err
        assert_equal failed [mg_info 0 migration_last_status]
        mb_assert_nothing_moved $ranges $keys $snap
    }
}
