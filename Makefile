# Developer and CI entry points. CI runs `make test` (see .ci/run).

GO       ?= go
BENCH    ?= .
COUNT    ?= 1
FUZZTIME ?= 30s

# Server binaries the integration tests start (internal/testserver); the
# Debian packages have the same names.
SERVERS := redis-server memcached nutcracker

.PHONY: deps test bench fuzz simulate

# deps installs the servers with apt-get, only when one is missing.
deps:
	@PATH="$$PATH:/usr/sbin:/usr/local/sbin"; missing=""; \
	for bin in $(SERVERS); do \
		command -v $$bin >/dev/null 2>&1 || missing="$$missing $$bin"; \
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

test: deps
	$(GO) vet ./...
	$(GO) test -race -count=1 ./...
	@if [ -f bench/go.mod ]; then \
		set -x; cd bench && $(GO) vet ./... && \
		$(GO) test -count=1 -run . -bench . -benchtime 1x ./...; \
	fi

# make bench BENCH=Locate COUNT=5
bench:
	cd bench && $(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -count $(COUNT) ./...

# go test -fuzz takes one target per run.
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzLocate$$' -fuzztime $(FUZZTIME) ./ring/
	$(GO) test -run '^$$' -fuzz '^FuzzNew$$' -fuzztime $(FUZZTIME) ./ring/
	$(GO) test -run '^$$' -fuzz '^FuzzCheckKey$$' -fuzztime $(FUZZTIME) ./client/
	$(GO) test -run '^$$' -fuzz '^FuzzMultiSplit$$' -fuzztime $(FUZZTIME) ./client/
	$(GO) test -run '^$$' -fuzz '^FuzzValueLine$$' -fuzztime $(FUZZTIME) ./internal/wire/memcache/
	$(GO) test -run '^$$' -fuzz '^FuzzGetsAnswer$$' -fuzztime $(FUZZTIME) ./internal/wire/memcache/
	$(GO) test -run '^$$' -fuzz '^FuzzMetaAnswer$$' -fuzztime $(FUZZTIME) ./internal/wire/memcache/
	$(GO) test -run '^$$' -fuzz '^FuzzMetadumpLine$$' -fuzztime $(FUZZTIME) ./internal/wire/memcache/
	$(GO) test -run '^$$' -fuzz '^FuzzStats$$' -fuzztime $(FUZZTIME) ./internal/wire/memcache/
	$(GO) test -run '^$$' -fuzz '^FuzzStorageReply$$' -fuzztime $(FUZZTIME) ./internal/wire/memcache/

simulate:
	$(GO) run ./cmd/shardcache simulate
