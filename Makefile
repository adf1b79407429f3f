# Sluice. `make help` lists the targets.

GO       ?= go
TOOL     := $(GO) tool -modfile=tools/go.mod
GOFILES   = $(shell git ls-files '*.go' | grep -v '^internal/gen/')
FUZZTIME ?= 30s

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: dev
dev: ## run Sluice on this machine, with embedded defaults where no service is configured
	$(GO) run ./cmd/sluice dev

.PHONY: test
test: ## run every test (race detector on) against local PostgreSQL, Redis and in-process Kafka
	$(GO) test -race -count=1 ./...

.PHONY: lint
lint: ## gofmt, go vet and staticcheck
	@out=$$(gofmt -l $(GOFILES)); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(TOOL) staticcheck ./...

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
	$(GO) test -run '^$$' -bench . -benchmem ./internal/limit/ ./internal/events/
	$(GO) test -run '^$$' -bench 'Ingest|Consume' -benchtime 300000x ./internal/analytics/
	$(GO) test -run '^$$' -bench Prune -benchtime 100x ./internal/analytics/
	$(GO) test -run '^$$' -bench . ./internal/pgstore/
	$(GO) test -run '^$$' -bench Reports -benchtime 10x ./internal/reports/
	$(GO) test -run '^$$' -bench ScriptCPU -benchtime 100000x ./internal/redisengine/
	$(GO) test -run '^$$' -bench LocalDecision ./internal/redisengine/
	$(GO) test -run '^$$' -bench 'Decisions|ProxyOverhead|ProxyWrk|EnvoyRLSH2load|EnvoyRLSLean' -benchtime 40000x ./internal/dataplane/
	$(GO) test -run '^$$' -bench 'InProcess' -benchmem ./internal/dataplane/

.PHONY: bench-check
bench-check: ## run every benchmark once, briefly: a benchmark that no longer runs fails (CI runs it)
	SLUICE_WRK_DURATION=1s $(GO) test -run '^$$' -bench . -benchtime 1x ./...

.PHONY: fuzz
fuzz: ## run each fuzz target for FUZZTIME (default 30s)
	$(GO) test -run '^$$' -fuzz '^FuzzAlgorithms$$' -fuzztime $(FUZZTIME) ./internal/limit/
	$(GO) test -run '^$$' -fuzz '^FuzzRuleValidate$$' -fuzztime $(FUZZTIME) ./internal/policy/
	$(GO) test -run '^$$' -fuzz '^FuzzSnapshot$$' -fuzztime $(FUZZTIME) ./internal/decide/
	$(GO) test -run '^$$' -fuzz '^FuzzConformance$$' -fuzztime $(FUZZTIME) ./internal/redisengine/
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./internal/envoyimport/
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./internal/tenantfile/
	$(GO) test -run '^$$' -fuzz '^FuzzBatchAdd$$' -fuzztime $(FUZZTIME) ./internal/analytics/
	$(GO) test -run '^$$' -fuzz '^FuzzCheckBody$$' -fuzztime $(FUZZTIME) ./internal/dataplane/
	$(GO) test -run '^$$' -fuzz '^FuzzShouldRateLimit$$' -fuzztime $(FUZZTIME) ./internal/dataplane/
	$(GO) test -run '^$$' -fuzz '^FuzzParseCheckBody$$' -fuzztime $(FUZZTIME) ./internal/dataplane/
	$(GO) test -run '^$$' -fuzz '^FuzzCheckJSON$$' -fuzztime $(FUZZTIME) ./internal/dataplane/
	$(GO) test -run '^$$' -fuzz '^FuzzSplit$$' -fuzztime $(FUZZTIME) ./internal/h2sniff/
	$(GO) test -run '^$$' -fuzz '^FuzzReadToken$$' -fuzztime $(FUZZTIME) ./internal/controlplane/
	$(GO) test -run '^$$' -fuzz '^FuzzError$$' -fuzztime $(FUZZTIME) ./internal/redact/
	$(GO) test -run '^$$' -fuzz '^FuzzChanges$$' -fuzztime $(FUZZTIME) ./internal/auditdiff/
	$(GO) test -run '^$$' -fuzz '^FuzzOf$$' -fuzztime $(FUZZTIME) ./internal/clientip/
	$(GO) test -run '^$$' -fuzz '^FuzzRecoverCheckpoint$$' -fuzztime $(FUZZTIME) ./internal/events/
	$(GO) test -run '^$$' -fuzz '^FuzzMessageFromSpool$$' -fuzztime $(FUZZTIME) ./internal/events/
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./internal/spool/
	$(GO) test -run '^$$' -fuzz '^FuzzParseDuration$$' -fuzztime $(FUZZTIME) ./internal/days/
	$(GO) test -run '^$$' -fuzz '^FuzzNormalize$$' -fuzztime $(FUZZTIME) ./internal/route/
