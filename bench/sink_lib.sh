# shellcheck shell=bash
# bench/sink_lib.sh -- the servers and relays of bench/sink_drain and
# bench/sink_latency, one kind at a time: RabbitMQ (amqp), nats-server with
# JetStream (nats), mosquitto (mqtt) and a webhook receiver (http), each
# started on loopback ports of its own (from SINK_PORT_BASE, default 27300)
# with a private directory under $WORK, as test/lib/OutboxRabbit.pm,
# OutboxNats.pm and OutboxMosquitto.pm start them for the TAP tests.
#
# After `sink_start KIND`:
#   SINK_SQL      creates outbox's sink `b` on that server
#   TARGET_OUTBOX the route target of outbox's events, TARGET_WARM that of the
#                 warm-up event (counted apart)
#   RELAY_CMD     the relay (an array), to run with PG* set to the cluster
#   SERVER_PIDS   what to watch (CPU) and stop
# `sink_count KIND outbox|relay` prints "HELD DISTINCT": what the server holds
# for that side (DISTINCT: different event ids among them, where the server
# keeps them apart; else HELD again); `sink_take KIND SIDE EXPECTED` the same
# for what came since its last call, emptying the queue or stream (below).
# `sink_stop` stops everything started.
# Needs WORK, REPO and pick_free_port (test/lib/cluster.sh).

SINK_PORT_BASE=${SINK_PORT_BASE:-27300}
SINK_USER=outbox
SINK_PASSWORD=bench-Secret-4711
OUTBOX_BENCH_NODE_TOOLS=${OUTBOX_BENCH_NODE_TOOLS:-$REPO/bench/node_tools}
export OUTBOX_BENCH_NODE_TOOLS
SERVER_PIDS=()
SUB_PID=""

sink_need_tools() {
  local pkg
  for pkg in python3-psycopg2 python3-pika python3-paho-mqtt python3-aiohttp rabbitmq-server \
    nats-server libnats-dev mosquitto mosquitto-clients nodejs wrk; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed"; then
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$pkg" >/dev/null
    fi
  done
  bash "$REPO/bench/install_node_tools.sh" "$OUTBOX_BENCH_NODE_TOOLS"
}

# wait_for SECONDS COMMAND...: until COMMAND succeeds, or fail.
wait_for() {
  local limit=$1 i
  shift
  for ((i = 0; i < limit * 10; i++)); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "gave up waiting for: $*" >&2
  return 1
}

amqp_tool() {
  OUTBOX_TEST_AMQP_PASSWORD=$SINK_PASSWORD /usr/bin/python3 "$REPO/test/amqp/amqp_tool.py" \
    --port "$AMQP_PORT" --user "$SINK_USER" "$@"
}
nats_tool() { "$WORK/nats_tool" "nats://127.0.0.1:$NATS_PORT" "$SINK_USER" "$SINK_PASSWORD" "$@"; }

start_amqp() {
  local d=$WORK/rabbit
  mkdir -p "$d/home" "$d/log" "$d/mnesia"
  AMQP_PORT=$(pick_free_port "$SINK_PORT_BASE")
  local epmd_port dist_port
  epmd_port=$(pick_free_port $((SINK_PORT_BASE + 10)))
  dist_port=$(pick_free_port $((SINK_PORT_BASE + 20)))
  echo "[]." >"$d/enabled_plugins"
  : >"$d/rabbitmq-env.conf"
  cat >"$d/rabbitmq.conf" <<EOF
listeners.tcp.default = 127.0.0.1:$AMQP_PORT
default_user = $SINK_USER
default_pass = $SINK_PASSWORD
disk_free_limit.absolute = 1MB
EOF
  /usr/bin/epmd -port "$epmd_port" >"$d/epmd.log" 2>&1 &
  SERVER_PIDS+=($!)
  # The package's real start script (/usr/sbin/rabbitmq-server would switch
  # to the rabbitmq user); RABBITMQ_ALLOW_INPUT makes it exec erl, so the
  # pid is the node's.
  (cd "$d" && exec env HOME="$d/home" ERL_EPMD_PORT="$epmd_port" ERL_CRASH_DUMP="$d/erl_crash.dump" \
    RABBITMQ_NODENAME="outbox-bench-$$@localhost" RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
    RABBITMQ_NODE_PORT="$AMQP_PORT" RABBITMQ_DIST_PORT="$dist_port" \
    RABBITMQ_CONF_ENV_FILE="$d/rabbitmq-env.conf" RABBITMQ_CONFIG_FILE="$d/rabbitmq" \
    RABBITMQ_ADVANCED_CONFIG_FILE="$d/advanced.config" RABBITMQ_ENABLED_PLUGINS_FILE="$d/enabled_plugins" \
    RABBITMQ_MNESIA_BASE="$d/mnesia" RABBITMQ_LOG_BASE="$d/log" RABBITMQ_LOGS="$d/log/node.log" \
    RABBITMQ_PID_FILE="$d/node.pid" RABBITMQ_ALLOW_INPUT=1 RABBITMQ_SERVER_START_ARGS=-noinput \
    LANG=C.UTF-8 LC_ALL=C.UTF-8 /usr/lib/rabbitmq/bin/rabbitmq-server) >"$d/stdout" 2>&1 </dev/null &
  SERVER_PIDS+=($!)
  wait_for 180 amqp_tool ping || { tail -n 30 "$d/stdout" >&2; return 1; }
  local q
  for q in bench_outbox bench_relay warm; do amqp_tool declare-queue "$q" >/dev/null; done
  SINK_SQL="SELECT outbox.create_sink('b', 'amqp', '{\"port\": $AMQP_PORT, \"user\": \"$SINK_USER\", \"password\": \"$SINK_PASSWORD\"}')"
  TARGET_OUTBOX=bench_outbox TARGET_WARM=warm
  RELAY_CMD=(env OUTBOX_BENCH_AMQP_USER="$SINK_USER" OUTBOX_BENCH_AMQP_PASSWORD="$SINK_PASSWORD"
    /usr/bin/python3 "$REPO/bench/sink_relay.py" "" amqp "$AMQP_PORT" bench_relay)
}

