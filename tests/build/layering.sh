#!/usr/bin/env bash
# Calls go one way: allocator -> slot placement -> blocks -> transport ->
# migration (docs/DESIGN.md, "Overview"). Checked on the objects the build
# made, not on the sources: for each of our object files, every symbol it
# uses (nm -u) that another of our objects defines (nm --defined-only) must
# be defined in the same layer or a lower one. A lower layer that needs
# something from a higher one takes a callback instead.
#
# Layers (0 is the lowest):
#   0  slotalloc.o, rdmamig.o               allocator; build identity
#   1  slotcompact.o                        slot placement (slot affinity)
#   2  slotblocks.o, slotfreeze.o           blocks of a migration; write fence
#   3  xfer.o, xfertcp.o, xferrdma.o        block transport
#   4  migsession.o                         what both roles use
#   5  clustersetslots.o                    CLUSTER SETSLOTS, the slot parser
#                                           and the handover's ownership change
#   6  migdonor.o, migrecipient.o           the two roles
#   7  migration.o                          RDMAMIGRATESLOTS, upstream's hooks
# Files of one layer may call each other in layers 0-3 (the transport's
# implementations use its common part); from layer 4 up only strictly
# down: the donor and the recipient never call each other, migsession.c
# calls neither.
#
# And one prefix per layer: every global symbol an object defines starts
# with its layer's prefix (below), or is a command's procedure (...Command,
# upstream's convention), so a name says which layer it belongs to.
#
# Run by `make test` (suite "ours") like every tests/build/*.sh; needs a
# build (build/redis/src/*.o). Prints one [ok] or [err] line per object.
set -uo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
objdir="$repo/build/redis/src"

declare -A layer=(
    [slotalloc.o]=0 [rdmamig.o]=0
    [slotcompact.o]=1
    [slotblocks.o]=2 [slotfreeze.o]=2
    [xfer.o]=3 [xfertcp.o]=3 [xferrdma.o]=3
    [migsession.o]=4 [clustersetslots.o]=5
    [migdonor.o]=6 [migrecipient.o]=6 [migration.o]=7
)

# The names an object may define (an extended regex, anchored).
declare -A prefix=(
    [slotalloc.o]='slotAlloc' [rdmamig.o]='rdmaMig'
    [slotcompact.o]='slotCompact'
    [slotblocks.o]='blk' [slotfreeze.o]='slot(Freeze|Thaw|Watch|Unwatch)'
    [xfer.o]='xfer' [xfertcp.o]='xfer' [xferrdma.o]='xfer'
    [migsession.o]='mig' [clustersetslots.o]='cluster'
    [migdonor.o]='mig' [migrecipient.o]='mig' [migration.o]='mig'
)

if [ ! -e "$objdir/slotalloc.o" ]; then
    echo "[err]: layering: no objects in $objdir (run make)"
    exit 1
fi

# symbol -> defining object, for our objects that exist in this build
# (xferrdma.o only with BUILD_RDMA, xfertcp.o once the transport is split).
declare -A def
for o in "${!layer[@]}"; do
    [ -e "$objdir/$o" ] || continue
    while read -r sym; do def[$sym]=$o; done < <(nm --defined-only -g "$objdir/$o" | awk '{print $3}')
done

failed=0
for o in $(printf '%s\n' "${!layer[@]}" | sort); do
    [ -e "$objdir/$o" ] || continue
    bad=()
    while read -r sym; do
        d=${def[$sym]:-}
        [ -n "$d" ] && [ "$d" != "$o" ] || continue
        if [ "${layer[$d]}" -gt "${layer[$o]}" ] ||
           { [ "${layer[$d]}" -eq "${layer[$o]}" ] && [ "${layer[$o]}" -ge 4 ]; }; then
            bad+=("$sym (${d%.o}.c)")
        fi
    done < <(nm -u "$objdir/$o" | awk '{print $2}')
    if [ ${#bad[@]} -eq 0 ]; then
        echo "[ok]: layering - ${o%.o}.c calls nothing above its layer (${layer[$o]})"
    else
        echo "[err]: layering - ${o%.o}.c calls up: ${bad[*]}"
        failed=1
    fi
done
for o in $(printf '%s\n' "${!layer[@]}" | sort); do
    [ -e "$objdir/$o" ] || continue
    bad=$(nm --defined-only -g "$objdir/$o" | awk '{print $3}' |
          grep -Ev "^(${prefix[$o]})|Command\$" | tr '\n' ' ')
    if [ -z "$bad" ]; then
        echo "[ok]: layering - ${o%.o}.c defines only ${prefix[$o]}* names"
    else
        echo "[err]: layering - ${o%.o}.c defines names outside its prefix ${prefix[$o]}: $bad"
        failed=1
    fi
done
exit $failed
