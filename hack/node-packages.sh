#!/usr/bin/env bash
# Installs the Debian packages that the local cluster's real nodes run, when
# they are missing: containerd, runc, the CNI plugins (containerd wants a
# network configuration even for host-network pods; the bridge plugin joins
# the pods to the pod network), iproute2 (ip: the pod network's bridge) and a
# static busybox (the shell of the workload image). It installs nothing else and changes no
# setting of the machine: containerd's service is stopped and disabled again
# if the package started it, since the nodes run their own containerd with
# its state in the cluster's directory.
set -euo pipefail

want=(containerd runc containernetworking-plugins iproute2 busybox-static)
missing=()
for p in "${want[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
	echo "The real nodes need the Debian packages ${missing[*]}; install them as root (apt-get install ${missing[*]})." >&2
	exit 1
fi
echo "==> Installing the Debian packages the real nodes run: ${missing[*]} (apt-get, as root)." >&2
export DEBIAN_FRONTEND=noninteractive
apt-get install -y --no-install-recommends "${missing[@]}" >&2 || {
	apt-get update >&2
	apt-get install -y --no-install-recommends "${missing[@]}" >&2
}
# The package's own containerd service would run beside the nodes' and keep
# its state in /var/lib/containerd: the nodes do not use it.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet containerd 2>/dev/null; then
	echo "==> Stopping and disabling the containerd service the package started: the nodes run their own." >&2
	systemctl disable --now containerd >&2 || true
fi
