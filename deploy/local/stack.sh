#!/usr/bin/env bash
# The real stack on one machine: the official Firestore and Pub/Sub emulators, the topic
# and a pull subscription with a retry policy and a dead-letter topic, a sink that the
# jobs call, the ingress and two workers, all on free loopback ports.
#
#   deploy/local/stack.sh                 start, print the addresses, stay until Ctrl-C
#   deploy/local/stack.sh -d|--detach     start, write DIR/stack.env (shell variables to
#                                         source; none exported), return
#   deploy/local/stack.sh stop            stop what a detached stack started
#   deploy/local/stack.sh status          show whether it runs (exit 1 if not)
#
# Options: --dir DIR (default $RUNONCE_STACK_DIR or ${TMPDIR:-/tmp}/runonce-stack) holds
# the binaries, logs, the jobs file and stack.env; --jobs FILE replaces
# deploy/local/jobs.json (in either, http://sink.invalid becomes the sink's URL and
# http://loadtest-sink.invalid the address reserved for the load test's sink,
# $LOADTEST_SINK_ADDR). Extra environment for `go build` (e.g. GOFLAGS) is honoured.
#
# Every process runs under setsid and is stopped by process group (killing the gcloud
# wrapper alone leaves the emulator's Java child running). Needs: gcloud with the
# emulator components, Java, go, curl, python3.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

PROJECT=runonce-local
TOPIC=runonce-runs
DEAD_LETTER_TOPIC=runonce-dead-letter
SUBSCRIPTION=runonce-worker
DEAD_LETTER_SUBSCRIPTION=runonce-dead-letter
NAMESPACE=local/stack
WAIT_SECONDS=${RUNONCE_STACK_WAIT:-120}

log() { printf 'stack: %s\n' "$*" >&2; }
die() {
	log "$*"
	exit 1
}

usage() {
	sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

cmd=up
detach=false
dir=${RUNONCE_STACK_DIR:-${TMPDIR:-/tmp}/runonce-stack}
jobs_src=$here/jobs.json
while (($#)); do
	case $1 in
	up | stop | status) cmd=$1 ;;
	-d | --detach) detach=true ;;
	--dir)
		dir=${2:?--dir needs a directory}
		shift
		;;
	--dir=*) dir=${1#--dir=} ;;
	--jobs)
		jobs_src=${2:?--jobs needs a file}
		shift
		;;
	--jobs=*) jobs_src=${1#--jobs=} ;;
	-h | --help) usage ;;
	*)
		log "unknown argument $1"
		usage
		;;
	esac
	shift
done
env_file=$dir/stack.env

# The process groups this stack started, in stop order, as NAME=PGID lines.
pids_file=$dir/pids

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# spawn NAME COMMAND...: starts COMMAND in its own session and process group, logging to
# DIR/NAME.log, and records its process group.
spawn() {
	local name=$1
	shift
	setsid "$@" >"$dir/$name.log" 2>&1 </dev/null &
	echo "$name=$!" >>"$pids_file"
}

# wait_for NAME COMMAND...: polls COMMAND until it succeeds, at most WAIT_SECONDS.
wait_for() {
	local name=$1
	shift
	local deadline=$((SECONDS + WAIT_SECONDS))
	until "$@" >/dev/null 2>&1; do
		if ! alive "$name"; then
			log "$name exited; its log follows"
			tail -n 40 "$dir/$name.log" >&2 || true
			return 1
		fi
		if ((SECONDS >= deadline)); then
			log "$name did not become ready within ${WAIT_SECONDS}s; its log follows"
			tail -n 40 "$dir/$name.log" >&2 || true
			return 1
		fi
		sleep 0.5
	done
	log "$name ready"
}

pgid_of() { sed -n "s/^$1=//p" "$pids_file" 2>/dev/null | tail -n 1; }

alive() {
	local pgid
	pgid=$(pgid_of "$1")
	[ -n "$pgid" ] && kill -0 -- "-$pgid" 2>/dev/null
}

