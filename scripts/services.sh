#!/usr/bin/env bash
# Install the system packages the tests need and start the services they talk to,
# if they are not already up. Idempotent.
# Redis on 127.0.0.1:6379, memcached on 127.0.0.1:11211, and the message brokers of the queue
# tests (docs/queue.md): RabbitMQ on 127.0.0.1:5672 (guest/guest) and NATS with JetStream on 127.0.0.1:4222. The moto S3 server is
# started by the test fixtures themselves. Tests fail loudly (never skip) when one is missing.
set -euo pipefail

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo -n "$@"; else "$@"; fi; }

apt_install() {
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null 2>&1 \
    || { as_root apt-get update -q >/dev/null 2>&1 && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null; }
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_port() {
  for _ in $(seq 1 50); do port_open "$1" && return 0; sleep 0.1; done
  echo "services.sh: $2 did not come up on 127.0.0.1:$1" >&2; return 1
}

# Debian's chromium renders report.html to a screenshot in the stats tests.
command -v chromium >/dev/null || apt_install chromium
echo "chromium:  $(command -v chromium)"

if ! port_open 6379; then
  command -v redis-server >/dev/null || apt_install redis-server
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no >/dev/null
  wait_port 6379 redis
fi
echo "redis:     127.0.0.1:6379 up"

if ! port_open 11211; then
  command -v memcached >/dev/null || apt_install memcached
  memcached -d -l 127.0.0.1 -p 11211 -m 1024 -U 0 -u "$(id -un)" >/dev/null
  wait_port 11211 memcached
fi
echo "memcached: 127.0.0.1:11211 up"

# Slurm: the slurm tests start a private two-node cluster of their own (tests/slurm_cluster.py);
# here only its programs are installed. Its accounting (slurmdbd, which `torchx status` needs)
# uses the MariaDB on 127.0.0.1:3306 (root, no password) that this machine already runs.
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v slurmdbd >/dev/null \
  || ! command -v sbatch >/dev/null || ! command -v munged >/dev/null || ! command -v mysql >/dev/null; then
  apt_install slurmctld slurmd slurm-client slurmdbd munge mariadb-client
fi
echo "slurm:     $(slurmctld -V 2>/dev/null) (programs; the tests start their own cluster)"
port_open 3306 || echo "services.sh: MariaDB is not up on 127.0.0.1:3306: the Slurm tests' accounting needs it" >&2

# Message brokers for the queue tests (docs/queue.md). Started from Debian's packages only where missing.
if ! port_open 5672; then
  command -v rabbitmq-server >/dev/null || apt_install rabbitmq-server
  as_root rabbitmq-server -detached >/dev/null 2>&1 || rabbitmq-server -detached >/dev/null
  for _ in $(seq 1 300); do port_open 5672 && break; sleep 0.2; done  # the Erlang VM takes a while
  wait_port 5672 rabbitmq
fi
echo "rabbitmq:  127.0.0.1:5672 up"

if ! port_open 4222; then
  command -v nats-server >/dev/null || [ -x /usr/sbin/nats-server ] || apt_install nats-server
  mkdir -p /var/lib/nats-server 2>/dev/null || true
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- \
    -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log
  wait_port 4222 nats
fi
echo "nats:      127.0.0.1:4222 up (JetStream)"
