#!/usr/bin/env bash
# Installs PostgreSQL's server (Debian's package), which the fenced-SQL
# tests and the demo start as a process of their own, when it is missing.
# As root, saying so; the package's own service is left stopped.
set -euo pipefail

if ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
	exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "The fenced-SQL tests need PostgreSQL's server: install it as root (apt-get install postgresql)." >&2
	exit 1
fi
echo "==> Installing PostgreSQL's server (Debian package postgresql, apt-get, as root) for the fenced-SQL tests." >&2
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -qq postgresql >/dev/null || {
	apt-get update -qq
	apt-get install -y -qq postgresql >/dev/null
}
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet postgresql 2>/dev/null; then
	systemctl disable --now postgresql >&2 || true
fi
