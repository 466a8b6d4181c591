#!/bin/sh
# `make run`: migrate, then the web server and one worker on the embedded default (SQLite and
# the filesystem broker under ./.ephyra) or on DATABASE_URL / REDIS_URL when they are set.
# Either process ending stops the other, so a crashed worker is never silently missing.
set -eu
BIN=${BIN:-.venv/bin}
ADDR=${EPHYRA_ADDR:-127.0.0.1:8000}
"$BIN/python" manage.py migrate --no-input
"$BIN/python" manage.py worker &
worker=$!
"$BIN/python" manage.py runserver --noreload "$ADDR" &
web=$!
trap 'kill "$worker" "$web" 2>/dev/null; wait' INT TERM EXIT
echo "Ephyra: http://$ADDR/ (admin at /admin/), worker pid $worker; Ctrl-C stops both" >&2
# POSIX sh has no `wait -n`: poll until one of the two is gone.
while kill -0 "$worker" 2>/dev/null && kill -0 "$web" 2>/dev/null; do
    sleep 1
done
