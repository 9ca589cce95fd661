# heterps — make run (train on this machine), make test (what CI runs).
SHELL := /bin/bash
GO ?= go
export CGO_ENABLED := 1
BIN := bin

.PHONY: all setup build build-cuda test cuda-check run bench chaos batching-bench multijob-bench fmt lint clean install install-files

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

# heterps and heterpsd built with -tags cuda into $(BIN): compiles the
# kernels with the toolkit cuda-check finds or installs (no GPU needed).
# The binaries open libcuda and cuBLAS at run time, so they run on
# CPU-only machines too. Not part of make test (cuda-check compiles there).
build-cuda: setup
	@./scripts/cuda-check.sh --build $(BIN)

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
# daemons at H-levels 1, 2, 4, 6 for ctrdnn, mlp-digits and linreg, BSP and
# ASP, under scripted interference, and in-place vs kill-restart resizing;
# the program records bench/results/batching.txt, the loss curves
# (batching-curves.csv) and the plot (batching.png) itself (about 12
# minutes on 2 cores). BATCHING_FLAGS selects parts or lengthens runs, e.g.
# BATCHING_FLAGS="--models ctrdnn --sync bsp --steps 300". Not part of make
# test or make bench.
BATCHING_FLAGS ?=
batching-bench: setup
	$(GO) run ./bench/batching --plot bench/results/batching.png $(BATCHING_FLAGS)

# Installs the binaries, the systemd units (with @BINDIR@ and @DOCDIR@ set),
# the sysusers.d file and the example configs; DESTDIR stages it for a
# package. Then, as root: systemd-sysusers; systemctl daemon-reload (see
# docs/deploy.md). install-files does the same without building $(BIN).
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
UNITDIR ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
DATADIR ?= $(PREFIX)/share/heterps
DOCDIR ?= $(PREFIX)/share/doc/heterps
UNITS := heterpsd-coordinator.service heterpsd-node@.service

install: build install-files

install-files:
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(UNITDIR)/heterpsd-node@.service.d $(DESTDIR)$(SYSUSERSDIR) \
		$(DESTDIR)$(DATADIR)/examples $(DESTDIR)$(DOCDIR)
	install -m 0755 $(BIN)/heterps $(BIN)/heterpsd $(DESTDIR)$(BINDIR)/
	for u in $(UNITS); do \
		sed -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@DOCDIR@|$(DOCDIR)|g' config/systemd/$$u > $(DESTDIR)$(UNITDIR)/$$u && \
		chmod 0644 $(DESTDIR)$(UNITDIR)/$$u || exit 1; \
	done
	install -m 0644 config/systemd/heterpsd-node@.service.d/gpu.conf $(DESTDIR)$(UNITDIR)/heterpsd-node@.service.d/
	install -m 0644 config/systemd/heterps.sysusers.conf $(DESTDIR)$(SYSUSERSDIR)/heterps.conf
	for d in catalogs devices jobs models problems; do cp -R config/examples/$$d $(DESTDIR)$(DATADIR)/examples/ || exit 1; done
	cp -R config/systemd/examples/. $(DESTDIR)$(DATADIR)/examples/systemd/
	install -d $(DESTDIR)$(DATADIR)/examples/grafana
	install -m 0644 config/grafana/heterps.json $(DESTDIR)$(DATADIR)/examples/grafana/
	install -m 0644 docs/deploy.md $(DESTDIR)$(DOCDIR)/

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
