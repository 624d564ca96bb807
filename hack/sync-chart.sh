#!/usr/bin/env bash
# Copies into the Helm chart the manifests that config/ is the source of:
# the CRDs (charts/fencedlease/crds), the operator's RBAC rules and the webhook
# configurations (charts/fencedlease/files), and the admission policies when
# there are some, the opt-in ones too. The chart's templates read the copies;
# make verify fails when they differ from config/.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
chart="$root/charts/fencedlease"

sync_dir() { # sync_dir SRC DST FILE... : DST holds exactly these files of SRC (paths relative to SRC)
	local src=$1 dst=$2
	shift 2
	rm -rf "$dst"
	[ $# -eq 0 ] && return 0
	mkdir -p "$dst"
	for f in "$@"; do
		mkdir -p "$(dirname "$dst/$f")"
		cp "$src/$f" "$dst/$f"
	done
}

cd "$root/config/crd/bases"
sync_dir . "$chart/crds" *.yaml

sync_dir "$root/config/rbac" "$chart/files/rbac" role.yaml leader_election_role.yaml metrics_reader_role.yaml

# Every webhook configuration of config/webhook (not its Service).
cd "$root/config/webhook"
hooks=()
for f in *.yaml; do
	grep -qE '^kind: (Validating|Mutating)WebhookConfiguration$' "$f" && hooks+=("$f")
done
sync_dir . "$chart/files/webhook" "${hooks[@]}"

# Every file of config/policy but its kustomization, subdirectories included:
# the policies installed by default (files/policy/*.yaml) and the opt-in ones
# (files/policy/optional, installed by chart values).
if [ -d "$root/config/policy" ]; then
	cd "$root/config/policy"
	policies=()
	while IFS= read -r f; do
		policies+=("$f")
	done < <(find . -type f ! -name kustomization.yaml | sed 's|^\./||' | LC_ALL=C sort)
	sync_dir . "$chart/files/policy" ${policies[@]+"${policies[@]}"}
else
	rm -rf "$chart/files/policy"
fi
