#!/usr/bin/env bash
# Everything `docker compose up` needs on a machine with no image registry, for
# tests/test_compose_engine.py (`make compose-test`). Idempotent; slow results are cached.
#
#   1. engine    Debian's docker.io (+ debootstrap, chromium) if missing; dockerd started in
#                the background if no daemon answers (log: $CACHE/dockerd.log).
#   2. compose   Compose v2 built from the Go module proxy, installed as the CLI plugin
#                ~/.docker/cli-plugins/docker-compose (binary cached in $CACHE).
#   3. base      a Debian bookworm root file system (debootstrap --variant=minbase, plus
#                python3, python3-venv, python-is-python3; tarball cached in $CACHE),
#                `docker import`ed; then the machine's CA bundle and pip settings on top, so
#                pip inside a build reaches PyPI the way it does on this machine.
#   4. stand-ins images for the third-party services built from the same sources as the
#                test harness: Kafka from deploy/kafka/pom.xml's Maven jars (cached where
#                `rankstream services up` keeps them), Redis and Prometheus from Debian.
#   5. image     the project image from deploy/Dockerfile on that base (rankstream:latest,
#                the tag deploy/docker-compose.yml names).
#
# Exit status 3 means "no Docker engine can be had here" (not root, no apt-get, dockerd
# will not start); any other failure is a real error. Each stage appends
# "stage<TAB>seconds<TAB>built|cached" to $COMPOSE_TEST_TIMINGS if that is set.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
DATA_DIR="${RANKSTREAM_DATA_DIR:-$HOME/.cache/rankstream}"
CACHE="$DATA_DIR/cache/compose-test"
TIMINGS="${COMPOSE_TEST_TIMINGS:-/dev/null}"

COMPOSE_VERSION=v2.29.7
BASE_PACKAGES=python3,python3-venv,python-is-python3
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
BASE_IMAGE=rankstream-test/debian-python:bookworm
PYTHON_IMAGE=rankstream-test/python:3.11-bookworm
KAFKA_IMAGE=rankstream-standin/kafka:3.9.1
REDIS_IMAGE=rankstream-standin/redis:7.4
PROMETHEUS_IMAGE=rankstream-standin/prometheus:v2.53.2
APP_IMAGE=rankstream:latest

export DOCKER_BUILDKIT=0 DEBIAN_FRONTEND=noninteractive
mkdir -p "$CACHE"

