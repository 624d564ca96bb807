# fencedlease: singleton workloads with fencing tokens on Kubernetes.
#
# Every tool builds from the Go module proxy into bin/ (see hack/tools.sh);
# the first build of the control plane takes several minutes.

# The versions of the control plane and of every tool: hack/versions.env,
# which hack/tools.sh and the Go test harness read too.
include hack/versions.env
IMG ?= ghcr.io/fencedlease/fencedlease:dev

K8S_BIN := $(CURDIR)/bin/k8s/$(K8S_VERSION)
CONTROLLER_GEN := $(CURDIR)/bin/tools/controller-gen-$(CONTROLLER_GEN_VERSION)
GOLANGCI_LINT := $(CURDIR)/bin/tools/golangci-lint-$(GOLANGCI_LINT_VERSION)
HELM := $(CURDIR)/bin/tools/helm-$(HELM_VERSION)
KWOK := $(CURDIR)/bin/tools/kwok-$(KWOK_VERSION)
VERSITYGW := $(CURDIR)/bin/tools/versitygw-$(VERSITYGW_VERSION)
# The S3 server of the fenced-storage tests (pkg/fence/fences3, test/storage).
export FENCEDLEASE_VERSITYGW := $(VERSITYGW)
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
# Each target's help is one short line (at most 100 characters as printed);
# the details are in the comments above the target.
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(firstword $(MAKEFILE_LIST))

##@ Development

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate deepcopy code (the API's and the example controller's).
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./api/..." paths="./examples/fenced-controller/api/..."

# make manifests: the CRDs and the operator's RBAC from the markers (the
# webhook configurations are written by hand: markers cannot express their
# selectors), the example controller's too, and their copies in the chart.
.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate the CRD and RBAC manifests into config/ and the chart.
	$(CONTROLLER_GEN) crd rbac:roleName=manager-role paths="./api/..." paths="./controllers/..." paths="./internal/..." \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	$(CONTROLLER_GEN) crd rbac:roleName=widget-controller paths="./examples/fenced-controller/..." \
		output:crd:artifacts:config=examples/fenced-controller/config/crd output:rbac:artifacts:config=examples/fenced-controller/config/rbac
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

# The kubectl plugin is a small client: it links none of the operator's
# packages, nor controller-runtime's manager (make verify checks).
PLUGIN_MUST_NOT_LINK := ^github.com/fencedlease/fencedlease/(controllers|internal/(setup|webhook|holder|pace|sim|gateway|coverage|certs))|^sigs.k8s.io/controller-runtime/pkg/(manager|builder|webhook)

# make verify fails when generated code, manifests or the chart's copies of
# them are out of date, code is not gofmt'ed, config/default does not render
# with kustomize (kubectl's, the one tool of the control plane it builds), the
# chart does not lint, merge conflict markers are left, the kubectl plugin
# links operator code, or shipped code links a test or hack package (hack/
# commands may use test/'s local cluster and control plane: they are the
# developers' tooling, test/ their library; nothing shipped links either).
.PHONY: verify
verify: $(K8S_BIN)/kubectl generate manifests helm-lint ## Check generated files, gofmt, config/default, the chart and the plugin.
	@! git grep -nE '^(<<<<<<<|>>>>>>>)( |$$)' -- . ':!*.go' || { echo "merge conflict markers left in the files above"; exit 1; }
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	@git diff --exit-code -- api config $(CHART) examples || { echo "generated files are out of date: run 'make generate manifests' and commit"; exit 1; }
	@test -z "$$(git status --porcelain -- api config $(CHART) examples)" || { echo "untracked generated files:"; git status --porcelain -- api config $(CHART) examples; exit 1; }
	@$(K8S_BIN)/kubectl kustomize config/default >/dev/null || { echo "config/default does not render with kustomize"; exit 1; }
	@! go list -deps ./cmd/kubectl-fence | grep -E '$(PLUGIN_MUST_NOT_LINK)' || { echo "cmd/kubectl-fence links the operator's code (above)"; exit 1; }
	@! go list -deps ./cmd/... ./pkg/... ./controllers/... ./internal/... ./api/... | grep -E '^github.com/fencedlease/fencedlease/(test|hack)/' || { echo "shipped code links test or hack packages (above)"; exit 1; }

