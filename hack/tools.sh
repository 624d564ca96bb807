#!/usr/bin/env bash
# Builds the binaries the project needs from the Go module proxy and caches
# them, version-keyed, under bin/. Nothing is downloaded from anywhere else.
#
#   hack/tools.sh control-plane   kube-apiserver, etcd, kubectl   -> bin/k8s/<version>/
#   hack/tools.sh cluster         + kube-controller-manager, kube-scheduler
#   hack/tools.sh kwok            -> bin/tools/kwok-<version> (simulated nodes and pods)
#   hack/tools.sh controller-gen  -> bin/tools/controller-gen-<version>
#   hack/tools.sh golangci-lint   -> bin/tools/golangci-lint-<version>
#   hack/tools.sh helm            -> bin/tools/helm-<version>
#
# Idempotent: a binary that is already there is not rebuilt.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
K8S_VERSION=${K8S_VERSION:-1.37.2}
ETCD_VERSION=${ETCD_VERSION:-3.6.16}
CONTROLLER_GEN_VERSION=${CONTROLLER_GEN_VERSION:-v0.23.0}
GOLANGCI_LINT_VERSION=${GOLANGCI_LINT_VERSION:-v2.15.0}
HELM_VERSION=${HELM_VERSION:-v3.22.0}
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
k8s_dir="$root/bin/k8s/$K8S_VERSION"
tools_dir="$root/bin/tools"

say() { printf '==> %s\n' "$*" >&2; }

build_k8s() {
	local missing=()
	for cmd in "$@"; do
		[ -x "$k8s_dir/$cmd" ] || missing+=("k8s.io/kubernetes/cmd/$cmd")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	say "Building ${missing[*]##*/} v$K8S_VERSION from the Go module proxy."
	say "The first build takes several minutes (about 5 on 2 cores); later ones reuse bin/ and the Go build cache."
	mkdir -p "$k8s_dir"
	(cd "$root/hack/tools/k8s" && go build -o "$k8s_dir/" "${missing[@]}")
}

build_etcd() {
	[ -x "$k8s_dir/etcd" ] && return 0
	say "Building etcd v$ETCD_VERSION from the Go module proxy (about half a minute the first time)."
	mkdir -p "$k8s_dir"
	(cd "$root/hack/tools/etcd" && go build -o "$k8s_dir/etcd" go.etcd.io/etcd/server/v3)
}

# build_kwok builds kwok from its own tools module (hack/tools/kwok): the
# k8s tools module pins k8s.io/* to the control plane's versions, which are
# not kwok's.
build_kwok() {
	local out="$tools_dir/kwok-$KWOK_VERSION"
	[ -x "$out" ] && return 0
	say "Building kwok $KWOK_VERSION from the Go module proxy (about 2 minutes the first time)."
	mkdir -p "$tools_dir"
	(cd "$root/hack/tools/kwok" && go build -o "$out" sigs.k8s.io/kwok/cmd/kwok)
}

# go_install builds a Go command at a version into bin/tools/<name>-<version>.
go_install() {
	local name=$1 pkg=$2 version=$3
	local out="$tools_dir/$name-$version"
	[ -x "$out" ] && return 0
	say "Building $name $version from the Go module proxy."
	mkdir -p "$tools_dir"
	GOBIN="$tools_dir" go install "$pkg@$version"
	mv "$tools_dir/$name" "$out"
}

case "${1:-}" in
control-plane)
	build_etcd
	build_k8s kube-apiserver kubectl
	echo "$k8s_dir"
	;;
cluster)
	build_etcd
	build_k8s kube-apiserver kubectl kube-controller-manager kube-scheduler
	echo "$k8s_dir"
	;;
controller-gen)
	go_install controller-gen sigs.k8s.io/controller-tools/cmd/controller-gen "$CONTROLLER_GEN_VERSION"
	echo "$tools_dir/controller-gen-$CONTROLLER_GEN_VERSION"
	;;
golangci-lint)
	go_install golangci-lint github.com/golangci/golangci-lint/v2/cmd/golangci-lint "$GOLANGCI_LINT_VERSION"
	echo "$tools_dir/golangci-lint-$GOLANGCI_LINT_VERSION"
	;;
kwok)
	build_kwok
	echo "$tools_dir/kwok-$KWOK_VERSION"
	;;
helm)
	go_install helm helm.sh/helm/v3/cmd/helm "$HELM_VERSION"
	echo "$tools_dir/helm-$HELM_VERSION"
	;;
*)
	echo "usage: $0 control-plane|cluster|kwok|controller-gen|golangci-lint|helm" >&2
	exit 2
	;;
esac
