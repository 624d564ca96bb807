# fencedlease: singleton workloads with fencing tokens on Kubernetes.
#
# Every tool builds from the Go module proxy into bin/ (see hack/tools.sh);
# the first build of the control plane takes several minutes.

K8S_VERSION ?= 1.37.2
CONTROLLER_GEN_VERSION ?= v0.23.0
GOLANGCI_LINT_VERSION ?= v2.15.0
HELM_VERSION ?= v3.22.0
KWOK_VERSION ?= v0.8.0
IMG ?= ghcr.io/fencedlease/fencedlease:dev

K8S_BIN := $(CURDIR)/bin/k8s/$(K8S_VERSION)
CONTROLLER_GEN := $(CURDIR)/bin/tools/controller-gen-$(CONTROLLER_GEN_VERSION)
GOLANGCI_LINT := $(CURDIR)/bin/tools/golangci-lint-$(GOLANGCI_LINT_VERSION)
HELM := $(CURDIR)/bin/tools/helm-$(HELM_VERSION)
KWOK := $(CURDIR)/bin/tools/kwok-$(KWOK_VERSION)
export KUBEBUILDER_ASSETS := $(K8S_BIN)
# test/install runs this helm.
export FENCEDLEASE_HELM := $(HELM)
# The cluster's kubectl for install and deploy: the one on PATH, else the one
# hack/tools.sh builds.
KUBECTL ?= $(shell command -v kubectl 2>/dev/null || echo $(K8S_BIN)/kubectl)
CHART := charts/fencedlease

GO_TEST_FLAGS ?= -count=1

.DEFAULT_GOAL := help

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate deepcopy code.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./api/..."

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate the CRD and RBAC manifests under config/ (the webhook configurations are written by hand: markers cannot express their selectors), and copy them into the Helm chart.
	$(CONTROLLER_GEN) crd rbac:roleName=manager-role paths="./api/..." paths="./controllers/..." paths="./internal/..." \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	hack/sync-chart.sh

.PHONY: fmt
fmt: ## Run gofmt.
	gofmt -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## Run go vet.
	go vet ./...

.PHONY: lint
lint: $(GOLANGCI_LINT) ## Run golangci-lint (.golangci.yml).
	$(GOLANGCI_LINT) run --allow-parallel-runners ./...

.PHONY: verify
verify: control-plane generate manifests helm-lint ## Fail when generated code, manifests or the chart's copies of them are out of date, code is not gofmt'ed, config/default does not render, or the chart does not lint.
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	@git diff --exit-code -- api config $(CHART) || { echo "generated files are out of date: run 'make generate manifests' and commit"; exit 1; }
	@test -z "$$(git status --porcelain -- api config $(CHART))" || { echo "untracked generated files:"; git status --porcelain -- api config $(CHART); exit 1; }
	@$(K8S_BIN)/kubectl kustomize config/default >/dev/null || { echo "config/default does not render with kustomize"; exit 1; }

.PHONY: helm-lint
helm-lint: $(HELM) ## Lint the Helm chart, with its default values and with every option turned on.
	$(HELM) lint --strict $(CHART)
	$(HELM) lint --strict $(CHART) --set certManager.enabled=true --set metrics.serviceMonitor.enabled=true --set replicaCount=3 --set policies.podBoundTokens.enabled=true --set metrics.prometheusRule.enabled=true --set metrics.dashboard.enabled=true

##@ Test

.PHONY: test
test: cluster-tools $(HELM) $(KWOK) verify vet lint ## Run every test: unit, and integration against a real kube-apiserver, etcd, kube-controller-manager and PostgreSQL, both install paths (Helm, kustomize) included, then the short chaos run and the end-to-end tests on a local cluster.
	go test $(GO_TEST_FLAGS) ./...
	cd hack/rulecheck && FENCEDLEASE_HELM=$(HELM) go test $(GO_TEST_FLAGS) ./...
	$(MAKE) --no-print-directory chaos
	$(MAKE) --no-print-directory test-e2e

SCALE_LEASES ?= 1000
SCALE_STEADY ?= 10m

.PHONY: scale
scale: control-plane ## Run the scale test: SCALE_LEASES FencedLeases (default 1000) x 2 ready pods on one operator process, cold start, then SCALE_STEADY (default 10m) of steady state with zero re-grants (about 12 minutes).
	SCALE_LEASES=$(SCALE_LEASES) SCALE_STEADY=$(SCALE_STEADY) go test -tags scale -count=1 -v -timeout 60m ./test/scale

.PHONY: test-e2e
test-e2e: cluster-tools $(KWOK) $(HELM) ## Run the end-to-end tests (test/e2e): a local cluster of its own with kwok's nodes, the operator installed from the chart as two local replicas, Deployments and StatefulSets, rolling updates, scale to zero, a lost node, an operator restart, a webhook replica down (about 3 minutes).
	FENCEDLEASE_KWOK=$(KWOK) go test -tags e2e $(GO_TEST_FLAGS) -v -timeout 20m ./test/e2e/

.PHONY: test-unit
test-unit: ## Run only the tests that need no control plane.
	go test $(GO_TEST_FLAGS) ./internal/... ./api/...

HOLDER_BENCH_PARALLEL ?= 6