.PHONY: helm-lint
helm-lint: $(HELM) ## Lint the Helm chart with its defaults and with every option on.
	$(HELM) lint --strict $(CHART)
	$(HELM) lint --strict $(CHART) --set certManager.enabled=true --set metrics.serviceMonitor.enabled=true --set replicaCount=3 --set policies.podBoundTokens.enabled=true --set metrics.prometheusRule.enabled=true --set metrics.dashboard.enabled=true \
		--set gateway.enabled=true --set gateway.upstream.endpoint=https://s3.example.com --set gateway.upstream.credentialsSecret=s3-credentials \
		--set 'gateway.routes[0].bucket=reports' --set 'gateway.routes[0].prefix=monthly/' --set 'gateway.routes[0].namespace=billing' --set 'gateway.routes[0].fencedLease=exporter' \
		--set gateway.tlsSecret=gateway-tls --set 'gateway.tokenAudiences[0]=fence-gateway'

##@ Test

# make test runs every test: verify, vet and lint; unit tests and integration
# against a real kube-apiserver, etcd, kube-controller-manager, PostgreSQL and
# an S3 server (versitygw), both install paths (Helm, kustomize) included;
# then the short chaos run, the etcd restore test and the end-to-end tests on
# a local cluster. make test-unit runs the unit tests alone.
.PHONY: test
test: cluster-tools $(HELM) $(KWOK) $(VERSITYGW) postgres kubelet images verify vet lint ## Run every test: unit, integration, chaos, restore, end-to-end.
	go test $(GO_TEST_FLAGS) ./...
	go test $(GO_TEST_FLAGS) -race $(RACE_PACKAGES)
	cd hack/rulecheck && FENCEDLEASE_HELM=$(HELM) go test $(GO_TEST_FLAGS) ./...
	cd hack/tools/images && go test $(GO_TEST_FLAGS) ./...
	$(MAKE) --no-print-directory chaos
	$(MAKE) --no-print-directory test-restore
	$(MAKE) --no-print-directory test-e2e

# The packages whose concurrency the race detector checks again inside make
# test: the shard controller writes many Leases at once.
RACE_PACKAGES = ./controllers/fencedshardset/ ./internal/shard/ ./pkg/fence/

SCALE_LEASES ?= 1000
SCALE_STEADY ?= 10m

# make scale: SCALE_LEASES FencedLeases (default 1000) x 2 ready pods on one
# operator process, cold start, then SCALE_STEADY (default 10m) of steady
# state with zero re-grants (about 12 minutes).
.PHONY: scale
scale: control-plane ## Run the scale test: SCALE_LEASES FencedLeases on one operator (~12 min).
	SCALE_LEASES=$(SCALE_LEASES) SCALE_STEADY=$(SCALE_STEADY) go test -tags scale -count=1 -v -timeout 60m ./test/scale

# make test-e2e (test/e2e): a local cluster of its own with kwok's nodes, the
# operator installed from the chart as two local replicas, Deployments and
# StatefulSets, rolling updates, scale to zero, a lost node, an operator
# restart, a webhook replica down (about 3 minutes).
.PHONY: test-e2e
test-e2e: cluster-tools $(KWOK) $(HELM) kubelet images ## Run the end-to-end tests on a local cluster of their own, with a real node (~4 min).
	FENCEDLEASE_KWOK=$(KWOK) go test -tags e2e $(GO_TEST_FLAGS) -v -timeout 20m ./test/e2e/

# make test-restore (test/restore): on three etcd members and two API
# servers, a snapshot, grants and protected writes after it, the snapshot
# restored plainly and with --bump-revision, the fences before and after
# printed (about 3 minutes).
.PHONY: test-restore
test-restore: control-plane ## Run the etcd restore test on the HA control plane (~3 min).
	go test -tags restore $(GO_TEST_FLAGS) -v -timeout 20m ./test/restore/

# make test-unit: go test -short ./... starts no server and no process (no
# kube-apiserver, etcd, PostgreSQL, S3 server or built command); every test
# that needs one skips and says what it needs (test/harness).
.PHONY: test-unit
test-unit: ## Run the unit tests: go test -short ./..., no server or process started.
	go test -short $(GO_TEST_FLAGS) ./...

# make test-controllers-clientgo: the example controller's split brain twice,
# side by side (docs/benchmarks.md): as FencedLease candidates, and on
# client-go's leader election (15 s / 10 s / 2 s), each replica paused past
# its lease and resumed; prints what its late writes became (about a minute).
.PHONY: test-controllers-clientgo
test-controllers-clientgo: control-plane ## Run the example controller's split brain, fenced and not.
	go test -tags clientgo -count=1 -v -run 'TestFencedControllerPausedPastItsDeadline|TestClientGoControllerPausedPastItsLease' ./test/controllers/

