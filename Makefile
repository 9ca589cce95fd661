# heterps — make run (train on this machine), make test (what CI runs).
SHELL := /bin/bash
GO ?= go
export CGO_ENABLED := 1
BIN := bin

.PHONY: all setup build test cuda-check run bench chaos batching-bench multijob-bench fmt lint clean

all: build

# Installs what is missing, quietly when everything is there: OpenBLAS and a C
# compiler from Debian, and the Go modules.
setup:
	@./scripts/setup.sh

build: setup
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ ./tools/heterps ./daemon/cmd/heterpsd

test: setup cuda-check
	$(GO) vet ./...
	GODEBUG=cgocheck=1 $(GO) test -race -count=1 ./...

# Compiles every CUDA kernel for sm_80/sm_90 and the cuda-tagged Go code
# without a GPU (installs the CUDA 13.0 toolkit wheels into ~/.cache once).
cuda-check:
	@./scripts/cuda-check.sh

# The main job on one machine: a coordinator and node daemons on loopback
# train CTR-DNN on synthetic data as the scheduler planned it (plan, per-stage
# throughput against the cost model, loss, cost); then single-process
# training of the same model with held-out AUC against the Bayes optimum.
run: build
	./$(BIN)/heterps run config/examples/jobs/ctrdnn-local.toml
	./$(BIN)/heterps train --model ctrdnn --data synthetic --steps 1000

bench: setup
	@./bench/run.sh

# Kills each role (coordinator, stage node, PS node) of a live loopback
# cluster and measures recovery; the program records its output in
# bench/results/chaos.txt itself. Not part of make test or make bench.
chaos: setup
	$(GO) run ./bench/chaos

# Uniform, variable and dynamic batching on two CPU-share-throttled node
# daemons at H-levels 1, 2, 4, and under scripted interference; the program
# records bench/results/batching.txt itself (about 8 minutes on 2 cores).
# Not part of make test or make bench.
batching-bench: setup
	$(GO) run ./bench/batching

# A seeded Poisson stream of small jobs on a live loopback cluster under the
# fair and quality allocation policies, compared with heterps sim on the
# recorded traces; records bench/results/multijob.txt itself (under 10
# minutes on 2 cores). Not part of make test or make bench.
multijob-bench: setup
	$(GO) run ./bench/multijob

fmt:
	gofmt -w $$(git ls-files '*.go')

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change: $$out"; exit 1; fi
	$(GO) vet ./...

clean:
	rm -rf $(BIN)
