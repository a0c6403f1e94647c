# RDMAMIGRATESLOTS (src/migration.c), TRANSPORT tcp: slots moved as memory
# blocks between two masters while both serve clients.
#
# 1. Usage errors: every bad argument or state gets an error and changes
#    nothing (slot owners, MIGRATING/IMPORTING, keys), on the donor, the
#    recipient and a replica; the recipient-side commands refuse misuse; a
#    server without cluster mode refuses them all; COMMAND DOCS/INFO.
# 2. A random workload over every type and encoding (and 100k-element
#    keys, TTLs) moves to the other master: the reply, the slot owners on
#    every node, every key identical on the recipient (DUMP, DEBUG
#    DIGEST-VALUE, expire time), nothing left on the donor, INFO migration,
#    redis-cli --cluster check; then back again after writes on the
#    recipient (round trip).
# 3. Writes to the migrating slots while the migration runs
#    (migration-test-delay-* holds it in prepare and transfer): each is answered
#    without error, by the donor or with a MOVED to the recipient (then
#    resent there, as a cluster client would), and every acknowledged write
#    is on the new owner afterwards.
# Faults and replication: migrate-faults.tcl.

source tests/helpers/rdmamig-migrate.tcl

# cluster-node-timeout 15000: on a loaded 2-core machine a 100k-element
# script or DEBUG DIGEST takes seconds, and with start_cluster's 500 ms
# (or even 3 s) a 2-master cluster goes down (CLUSTERDOWN) under the test.
start_cluster 2 1 {overrides {cluster-enabled yes cluster-node-timeout 15000} tags {external:skip cluster rdmamig}} {
    # Node 0 serves 0-8191, node 1 8192-16383, node 2 replicates node 0.
    mg_fast_clients
    set id1 [R 1 cluster myid]
    set h0 [srv 0 host]; set p0 [srv 0 port]
    set h1 [srv -1 host]; set p1 [srv -1 port]
    set h2 [srv -2 host]; set p2 [srv -2 port]

    test {RDMAMIGRATESLOTS: COMMAND DOCS and COMMAND INFO describe the commands} {
        foreach cmd {rdmamigrateslots initrdmaserver rdmaregister rdmadone rdmareplay rdmahandover rdmaresolve} {
            set docs [dict get [R 0 command docs $cmd] $cmd]
            assert {[string length [dict get $docs summary]] > 10}
            set info [lindex [R 0 command info $cmd] 0]
            assert_equal $cmd [lindex $info 0]
            assert {[lsearch [lindex $info 2] admin] >= 0}
            assert {[lsearch [lindex $info 2] noscript] >= 0}
            assert {[lsearch [lindex $info 6] @admin] >= 0}
            assert {[lsearch [lindex $info 6] @dangerous] >= 0}
        }
        set args [dict get [dict get [R 0 command docs rdmamigrateslots] rdmamigrateslots] arguments]
        assert {[string match -nocase "*transport*auth*timeout*" $args]}
    }

    test {RDMAMIGRATESLOTS: usage errors change nothing} {
        rdmamig_wait_config_consistent
        # Node 0 knows node 2 is a replica.
        set id2 [R 2 cluster myid]
        wait_for_condition 100 100 {
            [regexp "(^|\n)$id2 \\S+ slave " [R 0 cluster nodes]]
        } else {
            fail "node 0 does not see node 2 as a replica"
        }
        # Keys in a few of node 0's slots, one slot already MIGRATING.
        foreach k [mg_names err 50 [mg_slotset 0-200]] { R 0 set $k $k }
        R 0 cluster setslots migrating $id1 300
        R 1 cluster setslots importing [R 0 cluster myid] 300
        set cases [list \
            {} {wrong number of arguments} \
            [list $h1] {wrong number of arguments|syntax|unknown} \
            [list $h1 $p1] {wrong number of arguments|slot} \
            [list $h1 notaport 0] {port} \
            [list $h1 70000 0] {port} \
            [list $h1 $p1 16384] {out of range} \
            [list $h1 $p1 -1] {out of range|invalid} \
            [list $h1 $p1 abc] {invalid} \
            [list $h1 $p1 0-16384] {out of range} \
            [list $h1 $p1 5-3] {invalid range|start slot is greater|start <= end} \
            [list $h1 $p1 1-] {invalid} \
            [list $h1 $p1 0-10 5] {given twice} \
            [list $h1 $p1 7 7] {given twice} \
            [list $h1 $p1 0-100 9000] {not the owner|own} \
            [list $h1 $p1 8191-8192] {not the owner|own} \
            [list $h1 $p1 299-301] {migrating|importing|open|stable} \
            [list $h1 1 0-100] {not a node|unknown|not a known|don't know} \
            [list 10.255.255.1 $p1 0-100] {not a node|unknown|not a known|don't know} \
            [list $h0 $p0 0-100] {myself|itself|self} \
            [list $h2 $p2 0-100] {not a master|replica|slave} \
            [list $h1 $p1 0-100 transport bogus] {transport} \
            [list $h1 $p1 0-100 transport] {transport|syntax|wrong number} \
            [list $h1 $p1 0-100 timeout 0] {timeout} \
            [list $h1 $p1 0-100 timeout -5] {timeout} \
            [list $h1 $p1 0-100 timeout abc] {timeout|integer} \
            [list $h1 $p1 0-100 timeout] {timeout|syntax|wrong number} \
            [list $h1 $p1 0-100 auth] {auth|syntax|wrong number} \
            [list $h1 $p1 0-100 auth2 user] {auth|syntax|wrong number} \
            [list $h1 $p1 0-100 frobnicate] {syntax|option|invalid|slot} \
            [list status extra] {wrong number|syntax|status} \
            [list cancel extra] {wrong number|syntax|cancel} \
            [list cancel] {no migration is running} \
        ]
        set before [list [mg_state 0] [mg_state 1]]
        foreach {args re} $cases {
            set err [mg_assert_err $re {R 0 rdmamigrateslots {*}$args}]
            assert_equal $before [list [mg_state 0] [mg_state 1]] "after 'RDMAMIGRATESLOTS $args' ($err)"
        }
        # Sent to the replica, or to the recipient for slots it does not own.
        mg_assert_err {master|replica|slave} {R 2 rdmamigrateslots $h1 $p1 0-100 transport tcp}
        mg_assert_err {not the owner|own} {R 1 rdmamigrateslots $h0 $p0 0-100 transport tcp}
        mg_assert_err {no migration is running} {R 1 rdmamigrateslots cancel}
        # Not in a transaction, not from a script.
        set rd [redis_deferring_client]
        $rd multi
        $rd read
        $rd rdmamigrateslots $h1 $p1 0-100 transport tcp
        mg_assert_err {transaction|multi} {$rd read}
        $rd exec
        catch {$rd read}
        $rd close
        mg_assert_err {script} {R 0 eval {return redis.call('rdmamigrateslots', ARGV[1], ARGV[2], '0-100')} 0 $h1 $p1}
        # The test hooks (hidden configs) check their values too.
        mg_assert_err {unknown option.*migration-test-delay-bogus} {mg_delay 0 bogus 10}
        mg_assert_err {migration-test-delay-transfer.*integer} {mg_delay 0 transfer abc}
        assert_equal {migration-test-delay-transfer 0} [R 0 config get migration-test-delay-transfer]
        assert_equal $before [list [mg_state 0] [mg_state 1]]
        assert_equal 0 [mg_info 0 migration_total_failed]
        R 0 cluster setslots stable 300
        R 1 cluster setslots stable 300
    }

    test {INITRDMASERVER, RDMAREGISTER, RDMADONE: misuse is refused} {
        set before [list [mg_state 0] [mg_state 1]]
        set v [mg_info 1 migration_protocol_version]
        mg_assert_err {wrong number} {R 1 initrdmaserver}
        mg_assert_err {port|integer} {R 1 initrdmaserver notaport 100}
        mg_assert_err {port} {R 1 initrdmaserver 70000 100}
        mg_assert_err {transport} {R 1 initrdmaserver 0 100 transport bogus}
        mg_assert_err {timeout} {R 1 initrdmaserver 0 100 timeout 0}
        mg_assert_err {invalid slot} {R 1 initrdmaserver 0 frobnicate}
        mg_assert_err {at least one slot} {R 1 initrdmaserver 0 transport tcp}
        mg_assert_err {given twice} {R 1 initrdmaserver 0 100-200 150}
        mg_assert_err {already the owner} {R 1 initrdmaserver 0 9000 version $v}
        mg_assert_err {wrong number} {R 1 rdmaregister}
        mg_assert_err {wrong number} {R 1 rdmadone 0123456789abcdef}
        # No session (no INITRDMASERVER anywhere).
        mg_assert_err {no import session '0123456789abcdef'} \
            {R 1 rdmaregister 0123456789abcdef 100 1 4096 1 4096 65536 65536 0}
        mg_assert_err {no import session} {R 1 rdmadone 0123456789abcdef 100}
        # A replica refuses to open a data listener.
        mg_assert_err {master|replica|slave} {R 2 initrdmaserver 0 transport tcp}
        assert_equal $before [list [mg_state 0] [mg_state 1]]

        # With a session: every message names it, on the connection that
        # opened it; slots that are not the import's are refused. The
        # session ends when its connection closes.
        set c [redis $h1 $p1 0 $::tls]
        # (The session must end whatever happens: close the connection.)
        set failed [catch {
            set init [$c initrdmaserver 0 100-200 transport tcp timeout 10000 version $v]
            assert_equal $v [dict get $init version]
            set sid [dict get $init session]
            assert_match {[0-9a-f]*} $sid
            assert_equal tcp [dict get $init transport]
            assert {[dict get $init port] > 0}
            assert {[string length [dict get $init token]] > 0}
            # Another session's id (a donor's stale or stray message), and
            # the right id from another connection: refused, the import
            # goes on.
            set other [string map {0 1 1 2 2 3 3 4 4 5 5 6 6 7 7 8 8 9 9 a a b b c c d d e e f f 0} $sid]
            mg_assert_err {no import session} {$c rdmaregister $other 100 1 4096 1 4096 65536 65536 0}
            mg_assert_err {no import session} {$c rdmadone $other 100-200}
            mg_assert_err {no import session} {$c rdmareplay $other 3 set k v}
            mg_assert_err {no import session} {$c rdmahandover $other}
            mg_assert_err {connection that sent INITRDMASERVER} {R 1 rdmaregister $sid 100 1 4096 1 4096 65536 65536 0}
            mg_assert_err {connection that sent INITRDMASERVER} {R 1 rdmadone $sid 100-200}
            mg_assert_err {connection that sent INITRDMASERVER} {R 1 rdmahandover $sid}
            assert_equal listening [dict get [R 1 rdmamigrateslots status] import_state]
            mg_assert_err {not part of this import} {$c rdmaregister $sid 300 1 4096 1 4096 65536 65536 0}
            mg_assert_err {not part of this import} {$c rdmaregister $sid 9000 1 4096 1 4096 65536 65536 0}
            mg_assert_err {bad address|byte count} {$c rdmaregister $sid 100 1 4096 1 4096 65536 0 0}
            mg_assert_err {checksum} {$c rdmaregister $sid 100 1 4096 1 4096 65536 65536 notasum}
            mg_assert_err {wrong number|syntax|invalid|block} {$c rdmaregister $sid 100 1 4096 2 4096 65536 65536 0}
            mg_assert_err {out of range|invalid|bad slot} {$c rdmaregister $sid 16384 1 4096 1 4096 65536 65536 0}
            mg_assert_err {before RDMAREGISTER|not those of this import} {$c rdmadone $sid 9000}
            mg_assert_err {out of range|invalid|before RDMAREGISTER} {$c rdmadone $sid 16384}
            mg_assert_err {not ready|listening} {$c rdmahandover $sid}
            assert_equal listening [dict get [R 1 rdmamigrateslots status] import_state]
        } err]
        $c close
        mg_wait_idle 1
        if {$failed} { error $err }
        assert_equal $before [list [mg_state 0] [mg_state 1]]
    }

    test {RDMAMIGRATESLOTS: slots without keys move too, and back} {
        set size0 [R 0 dbsize]
        mg_assert_reply [mg_migrate 0 1 {5000-5099 6000}] 101 0
        assert_equal {} [mg_open_slots 0]
        assert_equal {} [mg_open_slots 1]
        mg_wait_converged
        mg_assert_owner 1 {5000-5099 6000}
        set st [mg_status 1]
        assert_equal idle [dict get $st state]
        mg_assert_reply [mg_migrate 1 0 {5000-5099 6000}] 101 0
        mg_wait_converged
        mg_assert_owner 0 {5000-5099 6000}
        assert_equal $size0 [R 0 dbsize]
        # The replica catches up (its first sync may still be running).
        wait_for_condition 100 100 {
            [R 0 debug digest] eq [R 2 debug digest]
        } else {
            fail "the replica differs from its master: [R 2 dbsize] keys, [R 0 dbsize] on the master"
        }
        mg_cluster_check 0
    }
}

