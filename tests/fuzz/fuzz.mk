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
# finding aborts), from our sources only: they need none of the upstream
# tree, only clang and its runtime (utils/install-deps.sh fuzz).

FUZZ_TARGETS ?= migtransport slotalloc
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

fuzz-seeds: $(FUZZ_DIR)/migtransport-seeds $(FUZZ_DIR)/slotalloc-seeds
	rm -f tests/fuzz/corpus/migtransport/* tests/fuzz/corpus/slotalloc/*
	mkdir -p tests/fuzz/corpus/migtransport tests/fuzz/corpus/slotalloc
	$(FUZZ_DIR)/migtransport-seeds tests/fuzz/corpus/migtransport
	$(FUZZ_DIR)/slotalloc-seeds tests/fuzz/corpus/slotalloc

# migtransport: src/migtransport.c with its socket calls turned into the
# scripted peer of fakeio.h (-include + FAKEIO_SEAM; the file is unchanged).
$(FUZZ_DIR)/migtransport-seam.o: src/migtransport.c src/migtransport.h tests/fuzz/fakeio.h
	@mkdir -p $(FUZZ_DIR)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -include tests/fuzz/fakeio.h \
		-DFAKEIO_SEAM -c -o $@ $<

$(FUZZ_DIR)/fakeio.o: tests/fuzz/fakeio.c tests/fuzz/fakeio.h
	@mkdir -p $(FUZZ_DIR)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -c -o $@ $<

MIGTRANSPORT_FUZZ_OBJ := $(FUZZ_DIR)/migtransport-seam.o $(FUZZ_DIR)/fakeio.o

$(FUZZ_DIR)/migtransport-fuzz: tests/fuzz/migtransport-fuzz.c $(MIGTRANSPORT_FUZZ_OBJ)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $^

$(FUZZ_DIR)/migtransport-seeds: tests/fuzz/migtransport-seeds.c $(MIGTRANSPORT_FUZZ_OBJ)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $^

# slotalloc: the harness includes src/slotalloc.c (REDIS_TEST's checks).
$(FUZZ_DIR)/slotalloc-fuzz: tests/fuzz/slotalloc-fuzz.c src/slotalloc.c src/slotalloc.h
	@mkdir -p $(FUZZ_DIR)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -pthread -fsanitize=fuzzer -o $@ $<

$(FUZZ_DIR)/slotalloc-seeds: tests/fuzz/slotalloc-seeds.c src/slotalloc.c src/slotalloc.h
	@mkdir -p $(FUZZ_DIR)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -pthread -o $@ tests/fuzz/slotalloc-seeds.c src/slotalloc.c