start_nats() {
  local d=$WORK/nats flags
  mkdir -p "$d"
  flags=$(pkg-config --cflags --libs libnats 2>/dev/null || echo -lnats)
  # shellcheck disable=SC2086 # flags are words
  [[ -x $WORK/nats_tool ]] || cc -O1 -o "$WORK/nats_tool" "$REPO/test/nats/nats_tool.c" $flags
  NATS_PORT=$(pick_free_port $((SINK_PORT_BASE + 30)))
  cat >"$d/nats.conf" <<EOF
listen: 127.0.0.1:$NATS_PORT
authorization { user: "$SINK_USER", password: "$SINK_PASSWORD" }
jetstream { store_dir: "$d/store" }
EOF
  nats-server -c "$d/nats.conf" >"$d/nats.log" 2>&1 &
  SERVER_PIDS+=($!)
  wait_for 60 nats_tool ready || { tail -n 30 "$d/nats.log" >&2; return 1; }
  nats_tool add-stream OUTBOX bench.outbox >/dev/null
  nats_tool add-stream RELAY bench.relay >/dev/null
  nats_tool add-stream WARM warm.outbox >/dev/null
  SINK_SQL="SELECT outbox.create_sink('b', 'nats', '{\"servers\": \"nats://127.0.0.1:$NATS_PORT\", \"user\": \"$SINK_USER\", \"password\": \"$SINK_PASSWORD\"}')"
  TARGET_OUTBOX=bench.outbox TARGET_WARM=warm.outbox
  RELAY_CMD=(env OUTBOX_BENCH_NATS_USER="$SINK_USER" OUTBOX_BENCH_NATS_PASSWORD="$SINK_PASSWORD"
    node "$REPO/bench/sink_relay_nats.mjs" "nats://127.0.0.1:$NATS_PORT" bench.relay)
}

start_mqtt() {
  local d=$WORK/mosquitto
  mkdir -p "$d"
  MQTT_PORT=$(pick_free_port $((SINK_PORT_BASE + 40)))
  # No limit on what waits for the counting subscriber (mosquitto drops QoS 1
  # messages beyond 1,000 queued for a client by default); no persistence.
  cat >"$d/mosquitto.conf" <<EOF
listener $MQTT_PORT 127.0.0.1
allow_anonymous true
log_dest stderr
max_queued_messages 0
EOF
  ((EUID == 0)) && echo "user root" >>"$d/mosquitto.conf"
  # The Receive Maximum mosquitto announces to MQTT 5 clients (and its
  # window towards the subscriber): 20 unless MQTT_MAX_INFLIGHT says.
  if [[ -n ${MQTT_MAX_INFLIGHT:-} ]]; then
    echo "max_inflight_messages $MQTT_MAX_INFLIGHT" >>"$d/mosquitto.conf"
  fi
  mosquitto -c "$d/mosquitto.conf" >"$d/mosquitto.log" 2>&1 &
  SERVER_PIDS+=($!)
  wait_for 30 bash -c "exec 3<>/dev/tcp/127.0.0.1/$MQTT_PORT"
  # The counting subscriber (C, QoS 1): one line per message, "topic payload".
  stdbuf -oL mosquitto_sub -h 127.0.0.1 -p "$MQTT_PORT" -V mqttv5 -q 1 -t 'bench/#' -v \
    >"$d/received" 2>"$d/sub.log" &
  SUB_PID=$!
  SERVER_PIDS+=("$SUB_PID")
  sleep 0.5
  SINK_SQL="SELECT outbox.create_sink('b', 'mqtt', '{\"port\": $MQTT_PORT${MQTT_CONNECTIONS:+, \"connections\": $MQTT_CONNECTIONS}}')"
  TARGET_OUTBOX=bench/outbox TARGET_WARM=warm/outbox
  RELAY_CMD=(/usr/bin/python3 "$REPO/bench/sink_relay.py" "" mqtt "$MQTT_PORT" bench/relay)
}