.PHONY: test-apf
test-apf: control-plane $(HELM) ## Run the API Priority and Fairness test (test/flowcontrol, about 2 minutes).
	go test -tags apf $(GO_TEST_FLAGS) -v -timeout 20m ./test/flowcontrol/

HOLDER_BENCH_PARALLEL ?= 6

# make holder-bench: the holder-renewal proofs and their numbers
# (docs/benchmarks.md): 100 paused fence run holders, 30 paused Go holders,
# 20 partitioned, 20 on a lost node, 50 handoffs per renewal mode (about 5
# minutes).
.PHONY: holder-bench
holder-bench: control-plane ## Run the holder-renewal proofs and print their numbers (~5 min).
	go test -tags holderbench -count=1 -v -parallel $(HOLDER_BENCH_PARALLEL) -timeout 60m -run '^TestHolderBench' ./test/holder

# make bench-storage: what the fence gateway adds to a PUT and a GET (p50,
# p99) against going to the S3 server directly (docs/storage.md; under a
# minute).
# make chaos-storage: the storage chaos run (TestConcurrentWriters) for
# STORAGE_CHAOS_DURATION (20m): 8 writer processes, two gateway replicas,
# pauses, handovers, deletions, aliases, paused bodies and replays.
STORAGE_CHAOS_DURATION ?= 20m
.PHONY: chaos-storage
chaos-storage: control-plane $(VERSITYGW) ## Run the storage chaos for STORAGE_CHAOS_DURATION (20m), every write checked.
	STORAGE_CHAOS_DURATION=$(STORAGE_CHAOS_DURATION) go test -count=1 -v -timeout 2h -run '^TestConcurrentWriters$$' ./test/storage/

.PHONY: bench-storage
bench-storage: control-plane $(VERSITYGW) ## Measure what the fence gateway adds to S3 PUTs and GETs.
	go test -tags bench -count=1 -v -run '^TestGatewayLatency$$' ./test/storage/

# make bench: side by side with client-go's leader election, failover (3
# causes, 2 clocks), admission latency, scale (100 and 1,000 leases), into
# tables and plots under bench-results/. FULL=1 runs the recorded
# configuration (100 handoffs per configuration; 100, 1,000 and 10,000
# leases; about 45 minutes); BENCH_OUT names the results directory (default
# bench-results/<UTC date and time>).
.PHONY: bench
bench: cluster-tools bench-knows ## Run the benchmarks against client-go's leader election.
	go run ./hack/bench $(if $(FULL),-full) $(if $(BENCH_OUT),-out $(BENCH_OUT))

# make bench-knows (test/e2e TestProcessKnows): on the real node, KNOWS_ROUNDS
# handoffs each of fencedlease and of client-go's leader election (with and
# without ReleaseOnCancel), the holder pod deleted: when the new holder is
# published, when its process knows, when the old one is told (about 25
# minutes at 50; make test runs 2).
KNOWS_ROUNDS ?= 50
.PHONY: bench-knows
bench-knows: cluster-tools $(KWOK) $(HELM) kubelet images ## Measure when the processes know of a handoff, on the real node, beside client-go (KNOWS_ROUNDS=50).
	KNOWS_ROUNDS=$(KNOWS_ROUNDS) FENCEDLEASE_KWOK=$(KWOK) go test -tags e2e -count=1 -v -timeout 90m -run TestProcessKnows ./test/e2e/

# make chaos: CHAOS_DURATION of faults (the test's default, 75s, when unset);
# LONG=1 makes it CHAOS_LONG_DURATION. HA=1 (or CHAOS_CONTROL_PLANE=ha) runs
# it on the HA control plane, with its faults, and times failovers there
# (TestHAFailover). CHAOS_SEED, CHAOS_ARTIFACTS, CHAOS_REPORT and
# CHAOS_FENCING pass through to the test (see test/chaos/doc.go).
CHAOS_LONG_DURATION ?= 20m
CHAOS_TIMEOUT ?= $(if $(LONG),60m,20m)
CHAOS_CONTROL_PLANE ?= $(if $(HA),ha,envtest)

