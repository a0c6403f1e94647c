# Build identity of the rdma-migration fork: what an operator reads to know
# which binary runs (redis-server --version, INFO server). Later issues'
# tooling (redis-cli --cluster, utils/bench) relies on these fields.

start_server {tags {"rdmamig"}} {
    set version_line [exec src/redis-server --version]

    test {--version keeps upstream's line and names the fork} {
        assert_match {Redis server v=7.0.15 sha=*} $version_line
        assert_match {* rdma-migration=* rdma=*} $version_line
        assert {[regexp { rdma-migration=([0-9]+\.[0-9]+\.[0-9]+) rdma=(yes|no)$} $version_line]}
    }

    test {INFO server reports the fork version, RDMA support and patchlevel} {
        regexp { rdma-migration=(\S+) rdma=(yes|no)$} $version_line -> ver rdma
        set info [r info server]
        assert_equal $ver [getInfoProperty $info rdma_migration_version]
        assert_equal $rdma [getInfoProperty $info rdma_support]
        assert_match {7.0.15-*} [getInfoProperty $info upstream_patchlevel]
        # Upstream's own fields are still there and unchanged.
        assert_equal 7.0.15 [getInfoProperty $info redis_version]
    }

    test {Our fields appear only in the server section} {
        set info [r info memory]
        assert_equal {} [getInfoProperty $info rdma_migration_version]
        set info [r info everything]
        assert_equal 1 [regexp -all {rdma_migration_version:} $info]
    }

    test {RDMA support follows the build (rdma=yes when the verbs headers were found)} {
        # The binary links libibverbs only when compiled with RDMA; it must
        # agree with what it reports, in both directions.
        set linked [expr {![catch {exec sh -c "ldd src/redis-server | grep -q libibverbs"}]}]
        assert_equal [expr {$rdma eq "yes"}] $linked
        # rdma_devices counts what the verbs library sees: none on a host
        # without RDMA (tests/rdma/info.sh checks the SoftRoCE guest sees 1).
        set devices [getInfoProperty [r info server] rdma_devices]
        assert {[string is integer -strict $devices] && $devices >= 0}
        if {$rdma eq "no"} { assert_equal 0 $devices }
        if {![file exists /sys/class/infiniband] ||
            [llength [glob -nocomplain /sys/class/infiniband/*]] == 0} {
            assert_equal 0 $devices
        }
    }
}