# stop_all: stops every recorded process group, newest first (the binaries before the
# emulators they use): SIGTERM, up to 10 s (the workers release their runs), SIGKILL.
stop_all() {
	[ -f "$pids_file" ] || return 0
	local line name pgid
	while IFS= read -r line; do
		name=${line%%=*}
		pgid=${line#*=}
		if kill -0 -- "-$pgid" 2>/dev/null; then
			kill -TERM -- "-$pgid" 2>/dev/null || true
			for _ in $(seq 40); do
				kill -0 -- "-$pgid" 2>/dev/null || break
				sleep 0.25
			done
			kill -KILL -- "-$pgid" 2>/dev/null || true
			log "stopped $name"
		fi
	done < <(tac "$pids_file")
	rm -f "$pids_file" "$env_file"
}

rest() { # METHOD PATH [JSON]: the Pub/Sub emulator's REST API
	local method=$1 path=$2 body=${3:-}
	curl -sS --fail-with-body -X "$method" -H 'Content-Type: application/json' \
		${body:+--data "$body"} "http://$PUBSUB_EMULATOR_HOST/v1/projects/$PROJECT/$path" >/dev/null
}

case $cmd in
stop)
	if [ ! -f "$pids_file" ]; then
		log "nothing to stop in $dir"
		exit 0
	fi
	stop_all
	exit 0
	;;
status)
	if [ -f "$env_file" ] && alive ingress; then
		cat "$env_file"
		exit 0
	fi
	log "not running (no live stack in $dir)"
	exit 1
	;;
esac

for tool in gcloud java go curl python3 setsid; do
	command -v "$tool" >/dev/null || die "$tool is missing: the stack needs gcloud (with the Firestore and Pub/Sub emulators), Java, go, curl and python3"
done
[ -f "$jobs_src" ] || die "jobs file $jobs_src does not exist"
if [ -f "$pids_file" ]; then
	if alive ingress || alive firestore; then
		die "a stack already runs in $dir: deploy/local/stack.sh stop --dir $dir"
	fi
	rm -f "$pids_file"
fi
mkdir -p "$dir/bin" "$dir/pubsub-data"
: >"$pids_file"

if $detach; then
	# A failed start cleans up; a started detached stack is left running.
	trap 'if [ "$?" != 0 ]; then stop_all; fi' EXIT
else
	trap 'stop_all' EXIT
fi
trap 'exit 130' INT TERM

export CLOUDSDK_CORE_DISABLE_PROMPTS=1

# --- emulators -------------------------------------------------------------------------
fs_port=$(free_port)
ps_port=$(free_port)
export FIRESTORE_EMULATOR_HOST=127.0.0.1:$fs_port PUBSUB_EMULATOR_HOST=127.0.0.1:$ps_port
log "starting the Firestore emulator on $FIRESTORE_EMULATOR_HOST and the Pub/Sub emulator on $PUBSUB_EMULATOR_HOST"
spawn firestore gcloud emulators firestore start --host-port="$FIRESTORE_EMULATOR_HOST"
spawn pubsub gcloud beta emulators pubsub start --host-port="$PUBSUB_EMULATOR_HOST" --data-dir="$dir/pubsub-data"

# Build while the emulators boot.
log "building cmd/ingress and cmd/worker"
(cd "$repo" && go build -o "$dir/bin/" ./cmd/ingress ./cmd/worker)

wait_for firestore curl -sf "http://$FIRESTORE_EMULATOR_HOST/"
wait_for pubsub curl -sf "http://$PUBSUB_EMULATOR_HOST/"

# --- topics and subscriptions (as deploy/terraform creates them) ------------------------
rest PUT "topics/$TOPIC"
rest PUT "topics/$DEAD_LETTER_TOPIC"
rest PUT "subscriptions/$SUBSCRIPTION" "{
  \"topic\": \"projects/$PROJECT/topics/$TOPIC\",
  \"ackDeadlineSeconds\": 60,
  \"messageRetentionDuration\": \"604800s\",
  \"retryPolicy\": {\"minimumBackoff\": \"1s\", \"maximumBackoff\": \"10s\"},
  \"deadLetterPolicy\": {\"deadLetterTopic\": \"projects/$PROJECT/topics/$DEAD_LETTER_TOPIC\", \"maxDeliveryAttempts\": 20}
}"
rest PUT "subscriptions/$DEAD_LETTER_SUBSCRIPTION" "{\"topic\": \"projects/$PROJECT/topics/$DEAD_LETTER_TOPIC\"}"
log "created topic $TOPIC, subscription $SUBSCRIPTION (retry 1s-10s, dead letter to $DEAD_LETTER_TOPIC after 20)"

# --- the sink and the jobs file --------------------------------------------------------
sink_port=$(free_port)
SINK_URL=http://127.0.0.1:$sink_port
LOADTEST_SINK_ADDR=127.0.0.1:$(free_port)
sed -e "s|http://sink.invalid|$SINK_URL|g" -e "s|http://loadtest-sink.invalid|http://$LOADTEST_SINK_ADDR|g" \
	"$jobs_src" >"$dir/jobs.json"