# The chaos test runs the operator and its webhooks on a real control plane
# under seeded faults, and records every protected write and checks the
# history with porcupine.
.PHONY: chaos
chaos: control-plane ## Run the chaos test: seeded faults, every write checked (LONG=1, HA=1).
	CHAOS_CONTROL_PLANE=$(CHAOS_CONTROL_PLANE) CHAOS_DURATION=$(if $(LONG),$(CHAOS_LONG_DURATION),$(CHAOS_DURATION)) \
		go test -tags chaos $(GO_TEST_FLAGS) -v -timeout $(CHAOS_TIMEOUT) $(if $(filter ha,$(CHAOS_CONTROL_PLANE)),,-skip TestHAFailover) ./test/chaos/

##@ Run

CLUSTER_DIR ?= $(CURDIR)/bin/cluster
CLUSTER_COMMAND ?= bin/cluster-command
CLUSTER_FLAGS = --dir $(CLUSTER_DIR) --k8s-bin $(K8S_BIN) --kwok $(KWOK) --kubelet $(KUBELET) --images $(IMAGES_DIR)
# The real nodes of make cluster (a containerd and a kubelet each, beside
# kwok's simulated nodes); REAL_NODES=0 for none.
REAL_NODES ?= 2
# The demos start the cluster as make cluster does, when it does not run.
DEMO_FLAGS = --cluster-dir $(CLUSTER_DIR) --k8s-bin $(K8S_BIN) --kwok $(KWOK) --helm $(HELM) --kubelet $(KUBELET) \
	--images $(IMAGES_DIR) --cluster-command $(CURDIR)/$(CLUSTER_COMMAND) --real-nodes $(REAL_NODES)
KUBELET := $(K8S_BIN)/kubelet
export FENCEDLEASE_KUBELET := $(KUBELET)
# The image tarballs of hack/tools/images (make images), which the real
# nodes' containerd imports.
IMAGES_DIR ?= $(CURDIR)/bin/images
export FENCEDLEASE_IMAGES := $(IMAGES_DIR)

# make postgres: PostgreSQL's server (Debian's package), which the fenced-SQL
# tests and the demo run, installed as root when missing.
.PHONY: postgres
postgres:
	@hack/postgres.sh install

# make node-packages: the Debian packages the real nodes run (containerd,
# runc, the CNI plugins, a static busybox), installed as root when missing.
.PHONY: node-packages
node-packages:
	@hack/node-packages.sh

# make kubelet: the real nodes' kubelet, built from the tools module like the
# control plane (minutes the first time) and cached in bin/k8s/<version>/.
.PHONY: kubelet
kubelet:
	@test -x $(KUBELET) || hack/tools.sh kubelet >/dev/null

# make images: the operator's image (the Dockerfile's contents, user and
# entrypoint), the example fenced controller's, the pause image and the
# workload image (fence and busybox), as
# image tarballs in IMAGES_DIR, built with go-containerregistry: no Docker
# engine, no registry.
.PHONY: images
images: node-packages ## Build the container images as tarballs (no Docker) into bin/images.
	@echo "==> Building the images (operator, fenced-controller, elector, pause, workload) into $(IMAGES_DIR)."
	@cd hack/tools/images && go run . -repo $(CURDIR) -out $(IMAGES_DIR) >/dev/null

# go-build builds the Go command $(1) into $(2). Its first build compiles
# client-go, controller-runtime and the rest: several minutes on 2 cores with
# nothing on the terminal, so it says so first.
define go-build
	@test -x $(2) || echo "==> Building $(2) from $(1): the first build compiles the Kubernetes libraries and takes several minutes."
	@CGO_ENABLED=0 go build -o $(2) $(1)
endef

# The cluster command runs the balancer of an HA cluster as a process of its
# own, so it is built rather than run with go run (whose binary goes away).
.PHONY: cluster-command
cluster-command:
	$(call go-build,./hack/cluster,$(CLUSTER_COMMAND))

# make cluster (docs/cluster.md): etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kwok with 4 simulated nodes, and
# REAL_NODES real nodes (containerd and a kubelet, as root); HA=1:
# three etcd members and two kube-apiservers behind a TCP balancer. Prints
# the KUBECONFIG. Harmless when it runs already.
.PHONY: cluster
cluster: cluster-tools $(KWOK) node-packages kubelet images cluster-command ## Start the local cluster and print its KUBECONFIG.
	@$(CLUSTER_COMMAND) $(CLUSTER_FLAGS) --real-nodes $(REAL_NODES) $(if $(HA),--ha) up

.PHONY: cluster-down
cluster-down: cluster-command ## Stop the local cluster and the demos' processes.
	@$(CLUSTER_COMMAND) $(CLUSTER_FLAGS) down

