# rdmamig.mk -- build options of the rdma-migration fork.
#
# Included by upstream's src/Makefile (patches/0001-*), after its own
# FINAL_CFLAGS/FINAL_LIBS are set, in the way BUILD_TLS is handled there:
#
#   BUILD_RDMA=auto  (default) build the RDMA transport when the libibverbs
#                    and librdmacm headers are installed
#   BUILD_RDMA=yes   build it, and fail if the headers are missing
#   BUILD_RDMA=no    build without it (TCP transport only)
#
# It also lists our object files for redis-server (RDMAMIG_SERVER_OBJ) and
# for redis-cli (RDMAMIG_CLI_OBJ).
# The top-level Makefile builds bin/migtransport-test from the same sources
# with the same USE_RDMA decision (it asks redis-server --version).

BUILD_RDMA?=auto
# xfer.o + xfertcp.o + xferrdma.o: the block transport of slot
# migration (its facade, TCP, and RDMA under USE_RDMA; without it xferrdma.o
# only refuses RDMA). slotblocks.o: what a migration puts in the blocks and
# how the recipient adopts it.
RDMAMIG_SERVER_OBJ=rdmamig.o slotalloc.o slotcompact.o slotblocks.o xfer.o xfertcp.o xferrdma.o \
	clustersetslots.o slotfreeze.o migsession.o migdonor.o migrecipient.o migration.o
# clitransport.o + climigrate.o: redis-cli --cluster rebalance|reshard
# moving slots with RDMAMIGRATESLOTS (--cluster-transport).
RDMAMIG_CLI_OBJ=clitransport.o climigrate.o

RDMAMIG_HAVE_VERBS:=$(shell printf '\043include <infiniband/verbs.h>\n\043include <rdma/rdma_cma.h>\nint main(void){return 0;}\n' | \
	$(CC) -x c - -o /dev/null -libverbs -lrdmacm >/dev/null 2>&1 && echo yes || echo no)

ifeq ($(BUILD_RDMA),auto)
	RDMAMIG_RDMA:=$(RDMAMIG_HAVE_VERBS)
else ifeq ($(BUILD_RDMA),yes)
ifneq ($(RDMAMIG_HAVE_VERBS),yes)
$(error BUILD_RDMA=yes but the RDMA headers/libraries are missing: install libibverbs-dev and librdmacm-dev (apt-get install libibverbs-dev librdmacm-dev), or build with BUILD_RDMA=no)
endif
	RDMAMIG_RDMA:=yes
else ifeq ($(BUILD_RDMA),no)
	RDMAMIG_RDMA:=no
else
$(error BUILD_RDMA must be auto, yes or no (got '$(BUILD_RDMA)'))
endif

ifeq ($(RDMAMIG_RDMA),yes)
	FINAL_CFLAGS+=-DUSE_RDMA
	FINAL_LIBS+=-libverbs -lrdmacm
endif

# slotblocks.o: the blocks' checksums, XXH3 from Debian's libxxhash
# (libxxhash-dev; utils/install-deps.sh installs it).
FINAL_LIBS+=-lxxhash
