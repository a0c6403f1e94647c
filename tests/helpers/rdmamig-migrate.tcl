# Helpers of the RDMAMIGRATESLOTS tests (tests/unit/rdmamig/migrate*.tcl):
# slot sets, key workloads of every type and encoding, per-key snapshots
# (TYPE, OBJECT ENCODING, DUMP, DEBUG DIGEST-VALUE, PEXPIRETIME) and their
# comparison, the migration call and the checks made after each one.
# Nodes are numbered as by start_cluster (node n is srv -n, R n).
# Sourced relative to the tree's root, where ./runtest runs.

source tests/support/cluster.tcl
source tests/helpers/rdmamig.tcl

# --- slots ------------------------------------------------------------------

# The slots of "0-10 20 30-31" as a list.
proc mg_expand {ranges} {
    set slots {}
    foreach r $ranges {
        if {[regexp {^([0-9]+)-([0-9]+)$} $r _ a b]} {
            for {set s $a} {$s <= $b} {incr s} { lappend slots $s }
        } else {
            lappend slots $r
        }
    }
    return $slots
}

# A dict slot -> 1 of the slots of ranges (fast membership test).
proc mg_slotset {ranges} {
    set set {}
    foreach s [mg_expand $ranges] { dict set set $s 1 }
    return $set
}

proc mg_keyslot {key} { ::redis_cluster::hash $key }

# Keys of the list whose slot is in / not in the slot set.
proc mg_keys_in {keys slotset} {
    lmap k $keys { if {[dict exists $slotset [mg_keyslot $k]]} { set k } else continue }
}
proc mg_keys_not_in {keys slotset} {
    lmap k $keys { if {![dict exists $slotset [mg_keyslot $k]]} { set k } else continue }
}

# Writes to node n touching 'keys' (of any type) and new keys; returns the
# number of write commands sent. Every reply must be a success.
proc mg_write_all {n keys newkeys} {
    set sent 0
    foreach k $keys {
        switch [R $n type $k] {
            string {
                if {[string is integer -strict [R $n get $k]]} { R $n incrby $k 7 } else { R $n append $k "+w" }
            }
            list { R $n rpush $k w1 w2; R $n lpop $k; incr sent }
            set { R $n sadd $k w1 w2; R $n srem $k w1; incr sent }
            zset { R $n zadd $k 1.5 w1; R $n zincrby $k 2 w1; incr sent }
            hash {
                # The counter's name has a space: mg_fill's random fields
                # never do, so none of them can hold a non-number there.
                R $n hset $k wf wv; R $n hset $k wf wx; R $n hincrby $k {replay counter} 3; incr sent 2
            }
            stream { R $n xadd $k * wf wv; R $n xadd $k * wf2 wv2; incr sent }
            none { continue }
        }
        incr sent
    }
    foreach k $newkeys {
        switch [expr {$sent % 3}] {
            0 { R $n set $k new-$k }
            1 { R $n hset $k f1 v1 f2 v2 }
            2 { R $n rpush $k a b c }
        }
        incr sent
    }
    return $sent
}

# The keys mg_write_mixed works on, on node n: 300 keys of every kind and
# the big ones in the slot set, 5 "prefix:short" keys with a TTL, and 50
# others in slots 2000-2999 (not to be touched). Returns a dict: keys,
# others, short, tag (a hash tag of the slot set).
proc mg_fill_for_writes {n prefix slotset} {
    set keys [mg_fill $n $prefix 300 $slotset]
    lappend keys {*}[mg_fill_big $n $prefix $slotset]
    set others [mg_fill $n o 50 [mg_slotset 2000-2999]]
    set short [mg_names $prefix:short 5 $slotset]
    foreach k $short { R $n set $k v px 100000 }
    dict create keys $keys others $others short $short tag [mg_tag $slotset]
}

# The writes a user may send to migrating slots, on node n: mg_write_all
# over 'written' and 'newkeys', DELs of 'doomed', a TTL set and one removed,
# the 'short' keys' TTLs reached (they must be gone), and, on keys
# "prefix:{tag}:...", an INCRBYFLOAT, a script, a transaction (SET then
# RENAME) and a 3 MB string. Returns a dict: sent (the write commands),
# present (the keys of 'keys', 'newkeys' and those created here, less the
# doomed), gone (the keys that must be missing).
proc mg_write_mixed {n keys written newkeys doomed short prefix tag} {
    set sent [mg_write_all $n $written $newkeys]
    foreach k $doomed { R $n del $k }
    # TTLs set, removed, and reached (the expired key's DEL is a write).
    R $n pexpire [lindex $written 0] 500000
    R $n persist [lindex $written 1]
    foreach k $short { R $n pexpire $k 1 }
    after 20
    foreach k $short { assert_equal 0 [R $n exists $k] }
    R $n incrbyfloat $prefix:{$tag}:float 1.5
    R $n eval {redis.call('set', KEYS[1], 'from-a-script'); return redis.call('lpush', KEYS[2], 'x')} 2 \
        $prefix:{$tag}:script $prefix:{$tag}:scriptlist
    R $n multi
    R $n set $prefix:{$tag}:tx1 a
    R $n rename $prefix:{$tag}:tx1 $prefix:{$tag}:tx2
    R $n exec
    R $n set $prefix:{$tag}:big [string repeat x 3000000]
    set present {}
    foreach k [concat $keys $newkeys [lmap s {float script scriptlist tx2 big} {set _ $prefix:{$tag}:$s}]] {
        if {[lsearch -exact $doomed $k] < 0} { lappend present $k }
    }
    dict create sent $sent present $present gone [concat $doomed $short [list $prefix:{$tag}:tx1]]
}