.PHONY: cluster-status
cluster-status: cluster-command ## List the local cluster's processes and nodes.
	@$(CLUSTER_COMMAND) $(CLUSTER_FLAGS) status

# make demo: on the local cluster (started if needed), the operator installed
# from the chart, a 3-replica Deployment, a deleted holder, a failed node, a
# rolling update; the cluster stays up.
.PHONY: demo
demo: cluster-tools $(KWOK) $(HELM) node-packages kubelet images cluster-command postgres build ## Show the operator at work on the local cluster.
	$(call go-build,./hack/demo,bin/demo-command)
	@bin/demo-command $(DEMO_FLAGS) --manager $(CURDIR)/bin/manager

# make demo-controller: CLIENTGO=0 leaves out client-go's leader election
# (about 35 of its 55 to 70 seconds).
.PHONY: demo-controller
demo-controller: cluster-tools $(KWOK) $(HELM) node-packages kubelet images cluster-command build build-example ## Show the example fenced controller: its holder paused, resumed, rejected.
	$(call go-build,./hack/demo,bin/demo-command)
	@bin/demo-command --scene controller $(if $(filter 0,$(CLIENTGO)),--clientgo=false) $(DEMO_FLAGS) \
		--manager $(CURDIR)/bin/manager --example $(CURDIR)/bin/fenced-controller

# make demo-shards: a FencedShardSet's 64 shards over a 3-replica
# Deployment; a pod deleted, a node paused past the shards' lease (its pod's
# late write rejected), a rolling update; every move printed with its fences.
.PHONY: demo-shards
demo-shards: cluster-tools $(KWOK) $(HELM) node-packages kubelet images cluster-command build ## Show fenced shards: 64 shards over three pods, moved and fenced.
	$(call go-build,./hack/demo,bin/demo-command)
	@bin/demo-command --scene shards $(DEMO_FLAGS) --manager $(CURDIR)/bin/manager

##@ Deploy

.PHONY: install
install: ## Install the CRDs into the cluster of the current kubeconfig.
	$(KUBECTL) apply --server-side -k config/crd

.PHONY: uninstall
uninstall: ## Remove the CRDs, and with them every FencedLease, from the cluster.
	$(KUBECTL) delete --ignore-not-found -k config/crd

.PHONY: deploy
deploy: ## Install the operator with kustomize (config/default, image IMG).
	$(KUBECTL) kustomize config/default | sed 's|ghcr.io/fencedlease/fencedlease:dev|$(IMG)|' | $(KUBECTL) apply --server-side -f -

.PHONY: undeploy
undeploy: ## Remove what make deploy installed, CRDs included.
	$(KUBECTL) delete --ignore-not-found -k config/default

##@ Build

.PHONY: build
build: ## Build bin/manager and bin/kubectl-fence (the kubectl plugin: put it on PATH).
	$(call go-build,./cmd/manager,bin/manager)
	$(call go-build,./cmd/kubectl-fence,bin/kubectl-fence)

.PHONY: build-example
build-example: ## Build the example fenced controller (examples/fenced-controller) into bin/.
	$(call go-build,./examples/fenced-controller,bin/fenced-controller)

.PHONY: docker-build
docker-build: ## Build the container image (needs a Docker engine).
	docker build -t $(IMG) .

##@ Tools

.PHONY: control-plane
control-plane: ## Build kube-apiserver, etcd and kubectl into bin/k8s/ (minutes at first).
	@hack/tools.sh control-plane >/dev/null

.PHONY: cluster-tools
cluster-tools: ## Build the control plane, kube-controller-manager and kube-scheduler.
	@hack/tools.sh cluster >/dev/null

$(K8S_BIN)/kubectl:
	@hack/tools.sh kubectl >/dev/null

$(KWOK):
	@hack/tools.sh kwok >/dev/null

$(CONTROLLER_GEN):
	@hack/tools.sh controller-gen >/dev/null

.PHONY: versitygw
versitygw: $(VERSITYGW) ## Build versitygw, the storage tests' S3 server, into bin/tools/.

$(VERSITYGW):
	@hack/tools.sh versitygw >/dev/null

$(GOLANGCI_LINT):
	@hack/tools.sh golangci-lint >/dev/null

.PHONY: helm
helm: $(HELM) ## Build helm into bin/tools/.

$(HELM):
	@hack/tools.sh helm >/dev/null
