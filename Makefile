# Shoal. `make test` installs what the tests need (fuse3) and runs them all;
# `make local` builds and starts an all-in-one cluster mounted at ./mnt.
GO      ?= go
BIN     := bin/shoal
PKGS    := ./...
DATA    ?= ./data
MNT     ?= ./mnt

PREFIX  ?= /usr/local

.PHONY: all build install deps test test-short generate check-generate lint bench local clean gpu-check

all: build

build:
	$(GO) build -o $(BIN) ./cmd/shoal

# install copies bin/shoal to $(PREFIX)/bin (default /usr/local/bin), so
# that `shoal` is on PATH: make install PREFIX=$$HOME/.local without root.
install: build
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/shoal

# deps installs the system packages Shoal needs (fuse3), when missing.
deps:
	@bash tools/deps.sh

# TESTFLAGS adds go test flags, e.g. TESTFLAGS='-run TestPosix'. CI
# (.ci/run) skips here the tests it runs at the spec's size right after
# (admin-spec, raft-spec).
TESTFLAGS ?=
test: deps
	$(GO) vet $(PKGS)
	$(GO) test -count=1 -timeout 40m $(TESTFLAGS) $(PKGS)

# test-short skips the end-to-end tests that start clusters and mounts.
test-short:
	$(GO) test -count=1 -short $(PKGS)

# generate rebuilds the gRPC code from the .proto files with buf and local
# plugins pinned in tools/pins/go.mod: no network once the module cache is warm.
generate:
	$(GO) tool -modfile=tools/pins/go.mod buf generate

check-generate: generate
	@git diff --exit-code -- '*.pb.go' || (echo "generated code is stale: run make generate and commit" >&2; exit 1)

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); if [ -n "$$out" ]; then echo "gofmt: $$out" >&2; exit 1; fi
	$(GO) vet $(PKGS)

# bench runs `shoal bench` with its defaults in a new directory under .bench/
# (ignored by git): a local cluster measured through its mount and the client
# API next to the bare disk and a loopback FUSE mount, in the same run (see
# docs/performance.md). Add flags with BENCHFLAGS, e.g.
# make bench BENCHFLAGS='--only big --json'. A failed run keeps its directory.
BENCHFLAGS ?=
bench: build deps
	@mkdir -p .bench && d=$$(mktemp -d -p .bench run.XXXX) && \
	{ $(BIN) bench --dir $$d $(BENCHFLAGS); rc=$$?; \
	  if [ $$rc -eq 0 ]; then rm -rf --one-file-system $$d; else echo "bench: kept $$d" >&2; fi; exit $$rc; }

local: build deps
	$(BIN) local --dir $(DATA) --mount $(MNT)

# gpu-check proves the GPU read path (gds/) on a machine with an NVIDIA GPU:
# a checkpoint restored into GPU memory by each path, every byte checked on
# the device, GB/s beside cuFileRead and pread+cudaMemcpy baselines, in under
# 5 minutes (docs/gpu.md). Without a GPU it stops at once saying so.
# GPU_CHECK_SIZE (default 2GiB) and GPU_CHECK_DIR (default a temp dir).
gpu-check:
	@bash tools/gpu-check.sh

# soak runs the long tests: the random-operation checker (test/fsx) with
# SHOAL_FSX_OPS operations per case (default 200,000, minutes per case)
# from seed SHOAL_FSX_SEED (default: the clock; printed), two of its cases
# with injected faults (OST and MDS restarts), and the 100,000-entry
# directory. SHOAL_FSX_CASE (a name prefix) or SHOAL_FSX_MODE (file, tree)
# picks cases. It also kills the leader of a replicated MDS under a storm
# of two clients' operations over SHOAL_RAFT_SEEDS seeds (default 20, from
# SHOAL_RAFT_SEED, default 1; about 7 s each), with the same seeds the
# linearizability check and the member crash test, and crashes a single MDS at
# SHOAL_CRASH_POINTS points (default 1000) (docs/mds-raft.md). It restarts
# an OST, and the MDS, under writers and a reader over SHOAL_RESTART_SEEDS
# seeds (default 10, from SHOAL_RESTART_SEED, default 1; about 15 s each)
# (docs/reliability.md, "Server restarts under load").
# It writes while one, two and three OSTs are down (killed or stopped) and
# checks that they are widened once back, over SHOAL_NARROW_SEEDS seeds
# (default 10, from SHOAL_NARROW_SEED, default 1; about 8 s each)
# (docs/reliability.md, "Writes while OSTs are down or full").
.PHONY: soak
soak: deps
	SHOAL_FSX_OPS=$${SHOAL_FSX_OPS:-200000} $(GO) test -count=1 -timeout 0 -v -run 'TestFsxSoak|TestPosixBigDirectory' ./test/
	SHOAL_RAFT_SEEDS=$${SHOAL_RAFT_SEEDS:-20} $(GO) test -count=1 -timeout 0 -v -run 'TestRaftStorm|TestRaftLinearizable|TestRaftCrashMembers' ./test/
	SHOAL_CRASH_POINTS=$${SHOAL_CRASH_POINTS:-1000} $(GO) test -count=1 -timeout 0 -v -run 'TestCrashStrictMem' ./mds/
	SHOAL_NARROW_SEEDS=$${SHOAL_NARROW_SEEDS:-10} $(GO) test -count=1 -timeout 0 -v -run 'TestWritesWhileOSTsDown' ./test/
	SHOAL_RESTART_SEEDS=$${SHOAL_RESTART_SEEDS:-10} $(GO) test -count=1 -timeout 0 -v -run 'TestOSTRestartUnderLoad|TestMDSRestartUnderLoad' ./test/

