#!/bin/sh
# The image's entrypoint: refuse to start with a placeholder Redis password, then run
# `rankstream` with the container's arguments (exec: signals reach it directly).
#
# A process that talks to Redis (RANKSTREAM_REDIS_URL set) needs a real
# RANKSTREAM_REDIS_PASSWORD. Empty, shorter than 12 characters, or a "change me"
# placeholder (what a user who copied .env.example without editing it has), and it exits
# 78 (EX_CONFIG) saying so before anything connects. The redis service in
# deploy/docker-compose.yml applies the same rule. Commands without Redis (`eval`, `demo`,
# `--help`) are not affected.
set -eu
if [ -n "${RANKSTREAM_REDIS_URL:-}" ]; then
  password="${RANKSTREAM_REDIS_PASSWORD:-}"
  case "$password" in
    *[Cc][Hh][Aa][Nn][Gg][Ee]*[Mm][Ee]*) weak=placeholder ;;
    *) if [ "${#password}" -lt 12 ]; then weak="shorter than 12 characters"; else weak=""; fi ;;
  esac
  if [ -n "$weak" ]; then
    echo "rankstream: refusing to start: RANKSTREAM_REDIS_PASSWORD is $weak;" \
         "set a real one in deploy/.env" >&2
    exit 78
  fi
fi
exec rankstream "$@"
