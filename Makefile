# Top-level Makefile of the rdma-migration fork of Redis.
#
# The repository holds only our code; this file fetches the pinned upstream
# base, patches it and builds it (see README.md). The base is Debian's source
# package at the revision locked in deps/upstream.lock (with its SHA-256s):
#
#   make                 fetch + verify + patch (first time only) and build
#                        bin/redis-server, bin/redis-cli, bin/redis-benchmark
#                        (and bin/rdma-smoke when RDMA is compiled in),
#                        bin/migtransport-test (block transport test tool)
#   make test            install test deps, build, run upstream's suites + ours
#   make test-rdma       run the RDMA tests inside a SoftRoCE VM (utils/rxe-vm)
#   make fuzz            build the libFuzzer targets (ASan + UBSan) and run
#                        each for FUZZ_SECONDS (default 60); tests/fuzz/
#   make demo            3 -> 4 node loopback cluster rebalance, explained
#   make chaos           seeded chaos run of slot migrations under faults and
#                        writes, then a full check (utils/chaos; not in test/CI;
#                        CHAOS_SECONDS=300, CHAOS_SEED=<n>, CHAOS_PORT=31000,
#                        CHAOS_AFFINITY=mixed|yes|no)
#   make check-skips     show the excluded upstream tests fail without our patches
#   make update-upstream move to Debian's newest revision: rewrite
#                        deps/upstream.lock (commit it), refetch and repatch
#   make patch-tree      patched upstream as a git checkout, one commit per patch
#   make patch-export    write that checkout's commits back to patches/
#   make install PREFIX=/usr/local
#
# Options: BUILD_RDMA=auto|yes|no (default auto), JOBS (default 2),
# REDIS_TARBALL=/path/redis-7.0.15.tar.gz (build from upstream's tarball
# instead of Debian's source package).

JOBS ?= 2
BUILD_RDMA ?= auto
PREFIX ?= /usr/local