.PHONY: holder-bench
holder-bench: control-plane ## Run the holder-renewal proofs and print their numbers (docs/benchmarks.md): 100 paused fence run holders, 30 paused Go holders, 20 partitioned, 20 on a lost node, 50 handoffs per renewal mode (about 5 minutes).
	go test -tags holderbench -count=1 -v -parallel $(HOLDER_BENCH_PARALLEL) -timeout 60m -run '^TestHolderBench' ./test/holder

# make bench: FULL=1 runs the recorded configuration; BENCH_OUT names the
# results directory (default bench-results/<UTC date and time>).
.PHONY: bench
bench: cluster-tools ## Run the benchmarks side by side with client-go's leader election: failover (3 causes, 2 clocks), admission latency, scale (100 and 1,000 leases; FULL=1: 100 handoffs per configuration, 100, 1,000 and 10,000 leases, about 45 minutes), into tables and plots under bench-results/.
	go run ./hack/bench $(if $(FULL),-full) $(if $(BENCH_OUT),-out $(BENCH_OUT))

# make chaos: CHAOS_DURATION of faults (the test's default, 75s, when unset);
# LONG=1 makes it CHAOS_LONG_DURATION. CHAOS_SEED, CHAOS_ARTIFACTS and
# CHAOS_REPORT pass through to the test (see test/chaos/doc.go).
CHAOS_LONG_DURATION ?= 20m
CHAOS_TIMEOUT ?= $(if $(LONG),60m,20m)

.PHONY: chaos
chaos: control-plane ## Run the chaos test: the operator and its webhooks on a real control plane under seeded faults, every protected write recorded and checked with porcupine (75s of faults; LONG=1 for 20 minutes; CHAOS_SEED=n replays a schedule).
	CHAOS_DURATION=$(if $(LONG),$(CHAOS_LONG_DURATION),$(CHAOS_DURATION)) go test -tags chaos $(GO_TEST_FLAGS) -v -timeout $(CHAOS_TIMEOUT) ./test/chaos/

##@ Run

CLUSTER_DIR ?= $(CURDIR)/bin/cluster
CLUSTER_FLAGS = --dir $(CLUSTER_DIR) --k8s-bin $(K8S_BIN) --kwok $(KWOK)

.PHONY: cluster
cluster: cluster-tools $(KWOK) ## Start the local cluster (docs/cluster.md): etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok with 4 simulated nodes; prints the KUBECONFIG. Harmless when it runs already.
	@go run ./hack/cluster $(CLUSTER_FLAGS) up

.PHONY: cluster-down
cluster-down: ## Stop the local cluster and the operator processes of make demo; no process of it is left.
	@go run ./hack/cluster $(CLUSTER_FLAGS) down

.PHONY: cluster-status
cluster-status: ## List the local cluster's processes and nodes.
	@go run ./hack/cluster $(CLUSTER_FLAGS) status

.PHONY: demo
demo: cluster-tools $(KWOK) $(HELM) build ## Show the operator at work on the local cluster (started if needed): installed from the chart, a 3-replica Deployment, a deleted holder, a failed node, a rolling update; the cluster stays up.
	@go run ./hack/demo --cluster-dir $(CLUSTER_DIR) --k8s-bin $(K8S_BIN) --kwok $(KWOK) --helm $(HELM) --manager $(CURDIR)/bin/manager

##@ Deploy

.PHONY: install
install: ## Install the CRDs into the cluster of the current kubeconfig.
	$(KUBECTL) apply --server-side -k config/crd

.PHONY: uninstall
uninstall: ## Remove the CRDs, and with them every FencedLease, from the cluster.
	$(KUBECTL) delete --ignore-not-found -k config/crd

.PHONY: deploy
deploy: ## Install the operator with kustomize (config/default, image IMG) into the cluster of the current kubeconfig.
	$(KUBECTL) kustomize config/default | sed 's|ghcr.io/fencedlease/fencedlease:dev|$(IMG)|' | $(KUBECTL) apply --server-side -f -

.PHONY: undeploy
undeploy: ## Remove what make deploy installed, CRDs included.
	$(KUBECTL) delete --ignore-not-found -k config/default

##@ Build

.PHONY: build
build: ## Build the operator binary and the kubectl fence plugin (bin/kubectl-fence; put it on PATH) into bin/.
	CGO_ENABLED=0 go build -o bin/manager ./cmd/manager
	CGO_ENABLED=0 go build -o bin/kubectl-fence ./cmd/kubectl-fence

.PHONY: docker-build
docker-build: ## Build the container image (needs a Docker engine).
	docker build -t $(IMG) .

##@ Tools

.PHONY: control-plane
control-plane: ## Build kube-apiserver, etcd and kubectl into bin/k8s/ (minutes the first time).
	@hack/tools.sh control-plane >/dev/null

.PHONY: cluster-tools
cluster-tools: ## Build the control plane plus kube-controller-manager and kube-scheduler into bin/k8s/.
	@hack/tools.sh cluster >/dev/null

$(KWOK):
	@hack/tools.sh kwok >/dev/null

$(CONTROLLER_GEN):
	@hack/tools.sh controller-gen >/dev/null

$(GOLANGCI_LINT):
	@hack/tools.sh golangci-lint >/dev/null

.PHONY: helm
helm: $(HELM) ## Build helm into bin/tools/.

$(HELM):
	@hack/tools.sh helm >/dev/null