# admin-spec runs the administration tests at the size the spec asks for
# (docs/admin.md, "Tests"): the rebalance of 1 GiB in 128 files from 6 OSTs
# onto 3 added ones, under a reader and a writer, and the rebalance
# interrupted by MDS and OST kills over 20 seeds (at the CI size, 48 MiB
# each). SHOAL_ADMIN_MIB and SHOAL_ADMIN_SEEDS override. Not part of
# `make test`; CI (.ci/run) runs it after it. About 3.5 minutes on 2 quiet
# cores.
.PHONY: admin-spec
admin-spec: deps
	SHOAL_ADMIN_MIB=$${SHOAL_ADMIN_MIB:-1024} $(GO) test -count=1 -timeout 30m -v -run 'TestAdminRebalance$$' ./test/
	SHOAL_ADMIN_SEEDS=$${SHOAL_ADMIN_SEEDS:-20} $(GO) test -count=1 -timeout 30m -v -run 'TestAdminRebalanceInterrupted$$' ./test/

# raft-spec runs the replicated MDS's fault tests at the size the spec
# asks for (docs/reliability.md): the leader killed under a storm of two
# clients over 20 seeds, and a single MDS crashed at 1,000 seeded points
# on the strict in-memory file system. Not part of `make test`; CI
# (.ci/run) runs it after it.
.PHONY: raft-spec
raft-spec: deps
	SHOAL_RAFT_SEEDS=$${SHOAL_RAFT_SEEDS:-20} $(GO) test -count=1 -timeout 30m -v -run 'TestRaftStorm$$' ./test/
	SHOAL_CRASH_POINTS=$${SHOAL_CRASH_POINTS:-1000} $(GO) test -count=1 -timeout 30m -run 'TestCrashStrictMem' ./mds/

# fuzz runs each fuzz target (a decoder of bytes from the network or the
# disk) for FUZZTIME, starting from its committed corpus in testdata/fuzz/.
# Not part of `make test`, which runs the corpora only, as plain tests.
# A failure writes the input to the package's testdata/fuzz/: commit it
# with the fix.
#
# FUZZTIME is a count of executions, not a duration: with a duration, Go
# 1.26's fuzz coordinator can fail a run that found nothing with "context
# deadline exceeded" when the deadline races a busy worker
# (golang/go#75804, fixed in Go 1.27), and CI hit that on 2 cores.
# Minimizing a newly interesting input runs outside the exec count and,
# by default, for up to 60 s, so the workers sat at 0 execs/s
# (golang/go#48820); one second is enough for our inputs.
FUZZTIME ?= 100000x
FUZZMINIMIZETIME ?= 1s
FUZZ_TARGETS := \
	./internal/capability:FuzzDecode \
	./internal/wire:FuzzUserFrom \
	./internal/pki:FuzzRoleOf \
	./internal/datanet:FuzzDecodeHeader \
	./internal/checksum:FuzzDecode \
	./internal/compress:FuzzDecode \
	./client/ckpt/safetensors:FuzzDecode \
	./mds:FuzzDecodeKey \
	./mds:FuzzDecodeValue
.PHONY: fuzz
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz $$pkg $$name ($(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME) $$pkg; \
	done

# scale runs the simulated network of hosts (test/netsim, docs/scale.md):
# servers and clients as separate shoal processes in network namespaces,
# mutual TLS between them. Throughput with 3, 6 and 12 OST hosts, each
# behind a tbf link of SHOAL_SCALE_MBIT (default 40) Mbit/s, from one and
# from SHOAL_SCALE_CLIENTS (default 4) client hosts; metadata latency
# through a delaying relay; hosts cut off and killed. Needs root and
# iproute2 (make deps installs it). About 4 minutes on 2 quiet cores. Ends
# with one line of JSON: {"link_mbit":..., "points":[...]}.
.PHONY: scale
scale: build deps
	@out=$$(mktemp); \
	SHOAL_SCALE=1 SHOAL_SCALE_OUT=$$out $(GO) test -count=1 -timeout 30m -v -run 'TestScale$$|TestLatency$$|TestHostFailures$$' ./test/netsim/ || { rm -f $$out; exit 1; }; \
	cat $$out; rm -f $$out

clean:
	rm -rf bin
