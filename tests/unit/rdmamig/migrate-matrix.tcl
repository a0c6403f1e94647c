# RDMAMIGRATESLOTS (src/migration.c): the fault matrix (issue 34).
#
# Every phase a donor goes through, held by migration-test-delay-* at its
# start: prepare (the recipient's session open), transfer (the slots
# frozen, nothing registered), inside the transfer at `write` (the blocks
# registered on both ends, nothing sent) and at `chunk` (the first chunk
# that completed a slot sent, as production cuts it: the slots it
# completed take writes again, recorded for the replay), patch
# (everything sent, RDMADONE not yet: the recipient patches and links
# after it), handover (after the replay, the slots frozen again, before
# RDMAHANDOVER) and delete (the recipient owns the slots) -- crossed with
# every fault: kill -9 of the donor or of the recipient then a restart
# (from its AOF), SIGSTOP of the donor or of the recipient until the
# migration's deadline (TIMEOUT) has passed on both nodes then SIGCONT,
# RDMAMIGRATESLOTS CANCEL on the donor or on the recipient. Killing the
# recipient or the donor held at `delete` is the closest to a fault right
# after the recipient's handover: the donor applies the handover as soon
# as the recipient says OK.
#
# During each cell a writer (tests/helpers/rdmamig-writer.py) SETs unique
# keys into the moving slots and into other slots, following MOVED,
# retrying on errors and timeouts, and records only the writes that got
# +OK. Both nodes run with appendonly yes, appendfsync always. Each cell
# ends with:
# - the slots owned by the node the rules say: the donor for a fault
#   before the recipient's handover OK (the migration rolls back), the
#   recipient from then on (the migration completes); the migration's
#   reply and the recipient's last status agree with that;
# - every key of the moved slots exactly once, on the owner, with its
#   value and TTL (DUMP, digest, PEXPIRETIME); every acknowledged write on
#   its slot's owner with its value; no key of the slots on the other node;
# - both nodes idle, no open slot, sound slot blocks (DEBUG SLOTCOMPACT
#   CHECK), redis-cli --cluster check clean.
# Then the writer's keys are deleted and the slots go back to the donor.

source tests/helpers/rdmamig-migrate.tcl

