# load.tcl -- writes the demo's data set as Redis protocol, one file per
# master, for `redis-cli --pipe`: N string keys "demo:<i>" with values of
# B bytes, each key sent to the master that owns its hash slot, so the keys
# spread over all 16384 slots as real application keys do (redis-benchmark
# --cluster puts every key of a node behind one hash tag, i.e. one slot).
#
#   tclsh load.tcl N B OUTDIR PORT=START-END[,START-END...] ...
#
# Writes OUTDIR/<port>.resp for every PORT given.

proc crc16_table {} {
    set t {}
    for {set i 0} {$i < 256} {incr i} {
        set crc [expr {$i << 8}]
        for {set j 0} {$j < 8} {incr j} {
            if {$crc & 0x8000} {
                set crc [expr {(($crc << 1) ^ 0x1021) & 0xFFFF}]
            } else {
                set crc [expr {($crc << 1) & 0xFFFF}]
            }
        }
        lappend t $crc
    }
    return $t
}

# Redis Cluster's key -> slot (CRC16-XMODEM mod 16384; no hash tags used).
proc key_slot {key} {
    global crctab
    set crc 0
    binary scan $key c* bytes
    foreach b $bytes {
        set crc [expr {(($crc << 8) & 0xFFFF) ^ [lindex $crctab [expr {(($crc >> 8) ^ $b) & 0xFF}]]}]
    }
    return [expr {$crc & 16383}]
}

lassign $argv count vsize outdir
set crctab [crc16_table]
set owner [lrepeat 16384 {}]
foreach spec [lrange $argv 3 end] {
    lassign [split $spec =] port ranges
    set fd($port) [open [file join $outdir $port.resp] w]
    fconfigure $fd($port) -translation binary -buffering full
    foreach r [split $ranges ,] {
        lassign [split $r -] a b
        if {$b eq ""} { set b $a }
        for {set s $a} {$s <= $b} {incr s} { lset owner $s $port }
    }
}
set value [string repeat x $vsize]
for {set i 0} {$i < $count} {incr i} {
    set key "demo:$i"
    set port [lindex $owner [key_slot $key]]
    if {$port eq ""} { puts stderr "slot of $key has no owner"; exit 1 }
    puts -nonewline $fd($port) "*3\r\n\$3\r\nSET\r\n\$[string length $key]\r\n$key\r\n\$$vsize\r\n$value\r\n"
}
foreach port [array names fd] { close $fd($port) }