# 'count' key names "prefix:i" whose slot is in the slot set.
proc mg_names {prefix count slotset} {
    set names {}
    for {set i 0} {[llength $names] < $count} {incr i} {
        set k "$prefix:$i"
        if {[dict exists $slotset [mg_keyslot $k]]} { lappend names $k }
    }
    return $names
}

# A hash tag "tN" whose slot is in the slot set and not in 'avoid'.
proc mg_tag {slotset {avoid {}}} {
    for {set t 0} {$t < 200000} {incr t} {
        set s [mg_keyslot "t$t"]
        if {[dict exists $slotset $s] && [lsearch -exact $avoid $s] < 0} { return "t$t" }
    }
    fail "no hash tag in the slot set"
}

# --- cluster state ----------------------------------------------------------

# The "myself" line of node n's CLUSTER NODES.
proc mg_myself {n} {
    foreach line [split [string trim [R $n cluster nodes]] "\n"] {
        if {[string match {* myself,*} $line]} { return $line }
    }
    fail "node $n has no myself line"
}

# The slots node n says it serves (the slot fields of its myself line).
proc mg_own_slots {n} {
    lmap f [lrange [split [mg_myself $n] " "] 8 end] {
        if {[string match {\[*} $f]} continue
        set f
    }
}

# MIGRATING/IMPORTING states of node n: "[slot->-id]" and "[slot-<-id]".
proc mg_open_slots {n} {
    regexp -all -inline {\[[0-9]+-[<>]-[0-9a-f]+\]} [mg_myself $n]
}

# {host port} of the master a CLUSTER SLOTS reply gives slot to ({} if
# none).
proc mg_slot_owner_in {slots slot} {
    foreach r $slots {
        if {$slot >= [lindex $r 0] && $slot <= [lindex $r 1]} {
            return [lrange [lindex $r 2] 0 1]
        }
    }
    return {}
}

# The same, in node n's view.
proc mg_slot_owner {n slot} {
    mg_slot_owner_in [R $n cluster slots] $slot
}

# The text of node n's nodes.conf.
proc mg_nodes_conf {n} {
    set path [file join [lindex [R $n config get dir] 1] [lindex [R $n config get cluster-config-file] 1]]
    set fd [open $path r]
    set text [read $fd]
    close $fd
    return $text
}

proc mg_info {n field} {
    getInfoProperty [R $n info migration] $field
}

# An INFO slotalloc field of node n.
proc mg_slotalloc {n field} {
    getInfoProperty [R $n info slotalloc] $field
}

# RDMAMIGRATESLOTS STATUS of node n as a dict.
proc mg_status {n} {
    R $n rdmamigrateslots status
}

# Everything a refused command must leave alone on node n.
proc mg_state {n} {
    list [mg_own_slots $n] [mg_open_slots $n] [R $n dbsize] [R $n debug digest] \
        [dict get [mg_status $n] state]
}

# Node n's slot blocks hold what its keys own and nothing else: every
# allocation a key reaches lies in a live allocation of its own slot's
# blocks, and every live allocation is reached (DEBUG SLOTCOMPACT CHECK).
# A bad pointer fails at once; unreached allocations may be values the
# lazyfree thread has yet to free, so they get a few seconds.
proc mg_assert_slotalloc_sound {n} {
    for {set tries 0} {1} {incr tries} {
        set c [R $n debug slotcompact check]
        if {[dict get $c problem] ne {}} { fail "node $n: slot blocks unsound: $c" }
        if {[dict get $c unreached] == 0} return
        if {$tries == 50} { fail "node $n: slot blocks unsound: $c" }
        after 100
    }
}

# After a migration of ranges from node 0 to node 1 during which node 0
# took writes (snap: what node 0 held once they were done; gone: keys
# they deleted; present: the keys of snap; others: node 0's keys of other
# slots): node 1 owns the slots and holds the snapshot, neither node
# holds the gone keys, node 0 none of the moved ones but all the others,
# the replicas caught up, the cluster checks, and both nodes' blocks hold
# what their keys own and nothing else.
proc mg_assert_moved_with_writes {ranges snap gone present others} {
    mg_assert_owner 1 $ranges
    mg_assert_keys 1 $snap
    mg_assert_absent 1 $gone
    mg_assert_absent 0 [concat $present $gone]
    foreach k $others { assert_equal 1 [R 0 exists $k] }
    mg_wait_converged
    mg_assert_replicas_equal
    mg_cluster_check 0
    mg_assert_slotalloc_sound 0
    mg_assert_slotalloc_sound 1
}

# Node n's migration reached its transfer, its slots frozen (with
# migration-test-delay-write: every key still in flight).
proc mg_wait_transfer_frozen {n} {
    wait_for_condition 500 10 {
        [dict get [mg_status $n] phase] eq {transfer} && [mg_info $n migration_frozen_slots] > 0
    } else {
        fail "the migration did not reach its transfer"
    }
}

# Cancel node 0's migration, whose caller is the deferring client rd: it
# ends with a "cancelled" error (the test delays reset).
proc mg_cancel_deferred {rd} {
    assert_equal OK [R 0 rdmamigrateslots cancel]
    catch {$rd read} err
    $rd close
    mg_delay_reset 0
    assert_match {*cancel*} $err
}

# After a migration of ranges from node 0 to node 1 was cancelled (keys:
# every key of the slots; snap: what node 0 must still hold; dropped: the
# keys it deleted meanwhile): both nodes are idle, node 0 owns the slots
# and holds the snapshot, node 1 none of the keys, both nodes' blocks are
# sound. Then moved again with no write in between: the same keys arrive.
proc mg_assert_cancelled_then_moved {ranges keys snap dropped} {
    mg_wait_idle 0
    mg_wait_idle 1
    mg_assert_owner 0 $ranges
    mg_assert_keys 0 $snap
    mg_assert_absent 0 $dropped
    mg_assert_absent 1 $keys
    mg_assert_slotalloc_sound 0
    mg_assert_slotalloc_sound 1
    set reply [mg_migrate 0 1 $ranges]
    assert_equal 0 [dict get $reply writes_replayed]
    mg_assert_keys 1 $snap
    mg_assert_absent 0 $keys
    mg_wait_converged
    mg_assert_replicas_equal
}

# After a migration of ranges from node 0 to node 1: node 1 holds every
# key of the snapshot as it was, node 0 none, both nodes' blocks are
# sound; then the slots go back (node 0 has them all again).
proc mg_assert_moved_and_back {ranges keys snap} {
    mg_assert_keys 1 $snap
    mg_assert_absent 0 $keys
    mg_assert_slotalloc_sound 0
    mg_assert_slotalloc_sound 1
    mg_wait_converged
    mg_migrate 1 0 $ranges
    mg_assert_keys 0 $snap
    mg_wait_converged
}

# Node n has no migration running (both roles), no open slot.
proc mg_wait_idle {n} {
    wait_for_condition 200 50 {
        [dict get [mg_status $n] state] eq {idle} && [mg_open_slots $n] eq {}
    } else {
        set open [mg_open_slots $n]
        fail "node $n: migration still running or slots open: [mg_status $n]; [llength $open] open slots: [lrange $open 0 2]"
    }
}

proc mg_wait_converged {} {
    # A node still loading (a replica's full sync after its master
    # restarted) answers LOADING: not converged yet, asked again.
    wait_for_condition 200 100 {
        [catch {cluster_config_consistent} ok] == 0 && $ok eq 1
    } else {
        fail "cluster config did not become consistent"
    }
    for {set j 0} {$j < [llength $::servers]} {incr j} {
        wait_for_condition 200 100 {
            [catch {CI $j cluster_state} st] == 0 && $st eq {ok}
        } else {
            fail "node $j cluster_state: $st"
        }
    }
}

# Node 'owner' serves every slot of ranges, in the view of every node.
proc mg_assert_owner {owner ranges} {
    set port [srv -$owner port]
    for {set j 0} {$j < [llength $::servers]} {incr j} {
        set slots [R $j cluster slots]
        foreach s [mg_expand $ranges] {
            if {[lindex [mg_slot_owner_in $slots $s] 1] != $port} {
                fail "node $j does not see slot $s served by node $owner (port $port)"
            }
        }
    }
}

# redis-cli --cluster check through node n: no warning, no error.
proc mg_cluster_check {n} {
    set rc [catch {exec src/redis-cli --cluster check [srv -$n host]:[srv -$n port] 2>@1} out]
    if {$rc || [string match {*\[WARNING\]*} $out] || [string match {*\[ERR\]*} $out] ||
        ![string match {*\[OK\] All 16384 slots covered.*} $out]} {
        fail "redis-cli --cluster check is not clean:\n$out"
    }
}

# --- errors -----------------------------------------------------------------

# The script must fail with an error matching the regexp (case-insensitive).
proc mg_assert_err {re script} {
    if {![catch {uplevel 1 $script} err]} {
        fail "expected an error matching /$re/ from {$script}, got '$err'"
    }
    if {![regexp -nocase -- $re $err]} {
        fail "error '$err' of {$script} does not match /$re/"
    }
    return $err
}

# --- the migration ----------------------------------------------------------

# RDMAMIGRATESLOTS from node 'from' to node 'to', TRANSPORT tcp; returns
# the reply (a dict).
# A failure is an assertion (the test fails, the file goes on).
proc mg_migrate {from to ranges args} {
    if {[catch {R $from rdmamigrateslots [srv -$to host] [srv -$to port] {*}$ranges transport tcp {*}$args} reply]} {
        fail "RDMAMIGRATESLOTS $ranges from node $from to node $to: $reply"
    }
    return $reply
}

# The same from a deferring client (the caller reads the reply).
proc mg_migrate_deferred {from to ranges args} {
    set rd [redis_deferring_client -$from]
    $rd rdmamigrateslots [srv -$to host] [srv -$to port] {*}$ranges transport tcp {*}$args
    return $rd
}

# --- the test hooks (hidden configs; src/migsession.h) ---------------------

# The points where a donor's thread can be held (migration-test-delay-*).
set ::mg_delay_points {prepare watch transfer write chunk patch handover handed delete}

# Node n's donor thread sleeps ms at point (0: not).
proc mg_delay {n point ms} {
    R $n config set migration-test-delay-$point $ms
}

# Every migration-test-delay-* of node n back to 0.
proc mg_delay_reset {n} {
    set args {}
    foreach p $::mg_delay_points { lappend args migration-test-delay-$p 0 }
    R $n config set {*}$args
}

# Node n, as a recipient, damages what it receives (migration-test-corrupt:
# "header <nth>", "manifest <nth>", "random <nth> <seed> <count>"; "": off).
proc mg_corrupt {n spec} {
    R $n config set migration-test-corrupt $spec
}

# The reply of a migration started with mg_migrate_deferred from node n,
# once it ended: the client closed, n's test delays reset; an error fails
# the test.
proc mg_deferred_reply {rd n} {
    set failed [catch {$rd read} reply]
    $rd close
    mg_delay_reset $n
    if {$failed} { fail "the migration failed: $reply" }
    return $reply
}

# Wait until node n's STATUS says phase (the donor thread sleeps there).
proc mg_wait_phase {n phase} {
    wait_for_condition 1000 10 {
        [dict get [mg_status $n] phase] eq $phase
    } else {
        fail "node $n never reached phase $phase: [mg_status $n]"
    }
}

# The recipient's (node 1's) import session ended (its rollback too).
proc mg_wait_import_over {} {
    wait_for_condition 200 50 {
        [dict get [mg_status 1] state] eq {idle}
    } else {
        fail "the recipient's session did not end: [mg_status 1]"
    }
}

# A donor (node donor, with replica node replica) killed while its
# migration from the deferring client rd runs past its handover, and its
# replica taking over (TAKEOVER: with one master left, no vote). Node 0
# is the recipient.
proc mg_kill_donor_takeover {donor replica rd} {
    exec kill -9 [srv -$donor pid]
    catch {$rd read}
    catch {$rd close}
    mg_wait_idle 0
    assert_equal OK [R $replica cluster failover takeover]
    wait_for_condition 100 100 {
        [s -$replica role] eq {master}
    } else {
        fail "node $replica did not take over from node $donor"
    }
}

# Node n restarted (from its RDB or AOF), as a replica now, in sync.
proc mg_restart_as_replica {n} {
    restart_server -$n true false
    mg_fast_clients
    wait_for_condition 100 100 {
        [s -$n role] eq {slave} && [s -$n master_link_status] eq {up}
    } else {
        fail "node $n did not turn into a replica"
    }
}

# appendonly yes|no on node n, kept over a restart (CONFIG REWRITE); with
# yes, once its first AOF is written.
proc mg_appendonly {n yesno} {
    R $n config set appendonly $yesno
    R $n config rewrite
    wait_for_condition 100 100 {
        [status [Rn $n] aof_rewrite_in_progress] == 0 &&
        [status [Rn $n] aof_rewrite_scheduled] == 0
    } else {
        fail "node $n: the AOF rewrite did not end"
    }
}

# Starts a migration of ranges 0 -> 1 held by migration-test-delay-<phase>
# <ms>, waits until the donor is in that phase; returns the
# deferring client that sent it.
proc mg_start_held {ranges phase ms args} {
    mg_delay_reset 0
    mg_delay 0 $phase $ms
    set rd [mg_migrate_deferred 0 1 $ranges {*}$args]
    mg_wait_phase 0 $phase
    return $rd
}

# The error a held migration ends with.
proc mg_held_error {rd re} {
    if {![catch {$rd read} err]} { fail "the migration succeeded: $err" }
    $rd close
    mg_delay_reset 0
    if {![regexp -nocase -- $re $err]} { fail "migration error '$err' does not match /$re/" }
    puts "migration error: $err"
}

set ::mg_reply_fields {transport slots keys bytes keys_zero_copy keys_serialized
    prepare_ms transfer_ms patch_ms handover_ms delete_ms write_pause_ms
    write_pause_mean_ms commands_held commands_held_max_ms}

# A success reply: every field, tcp, the slot and key counts.
proc mg_assert_reply {reply nslots nkeys} {
    foreach f $::mg_reply_fields {
        if {![dict exists $reply $f]} { fail "reply has no field '$f': $reply" }
        if {$f ne {transport} && !([string is integer -strict [dict get $reply $f]] &&
                                   [dict get $reply $f] >= 0)} {
            fail "reply field $f is not a count: $reply"
        }
    }
    assert_equal tcp [dict get $reply transport]
    assert_equal $nslots [dict get $reply slots] "slots in $reply"
    assert_equal $nkeys [dict get $reply keys] "keys in $reply"
    assert_equal $nkeys [expr {[dict get $reply keys_zero_copy] + [dict get $reply keys_serialized]}] \
        "zero-copy + serialized keys in $reply"
    if {$nkeys > 0} { assert {[dict get $reply bytes] > 0} }
}

# INFO migration counters of node n, to compare before/after.
proc mg_totals {n} {
    set d {}
    foreach f {migration_total_migrations migration_total_failed migration_total_keys
               migration_total_bytes migration_tcp_bytes_sent} {
        dict set d $f [mg_info $n $f]
    }
    return $d
}

# After a successful migration by node n (the donor) with this reply.
proc mg_assert_info_ok {n before reply} {
    assert_equal idle [mg_info $n migration_state]
    assert_equal ok [mg_info $n migration_last_status]
    assert_equal tcp [mg_info $n migration_last_transport]
    assert_equal [expr {[dict get $before migration_total_migrations] + 1}] [mg_info $n migration_total_migrations]
    assert_equal [dict get $before migration_total_failed] [mg_info $n migration_total_failed]
    assert_equal [expr {[dict get $before migration_total_keys] + [dict get $reply keys]}] \
        [mg_info $n migration_total_keys]
    assert_equal [expr {[dict get $before migration_total_bytes] + [dict get $reply bytes]}] \
        [mg_info $n migration_total_bytes]
    assert {[mg_info $n migration_tcp_bytes_sent] > [dict get $before migration_tcp_bytes_sent]}
    set st [mg_status $n]
    assert_equal idle [dict get $st state]
    assert_equal ok [dict get $st last_status]
}

# --- workloads --------------------------------------------------------------

# Tcl's socket writes a big command in 4 KB pieces, each waiting for the
# server's delayed ACK (40 ms per command of 40 KB): give the client of
# each node (and any other client) one buffer for the whole command.
proc mg_fast_client {client} {
    if {[regexp {redisHandle([0-9]+)$} $client _ id] && [info exists ::redis::fd($id)] &&
        $::redis::fd($id) ne {}} {
        fconfigure $::redis::fd($id) -buffersize 1048576
    }
}
proc mg_fast_clients {} {
    for {set j 0} {$j < [llength $::servers]} {incr j} { mg_fast_client [Rn $j] }
}

# Random elements come from a pool (randstring is slow for big workloads).
proc mg_elem {} {
    if {![info exists ::mg_pool]} {
        set ::mg_pool {}
        for {set i 0} {$i < 4096} {incr i} { lappend ::mg_pool [mg_new_elem] }
    }
    lindex $::mg_pool [randomInt 4096]
}
proc mg_new_elem {} {
    switch [randomInt 5] {
        0 { return [randomInt 100000] }
        1 { return [randstring 1 12 alpha] }
        2 { return [randstring 1 30 binary] }
        3 { return [randstring 65 200 alpha] }
        4 { return [randstring 1 8 alpha] }
    }
}
proc mg_elems {min max} {
    set n [expr {$min + [randomInt [expr {$max - $min + 1}]]}]
    set out {}
    for {set i 0} {$i < $n} {incr i} { lappend out [mg_elem] }
    return $out
}
# Short elements (keep listpack / intset encodings).
proc mg_short_elems {min max} {
    set n [expr {$min + [randomInt [expr {$max - $min + 1}]]}]
    set out {}
    for {set i 0} {$i < $n} {incr i} {
        set e [mg_elem]
        if {[string length $e] > 20} { set e [string range $e 0 19] }
        lappend out $e
    }
    return $out
}

set ::mg_kinds {int embstr raw bigstr listsmall listbig listcomp intset setht
    hashlp hashht zsetlp zsetsl stream}

# Creates key k of a kind on node n, maybe with a TTL, then mutates it a
# little (deletions leave some hash tables smaller than their threshold).
proc mg_make_key {n k kind} {
    switch $kind {
        int { R $n set $k [randomInt 1000000000] }
        embstr { R $n set $k [randstring 0 40 alpha] }
        raw {
            R $n set $k [string range [string repeat "[mg_elem][mg_elem]" 300] 0 [expr {45 + [randomInt 3000]}]]
            R $n append $k [randstring 1 10 binary]
        }
        bigstr {
            R $n set $k [string repeat [randstring 10 100 alpha] [expr {200 + [randomInt 600]}]]
            R $n setrange $k [randomInt 1000] [randstring 1 50 binary]
        }
        listsmall { R $n rpush $k {*}[mg_short_elems 1 30] }
        listbig {
            R $n rpush $k {*}[mg_elems 300 1200]
            R $n lpush $k [string repeat [mg_elem] [expr {100 + [randomInt 100]}]]
            R $n lpop $k [randomInt 5]
        }
        listcomp {
            R $n config set list-compress-depth 1
            set e {}
            for {set i 0} {$i < 600 + [randomInt 1000]} {incr i} { lappend e "compressible-element-$i" }
            R $n rpush $k {*}$e
            R $n config set list-compress-depth 0
        }
        intset { R $n sadd $k {*}[lmap x [lrepeat [expr {1 + [randomInt 200]}] 0] {randomInt 1000000}] }
        setht {
            R $n sadd $k {*}[mg_elems 1 300]
            # (Random removals could empty a set of one or two members,
            # deleting the key: one member stays whatever they draw.)
            set keep [R $n srandmember $k]
            set gone [lsearch -all -inline -not -exact [mg_elems 1 20] $keep]
            if {[llength $gone]} { R $n srem $k {*}$gone }
        }
        hashlp {
            R $n hset $k {*}[concat {*}[lmap e [mg_short_elems 1 40] {list $e [randstring 0 30 alpha]}]]
        }
        hashht {
            R $n hset $k {*}[concat {*}[lmap e [mg_elems 1 200] {list $e [mg_elem]}]]
            R $n hset $k long [randstring 65 300 alpha]
            if {[randomInt 2]} { R $n hdel $k long }
        }
        zsetlp {
            R $n zadd $k {*}[concat {*}[lmap e [mg_short_elems 1 60] {list [expr {[randomInt 1000] / 7.0}] $e}]]
        }
        zsetsl {
            R $n zadd $k {*}[concat {*}[lmap e [mg_elems 1 300] {list [randomInt 1000] $e}]]
            R $n zadd $k -1 [randstring 65 100 alpha]
            if {[randomInt 2]} { R $n zpopmin $k }
        }
        stream {
            set n_entries [expr {5 + [randomInt 150]}]
            R $n eval {
                for i = 1, #ARGV, 2 do
                    redis.call('xadd', KEYS[1], '*', 'f', ARGV[i], 'g', ARGV[i + 1])
                end
                return 1
            } 1 $k {*}[concat {*}[lmap e [mg_elems $n_entries $n_entries] {list $e [randstring 0 20 alpha]}]]
            R $n xgroup create $k g1 0
            R $n xreadgroup group g1 c1 count [randomInt 20] streams $k >
            R $n xreadgroup group g1 c2 count [randomInt 20] streams $k >
            if {[randomInt 2]} {
                R $n xgroup create $k g2 \$
                R $n xgroup createconsumer $k g2 idle
            }
            R $n xtrim $k maxlen [expr {$n_entries - [randomInt 5]}]
        }
    }
    if {[randomInt 3] == 0} {
        R $n pexpire $k [expr {100000000 + [randomInt 100000000]}]
    }
}

# Fills node n with 'count' keys "prefix:..." of random kinds, all in
# the slot set; a third share a few hash tags (many keys per slot).
# Returns the key names.
proc mg_fill {n prefix count slotset} {
    set tags {}
    for {set i 0} {$i < 4} {incr i} { lappend tags [mg_tag $slotset [lmap t $tags {mg_keyslot $t}]] }
    set plain [mg_names "$prefix" [expr {$count - $count / 3}] $slotset]
    set keys $plain
    for {set i 0} {$i < $count / 3} {incr i} {
        lappend keys "$prefix:{[lindex $tags [expr {$i % 4}]]}:$i"
    }
    foreach k $keys {
        mg_make_key $n $k [lindex $::mg_kinds [randomInt [llength $::mg_kinds]]]
    }
    return $keys
}

# Big keys (100k elements, or 'elements', and a 2 MB string) on node n in
# the slot set.
proc mg_fill_big {n prefix slotset {elements 100000}} {
    set script {
        local t = ARGV[1]
        for i = 1, tonumber(ARGV[2]) do
            if t == 'hash' then redis.call('hset', KEYS[1], 'field:' .. i, 'value:' .. i)
            elseif t == 'set' then redis.call('sadd', KEYS[1], 'member:' .. i)
            elseif t == 'zset' then redis.call('zadd', KEYS[1], i % 1000, 'member:' .. i)
            elseif t == 'list' then redis.call('rpush', KEYS[1], 'element:' .. i)
            else redis.call('xadd', KEYS[1], i .. '-1', 'f', i) end
        end
        return redis.call('type', KEYS[1])['ok']
    }
    set keys {}
    foreach t {hash set zset list stream} k [mg_names "$prefix:big" 5 $slotset] {
        R $n eval $script 1 $k $t $elements
        lappend keys $k
    }
    set stream [lindex $keys end]
    R $n xgroup create $stream g1 0
    R $n xreadgroup group g1 c1 count 1000 streams $stream >
    R $n pexpire [lindex $keys 0] 300000000
    set k [lindex [mg_names "$prefix:bigstr" 1 $slotset] 0]
    R $n set $k [string repeat [randstring 100 100 alpha] 20000]
    lappend keys $k
    return $keys
}

# Ops that change a key of any type a little (writes on the recipient
# between two migrations).
proc mg_touch {n k} {
    switch [R $n type $k] {
        string { R $n append $k [randstring 1 20 alpha] }
        list { R $n rpush $k [mg_elem] }
        set { R $n sadd $k [mg_elem] }
        hash { R $n hset $k [mg_elem] [mg_elem] }
        zset { R $n zadd $k [randomInt 100] [mg_elem] }
        stream { R $n xadd $k * touched [mg_elem] }
    }
    switch [randomInt 4] {
        0 { R $n persist $k }
        1 { R $n pexpire $k [expr {200000000 + [randomInt 1000000]}] }
    }
}

# --- snapshots --------------------------------------------------------------

# One key on node n: type, encoding, DUMP, DEBUG DIGEST-VALUE, PEXPIRETIME
# (absolute). A missing key is {}.
proc mg_key_state {n k} {
    if {![R $n exists $k]} { return {} }
    list [R $n type $k] [R $n object encoding $k] [R $n dump $k] \
        [R $n debug digest-value $k] [R $n pexpiretime $k]
}

proc mg_snapshot {n keys} {
    set snap {}
    foreach k $keys {
        set st [mg_key_state $n $k]
        if {$st eq {}} { fail "node $n has no key '$k' to snapshot" }
        dict set snap $k $st
    }
    return $snap
}

# Encodings a value may take when it is moved through the DUMP format (a
# hash table loaded back may become the compact encoding).
set ::mg_reencodings {hashtable {hashtable listpack intset} skiplist {skiplist listpack}}

# On a cluster of two masters with a replica each (node 2 replicates node
# 0, node 3 node 1): once the replicas caught up, each holds exactly what
# its master holds.
# Nodes 2 and 3 (replicas of 0 and 1) are linked to their masters.
proc mg_wait_replicas_up {} {
    wait_for_condition 100 100 {
        [s -2 master_link_status] eq {up} && [s -3 master_link_status] eq {up}
    } else {
        fail "replicas not in sync"
    }
}

proc mg_assert_replicas_equal {} {
    wait_for_ofs_sync [Rn 0] [Rn 2]
    wait_for_ofs_sync [Rn 1] [Rn 3]
    assert_equal [R 0 debug digest] [R 2 debug digest]
    assert_equal [R 1 debug digest] [R 3 debug digest]
}

# Every key of the snapshot is on node n, the same: type, value digest,
# DUMP bytes (not for hash tables: their DUMP follows the node's hash seed),
# encoding (or its re-encoding), expire time within tolerance_ms.
# Returns the number of keys that changed encoding.
proc mg_assert_keys {n snap {tolerance_ms 1000}} {
    set reencoded 0
    dict for {k want} $snap {
        set got [mg_key_state $n $k]
        if {$got eq {}} { fail "node $n lost key '$k'" }
        lassign $want type enc dump digest exp
        lassign $got gtype genc gdump gdigest gexp
        if {$gtype ne $type} { fail "key '$k' on node $n: type $gtype, expected $type" }
        if {$gdigest ne $digest} { fail "key '$k' ($type/$enc) on node $n: DEBUG DIGEST-VALUE differs" }
        if {$genc ne $enc} {
            if {![dict exists $::mg_reencodings $enc] ||
                [lsearch -exact [dict get $::mg_reencodings $enc] $genc] < 0} {
                fail "key '$k' on node $n: encoding $genc, expected $enc"
            }
            incr reencoded
        }
        if {$enc ne {hashtable} && $genc eq $enc && $gdump ne $dump} {
            fail "key '$k' ($type/$enc) on node $n: DUMP differs ([string length $gdump] vs [string length $dump] bytes)"
        }
        if {($exp < 0) != ($gexp < 0) || abs($gexp - $exp) > $tolerance_ms} {
            fail "key '$k' on node $n: PEXPIRETIME $gexp, expected $exp"
        }
    }
    return $reencoded
}

# None of the keys exists on node n (DEBUG DIGEST-VALUE: no redirection
# for slots that node n does not serve, a zero digest for a missing key).
proc mg_assert_absent {n keys} {
    set zero [string repeat 0 40]
    foreach k $keys {
        if {[R $n debug digest-value $k] ne $zero} { fail "node $n still holds key '$k'" }
    }
}

# How many units a migration of ranges from node n ships: one per slot
# holding keys, but one for all the slots of an arena that moves whole
# (slot groups: every slot sharing it moves, and it holds no leftover of
# another slot), whose lead carries the blocks. So many slots the
# recipient's patcher checks one by one, and so many RDMASLOTADOPT
# commands its replicas get.
proc mg_units {n ranges} {
    set moving [dict create]
    foreach s [mg_expand $ranges] {
        set d [R $n cluster slotblocks $s]
        dict incr moving [dict get $d arena]
        dict set info $s $d
    }
    set count 0
    set units {}
    foreach s [mg_expand $ranges] {
        if {[R $n cluster countkeysinslot $s] == 0} continue
        set d [dict get $info $s]
        set a [dict get $d arena]
        if {[dict get $d arena_slots] > 1 && ![dict get $d arena_mixed] &&
            [dict get $moving $a] == [dict get $d arena_slots]} {
            if {$a in $units} continue
            lappend units $a
        }
        incr count
    }
    return $count
}

# Keys per slot of the slots of ranges, counted locally from a key list.
proc mg_expected_counts {ranges keys} {
    set counts {}
    foreach s [mg_expand $ranges] { dict set counts $s 0 }
    foreach k $keys {
        set s [mg_keyslot $k]
        if {[dict exists $counts $s]} { dict incr counts $s }
    }
    return $counts
}

# CLUSTER COUNTKEYSINSLOT on node n for every slot of the dict.
proc mg_assert_counts {n counts} {
    dict for {s c} $counts {
        set got [R $n cluster countkeysinslot $s]
        if {$got != $c} { fail "node $n holds $got keys in slot $s, expected $c" }
    }
}

# XOR of two DEBUG DIGEST values (40 hex digits). A non-empty database's
# digest is a constant XOR the digests of its keys, so for two non-empty
# nodes the XOR of their digests does not change when keys move between
# them unchanged (TTLs included).
proc mg_xor {a b} {
    set out {}
    for {set i 0} {$i < 40} {incr i 8} {
        scan [string range $a $i $i+7] %x x
        scan [string range $b $i $i+7] %x y
        append out [format %08x [expr {$x ^ $y}]]
    }
    return $out
}
proc mg_pair_digest {a b} {
    mg_xor [R $a debug digest] [R $b debug digest]
}

# Migrate ranges from node 'from' to node 'to' (each holding keys: see
# mg_pair_digest) and check what a user relies on: the reply, the owner in
# every node's view, every key of snap identical on 'to' and absent on
# 'from', the two nodes' data set as a whole unchanged, both nodes' blocks
# sound. Returns the reply.
proc mg_migrate_checked {from to ranges snap} {
    set keys [dict keys $snap]
    set pair [mg_pair_digest $from $to]
    set reply [mg_migrate $from $to $ranges]
    mg_assert_reply $reply [llength [mg_expand $ranges]] [llength $keys]
    mg_assert_owner $to $ranges
    mg_assert_keys $to $snap
    mg_assert_absent $from $keys
    assert_equal $pair [mg_pair_digest $from $to]
    mg_assert_slotalloc_sound $from
    mg_assert_slotalloc_sound $to
    return $reply
}

# What node n answers a replica that announces capas (a list, each sent
# as "capa <c>") and asks PSYNC replid offset: the first line of the reply
# (+FULLRESYNC ... or +CONTINUE ...). The connection is closed after.
proc mg_psync_reply {n capas replid offset} {
    set rr [redis [srv -$n host] [srv -$n port] 0 $::tls]
    $rr replconf listening-port 1
    set argv {}
    foreach c $capas { lappend argv capa $c }
    $rr replconf {*}$argv
    $rr write "PSYNC $replid $offset\r\n"
    $rr flush
    set line [$rr read]
    $rr close
    return $line
}

# The commands of a RESP file (an AOF increment), each a list of arguments.
proc mg_resp_parse {data} {
    set cmds {}
    set p 0
    set end [string length $data]
    while {$p < $end} {
        set e [string first "\r\n" $data $p]
        if {[string index $data $p] ne "*"} { error "RESP: no array at $p" }
        set argc [string range $data [expr {$p + 1}] [expr {$e - 1}]]
        set p [expr {$e + 2}]
        set args {}
        for {set a 0} {$a < $argc} {incr a} {
            set e [string first "\r\n" $data $p]
            set len [string range $data [expr {$p + 1}] [expr {$e - 1}]]
            lappend args [string range $data [expr {$e + 2}] [expr {$e + 1 + $len}]]
            set p [expr {$e + 4 + $len}]
        }
        lappend cmds $args
    }
    return $cmds
}
