#!/usr/bin/env bash
# Installs (Debian, as root) and starts the services gymfleet uses. Idempotent: a second run
# costs about a second.
#   services.sh        what the tests need: Docker, PostgreSQL, bubblewrap, Chromium, npm; writes
#                      scripts/services.env with the variables the tests read (`make test`)
#   services.sh run    what the default run needs: Docker, bubblewrap, Chromium (`make run`)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mode=${1:-test}
case "$mode" in test|run) ;; *) echo "usage: services.sh [test|run]" >&2; exit 2 ;; esac
pkgs=(docker.io bubblewrap chromium debootstrap fonts-dejavu-core git patch make gcc sqlite3 python3 procps)
[ "$mode" = test ] && pkgs+=(postgresql)
# npm packs the CLI agents (Codex, opencode) that the Harness-v0 tests install into task images.
if [ "$mode" = test ] && ! command -v npm >/dev/null 2>&1; then pkgs+=(npm); fi
need=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || need+=("$p"); done
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then echo "services.sh: missing ${need[*]}; run as root or install them" >&2; exit 1; fi
  echo "services.sh: installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# Docker daemon.
if ! docker info >/dev/null 2>&1; then
  echo "services.sh: starting dockerd"
  (setsid dockerd >/var/log/gymfleet-dockerd.log 2>&1 &)
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { echo "services.sh: dockerd did not start; see /var/log/gymfleet-dockerd.log" >&2; tail -20 /var/log/gymfleet-dockerd.log >&2; exit 1; }
fi

if [ "$mode" = run ]; then
  echo "services.sh: docker, bubblewrap, chromium ready"
  exit 0
fi

# PostgreSQL cluster on 127.0.0.1:5432 with a test database.
pg_url="postgresql+asyncpg://gymfleet:gymfleet@127.0.0.1:5432/gymfleet_test"
if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
  echo "services.sh: starting PostgreSQL"
  ver=$(ls /usr/lib/postgresql | sort -n | tail -1)
  pg_lsclusters -h 2>/dev/null | grep -q "^$ver main" || pg_createcluster "$ver" main >/dev/null
  pg_ctlcluster "$ver" main start || true
  for _ in $(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done
fi
su postgres -c "psql -tAc \"SELECT 1 FROM pg_roles WHERE rolname='gymfleet'\"" | grep -q 1 || \
  su postgres -c "psql -qc \"CREATE ROLE gymfleet LOGIN SUPERUSER PASSWORD 'gymfleet'\""
su postgres -c "psql -tAc \"SELECT 1 FROM pg_database WHERE datname='gymfleet_test'\"" | grep -q 1 || \
  su postgres -c "createdb -O gymfleet gymfleet_test"

cat > "$here/services.env" <<ENV
export GYMFLEET_TEST_PG_URL=$pg_url
export GYMFLEET_CHROMIUM=/usr/bin/chromium
ENV
echo "services.sh: docker, postgresql, bubblewrap, chromium ready"