start_http() {
  HTTP_PORT=$(pick_free_port $((SINK_PORT_BASE + 50)))
  node "$REPO/bench/sink_receiver.mjs" "$HTTP_PORT" >"$WORK/receiver.log" 2>&1 &
  SERVER_PIDS+=($!)
  wait_for 30 curl -sf "http://127.0.0.1:$HTTP_PORT/_ready"
  SINK_SQL="SELECT outbox.create_sink('b', 'http', '{\"url\": \"http://127.0.0.1:$HTTP_PORT/{target}\"}')"
  TARGET_OUTBOX=outbox TARGET_WARM=warm
  # The relay's connections: as many as the sink's max_connections (16 by default).
  RELAY_CMD=(/usr/bin/python3 "$REPO/bench/sink_relay.py" "" http "http://127.0.0.1:$HTTP_PORT/relay" - 50 500 16)
}

sink_start() {
  SERVER_PIDS=() SUB_PID="" SINK_TAKEN=()
  "start_$1"
}

sink_count() {
  local kind=$1 side=$2
  case $kind in
    amqp) local n; n=$(amqp_tool count "bench_$side"); echo "$n $n" ;;
    nats) local n; n=$(nats_tool count "${side^^}"); echo "$n $n" ;;
    mqtt)
      # Each line is "bench/<side> <payload>"; the payload's order_id is the event's.
      awk -v t="bench/$side" '$1 == t { n++; if (match($0, /"order_id": *[0-9]+/)) ids[substr($0, RSTART, RLENGTH)] = 1 }
        END { printf "%d %d\n", n, length(ids) }' "$WORK/mosquitto/received" ;;
    http)
      curl -s "http://127.0.0.1:$HTTP_PORT/_count" | /usr/bin/python3 -c \
        "import json, sys; c = json.load(sys.stdin).get('/$side', {}); print(c.get('requests', 0), c.get('distinct', 0))" ;;
  esac
}

# sink_take KIND SIDE EXPECTED: sets TAKEN_HELD and TAKEN_DISTINCT (and
# prints them) for what reached the server for SIDE since the last call (run
# it in this shell, not in a $(...) or <(...) subshell, which would lose
# what it remembers), and empties the queue or stream, so
# that the next drain does not go into a server holding the last one's
# messages (RabbitMQ slows down as its queues fill). The counting subscriber
# and the receiver may lag behind the acknowledgements: waits up to 60 s for
# EXPECTED, then a moment for any copy beyond it.
declare -A SINK_TAKEN=()
sink_take() {
  local kind=$1 side=$2 expected=$3 held distinct prev_held prev_distinct i
  read -r prev_held prev_distinct <<<"${SINK_TAKEN[$side]:-0 0}"
  for ((i = 0; i < 600; i++)); do
    read -r held distinct < <(sink_count "$kind" "$side")
    ((held - prev_held >= expected)) && break
    sleep 0.1
  done
  sleep 0.5
  read -r held distinct < <(sink_count "$kind" "$side")
  case $kind in
    amqp) amqp_tool purge "bench_$side" >/dev/null ;;
    nats) nats_tool purge "${side^^}" >/dev/null ;;
    *) SINK_TAKEN[$side]="$held $distinct" ;;
  esac
  TAKEN_HELD=$((held - prev_held)) TAKEN_DISTINCT=$((distinct - prev_distinct))
  echo "$TAKEN_HELD $TAKEN_DISTINCT"
}

sink_stop() {
  local pid
  for pid in "${SERVER_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${SERVER_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  SERVER_PIDS=() SUB_PID=""
}
