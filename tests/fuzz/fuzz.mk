# fuzz.mk -- the fuzz targets (included by the top-level Makefile; see
# tests/fuzz/README.md).
#
#   make fuzz [FUZZ_SECONDS=60] [FUZZ_RUNS=N] [FUZZ_TARGETS="..."]
#        builds every target and runs each one in turn (tests/fuzz/run.sh)
#   make fuzz-build     only build them (build/fuzz/<target>-fuzz)
#   make fuzz-seeds     rewrite the seed corpora tests/fuzz/corpus/<target>/
#                       from real bytes (the *-seeds programs)
#
# Targets are built with clang, libFuzzer, ASan and UBSan (every UBSan
# finding aborts; utils/install-deps.sh fuzz). migtransport and slotalloc
# are built from our sources alone; migpatch links the objects of a second
# build of the patched tree with the same sanitizers (build/fuzz/redis,
# tests/fuzz/build-tree.sh: a few minutes the first time).

FUZZ_TARGETS ?= migtransport slotalloc migpatch
FUZZ_SECONDS ?= 60
FUZZ_CC ?= clang
FUZZ_DIR := build/fuzz
FUZZ_CFLAGS := -std=gnu11 -g -O1 -fno-omit-frame-pointer \
	-fsanitize=address,undefined -fno-sanitize-recover=all \
	-Wall -Wextra -Werror -Isrc -Itests/fuzz

.PHONY: fuzz fuzz-build fuzz-seeds

fuzz:
	@utils/install-deps.sh fuzz
	@$(MAKE) --no-print-directory fuzz-build
	@FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_RUNS=$(FUZZ_RUNS) tests/fuzz/run.sh $(FUZZ_TARGETS)

fuzz-build: $(foreach t,$(FUZZ_TARGETS),$(FUZZ_DIR)/$(t)-fuzz)

fuzz-seeds: $(foreach t,migtransport slotalloc migpatch,$(FUZZ_DIR)/$(t)-seeds)
	for t in migtransport slotalloc migpatch; do \
		rm -rf tests/fuzz/corpus/$$t && mkdir -p tests/fuzz/corpus/$$t && \
		$(FUZZ_DIR)/$$t-seeds tests/fuzz/corpus/$$t || exit 1; done

# migtransport: the block transport (src/xfer.c, the facade;
# src/xfertcp.c, TCP; src/xferrdma.c, built without USE_RDMA: the stub that
# refuses RDMA) with its socket calls and clock turned into the scripted
# peer of fakeio.h (-include + FAKEIO_SEAM; the files are unchanged).
MIGTRANSPORT_SEAM_SRC := xfer xfertcp xferrdma
$(FUZZ_DIR)/seam-%.o: src/%.c src/xfer.h src/xferimpl.h tests/fuzz/fakeio.h
	@mkdir -p $(FUZZ_DIR)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -include tests/fuzz/fakeio.h \
		-DFAKEIO_SEAM -c -o $@ $<

$(FUZZ_DIR)/fakeio.o: tests/fuzz/fakeio.c tests/fuzz/fakeio.h
	@mkdir -p $(FUZZ_DIR)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -c -o $@ $<

MIGTRANSPORT_FUZZ_OBJ := $(foreach f,$(MIGTRANSPORT_SEAM_SRC),$(FUZZ_DIR)/seam-$(f).o) \
	$(FUZZ_DIR)/fakeio.o

$(FUZZ_DIR)/migtransport-fuzz: tests/fuzz/migtransport-fuzz.c $(MIGTRANSPORT_FUZZ_OBJ) tests/fuzz/fuzz-util.h
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< $(MIGTRANSPORT_FUZZ_OBJ)

$(FUZZ_DIR)/migtransport-seeds: tests/fuzz/migtransport-seeds.c $(MIGTRANSPORT_FUZZ_OBJ) tests/fuzz/fuzz-util.h
	$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $< $(MIGTRANSPORT_FUZZ_OBJ)

# slotalloc: the harness includes src/slotalloc.c (REDIS_TEST's checks).
$(FUZZ_DIR)/slotalloc-fuzz: tests/fuzz/slotalloc-fuzz.c src/slotalloc.c src/slotalloc.h tests/fuzz/fuzz-util.h
	@mkdir -p $(FUZZ_DIR)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -pthread -fsanitize=fuzzer -o $@ $<

$(FUZZ_DIR)/slotalloc-seeds: tests/fuzz/slotalloc-seeds.c src/slotalloc.c src/slotalloc.h tests/fuzz/fuzz-util.h
	@mkdir -p $(FUZZ_DIR)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -pthread -o $@ tests/fuzz/slotalloc-seeds.c src/slotalloc.c

# migpatch: src/slotblocks.c and everything under it, in the objects of
# build/fuzz/redis (build-tree.sh runs its make every time: it rebuilds
# what changed, and then the harness is relinked).
MIGPATCH_SRC := tests/fuzz/migpatch-env.c tests/fuzz/migpatch-env.h tests/fuzz/fuzz-util.h
MIGPATCH_CFLAGS := $(FUZZ_CFLAGS) -Wno-missing-field-initializers -I$(FUZZ_DIR)/redis/src \
	-I$(FUZZ_DIR)/redis/deps/hiredis -I$(FUZZ_DIR)/redis/deps/lua/src \
	-I$(FUZZ_DIR)/redis/deps/hdr_histogram

.PHONY: fuzz-tree
fuzz-tree:
	@FUZZ_CC=$(FUZZ_CC) JOBS=$(JOBS) tests/fuzz/build-tree.sh

$(FUZZ_DIR)/migpatch-fuzz: tests/fuzz/migpatch-fuzz.c $(MIGPATCH_SRC) fuzz-tree
	$(FUZZ_CC) $(MIGPATCH_CFLAGS) -fsanitize=fuzzer -o $@ tests/fuzz/migpatch-fuzz.c \
		tests/fuzz/migpatch-env.c $$(cat $(FUZZ_DIR)/redis-link.txt)

$(FUZZ_DIR)/migpatch-seeds: tests/fuzz/migpatch-seeds.c $(MIGPATCH_SRC) fuzz-tree
	$(FUZZ_CC) $(MIGPATCH_CFLAGS) -o $@ tests/fuzz/migpatch-seeds.c \
		tests/fuzz/migpatch-env.c $$(cat $(FUZZ_DIR)/redis-link.txt)