start_server {tags {external:skip rdmamig}} {
    test {RDMAMIGRATESLOTS and the recipient commands need cluster mode} {
        r set k v
        mg_assert_err {cluster} {r rdmamigrateslots 127.0.0.1 [srv 0 port] 0-100}
        mg_assert_err {cluster|no migration is running} {r rdmamigrateslots cancel}
        mg_assert_err {cluster} {r initrdmaserver 0 100}
        mg_assert_err {cluster} {r rdmaregister 0123456789abcdef 0 1 4096 1 4096 65536 65536 0}
        mg_assert_err {cluster} {r rdmadone 0123456789abcdef 0}
        mg_assert_err {cluster} {r rdmareplay 0123456789abcdef 3 set k v}
        mg_assert_err {cluster} {r rdmahandover 0123456789abcdef}
        assert_equal v [r get k]
    }
}

# Writer c (a deferring client to node 0) sends its batch at once: INCRs
# of existing counters, RPUSHes to its own list, SETs of new keys. Adds
# to the caller's 'sent' (client -> commands) and 'expected' (counter ->
# increments).
proc mg_writer_batch {c Wset counters} {
    upvar sent sent expected expected
    set rd [redis_deferring_client 0]
    set cmds {}
    set list [lindex [mg_names w:list:$c 1 $Wset] 0]
    set i 0
    foreach new [mg_names w:new:$c 10 $Wset] {
        set counter [lindex $counters [expr {$i % [llength $counters]}]]
        dict incr expected $counter
        lappend cmds [list incr $counter]
        lappend cmds [list rpush $list $c:$i]
        lappend cmds [list set $new $c:$i]
        incr i
    }
    foreach cmd $cmds { $rd {*}$cmd }
    dict set sent $rd $cmds
}

