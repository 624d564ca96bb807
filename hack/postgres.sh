#!/usr/bin/env bash
# Start or stop a throwaway PostgreSQL server for tests.
#
#   hack/postgres.sh install     install Debian's server package when missing
#                                (as root, saying so; its own service left stopped)
#   hack/postgres.sh start DIR   initialise DIR, start a server, print its DSN
#   hack/postgres.sh stop DIR    stop the server started in DIR
#
# The server listens on 127.0.0.1 (a free port) and on a unix socket in
# DIR/socket, with trust authentication for the superuser "postgres". The DSN
# is also written to DIR/dsn. PostgreSQL refuses to run as root, so when run
# as root the server runs as the "postgres" user and DIR is given to it.
# Needs Debian's PostgreSQL server: apt-get install postgresql
set -euo pipefail

die() {
	echo "postgres.sh: $*" >&2
	exit 1
}

bindir() {
	local d
	if command -v pg_config >/dev/null 2>&1; then
		d=$(pg_config --bindir)
		if [[ -x "$d/initdb" ]]; then
			echo "$d"
			return
		fi
	fi
	d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
	if [[ -n "$d" && -x "$d/initdb" ]]; then
		echo "$d"
		return
	fi
	die "PostgreSQL server binaries not found (looked in pg_config --bindir and /usr/lib/postgresql/*/bin); install them with: apt-get install postgresql"
}

# as runs a command as the server's user.
as() {
	if [[ $(id -u) -eq 0 ]]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

# port_free succeeds when nothing accepts connections on 127.0.0.1:$1.
port_free() {
	! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

start() {
	local dir=$1 bin port attempt
	bin=$(bindir)
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	if [[ $(id -u) -eq 0 ]]; then
		id postgres >/dev/null 2>&1 || die "user postgres does not exist (apt-get install postgresql creates it)"
		chown postgres: "$dir"
	fi
	as test -w "$dir" || die "$dir is not writable by the server's user (a parent directory may be private)"
	as mkdir -p "$dir/socket"
	as "$bin/initdb" --pgdata="$dir/data" --username=postgres --auth=trust \
		--encoding=UTF8 --locale=C --no-sync >"$dir/initdb.log" 2>&1 ||
		die "initdb failed, see $dir/initdb.log: $(tail -n 5 "$dir/initdb.log")"
	for attempt in 1 2 3 4 5; do
		port=$((20000 + RANDOM % 30000))
		port_free "$port" || continue
		if as "$bin/pg_ctl" --pgdata="$dir/data" --log="$dir/postgres.log" --wait --timeout=60 \
			-o "-c listen_addresses=127.0.0.1 -p $port -k $dir/socket -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
			start >/dev/null; then
			echo "postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable" | as tee "$dir/dsn"
			return
		fi
	done
	die "server did not start, see $dir/postgres.log: $(tail -n 5 "$dir/postgres.log" 2>/dev/null)"
}

stop() {
	local dir=$1
	[[ -d "$dir/data" ]] || die "no server data in $dir"
	as "$(bindir)/pg_ctl" --pgdata="$dir/data" --mode=fast --wait stop >/dev/null
}

install() {
	if ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
		return
	fi
	[[ $(id -u) -eq 0 ]] || die "the fenced-SQL tests need PostgreSQL's server: install it as root (apt-get install postgresql)"
	echo "==> Installing PostgreSQL's server (Debian package postgresql, apt-get, as root) for the fenced-SQL tests." >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y -qq postgresql >/dev/null || {
		apt-get update -qq
		apt-get install -y -qq postgresql >/dev/null
	}
	if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet postgresql 2>/dev/null; then
		systemctl disable --now postgresql >&2 || true
	fi
}

case "${1:-}" in
install)
	[[ $# -eq 1 ]] || die "usage: $0 install | start DIR | stop DIR"
	install
	;;
start | stop)
	[[ $# -eq 2 ]] || die "usage: $0 install | start DIR | stop DIR"
	"$1" "$2"
	;;
*)
	die "usage: $0 install | start DIR | stop DIR"
	;;
esac
