# deepinfer-operator — the two commands a newcomer needs are `make run` and `make test`.
SHELL := /bin/bash
.DEFAULT_GOAL := help
ROOT := $(CURDIR)
BED := $(ROOT)/.testbed
KUBECTL := $(BED)/bin/kubectl --kubeconfig $(BED)/kubeconfig
CARGO ?= cargo

.PHONY: help
help: ## List targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

.PHONY: provision
provision: ## Install Debian packages, build/cache the control plane, kubectl and helm from Go modules
	@e2e/bed/provision.sh

.PHONY: build
build: ## Build the operator and the test bed's node agent
	$(CARGO) build --workspace --bins

.PHONY: cluster-up
cluster-up: provision build ## Start the local control plane and the simulated accelerator nodes
	@e2e/bed/cluster-up.sh

.PHONY: cluster-down
cluster-down: ## Stop the test bed and remove its state
	@e2e/bed/cluster-down.sh

.PHONY: run
run: cluster-up ## Bed + CRD + operator + a sample deployment, then show it
	@e2e/bed/run-sample.sh

.PHONY: bench
bench: cluster-up ## Drive 1000 deployments to Ready, roll and restart them with a release-built operator; print figures and the floor (BENCH_ARGS="--resources N")
	$(CARGO) build --release --bin deepinfer-operator --bin deepinfer-runner
	$(CARGO) build --release -p deepinfer-e2e --bin deepinfer-node-agent
	@e2e/bed/stop-sample.sh
	$(CARGO) run --release -q -p deepinfer-e2e --bin deepinfer-bench -- --operator target/release/deepinfer-operator --node-agent target/release/deepinfer-node-agent $(BENCH_ARGS)
	@$(MAKE) --no-print-directory bench-unit

.PHONY: bench-unit
bench-unit: ## Per-event and per-pass costs at 1,000 and 10,000 cached deployments and the caches' heap, without the bed (FLEET_SIZES=a,b)
	$(CARGO) bench -q --features bench --bench fleet

.PHONY: chaos
chaos: cluster-up ## Fault scenarios beside the invariant monitor; prints one row per scenario (CHAOS_ARGS="--scenarios a,b --seed N")
	@e2e/bed/stop-sample.sh
	$(CARGO) run -q -p deepinfer-e2e --bin deepinfer-chaos -- $(CHAOS_ARGS)

.PHONY: crds
crds: ## Regenerate the committed CRD YAML (crds/, the chart, kustomize) and the API reference
	$(CARGO) run -q --bin deepinfer-operator -- crd > crds/deepinfer.io_deepinferdeployments.yaml
	cp crds/deepinfer.io_deepinferdeployments.yaml charts/deepinfer-operator/crds/
	cp crds/deepinfer.io_deepinferdeployments.yaml config/crd/bases/
	$(CARGO) run -q --bin deepinfer-operator -- crd --kind role > crds/deepinfer.io_deepinferroles.yaml
	cp crds/deepinfer.io_deepinferroles.yaml charts/deepinfer-operator/crds/
	cp crds/deepinfer.io_deepinferroles.yaml config/crd/bases/
	$(MAKE) --no-print-directory docs

.PHONY: docs
docs: ## Regenerate docs/api-reference.md (CRD schema), docs/metrics.md and the chart's Prometheus rules (metric registry)
	$(CARGO) run -q --bin deepinfer-operator -- docs api-reference > docs/api-reference.md.tmp && mv docs/api-reference.md.tmp docs/api-reference.md
	$(CARGO) run -q --bin deepinfer-operator -- docs metrics > docs/metrics.md.tmp && mv docs/metrics.md.tmp docs/metrics.md
	$(CARGO) run -q --bin deepinfer-operator -- docs prometheus-rules > charts/deepinfer-operator/files/prometheus-rules.yaml.tmp && mv charts/deepinfer-operator/files/prometheus-rules.yaml.tmp charts/deepinfer-operator/files/prometheus-rules.yaml

.PHONY: lint
lint: ## rustfmt and clippy (warnings are errors); then lists the functions over 100 lines (informative)
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy -p deepinfer-operator --features bench --benches -- -D warnings
	@e2e/bed/long-functions.sh

.PHONY: test
test: provision ## The whole suite: lint, unit tests, integration and end-to-end on the test bed
	@e2e/bed/test.sh
