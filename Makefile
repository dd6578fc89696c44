.DEFAULT_GOAL := help
GO ?= go

.PHONY: help
help: ## show the targets
	@grep -hE '^[a-z/-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

.PHONY: test
test: ## start the services, lint, and run every test with -race (what CI runs)
	scripts/test.sh

# The workspace's modules (go.work): ./... does not reach into the nested ones.
MODULES := ./... ./deploy/... ./loadtest/... ./peerbench/... ./examples/userworker/... ./examples/receiver/...

.PHONY: lint
lint: ## gofmt, go vet, staticcheck
	@test -z "$$(gofmt -l .)" || { gofmt -l .; exit 1; }
	$(GO) vet $(MODULES)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 $(MODULES)
	for m in deploy loadtest peerbench examples/userworker examples/receiver; do (cd $$m && GOWORK=off $(GO) mod tidy -diff) || exit 1; done

.PHONY: bench-floors
bench-floors: ## runonce against its floors (bare handler, raw chains), paired in one run (BENCHMARKS.md)
	scripts/bench-floors.sh

SCHEDULES ?= 10000

.PHONY: simulate
simulate: ## run SCHEDULES random fault schedules per backend through the whole pipeline (internal/sim)
	$(GO) test ./internal/sim -run 'TestSimulation' -count=1 -timeout 0 -v -schedules $(SCHEDULES)

.PHONY: bench
bench: ## run the benchmarks of every package against the real services
	RACE= scripts/test.sh -run '^$$' -bench . -benchmem
