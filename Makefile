# Shoal. `make test` installs what the tests need (fuse3) and runs them all;
# `make local` builds and starts an all-in-one cluster mounted at ./mnt.
GO      ?= go
BIN     := bin/shoal
PKGS    := ./...
DATA    ?= ./data
MNT     ?= ./mnt

.PHONY: all build deps test test-short generate check-generate lint bench local clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/shoal

# deps installs the system packages Shoal needs (fuse3), when missing.
deps:
	@bash tools/deps.sh

test: deps
	$(GO) vet $(PKGS)
	$(GO) test -count=1 -timeout 20m $(PKGS)

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

# bench measures the 256 MiB copy in and out of a local cluster's mount next
# to dd on the bare disk, in the same run (see docs/performance.md).
bench: build deps
	@bash tools/bench-copy.sh

local: build deps
	$(BIN) local --dir $(DATA) --mount $(MNT)

clean:
	rm -rf bin