spawn sink python3 "$here/sink.py" "127.0.0.1:$sink_port"
wait_for sink curl -sf "$SINK_URL/healthz"

# --- the ingress and two workers -------------------------------------------------------
LEDGER=firestore://$PROJECT
TOPIC_URL=pubsub://$PROJECT/$TOPIC
SUBSCRIPTION_URL=pubsub://$PROJECT/$SUBSCRIPTION
ingress_port=$(free_port)
worker1_port=$(free_port)
worker2_port=$(free_port)
INGRESS_URL=http://127.0.0.1:$ingress_port
WORKER1_URL=http://127.0.0.1:$worker1_port
WORKER2_URL=http://127.0.0.1:$worker2_port

spawn ingress "$dir/bin/ingress" -addr "127.0.0.1:$ingress_port" -ledger "$LEDGER" -topic "$TOPIC_URL" \
	-auth none -namespace "$NAMESPACE" -jobs "$dir/jobs.json"
for i in 1 2; do
	port_var=worker${i}_port
	spawn "worker$i" "$dir/bin/worker" -addr "127.0.0.1:${!port_var}" -ledger "$LEDGER" \
		-subscription "$SUBSCRIPTION_URL" -topic "$TOPIC_URL" -auth none -jobs "$dir/jobs.json" \
		-lease 10s -rescue-interval 5s
done
wait_for ingress curl -sf "$INGRESS_URL/readyz"
wait_for worker1 curl -sf "$WORKER1_URL/readyz"
wait_for worker2 curl -sf "$WORKER2_URL/readyz"

{
	echo "# written by deploy/local/stack.sh; stop with: deploy/local/stack.sh stop --dir $dir"
	echo "# Shell variables, not exported: sourcing this changes no other command (no RUNONCE_*,"
	echo "# no *_EMULATOR_HOST). Pass them on: PUBSUB_EMULATOR_HOST=\$STACK_PUBSUB_EMULATOR_HOST cmd ..."
	for var in STACK_DIR=$dir STACK_FIRESTORE_EMULATOR_HOST=$FIRESTORE_EMULATOR_HOST \
		STACK_PUBSUB_EMULATOR_HOST=$PUBSUB_EMULATOR_HOST STACK_LEDGER=$LEDGER STACK_TOPIC=$TOPIC_URL \
		STACK_SUBSCRIPTION=$SUBSCRIPTION_URL STACK_NAMESPACE=$NAMESPACE INGRESS_URL=$INGRESS_URL \
		WORKER1_URL=$WORKER1_URL WORKER2_URL=$WORKER2_URL SINK_URL=$SINK_URL \
		LOADTEST_SINK_ADDR=$LOADTEST_SINK_ADDR JOBS_FILE=$dir/jobs.json; do
		printf '%s=%q\n' "${var%%=*}" "${var#*=}"
	done
	while IFS= read -r line; do
		printf 'STACK_%s_PGID=%s\n' "$(printf '%s' "${line%%=*}" | tr '[:lower:]' '[:upper:]')" "${line#*=}"
	done <"$pids_file"
} >"$env_file"

cat >&2 <<EOF

runonce local stack (logs in $dir):
  ingress   $INGRESS_URL        (-auth none, namespace $NAMESPACE)
  workers   $WORKER1_URL  $WORKER2_URL   (/healthz /readyz /metrics)
  sink      $SINK_URL           (the "hello" job's target; calls logged in $dir/sink.log)
  Firestore $FIRESTORE_EMULATOR_HOST   Pub/Sub $PUBSUB_EMULATOR_HOST   (project $PROJECT)

Try it:
  curl -si -X POST $INGRESS_URL/v1/jobs/hello \\
    -H 'X-CloudScheduler-JobName: hello-every-minute' \\
    -H "X-CloudScheduler-ScheduleTime: \$(date -u +%Y-%m-%dT%H:%M:00Z)" -d '{"greeting":"hi"}'
  curl -s $INGRESS_URL/v1/runs/RUN_ID     # the run_id from the answer; status becomes completed

Environment: $env_file
EOF

if $detach; then
	log "detached; stop with: $0 stop --dir $dir"
	exit 0
fi

log "running; Ctrl-C stops everything"
while true; do
	for name in firestore pubsub sink ingress worker1 worker2; do
		if ! alive "$name"; then
			log "$name exited; its log follows"
			tail -n 40 "$dir/$name.log" >&2 || true
			exit 1
		fi
	done
	sleep 1
done
