#!/usr/bin/env bash
# Starts the real services the tests use — PostgreSQL 15, Redis 7 (persistence on: an
# append-only file fsynced on every write), and the official Firestore, Pub/Sub and Cloud
# Spanner emulators — each on a free loopback port, waits for each with a bound, and prints
# the environment that points the tests at them.
#
#   eval "$(scripts/services.sh start DIR)"   # start; DIR holds data, logs and pids
#   scripts/services.sh stop DIR              # stop everything started in DIR
#
# Each emulator runs under setsid and is stopped by process group: killing the gcloud
# wrapper alone leaves its Java child running.
set -euo pipefail

cmd=${1:?usage: services.sh start|stop DIR}
dir=${2:?usage: services.sh start|stop DIR}

log() { printf 'services: %s\n' "$*" >&2; }

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# wait_for NAME SECONDS COMMAND...: polls COMMAND until it succeeds, at most SECONDS.
wait_for() {
	local name=$1 limit=$2
	shift 2
	local deadline=$((SECONDS + limit))
	until "$@" >/dev/null 2>&1; do
		if ((SECONDS >= deadline)); then
			log "$name did not become ready within ${limit}s; its log follows"
			tail -n 40 "$dir/$name.log" >&2 || true
			return 1
		fi
		sleep 0.5
	done
	log "$name ready"
}

# start_postgres runs PostgreSQL without durability (fsync off) for the tests' speed, or
# with its default durable settings when RUNONCE_PG_DURABLE=1 (the benchmarks' floors).
start_postgres() {
	local port pgbin pg_speed="-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
	if [ "${RUNONCE_PG_DURABLE:-}" = 1 ]; then pg_speed=""; fi
	port=$(free_port)
	pgbin=$(dirname "$(readlink -f "$(command -v pg_ctl)")")
	mkdir -p "$dir/pg"
	chown postgres: "$dir" "$dir/pg" 2>/dev/null || true
	as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
	as_pg "$pgbin/initdb" -D "$dir/pg/data" -A trust -U postgres >"$dir/postgres-initdb.log" 2>&1
	as_pg "$pgbin/pg_ctl" -D "$dir/pg/data" -l "$dir/postgres.log" -w -t 60 start \
		-o "-p $port -k $dir/pg -c listen_addresses=127.0.0.1 $pg_speed -c max_connections=300" >/dev/null
	echo "$pgbin/pg_ctl" >"$dir/pg_ctl"
	wait_for postgres 30 "$pgbin/pg_isready" -h 127.0.0.1 -p "$port"
	echo "export TEST_DATABASE_URL='postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable'"
}

# start_redis runs redis-server as the ledger's documented safe configuration: appendonly
# yes with appendfsync always, so that an acknowledged claim survives a restart, and
# maxmemory-policy noeviction (Redis's default, said explicitly: the ledger refuses a
# server that can evict its records, and a full server refuses writes instead). It
# installs Debian's redis-server first when the machine has none, so that every caller
# (the tests, make bench-floors) starts on a fresh machine.
start_redis() {
	local port
	if ! command -v redis-server >/dev/null; then
		log "installing redis-server (Debian's, for the Redis ledger)"
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
	fi
	port=$(free_port)
	mkdir -p "$dir/redis"
	setsid redis-server --bind 127.0.0.1 --port "$port" --dir "$dir/redis" \
		--appendonly yes --appendfsync always --maxmemory-policy noeviction --save '' --protected-mode yes \
		>"$dir/redis.log" 2>&1 </dev/null &
	echo $! >"$dir/redis.pid"
	wait_for redis 30 redis-cli -h 127.0.0.1 -p "$port" ping
	echo "export TEST_REDIS_URL='redis://127.0.0.1:$port/0'"
}

start_emulator() { # NAME PORTVAR ARGS...
	local name=$1 port
	shift
	port=$(free_port)
	CLOUDSDK_CORE_DISABLE_PROMPTS=1 setsid gcloud "$@" --host-port="127.0.0.1:$port" \
		>"$dir/$name.log" 2>&1 </dev/null &
	echo $! >"$dir/$name.pid"
	wait_for "$name" 120 curl -sf "http://127.0.0.1:$port/"
	echo "127.0.0.1:$port"
}

# start_spanner runs the Cloud Spanner emulator (the gcloud component cloud-spanner-emulator)
# and waits for its REST port; the tests create their instance and databases themselves.
start_spanner() {
	local port rest
	if [ ! -x "$(dirname "$(readlink -f "$(command -v gcloud)")")/cloud_spanner_emulator/emulator_main" ]; then
		log "the Cloud Spanner emulator is not installed: gcloud components install cloud-spanner-emulator"
		return 1
	fi
	port=$(free_port)
	rest=$(free_port)
	CLOUDSDK_CORE_DISABLE_PROMPTS=1 setsid gcloud emulators spanner start --host-port="127.0.0.1:$port" \
		--rest-port="$rest" >"$dir/spanner.log" 2>&1 </dev/null &
	echo $! >"$dir/spanner.pid"
	wait_for spanner 60 curl -s -o /dev/null "http://127.0.0.1:$rest/v1/projects/p/instances"
	echo "export SPANNER_EMULATOR_HOST=127.0.0.1:$port"
}

case "$cmd" in
start)
	mkdir -p "$dir"
	start_postgres
	start_redis
	fs=$(start_emulator firestore emulators firestore start)
	echo "export FIRESTORE_EMULATOR_HOST=$fs"
	mkdir -p "$dir/pubsub-data"
	ps=$(start_emulator pubsub beta emulators pubsub start --data-dir="$dir/pubsub-data")
	echo "export PUBSUB_EMULATOR_HOST=$ps"
	start_spanner
	;;
stop)
	for name in firestore pubsub redis spanner; do
		if [ -f "$dir/$name.pid" ]; then
			pgid=$(cat "$dir/$name.pid")
			kill -TERM -- "-$pgid" 2>/dev/null || true
			for _ in $(seq 20); do kill -0 -- "-$pgid" 2>/dev/null || break; sleep 0.25; done
			kill -KILL -- "-$pgid" 2>/dev/null || true
			rm -f "$dir/$name.pid"
		fi
	done
	if [ -f "$dir/pg_ctl" ]; then
		pg_ctl=$(cat "$dir/pg_ctl")
		if [ "$(id -u)" = 0 ]; then
			runuser -u postgres -- "$pg_ctl" -D "$dir/pg/data" -m fast -w stop >/dev/null 2>&1 || true
		else
			"$pg_ctl" -D "$dir/pg/data" -m fast -w stop >/dev/null 2>&1 || true
		fi
		rm -f "$dir/pg_ctl"
	fi
	;;
*)
	echo "usage: services.sh start|stop DIR" >&2
	exit 2
	;;
esac
