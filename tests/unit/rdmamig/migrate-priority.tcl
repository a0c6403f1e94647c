# migration-thread-priority (src/migsession.c, migApplyThreadPriority):
# the scheduling the migration threads of both nodes run with. What a user
# relies on:
#
# 1. auto is the default. A bad value is refused with the list of good
#    ones and changes nothing.
# 2. With low, the donor's and the recipient's migration threads run at
#    nice 10; with idle, in the SCHED_IDLE class; with normal, like the
#    main thread; with auto, SCHED_IDLE when the server may raise them
#    back (root here) and like the main thread otherwise: the donor's
#    one thread, and both of the recipient's (the receiving thread and
#    the patcher it starts). Read from /proc while a migration is held in
#    its transfer phase (migration-test-delay-transfer), so the threads exist.
#    Each thread has its own name (mig_donor; mig_recipient, mig_patcher)
#    and blocks SIGALRM, as bio.c's threads do.
# 3. Whatever the priority, the migration moves every key intact.
# 4. auto does not starve: with both servers on one CPU that a busy
#    process keeps full, the idle-class threads would get about 0.3% of
#    it; the main thread sees them wait and raises them to normal
#    (INFO migration_thread_priority_raised, a log line), and the
#    migration ends well inside its TIMEOUT with every key intact.

source tests/helpers/rdmamig-migrate.tcl

# The migration threads of node n: a list of {name nice policy sigalrm},
# one per thread, sorted by name, from /proc/<pid>/task/<tid>/stat (fields
# 19 and 41; the command name in field 2 may hold spaces, so count from
# the closing parenthesis) and status (sigalrm: 1 if SIGALRM, signal 14,
# is in the thread's blocked mask SigBlk). Migration threads are the ones
# named mig_*.
proc mp_threads {n} {
    set pid [srv [expr {-1 * $n}] pid]
    set found {}
    foreach task [glob -nocomplain /proc/$pid/task/*] {
        if {[catch {
            set fd [open $task/comm]
            set comm [string trim [read $fd]]
            close $fd
            set fd [open $task/stat]
            set stat [read $fd]
            close $fd
            set fd [open $task/status]
            set status [read $fd]
            close $fd
        }]} continue
        if {![string match mig_* $comm]} continue
        set rest [string range $stat [expr {[string last ")" $stat] + 2}] end]
        regexp -line {^SigBlk:\s*([0-9a-f]+)} $status -> blk
        set alrm [expr {("0x$blk" >> 13) & 1}]
        # rest starts at field 3 (state): field k is element k-3.
        lappend found [list $comm [lindex $rest 16] [lindex $rest 38] $alrm]
    }
    return [lsort -index 0 $found]
}

start_cluster 2 0 {overrides {cluster-enabled yes cluster-node-timeout 15000} tags {external:skip cluster rdmamig}} {
    mg_fast_clients

    test {migration-thread-priority: auto by default; a bad value is refused and changes nothing} {
        assert_equal auto [lindex [R 0 config get migration-thread-priority] 1]
        catch {R 0 config set migration-thread-priority lowest} err
        assert_match {*must be one of the following*auto*normal*low*idle*} $err
        assert_equal auto [lindex [R 0 config get migration-thread-priority] 1]
    }

    # linux: /proc and per-thread scheduling.
    if {[file isdirectory /proc/self/task]} {
        set round 0
        # policy 0 = SCHED_OTHER, 5 = SCHED_IDLE (linux/sched.h)
        set root [expr {[exec id -u] == 0}]
        set auto_want [expr {$root ? {0 5} : {0 0}}]
        foreach {prio want} [list low {10 0} idle {0 5} normal {0 0} auto $auto_want] {
            test "migration-thread-priority $prio: both nodes' migration threads run with it" {
                R 0 config set migration-thread-priority $prio
                R 1 config set migration-thread-priority $prio
                # One way, then back: node 0 always gives.
                set ranges [list [expr {100 * $round}]-[expr {100 * $round + 99}]]
                set slotset [mg_slotset $ranges]
                set keys [mg_fill 0 p$round 200 $slotset]
                set snap [mg_snapshot 0 $keys]
                mg_delay_reset 0
                mg_delay 0 transfer 1500
                set rd [mg_migrate_deferred 0 1 $ranges]
                mg_wait_phase 0 transfer
                set donor [mp_threads 0]
                set recipient [mp_threads 1]
                set reply [$rd read]
                $rd close
                mg_delay_reset 0
                # Each thread has its name and blocks SIGALRM (the
                # watchdog's signal is the main thread's). The recipient
                # has two: the receiving thread and its patcher.
                assert_equal [list [list mig_donor {*}$want 1]] $donor
                assert_equal [list [list mig_patcher {*}$want 1] [list mig_recipient {*}$want 1]] $recipient
                mg_assert_reply $reply 100 [llength $keys]
                mg_assert_moved_and_back $ranges $keys $snap
                incr round
            }
        }
        R 0 config set migration-thread-priority auto
        R 1 config set migration-thread-priority auto

        set ncpu [exec nproc]
        if {$root && [catch {exec which taskset}] == 0} {
            test {migration-thread-priority auto: a starving migration thread is raised, the migration ends} {
                set ranges {1000-1199}
                set slotset [mg_slotset $ranges]
                set keys [mg_fill 0 starve 600 $slotset]
                set snap [mg_snapshot 0 $keys]
                set raised0 [mg_info 0 migration_thread_priority_raised]
                set raised1 [mg_info 1 migration_thread_priority_raised]
                set pids [list [srv 0 pid] [srv -1 pid]]
                set hog {}
                try {
                    # Both servers (every thread, and the threads they
                    # start) and a busy loop share CPU 0.
                    foreach pid $pids { exec taskset -a -p -c 0 $pid }
                    set hog [exec taskset -c 0 sh -c {while :; do :; done} &]
                    set t0 [clock milliseconds]
                    set reply [mg_migrate 0 1 $ranges timeout 60000]
                    set took [expr {[clock milliseconds] - $t0}]
                } finally {
                    if {$hog ne {}} { catch {exec kill -9 {*}$hog} }
                    foreach pid $pids { catch {exec taskset -a -p -c 0-[expr {$ncpu - 1}] $pid} }
                }
                set d [expr {[mg_info 0 migration_thread_priority_raised] - $raised0}]
                set r [expr {[mg_info 1 migration_thread_priority_raised] - $raised1}]
                puts "    starved migration took $took ms; threads raised: donor $d, recipient $r"
                mg_assert_reply $reply 200 [llength $keys]
                assert_morethan [mg_info 0 migration_thread_priority_raised] $raised0
                verify_log_message 0 "*leave the idle class for the rest of this migration*" 0
                assert_lessthan $took 20000
                mg_assert_moved_and_back $ranges $keys $snap
            }
        }
    }
}