say() { printf '[prepare %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
unavailable() { say "no Docker engine here: $*"; exit 3; }
sha() { sha256sum | cut -c1-12; }

STAGE="" STAGE_START=0 STAGE_HOW=cached
stage() {
  if [[ -n "$STAGE" ]]; then
    local seconds=$((SECONDS - STAGE_START))
    say "stage $STAGE: ${seconds} s ($STAGE_HOW)"
    printf '%s\t%s\t%s\n' "$STAGE" "$seconds" "$STAGE_HOW" >> "$TIMINGS"
  fi
  STAGE="$1" STAGE_START=$SECONDS STAGE_HOW=cached
}

# The same guard harness/services/install.py uses: package scripts must not start
# daemons of their own (there is no init system here).
apt_install() {
  local policy=/usr/sbin/policy-rc.d created=0
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod 755 "$policy" && created=1
  fi
  local rc=0
  apt-get install -y -q --no-install-recommends "$@" >> "$CACHE/apt.log" 2>&1 \
    || { apt-get update -q >> "$CACHE/apt.log" 2>&1 \
         && apt-get install -y -q --no-install-recommends "$@" >> "$CACHE/apt.log" 2>&1; } \
    || rc=$?
  [[ $created == 1 ]] && rm -f "$policy"
  if [[ $rc != 0 ]]; then tail -20 "$CACHE/apt.log" >&2; fi
  return $rc
}

# ---------------------------------------------------------------------------------------
stage engine
[[ $(id -u) == 0 ]] || unavailable "needs root to install docker.io and start dockerd"
missing=()
command -v dockerd > /dev/null || missing+=(docker.io)
command -v debootstrap > /dev/null || missing+=(debootstrap)
command -v chromium > /dev/null || missing+=(chromium)
if ((${#missing[@]})); then
  command -v apt-get > /dev/null || unavailable "apt-get missing, cannot install ${missing[*]}"
  say "installing ${missing[*]} (apt-get)"
  STAGE_HOW=built
  apt_install "${missing[@]}" || unavailable "apt-get install ${missing[*]} failed"
fi
# Debian's client, the same version as its daemon (a newer client elsewhere on PATH
# negotiates down and works too).
DOCKER=/usr/bin/docker
[[ -x $DOCKER ]] || DOCKER=docker
if ! "$DOCKER" info > /dev/null 2>&1; then
  say "starting dockerd (log: $CACHE/dockerd.log)"
  STAGE_HOW=built
  # setsid: the daemon outlives this script and the test run, for the next run to reuse.
  setsid nohup dockerd > "$CACHE/dockerd.log" 2>&1 < /dev/null &
  echo $! > "$CACHE/dockerd.pid"
  for _ in $(seq 60); do
    "$DOCKER" info > /dev/null 2>&1 && break
    sleep 1
  done
  "$DOCKER" info > /dev/null 2>&1 \
    || unavailable "dockerd did not answer within 60 s: $(tail -5 "$CACHE/dockerd.log")"
fi

# ---------------------------------------------------------------------------------------
stage compose
PLUGIN="$HOME/.docker/cli-plugins/docker-compose"
COMPOSE_BIN="$CACHE/docker-compose-$COMPOSE_VERSION"
compose_build_pid=""
if ! "$DOCKER" compose version 2> /dev/null | grep -q "$COMPOSE_VERSION"; then
  if [[ ! -x $COMPOSE_BIN ]]; then
    command -v go > /dev/null || { say "go is not on PATH: Compose v2 cannot be built"; exit 1; }
    say "building Compose $COMPOSE_VERSION from the Go module proxy (background, ~2-3 min)"
    STAGE_HOW=built
    gobin="$(mktemp -d "$CACHE/gobin.XXXXXX")"
    (
      GOBIN="$gobin" GOFLAGS=-buildvcs=false go install \
        -ldflags "-s -w -X github.com/docker/compose/v2/internal.Version=$COMPOSE_VERSION" \
        "github.com/docker/compose/v2/cmd@$COMPOSE_VERSION" > "$CACHE/compose-build.log" 2>&1 \
        && mv "$gobin/cmd" "$COMPOSE_BIN" && rm -rf "$gobin"
    ) &
    compose_build_pid=$!
  fi
fi
install_compose() {
  if [[ -n $compose_build_pid ]]; then
    wait "$compose_build_pid" || { tail -20 "$CACHE/compose-build.log" >&2; exit 1; }
  fi
  if [[ -x $COMPOSE_BIN ]]; then
    mkdir -p "$(dirname "$PLUGIN")"
    install -m 0755 "$COMPOSE_BIN" "$PLUGIN"
  fi
  "$DOCKER" compose version | grep -q "$COMPOSE_VERSION" \
    || { say "docker compose is not $COMPOSE_VERSION: $("$DOCKER" compose version 2>&1)"; exit 1; }
}
if [[ -z $compose_build_pid ]]; then install_compose; fi

# ---------------------------------------------------------------------------------------
stage base
base_key="$(printf 'bookworm minbase %s %s v1' "$BASE_PACKAGES" "$DEBIAN_MIRROR" | sha)"
tarball="$CACHE/debian-bookworm-python-$base_key.tar"
if [[ "$("$DOCKER" image inspect -f '{{index .Config.Labels "rankstream.base-key"}}' \
        "$BASE_IMAGE" 2> /dev/null)" != "$base_key" ]]; then
  if [[ ! -s $tarball ]]; then
    say "debootstrap bookworm (minbase + $BASE_PACKAGES)"
    STAGE_HOW=built
    rootfs="$(mktemp -d "$CACHE/rootfs.XXXXXX")"
    debootstrap --variant=minbase --include="$BASE_PACKAGES" bookworm "$rootfs" \
      "$DEBIAN_MIRROR" > "$CACHE/debootstrap.log" 2>&1 \
      || { tail -20 "$CACHE/debootstrap.log" >&2; rm -rf "$rootfs"; exit 1; }
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/tmp/*
    tar -C "$rootfs" --numeric-owner -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
    rm -rf "$rootfs"
  fi
  STAGE_HOW=built
  "$DOCKER" import --change "LABEL rankstream.base-key=$base_key" \
    --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' "$tarball" "$BASE_IMAGE" > /dev/null
fi

# The machine's CA bundle and pip settings, layered on the base (a changed bundle or pip
# configuration makes a new layer; the rootfs stays cached). find-links points at a
# directory of this machine, which a build cannot see, so it is left out.
ca_bundle="${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}"
context="$(mktemp -d)"
trap 'rm -rf "$context"' EXIT
cp "$ca_bundle" "$context/ca-certificates.crt"
{
  echo "[global]"
  echo "cert = /etc/ssl/certs/ca-certificates.crt"
  python3 -m pip config list 2> /dev/null | sed -n "s/^[^.]*\.\([a-z-]*\)='\(.*\)'$/\1 = \2/p" \
    | grep -v -E '^(cert|find-links) ' | sort -u -k1,1 || true
} > "$context/pip.conf"
cat > "$context/Dockerfile" << EOF
FROM $BASE_IMAGE
# As in Debian's official images: package scripts never start daemons inside a build.
RUN printf '#!/bin/sh\\nexit 101\\n' > /usr/sbin/policy-rc.d && chmod 0755 /usr/sbin/policy-rc.d
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY pip.conf /etc/pip.conf
ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
EOF
"$DOCKER" build -q -t "$PYTHON_IMAGE" "$context" > /dev/null

# ---------------------------------------------------------------------------------------
stage standins
build_standin() {  # name image context
  local before after
  before="$("$DOCKER" image inspect -f '{{.Id}}' "$2" 2> /dev/null || true)"
  "$DOCKER" build --force-rm --network host --build-arg "BASE_IMAGE=$PYTHON_IMAGE" -t "$2" "$3" \
    > "$CACHE/build-$1.log" 2>&1 || { tail -30 "$CACHE/build-$1.log" >&2; exit 1; }
  after="$("$DOCKER" image inspect -f '{{.Id}}' "$2")"
  [[ $before == "$after" ]] || STAGE_HOW=built
}
# Kafka: the jars of deploy/kafka/pom.xml, in the directory the harness uses
# (harness/services/install.py: $RANKSTREAM_DATA_DIR/cache/kafka-jars-<pom sha256[:12]>).
jars="$DATA_DIR/cache/kafka-jars-$(sha256sum < "$REPO/deploy/kafka/pom.xml" | cut -c1-12)"
if [[ ! -e $jars/.complete ]]; then
  say "resolving the Kafka jars with Maven"
  STAGE_HOW=built
  staging="$(mktemp -d "$DATA_DIR/cache/kafka-jars-XXXXXX")"
  mvn -q -B -f "$REPO/deploy/kafka/pom.xml" dependency:copy-dependencies \
    "-DoutputDirectory=$staging" > "$CACHE/maven.log" 2>&1 \
    || { tail -20 "$CACHE/maven.log" >&2; rm -rf "$staging"; exit 1; }
  touch "$staging/.complete"
  mv -T "$staging" "$jars" 2> /dev/null || rm -rf "$staging"
fi
kafka_context="$context/kafka"
cp -r "$HERE/kafka" "$kafka_context"
mkdir -p "$kafka_context/libs"
cp -l "$jars"/*.jar "$kafka_context/libs/" 2> /dev/null || cp "$jars"/*.jar "$kafka_context/libs/"
build_standin kafka "$KAFKA_IMAGE" "$kafka_context"
build_standin redis "$REDIS_IMAGE" "$HERE/redis"
build_standin prometheus "$PROMETHEUS_IMAGE" "$HERE/prometheus"

# ---------------------------------------------------------------------------------------
stage compose-wait
if [[ -n $compose_build_pid ]]; then STAGE_HOW=built; fi
install_compose

# ---------------------------------------------------------------------------------------
stage image
before="$("$DOCKER" image inspect -f '{{.Id}}' "$APP_IMAGE" 2> /dev/null || true)"
"$DOCKER" build --force-rm --network host --build-arg "PYTHON_IMAGE=$PYTHON_IMAGE" \
  -f "$REPO/deploy/Dockerfile" -t "$APP_IMAGE" "$REPO" > "$CACHE/build-image.log" 2>&1 \
  || { tail -40 "$CACHE/build-image.log" >&2; exit 1; }
[[ $before == "$("$DOCKER" image inspect -f '{{.Id}}' "$APP_IMAGE")" ]] || STAGE_HOW=built
stage ""
say "ready: $("$DOCKER" compose version --short), images $APP_IMAGE $KAFKA_IMAGE $REDIS_IMAGE $PROMETHEUS_IMAGE"