start_cluster 2 0 {overrides {cluster-enabled yes cluster-node-timeout 15000} tags {external:skip cluster rdmamig}} {
    # Migrated: M (2101 of node 0's slots); K: node 0's other slots.
    set M {0-1999 3000 3500-3599}
    set Mset [mg_slotset $M]
    set Kset [mg_slotset {2000-2999 3001-3499 3600-8191}]
    set Rset [mg_slotset 8192-16383]
    set nM [llength [mg_expand $M]]
    mg_fast_clients

    test {RDMAMIGRATESLOTS: a random workload over every type and encoding} {
        set t0 [clock milliseconds]
        set mkeys [mg_fill 0 m 1200 $Mset]
        lappend mkeys {*}[mg_fill_big 0 m $Mset]
        # (Long scripts may have made the nodes miss pings.)
        mg_wait_converged
        set kkeys [mg_fill 0 k 300 $Kset]
        set rkeys [mg_fill 1 r 200 $Rset]
        assert_equal [expr {[llength $mkeys] + [llength $kkeys]}] [R 0 dbsize]
        assert_equal [llength $rkeys] [R 1 dbsize]
        set encodings {}
        foreach k $mkeys {
            dict incr encodings "[R 0 type $k]/[R 0 object encoding $k]"
        }
        foreach e {string/int string/embstr string/raw list/quicklist set/intset
                   set/hashtable hash/listpack hash/hashtable zset/listpack
                   zset/skiplist stream/stream} {
            assert {[dict exists $encodings $e]}
        }
        puts "workload: [llength $mkeys] keys to move ($encodings), in [expr {[clock milliseconds] - $t0}] ms"
        # (Long scripts may have made the nodes miss pings.)
        mg_wait_converged
    }

    # A migration of ranges from node 'from' to node 'to' of the keys in
    # snap (and nothing of the keys in stay_from/stay_to snapshots), with
    # every check.
    proc mg_check_migration {from to ranges snap stay_from stay_to} {
        set keys [dict keys $snap]
        set counts [mg_expected_counts $ranges $keys]
        mg_assert_counts $from $counts
        set pair [mg_pair_digest $from $to]
        set size_from [R $from dbsize]
        set size_to [R $to dbsize]
        set totals [mg_totals $from]

        set t0 [clock milliseconds]
        set reply [mg_migrate $from $to $ranges]
        set ms [expr {[clock milliseconds] - $t0}]
        mg_assert_reply $reply [llength [mg_expand $ranges]] [llength $keys]
        mg_assert_info_ok $from $totals $reply

        # Both nodes agree on the new owner at once, nothing is left open.
        assert_equal {} [mg_open_slots $from]
        assert_equal {} [mg_open_slots $to]
        mg_assert_owner $to $ranges
        # The keys moved, all of them, identical; the others stayed.
        mg_assert_counts $to $counts
        mg_assert_counts $from [dict map {s c} $counts {expr 0}]
        assert_equal [expr {$size_from - [llength $keys]}] [R $from dbsize]
        assert_equal [expr {$size_to + [llength $keys]}] [R $to dbsize]
        set reencoded [mg_assert_keys $to $snap]
        mg_assert_absent $from $keys
        mg_assert_keys $from $stay_from
        mg_assert_keys $to $stay_to
        # Whole nodes: the same keys, values and expire times in total.
        assert_equal $pair [mg_pair_digest $from $to]
        # The old owner redirects.
        set k [lindex $keys 0]
        assert_error "MOVED [mg_keyslot $k] [srv -$to host]:[srv -$to port]" {R $from exists $k}
        mg_wait_converged
        mg_cluster_check $from
        # Nothing left in the donor's blocks, nothing foreign in the
        # recipient's.
        mg_assert_slotalloc_sound $from
        mg_assert_slotalloc_sound $to
        puts "node $from -> node $to: [llength $keys] keys in $ms ms ($reencoded re-encoded): $reply"
    }

    test {RDMAMIGRATESLOTS: every key arrives identical, the donor keeps none} {
        set snap [mg_snapshot 0 $mkeys]
        mg_check_migration 0 1 $M $snap [mg_snapshot 0 $kkeys] [mg_snapshot 1 $rkeys]
    }

    test {RDMAMIGRATESLOTS: keys written on the recipient go back with the rest (round trip)} {
        # Changed, deleted and new keys in the moved slots.
        set shuffled [lshuffle $mkeys]
        foreach k [lrange $shuffled 0 99] { mg_touch 1 $k }
        set deleted [lrange $shuffled 100 119]
        foreach k [lrange $deleted 0 9] { assert_equal 1 [R 1 del $k] }
        foreach k [lrange $deleted 10 end] { assert_equal 1 [R 1 unlink $k] }
        set new [mg_fill 1 n 60 $Mset]
        set mkeys [concat [lrange $shuffled 0 99] [lrange $shuffled 120 end] $new]
        set snap [mg_snapshot 1 $mkeys]
        mg_check_migration 1 0 $M $snap [mg_snapshot 1 $rkeys] [mg_snapshot 0 $kkeys]
        mg_assert_absent 0 $deleted
        mg_assert_absent 1 $deleted
    }

    test {RDMAMIGRATESLOTS: writes during the migration wait or are redirected, none is lost} {
        # Slots 0-999 go to node 1 while clients write to them. The donor
        # thread sleeps 500 ms in prepare and 1000 ms in transfer. Writes
        # to keys not sent yet wait here (migrate-replay.tcl has them copy
        # their key instead, the default).
        set W {0-999}
        set Wset [mg_slotset $W]
        set wkeys [mg_keys_in $mkeys $Wset]
        set counters [mg_names w:cnt 4 $Wset]
        foreach c $counters { R 0 set $c 0 }
        set wsnap [mg_snapshot 0 $wkeys]
        set strkey [lindex [lmap k $wkeys { if {[R 0 type $k] eq {string}} { set k } else continue }] 0]
        set kept [lindex [mg_names w:kept 1 $Kset] 0]
        # Keys that expire while the migration runs: gone everywhere after.
        set short [mg_names w:short 5 $Wset]
        foreach k $short { R 0 set $k v px 1200 }
        set postponed [mg_info 0 migration_postponed_commands]
        R 0 config set migration-write-copy-max-size 0

        mg_delay 0 prepare 500
        mg_delay 0 transfer 1000
        set rdm [mg_migrate_deferred 0 1 $W]

        set sent {}
        set expected {}
        mg_wait_phase 0 prepare
        mg_writer_batch 0 $Wset $counters
        mg_wait_phase 0 transfer
        set st [mg_status 0]
        assert_equal donor [dict get $st role]
        assert_equal running [dict get $st state]
        assert_equal running [mg_info 0 migration_state]
        mg_writer_batch 1 $Wset $counters
        # Reads of the migrating slots and writes to other slots are served.
        assert_equal [lindex [dict get $wsnap $strkey] 2] [R 0 dump $strkey]
        assert_equal OK [R 0 set $kept x]
        assert_equal running [mg_info 0 migration_state]
        after 300
        mg_writer_batch 2 $Wset $counters

        set failed [catch {$rdm read} reply]
        $rdm close
        mg_delay_reset 0
        R 0 config set migration-write-copy-max-size 1mb
        if {$failed} { fail "the migration failed: $reply" }
        mg_assert_reply $reply 1000 [dict get $reply keys]
        assert {[dict get $reply keys] >= [llength $wkeys] + 4}
        # The freeze covers the 1000 ms the donor slept in transfer, and
        # the writes sent then waited most of it.
        assert {[dict get $reply write_pause_ms] >= 900}
        assert {[dict get $reply commands_held] >= 1}
        assert {[dict get $reply commands_held_max_ms] >= 500}

        # Every write is answered: done by the donor, or MOVED to node 1
        # (then resent there). ASK would expose the recipient's copy.
        set on_donor 0; set moved 0; set asked 0
        dict for {rd cmds} $sent {
            foreach cmd $cmds {
                if {![catch {$rd read} res]} { incr on_donor; continue }
                if {[regexp {^MOVED ([0-9]+) (.+):([0-9]+)$} $res _ slot host port]} {
                    assert_equal [list $slot $port] [list [mg_keyslot [lindex $cmd 1]] [srv -1 port]]
                    incr moved
                    R 1 {*}$cmd
                } elseif {[regexp {^ASK } $res]} {
                    incr asked
                    R 1 asking
                    R 1 {*}$cmd
                } else {
                    fail "'$cmd' during the migration: $res"
                }
            }
            $rd close
        }
        puts "writes during the migration: $on_donor done by the donor, $moved MOVED, $asked ASK; reply $reply"

        # Every acknowledged write is on the owner.
        mg_assert_owner 1 $W
        dict for {c n} $expected { assert_equal $n [R 1 get $c] "counter $c" }
        foreach c {0 1 2} {
            set list [lindex [mg_names w:list:$c 1 $Wset] 0]
            assert_equal [lmap i {0 1 2 3 4 5 6 7 8 9} {string cat $c:$i}] [R 1 lrange $list 0 -1]
            set i 0
            foreach new [mg_names w:new:$c 10 $Wset] {
                assert_equal $c:$i [R 1 get $new]
                incr i
            }
        }
        mg_assert_keys 1 $wsnap
        mg_assert_absent 0 [concat $wkeys $counters]
        assert {[mg_info 0 migration_postponed_commands] > $postponed}
        wait_for_condition 100 50 {
            [R 1 exists {*}[lrange $short 0 0]] == 0
        } else {
            fail "a key with a 1200 ms TTL still exists on the recipient"
        }
        foreach k $short {
            assert_equal 0 [R 1 exists $k]
            assert_equal -2 [R 1 pttl $k]
        }
        mg_assert_absent 0 $short
        assert_equal x [R 0 get $kept]
        assert_equal {} [mg_open_slots 0]
        assert_equal {} [mg_open_slots 1]
        mg_wait_converged
        mg_cluster_check 1
        mg_assert_slotalloc_sound 0
        mg_assert_slotalloc_sound 1
        # No ASK: the recipient's copies are never visible before handover.
        assert_equal 0 $asked
    }

    test {RDMAMIGRATESLOTS: a key the recipient was given meanwhile (ASKING) gives way to the donor's copy} {
        # Slots 1000-1099 go to node 1. While the donor waits before
        # RDMADONE (nothing linked yet), an operator opens one of them on
        # node 1 and a client writes there with ASKING: a key the donor is
        # sending, and a key the donor does not have.
        set S {1000-1099}
        set skeys [mg_keys_in $mkeys [mg_slotset $S]]
        set snap [mg_snapshot 0 $skeys]
        set victim [lindex $skeys 0]
        set vslot [mg_keyslot $victim]
        set extra [lindex [mg_names x:extra 1 [mg_slotset $vslot]] 0]
        set nv [R 0 cluster countkeysinslot $vslot]
        set size1 [R 1 dbsize]
        set donor_id [lindex [split [mg_myself 0] " "] 0]

        mg_delay 0 patch 1000
        set rdm [mg_migrate_deferred 0 1 $S]
        mg_wait_phase 0 patch
        assert_equal OK [R 1 cluster setslot $vslot importing $donor_id]
        assert_equal OK [R 1 asking]
        assert_equal OK [R 1 set $victim recipient-copy]
        assert_equal OK [R 1 asking]
        assert_equal OK [R 1 set $extra recipient-only]
        set failed [catch {$rdm read} reply]
        $rdm close
        mg_delay_reset 0
        if {$failed} { fail "the migration failed: $reply" }
        mg_assert_reply $reply [llength [mg_expand $S]] [llength $skeys]

        # The donor's copy won; the recipient's own key stayed; the slot's
        # key list (COUNTKEYSINSLOT, GETKEYSINSLOT) holds both, once.
        mg_assert_keys 1 $snap
        assert_equal recipient-only [R 1 get $extra]
        assert_equal [expr {$nv + 1}] [R 1 cluster countkeysinslot $vslot]
        assert_equal [lsort [concat [mg_keys_in $skeys [mg_slotset $vslot]] [list $extra]]] \
            [lsort [R 1 cluster getkeysinslot $vslot 100000]]
        assert_equal [expr {$size1 + [llength $skeys] + 1}] [R 1 dbsize]
        assert_equal 0 [R 0 cluster countkeysinslot $vslot]
        mg_assert_absent 0 $skeys
        verify_log_message -1 "*existed here already*" 0
        assert_equal {} [mg_open_slots 1]
        mg_wait_converged
        mg_cluster_check 1
    }

    test {RDMAMIGRATESLOTS: hash-table fields updated in their blocks move, and update in place on the recipient} {
        # A YCSB-like update load writes new values of existing fields in
        # the key's slot blocks (slotCompactReplaceSds): the moved keys
        # must carry them, and the recipient's adopted hash tables must
        # take such updates in its own blocks. Placed writes are what
        # slot-affinity yes does: set it for this test (the migration files
        # also run with `no`, see utils/run-tests.sh).
        set affinity [list [lindex [R 0 config get slot-affinity] 1] \
                           [lindex [R 1 config get slot-affinity] 1]]
        R 0 config set slot-affinity yes
        R 1 config set slot-affinity yes
        set S {1200-1299}
        set hkeys [mg_names h:upd 30 [mg_slotset $S]]
        foreach k $hkeys {
            set fv {}
            for {set f 0} {$f < 10} {incr f} { lappend fv field$f [string repeat v 100] }
            R 0 hset $k {*}$fv
            assert_equal hashtable [R 0 object encoding $k]
        }
        foreach slot [lsort -unique [lmap k $hkeys {mg_keyslot $k}]] {
            R 0 debug slotcompact $slot
        }
        set placed [mg_slotalloc 0 slotalloc_placed_writes]
        foreach k $hkeys {
            R 0 hset $k field3 [string repeat a 100] field4 [string repeat b 250]
        }
        assert_equal [expr {$placed + 60}] [mg_slotalloc 0 slotalloc_placed_writes]
        set snap [mg_snapshot 0 $hkeys]
        set reply [mg_migrate 0 1 $S]
        mg_assert_keys 1 $snap
        mg_assert_absent 0 $hkeys

        set placed [mg_slotalloc 1 slotalloc_placed_writes]
        foreach k $hkeys { R 1 hset $k field3 [string repeat c 100] }
        assert_equal [expr {$placed + 30}] [mg_slotalloc 1 slotalloc_placed_writes]
        foreach k $hkeys {
            assert_equal [list [string repeat c 100] [string repeat b 250] [string repeat v 100]] \
                [R 1 hmget $k field3 field4 field9]
        }
        # And back.
        set snap [mg_snapshot 1 $hkeys]
        mg_migrate 1 0 $S
        mg_assert_keys 0 $snap
        mg_assert_absent 1 $hkeys
        mg_wait_converged
        mg_cluster_check 0
        R 0 config set slot-affinity [lindex $affinity 0]
        R 1 config set slot-affinity [lindex $affinity 1]
    }
}
