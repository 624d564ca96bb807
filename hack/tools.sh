#!/usr/bin/env bash
# Builds the binaries the project needs from the Go module proxy and caches
# them, version-keyed, under bin/. Nothing is downloaded from anywhere else.
#
#   hack/tools.sh kubectl         kubectl alone (make verify's kustomize) -> bin/k8s/<version>/
#   hack/tools.sh control-plane   kube-apiserver, etcd, etcdctl, etcdutl, kubectl   -> bin/k8s/<version>/
#   hack/tools.sh cluster         + kube-controller-manager, kube-scheduler
#   hack/tools.sh kubelet         the real nodes' kubelet -> bin/k8s/<version>/
#   hack/tools.sh kwok            -> bin/tools/kwok-<version> (simulated nodes and pods)
#   hack/tools.sh controller-gen  -> bin/tools/controller-gen-<version>
#   hack/tools.sh golangci-lint   -> bin/tools/golangci-lint-<version>
#   hack/tools.sh helm            -> bin/tools/helm-<version>
#   hack/tools.sh versitygw       -> bin/tools/versitygw-<version> (the S3 server of the storage tests)
#
# The versions come from hack/versions.env. Idempotent: a binary that is
# already there is not rebuilt.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
# The versions: hack/versions.env, the one place that names them.
# shellcheck source=hack/versions.env
. "$root/hack/versions.env"
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
	# Built aside and moved into place, so that a build cut short leaves
	# no binary that looks complete.
	local tmp
	tmp=$(mktemp -d "$k8s_dir/.build.XXXXXX")
	(cd "$root/hack/tools/k8s" && go build -o "$tmp/" "${missing[@]}")
	mv "$tmp"/* "$k8s_dir/"
	rmdir "$tmp"
}

# build_etcd builds etcd and its tools from one module (hack/tools/etcd), so
# that they are the same version: etcdctl (snapshots, members, leader moves)
# and etcdutl (offline snapshot restore) serve the HA control plane of
# test/cluster and its restore test.
build_etcd() {
	local name pkg
	for name in etcd etcdctl etcdutl; do
		[ -x "$k8s_dir/$name" ] && continue
		case $name in
		etcd) pkg=go.etcd.io/etcd/server/v3 ;;
		*) pkg=go.etcd.io/etcd/$name/v3 ;;
		esac
		say "Building $name v$ETCD_VERSION from the Go module proxy (about half a minute the first time)."
		mkdir -p "$k8s_dir"
		(cd "$root/hack/tools/etcd" && go build -o "$k8s_dir/$name" "$pkg")
	done
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

# build_versitygw builds the S3 server of the fenced-storage tests from its
# own tools module (hack/tools/versitygw), which pins its dependencies apart
# from the product's.
build_versitygw() {
	local out="$tools_dir/versitygw-$VERSITYGW_VERSION"
	[ -x "$out" ] && return 0
	say "Building versitygw $VERSITYGW_VERSION from the Go module proxy (about a minute and a half the first time)."
	mkdir -p "$tools_dir"
	(cd "$root/hack/tools/versitygw" && go build -o "$out" github.com/versity/versitygw/cmd/versitygw)
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
kubectl)
	build_k8s kubectl
	echo "$k8s_dir"
	;;
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
kubelet)
	build_k8s kubelet
	echo "$k8s_dir/kubelet"
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
versitygw)
	build_versitygw
	echo "$tools_dir/versitygw-$VERSITYGW_VERSION"
	;;
helm)
	go_install helm helm.sh/helm/v3/cmd/helm "$HELM_VERSION"
	echo "$tools_dir/helm-$HELM_VERSION"
	;;
*)
	echo "usage: $0 kubectl|control-plane|cluster|kubelet|kwok|controller-gen|golangci-lint|helm|versitygw" >&2
	exit 2
	;;
esac
