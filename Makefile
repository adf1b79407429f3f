# Sluice. `make help` lists the targets.

GO       ?= go
TOOL     := $(GO) tool -modfile=tools/go.mod
GOFILES   = $(shell git ls-files '*.go' | grep -v '^internal/gen/')
FUZZTIME ?= 30s

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## build the binaries into bin/: sluice (the CLI and sluice dev), controlplane, dataplane, analytics, sluice-bench
	@echo "building bin/ (the first build takes up to three minutes, later ones seconds):"
	@for b in sluice controlplane dataplane analytics sluice-bench; do \
	  echo "  bin/$$b"; $(GO) build -o bin/ ./cmd/$$b || exit 1; done

.PHONY: dev
dev: build ## build, then run Sluice on this machine, with embedded defaults where no service is configured
	@echo "starting sluice dev; in another terminal, the CLI: bin/sluice rules list (or add bin/ to your PATH)"
	@# Ctrl-C stops sluice dev, which exits 0; so does make. In a terminal
	@# sluice dev runs as the foreground job, so that Ctrl-C reaches it
	@# alone: make would otherwise die of the SIGINT too, with 130.
	@if [ -t 0 ]; then bash -c 'set -m; ./bin/sluice dev & fg >/dev/null'; else ./bin/sluice dev; fi

.PHONY: test
# ALONE are the packages of the tests that hold a decider to its latency
# budget or burn the CPU (cputest.Alone): they run after the others, one
# package at a time, so that no other test binary shares the CPU with
# them (internal/deploy's test checks that none is missing).
ALONE = cmd/analytics cmd/dataplane internal/decide internal/deploy internal/fleet internal/regions web

test: ## run every test (race detector on) against local PostgreSQL, Redis and in-process Kafka
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || [ -n "$$SLUICE_CHROMIUM" ] || \
	  echo "no Chromium: the console's browser tests skip (Debian, Ubuntu: sudo apt-get install -y chromium)"
	$(GO) test -race -count=1 $$($(GO) list ./... | grep -vxF $(foreach p,$(ALONE),-e github.com/sluicehq/sluice/$(p)))
	$(GO) test -race -count=1 -p 1 $(addprefix ./,$(ALONE))
	@# interop/ drives Sluice with other projects' clients. gubernator's
	@# registers the same proto file as ours: allow it, with a warning.
	cd interop && GOLANG_PROTOBUF_REGISTRATION_CONFLICT=warn $(GO) test -race -count=1 ./...

.PHONY: lint
lint: ## gofmt, go vet and staticcheck
	@out=$$(gofmt -l $(GOFILES)); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(TOOL) staticcheck ./...
	cd interop && $(GO) vet ./...

.PHONY: generate
generate: ## regenerate protobuf and Connect code into internal/gen
	$(TOOL) buf lint
	$(TOOL) buf generate

.PHONY: generate-check
generate-check: generate ## fail when the committed generated code is not what `make generate` produces
	@git diff --exit-code -- internal/gen || (echo "internal/gen is stale: run make generate and commit"; exit 1)
	@untracked=$$(git ls-files --others --exclude-standard internal/gen); \
	  if [ -n "$$untracked" ]; then echo "untracked generated files: $$untracked"; exit 1; fi

