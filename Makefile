# Developer and CI entry points. CI runs `make test` (see .ci/run).

GO       ?= go
BENCH    ?= .
COUNT    ?= 1
FUZZTIME ?= 60s

# Server binaries the integration tests start (internal/testserver), as
# BINARY or BINARY:PACKAGE where the Debian package is named otherwise.
# prometheus brings promtool, which checks and tests docs/alerts.yml.
SERVERS := redis-server memcached nutcracker prometheus etcd:etcd-server

# go test's -timeout bounds each test binary (package). Its default, 10
# minutes, was the client package's whole run on a shared 2-core runner,
# which panicked there. The client package, the longest, took 491-518 s
# in three runs with two CPU-bound loops beside the suite (make test-busy,
# 2026-12-07), 765 s with more load beside it: 40 minutes keeps it under a
# third of its limit (the figures per package are in
# docs/performance.md). A binary that reaches it dies with its
# servers (testserver.LinkToParent).
TEST_TIMEOUT ?= 40m

# The repository's modules, found by their go.mod: the root module (the
# core: ring, migration, topology, client, compat) and those beside it
# (docs/layout.md lists them), each vetted and tested on its own, with its
# own go.mod and no go.work (GOWORK=off: one in a parent directory or in
# GOWORK would let a module build with another's requirements). bench/ is
# one too, run apart (its benchmarks once each). The root module first.
MODULES := . $(patsubst ./%/go.mod,%,$(shell find . -mindepth 2 -name go.mod -not -path './bench/*' -not -path '*/testdata/*' -not -path './.git/*' | LC_ALL=C sort))
export GOWORK := off

.PHONY: deps test test-busy bench fuzz simulate chaos

# deps installs the servers with apt-get, only when one is missing.
deps:
	@PATH="$$PATH:/usr/sbin:/usr/local/sbin"; missing=""; \
	for s in $(SERVERS); do \
		command -v $${s%%:*} >/dev/null 2>&1 || missing="$$missing $${s#*:}"; \
	done; \
	[ -n "$$missing" ] || exit 0; \
	if ! command -v apt-get >/dev/null 2>&1; then \
		echo "deps: missing$$missing and no apt-get: install them by hand; their tests skip meanwhile" >&2; \
		exit 0; \
	fi; \
	sudo=""; \
	if [ "$$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then sudo=sudo; fi; \
	echo "deps: installing$$missing"; \
	$$sudo apt-get update && \
	$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends$$missing

# Every module is run even when one fails, and the failed ones are named at
# the end: a failure in the root module hides none of another's.
test: deps
	@failed=""; for m in $(MODULES); do \
		echo "== module $$m"; \
		(set -x; cd $$m && $(GO) vet ./... && \
			$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...) || failed="$$failed $$m"; \
	done; \
	if [ -n "$$failed" ]; then echo "make test: failed in the modules:$$failed" >&2; exit 1; fi
	# ring's arithmetic, skipped under -race (skipUnderRace): -short runs
	# the fleets CI ran before under -race (fleetSizes), in a tenth of the time.
	$(GO) test -short -count=1 -timeout $(TEST_TIMEOUT) ./ring
	@if [ -f bench/go.mod ]; then \
		set -x; cd bench && $(GO) vet ./... && \
		$(GO) test -count=1 -run . -bench . -benchtime 1x ./...; \
	fi
	# The API against the latest release's (api/, docs/releasing.md); the
	# loop above tested tools/apicheck itself, as otelstats.
	cd tools/apicheck && $(GO) run . -root ../..

# make api VERSION=v0.3.0 records the API of the packages of
# api/packages.txt in api/v0.3.0/, from the commit whose CHANGELOG.md heads
# that version; make test checks the tree against the latest recorded
# (docs/releasing.md).
.PHONY: api
api:
	@test -n "$(VERSION)" || { echo "usage: make api VERSION=vX.Y.Z" >&2; exit 2; }
	cd tools/apicheck && $(GO) run . -root ../.. -write $(VERSION)

# test-busy runs make test with BUSY CPU-bound loops beside it (default 2,
# one per core of a CI runner), as a shared, busy runner sees the suite: a
# test that passes only on an idle machine fails here first.
BUSY ?= 2
test-busy:
	@pids=""; \
	for i in $$(seq $(BUSY)); do sh -c 'while :; do :; done' & pids="$$pids $$!"; done; \
	trap 'kill $$pids 2>/dev/null' EXIT INT TERM; \
	echo "test-busy: $(BUSY) CPU-bound loops beside the suite:$$pids"; \
	$(MAKE) test

# make bench BENCH=Locate COUNT=5
bench:
	cd bench && $(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -count $(COUNT) ./...

# Every fuzz target of every module, FUZZTIME each (go test -fuzz takes one
# target per run): the targets are found with go test -list, so a new one
# is run without being listed here. FUZZ=FuzzMget runs the matching ones.
FUZZ ?= ^Fuzz
fuzz:
	@set -e; for m in $(MODULES); do \
	  cd $(CURDIR)/$$m; \
	  for pkg in $$($(GO) list ./...); do \
	    for t in $$($(GO) test -list '$(FUZZ)' $$pkg | grep '^Fuzz'); do \
	      echo "== $$pkg $$t"; \
	      $(GO) test -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZTIME) $$pkg; \
	    done; \
	  done; \
	done

# cmd/shardcache is a module of its own: run from its directory.
simulate:
	cd cmd/shardcache && $(GO) run . simulate

# The long form of the consistency harness (internal/chaos, a module of its
# own, run from its directory): 20 runs of 60 s
# per backend, 3 client processes, at least 30 faults and 100,000 operations
# a run, a migration from 4 nodes to 5 in each, and no violation allowed
# (SHARDCACHE_CHAOS_STRICT=1). Reports go to CHAOS_OUT. CHAOS_FLAGS adds
# flags: -chaos.seed=N -chaos.runs=1 -chaos.backend=redis replays a run,
# -chaos.bug=NAME runs the client with a seeded bug (client/seeded.go),
# -chaos.seeds=N runs TestSeededBugs N times a bug, -chaos.async=1 puts
# one process on AsyncBackfill in every run, -chaos.replicas=2 keeps every
# key on two nodes in every run (default: every fourth run, 5 of the 20).
CHAOS_OUT   ?= chaos-reports
CHAOS_FLAGS ?=
chaos: deps
	cd internal/chaos && SHARDCACHE_CHAOS_STRICT=$${SHARDCACHE_CHAOS_STRICT:-1} $(GO) test -count=1 -timeout 0 -run 'TestChaos$$' -v . \
		-args -chaos.long -chaos.out=$(abspath $(CHAOS_OUT)) $(CHAOS_FLAGS)