# Node 0 donor (slots 0-8191), node 1 recipient (8192-16383).
start_cluster 2 0 {overrides {cluster-enabled yes cluster-node-timeout 15000} tags {external:skip cluster rdmamig}} {
    set F {40-49}
    set Fset [mg_slotset $F]
    mg_fast_clients
    set fkeys [mg_fill 0 m 300 $Fset]
    # Big keys of 20k elements (hash table, skiplist, quicklist, stream
    # of many nodes) and a 2 MB string: 100k would double the file's time.
    lappend fkeys {*}[mg_fill_big 0 m $Fset 20000]
    mg_fill 0 k 50 [mg_slotset 1000-8191]
    mg_fill 1 r 50 [mg_slotset 8192-16383]
    foreach n {0 1} {
        R $n config set appendfsync always
        mg_appendonly $n yes
    }
    mg_wait_converged

    # --- the writer -------------------------------------------------------

    # Starts the writer on keys "prefix:..."; returns its state (a dict).
    proc mx_writer_start {prefix ranges} {
        set dir [tmpdir matrix]
        set w [dict create dir $dir ack $dir/acked stop $dir/stop log $dir/log]
        set pid [exec python3 tests/helpers/rdmamig-writer.py [srv 0 host] [srv 0 port] \
                     $prefix $ranges [dict get $w ack] [dict get $w stop] >& [dict get $w log] &]
        dict set w pid $pid
        # Running: some writes acknowledged (on the slots' donor).
        wait_for_condition 100 50 {
            [file exists [dict get $w ack]] && [file size [dict get $w ack]] > 0
        } else {
            fail "the writer acknowledged nothing: [exec cat [dict get $w log]]"
        }
        return $w
    }

    # Stops the writer; returns a dict key -> value of its acknowledged
    # writes.
    proc mx_writer_stop {w} {
        close [open [dict get $w stop] w]
        wait_for_condition 100 100 {
            [file exists [dict get $w ack].done]
        } else {
            catch {exec kill -9 [dict get $w pid]}
            fail "the writer did not stop: [exec cat [dict get $w log]]"
        }
        set fd [open [dict get $w ack].done]
        lassign [read $fd] _ acked failed errors
        close $fd
        set fd [open [dict get $w ack]]
        set acks {}
        foreach line [split [string trim [read $fd]] "\n"] {
            dict set acks {*}$line
        }
        close $fd
        assert_equal $acked [dict size $acks]
        puts "writer: $acked writes acknowledged, $failed attempts not acknowledged ($errors)"
        return $acks
    }

    # The replies of commands sent to node n in one pipeline (per 1000).
    proc mx_pipeline {n cmds} {
        set rd [redis_deferring_client -$n]
        set replies {}
        for {set i 0} {$i < [llength $cmds]} {incr i 1000} {
            set batch [lrange $cmds $i [expr {$i + 999}]]
            foreach cmd $batch { $rd {*}$cmd }
            foreach cmd $batch { lappend replies [$rd read] }
        }
        $rd close
        return $replies
    }

    # The node (0 or 1) that owns a slot (by the initial layout, F apart).
    proc mx_owner_of {slot fset fowner} {
        if {[dict exists $fset $slot]} { return $fowner }
        expr {$slot < 8192 ? 0 : 1}
    }

    # Every acknowledged write is on its slot's owner with its value.
    # Returns the keys per node (to delete them).
    proc mx_assert_acks {acks fset fowner} {
        set per {0 {} 1 {}}
        dict for {k v} $acks {
            dict lappend per [mx_owner_of [mg_keyslot $k] $fset $fowner] $k
        }
        set inF 0
        foreach n {0 1} {
            set keys [dict get $per $n]
            set got [mx_pipeline $n [lmap k $keys {list get $k}]]
            foreach k $keys v $got {
                if {$v ne [dict get $acks $k]} {
                    fail "acknowledged write lost: $k (slot [mg_keyslot $k]) on node $n: '[string range $v 0 60]', expected '[dict get $acks $k]'"
                }
                if {[dict exists $fset [mg_keyslot $k]]} { incr inF }
            }
        }
        # Writes to both kinds of slot were acknowledged.
        assert {$inF > 0 && $inF < [dict size $acks]}
        return $per
    }

    # --- a cell -----------------------------------------------------------

    # mg_start_held, and for the holds inside the transfer (write: the
    # blocks registered on the recipient, nothing sent; chunk: the first
    # chunk that completed a slot sent, the freeze of the slots it
    # completed relaxed, their writes recorded for the replay),
    # which STATUS shows as the transfer phase, until the donor logs it.
    proc mx_start_held {ranges phase ms args} {
        if {$phase ni {write chunk}} { return [mg_start_held $ranges $phase $ms {*}$args] }
        set seen [count_log_message 0 "migration-test-delay-$phase:"]
        mg_delay_reset 0
        mg_delay 0 $phase $ms
        set rd [mg_migrate_deferred 0 1 $ranges {*}$args]
        wait_for_condition 1000 10 {
            [count_log_message 0 "migration-test-delay-$phase:"] > $seen
        } else {
            fail "node 0 never held at $phase: [mg_status 0]"
        }
        return $rd
    }

    # Node n (0 or 1), killed, restarted from its AOF.
    proc mx_restart {n} {
        restart_server -$n true false
        mg_fast_clients
    }

    # One cell: phase x fault (kill, stop, cancel) x node (0 donor, 1
    # recipient). Returns the owner of the slots at its end.
    proc mx_cell {phase fault node F fkeys snap} {
        set Fset [mg_slotset $F]
        set nslots [llength [mg_expand $F]]
        # (After a failed cell: the slots back on the donor.)
        mg_wait_idle 0
        mg_wait_idle 1
        if {[lindex [mg_slot_owner 0 [lindex [mg_expand $F] 0]] 1] == [srv -1 port]} {
            mg_migrate 1 0 $F
            mg_wait_converged
        }
        set w [mx_writer_start "w:$phase:$fault:$node" $F]
        # SIGSTOP: a TIMEOUT that leaves the donor time to reach the phase
        # (here up to 2 s to prepare, 1 s to patch), then the node stopped
        # until the deadline passed on both nodes (the recipient's is 1 s
        # later). Otherwise a TIMEOUT no cell reaches.
        set timeout [expr {$fault eq {stop} ? [dict get {prepare 4000 transfer 6000 write 6000
            chunk 6000 patch 6000 handover 8000 delete 8000} $phase] : 30000}]
        set rd [mx_start_held $F $phase 1500 timeout $timeout]
        # The handover phase begins with the replay; the hold follows it.
        if {$phase eq {handover}} { after 200 }
        set replied 1
        switch $fault {
            kill {
                exec kill -9 [srv -$node pid]
                if {$node == 0} {
                    catch {$rd read}
                    catch {$rd close}
                    set replied 0
                    mg_wait_idle 1
                    mx_restart 0
                } else {
                    set failed [catch {$rd read} reply]
                    $rd close
                    mg_delay_reset 0
                    mg_wait_idle 0
                    mx_restart 1
                }
            }
            stop {
                set stop [expr {$timeout + 2000 - [dict get [mg_status 0] elapsed_ms]}]
                exec kill -STOP [srv -$node pid]
                after $stop
                exec kill -CONT [srv -$node pid]
            }
            cancel {
                set err [catch {R $node rdmamigrateslots cancel} reply]
                if {$phase eq {delete}} {
                    # Past the handover (the recipient's session is over).
                    assert_equal 1 $err
                    if {![regexp {past its handover|no migration is running} $reply]} {
                        fail "CANCEL after the handover: $reply"
                    }
                } else {
                    assert_equal {0 OK} [list $err $reply]
                }
            }
        }
        if {$fault ne {kill}} {
            set failed [catch {$rd read} reply]
            $rd close
            mg_delay_reset 0
        }
        mg_wait_idle 0
        mg_wait_idle 1
        mg_wait_converged
        # Writes go on a little while the cluster is whole again.
        after 300
        set acks [mx_writer_stop $w]

        # The owner, as the rules say.
        set owner [expr {[lindex [mg_slot_owner 0 [lindex [mg_expand $F] 0]] 1] == [srv -1 port] ? 1 : 0}]
        set rstatus [dict get [mg_status 1] last_status]
        if {$phase eq {delete}} {
            set want 1
        } elseif {$fault eq {stop} && $node == 1 && $phase eq {handover}} {
            # The recipient stopped when RDMAHANDOVER was due: it decides
            # when it runs again (refused past its deadline, most likely).
            set want [expr {$rstatus eq {ok} ? 1 : 0}]
        } else {
            set want 0
        }
        puts "cell $phase/$fault/[lindex {donor recipient} $node]: owner node $owner;\
              migration [expr {!$replied ? {reply lost (donor killed)} : ($failed ? "failed: $reply" : {succeeded})}];\
              recipient's last status $rstatus"
        assert_equal $want $owner "the slots' owner"
        if {$replied} { assert_equal [expr {!$owner}] $failed "the migration failed: $failed ($reply)" }
        # A donor whose recipient stopped fails within its TIMEOUT, even
        # in a write the recipient no longer reads (the slots not sent yet
        # stay frozen until then). (Its reply comes up to 2 s later: it
        # tries to end the stopped recipient's session first.)
        if {$fault eq {stop} && $node == 1 && [regexp {timed out after ([0-9]+) ms} $reply -> ms]} {
            if {$ms > $timeout + 1500} { fail "the donor failed after $ms ms, TIMEOUT $timeout" }
        }
        if {!($fault eq {kill} && $node == 1)} {
            # (A restarted recipient knows no last status.)
            if {($rstatus eq {ok}) != $owner} { fail "the recipient's last status: $rstatus" }
        }
        mg_assert_owner $owner $F

        # Every key exactly once, on the owner, as it was.
        mg_assert_keys $owner $snap
        mg_assert_absent [expr {1 - $owner}] $fkeys
        mg_assert_counts [expr {1 - $owner}] [mg_expected_counts $F {}]
        set written [mx_assert_acks $acks $Fset $owner]

        # Both nodes sound and quiet.
        assert_equal {} [mg_open_slots 0]
        assert_equal {} [mg_open_slots 1]
        mg_assert_slotalloc_sound 0
        mg_assert_slotalloc_sound 1
        mg_cluster_check 0

        # For the next cell: the writer's keys gone, the slots back.
        foreach n {0 1} {
            mx_pipeline $n [lmap k [dict get $written $n] {list del $k}]
        }
        if {$owner == 1} {
            mg_assert_reply [mg_migrate 1 0 $F] $nslots [llength $fkeys]
            mg_wait_converged
        }
        file delete -force [dict get $w dir]
        return $owner
    }

    # The moving slots' keys, once: the writer leaves them alone.
    set snap [mg_snapshot 0 $fkeys]
    set names {kill {kill -9 %s} stop {SIGSTOP %s} cancel {CANCEL on the %s}}
    foreach phase {prepare transfer write chunk patch handover delete} {
        foreach {fault node} {kill 0 kill 1 stop 0 stop 1 cancel 0 cancel 1} {
            set name [format [dict get $names $fault] [lindex {donor recipient} $node]]
            set where [expr {$phase in {write chunk} ? "transfer/$phase" : $phase}]
            test "matrix: $name in $where" {
                try {
                    mx_cell $phase $fault $node $F $fkeys $snap
                } finally {
                    # (A failed cell leaves no writer running, no node
                    # stopped, and the slots on the donor.)
                    foreach f [glob -nocomplain tests/tmp/matrix.*] {
                        if {![file exists $f/stop]} { close [open $f/stop w] }
                    }
                    foreach n {0 1} { catch {exec kill -CONT [srv -$n pid]} }
                }
            }
        }
    }
}