.PHONY: bench
bench: ## run the benchmarks (figures go to docs/benchmarks.md)
	$(GO) test -run '^$$' -bench . -benchmem ./internal/limit/ ./internal/policy/
	$(GO) test -run '^$$' -bench 'Rejected|Count' -benchmem ./internal/events/
	$(GO) test -run '^$$' -bench PublishPerPartition -benchtime 300000x ./internal/events/
	$(GO) test -run '^$$' -bench 'Among|Compile' -benchmem ./internal/decide/
	$(GO) test -run '^$$' -bench 'Ingest|Consume' -benchtime 300000x ./internal/analytics/
	$(GO) test -run '^$$' -bench Prune -benchtime 100x ./internal/analytics/
	$(GO) test -run '^$$' -bench . ./internal/pgstore/
	$(GO) test -run '^$$' -bench ConfigPropagation -benchtime 200x ./internal/follower/
	$(GO) test -run '^$$' -bench Reports -benchtime 10x ./internal/reports/
	$(GO) test -run '^$$' -bench ScriptCPU -benchtime 100000x ./internal/redisengine/
	$(GO) test -run '^$$' -bench LocalDecision ./internal/redisengine/
	$(GO) test -run '^$$' -bench Replication -benchtime 100000x ./internal/regions/
	$(GO) test -run '^$$' -bench 'Decisions|ProxyOverhead|ProxyWrk|EnvoyRLSH2load|EnvoyRLSLean' -benchtime 40000x ./internal/dataplane/
	$(GO) test -run '^$$' -bench 'InProcess' -benchmem ./internal/dataplane/
	$(GO) test -run '^$$' -bench 'ClusterScaling|DecisionCost' -benchtime 100000x ./internal/decide/
	$(GO) test -run '^$$' -bench AdaptiveDecision -benchtime 20000x ./internal/fleet/

.PHONY: bench-check
bench-check: ## run every benchmark once, briefly: a benchmark that no longer runs fails (CI runs it)
	SLUICE_WRK_DURATION=1s $(GO) test -run '^$$' -bench . -benchtime 1x ./...

# FUZZ_TARGETS are every fuzz target, as package:Target (internal/deploy's
# test checks that none is missing).
FUZZ_TARGETS = \
	internal/limit:FuzzAlgorithms \
	internal/policy:FuzzRuleValidate \
	internal/policy:FuzzGlob \
	internal/decide:FuzzSnapshot \
	internal/redisengine:FuzzConformance \
	internal/envoyimport:FuzzParse \
	internal/kongimport:FuzzParse \
	internal/tenantfile:FuzzParse \
	internal/analytics:FuzzBatchAdd \
	internal/dataplane:FuzzCheckBody \
	internal/envoyrls:FuzzShouldRateLimit \
	internal/envoyrls:FuzzDecodeProto \
	internal/checkapi:FuzzParseCheckBody \
	internal/checkapi:FuzzCheckJSON \
	internal/grpcserve:FuzzServerFrames \
	internal/grpcserve:FuzzStateless \
	internal/protoconv:FuzzFieldJSON \
	internal/h2sniff:FuzzSplit \
	internal/controlplane:FuzzReadToken \
	internal/controlplane:FuzzUnkeyOverrideBody \
	internal/redact:FuzzError \
	internal/auditdiff:FuzzChanges \
	internal/clientip:FuzzOf \
	internal/events:FuzzRecoverCheckpoint \
	internal/events:FuzzMessageFromSpool \
	internal/spool:FuzzDecode \
	internal/days:FuzzParseDuration \
	internal/route:FuzzNormalize

.PHONY: fuzz
fuzz: ## run each fuzz target for FUZZTIME (default 30s)
	@# Go 1.26's fuzzer may stop a target at its -fuzztime with "context deadline
	@# exceeded" and no failing input (golang/go#75804, fixed in Go 1.27): that is
	@# said and passed over; a failure that writes an input, or says anything
	@# else, fails.
	@log=$$(mktemp); trap 'rm -f $$log' EXIT; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t#*:}; corpus=$$pkg/testdata/fuzz/$$fn; \
		before=$$(ls $$corpus 2>/dev/null | wc -l); \
		echo "== $$fn ($$pkg)"; \
		if $(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) ./$$pkg/ >$$log 2>&1; then tail -n 1 $$log; continue; fi; \
		cat $$log; \
		if [ "$$(ls $$corpus 2>/dev/null | wc -l)" = "$$before" ] && grep -q '^    context deadline exceeded$$' $$log \
			&& [ "$$(grep -c -- '--- FAIL' $$log)" = 1 ]; then \
			echo "$$fn: stopped at -fuzztime with no failing input (golang/go#75804), not a finding"; continue; fi; \
		exit 1; \
	done