CACHE := build/cache
TREE := build/redis
PATCHTREE := build/patch-tree
BINARIES := redis-server redis-cli redis-benchmark
OUR_PATCHES := $(wildcard patches/*.patch)

export BUILD_RDMA

.PHONY: all build fetch tree test test-rdma demo install clean distclean \
	patch-tree patch-export deps update-upstream check-skips chaos

all: build

deps:
	@utils/install-deps.sh build

# Fetching happens once, and again when the lock changes (a pull, a
# checkout): exactly the Debian revision deps/upstream.lock names. Without a
# lock file the fetch takes the newest revision and writes one.
# `make update-upstream` takes the newest revision and rewrites the lock.
UPSTREAM_LOCK := $(wildcard deps/upstream.lock)
$(CACHE)/source.env: deps/fetch-upstream.sh deps/upstream.env $(UPSTREAM_LOCK)
	@deps/fetch-upstream.sh $(CACHE)

fetch: $(CACHE)/source.env

update-upstream:
	@deps/fetch-upstream.sh $(CACHE) --update
	@$(MAKE) --no-print-directory tree
	@cat $(CACHE)/update.txt

# The patched tree is rebuilt from the cached tarballs only when the base or
# a patch changed; our own sources are symlinked in on every build instead.
$(TREE)/.prepared: $(CACHE)/source.env patches/series $(OUR_PATCHES) deps/prepare-tree.sh deps/upstream.env
	@deps/prepare-tree.sh $(CACHE) $(TREE)
	@touch $@

tree: $(TREE)/.prepared

build: $(TREE)/.prepared
	@deps/link-sources.sh $(TREE)
	@. $(CACHE)/source.env && echo "build: redis $$PATCHLEVEL + patches/ (BUILD_RDMA=$(BUILD_RDMA))"
	$(MAKE) -C $(TREE) -j$(JOBS) BUILD_TLS=no
	@mkdir -p bin
	@# cp to a temporary name, then rename: a running bin/redis-server
	@# ("text file busy") is replaced, not half-written, and errors stop make.
	@for b in $(BINARIES); do cmp -s $(TREE)/src/$$b bin/$$b || \
		{ cp $(TREE)/src/$$b bin/.$$b.tmp && mv -f bin/.$$b.tmp bin/$$b; } || exit 1; done
	@if bin/redis-server --version | grep -q ' rdma=yes'; then \
		$(MAKE) --no-print-directory bin/rdma-smoke; \
	else rm -f bin/rdma-smoke; fi
	@r=$$(bin/redis-server --version | grep -q ' rdma=yes' && echo yes || echo no); \
		[ "$$(cat build/migtest-rdma 2>/dev/null)" = "$$r" ] || echo $$r > build/migtest-rdma; \
		$(MAKE) --no-print-directory bin/migtransport-test MIGTEST_RDMA=$$r
	@bin/redis-server --version

bin/rdma-smoke: tests/tools/rdmasmoke.c
	$(CC) -O2 -g -Wall -Wextra -Werror -o $@ $< -libverbs -lrdmacm

# The block transport's test tool (tests/tools/migtransporttest.c): the same
# transport sources as redis-server, with RDMA when redis-server has it
# (build/migtest-rdma records that choice, so a change rebuilds the tool).
MIGTEST_SRC := tests/tools/migtransporttest.c src/xfer.c src/xfertcp.c src/xferrdma.c
# Made by hand (make bin/migtransport-test), the tool follows that record too.
MIGTEST_RDMA ?= $(shell cat build/migtest-rdma 2>/dev/null)
bin/migtransport-test: $(MIGTEST_SRC) src/xfer.h src/xferimpl.h build/migtest-rdma
	$(CC) -std=gnu11 -O2 -g -Wall -Wextra -Wstrict-prototypes -Werror -Isrc \
		$(if $(filter yes,$(MIGTEST_RDMA)),-DUSE_RDMA) -o $@ $(MIGTEST_SRC) \
		$(if $(filter yes,$(MIGTEST_RDMA)),-libverbs -lrdmacm)

install: build
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 755 $(addprefix bin/,$(BINARIES)) $(DESTDIR)$(PREFIX)/bin/

test:
	@utils/install-deps.sh test
	@$(MAKE) --no-print-directory build
	@utils/run-tests.sh

test-rdma:
	@utils/install-deps.sh rdma
	@$(MAKE) --no-print-directory build
	@test -x bin/rdma-smoke || { echo "test-rdma: bin/rdma-smoke was not built (RDMA support missing: install libibverbs-dev librdmacm-dev)"; exit 1; }
	@utils/rxe-vm/rxe-vm --ips 4 --timeout 1200 -- sh tests/rdma/run.sh

# Shows that each test in tests/upstream-skip.txt fails the same way
# without our patches (builds build/vanilla: upstream + Debian only).
check-skips: build
	@utils/check-skips.sh

# make fuzz, fuzz-build, fuzz-seeds: see tests/fuzz/README.md.
include tests/fuzz/fuzz.mk

demo:
	@utils/install-deps.sh test
	@$(MAKE) --no-print-directory build
	@utils/demo/demo.sh

# A chaos run of our own (utils/chaos/README.md): 4 masters on 127.0.0.1,
# slots moved under kills, stops and cancels while clients write, then every
# key and acknowledged write checked. Not part of `make test` or CI.
CHAOS_SECONDS ?= 300
CHAOS_SEED ?=
CHAOS_AFFINITY ?= mixed
chaos:
	@utils/install-deps.sh build
	@$(MAKE) --no-print-directory build
	@CHAOS_SECONDS=$(CHAOS_SECONDS) CHAOS_SEED=$(CHAOS_SEED) CHAOS_AFFINITY=$(CHAOS_AFFINITY) \
		python3 utils/chaos/chaos.py

patch-tree: $(CACHE)/source.env
	@if [ -d $(PATCHTREE) ] && [ -n "$$(git -C $(PATCHTREE) status --porcelain --untracked-files=no 2>/dev/null)$$(git -C $(PATCHTREE) log --oneline ORIG_PATCHES..HEAD 2>/dev/null)" ]; then \
		echo "patch-tree: $(PATCHTREE) has work not exported; run 'make patch-export' or remove it"; exit 1; fi
	@deps/prepare-tree.sh $(CACHE) $(PATCHTREE) --git
	@git -C $(PATCHTREE) tag -f ORIG_PATCHES >/dev/null
	@deps/link-sources.sh $(PATCHTREE)
	@echo "patch-tree: $(PATCHTREE) is a git checkout: tag 'base' = upstream + Debian, one commit per patch."
	@echo "patch-tree: edit/commit/rebase there, then run 'make patch-export'."

patch-export:
	@utils/patch-export.sh $(PATCHTREE)
	@git -C $(PATCHTREE) tag -f ORIG_PATCHES >/dev/null

clean:
	@[ ! -d $(TREE) ] || $(MAKE) -C $(TREE) distclean
	rm -rf bin

distclean:
	rm -rf build bin
