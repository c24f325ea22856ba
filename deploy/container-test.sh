#!/bin/sh
# deploy/container-test.sh - build deploy/Containerfile with podman and run
# the image (make container-test).  Not part of make check: it downloads
# from Debian's archive (the base image and the packages of both stages).
#
# 1. The base: if no debian:12-slim image is present and none can be
#    pulled, one is made from Debian's archive with debootstrap (minbase,
#    bookworm) and imported under that name.
# 2. podman build (docker format, so HEALTHCHECK is kept).
# 3. Run it with a keys file, listening on 127.0.0.1 (host network; port 0,
#    read back from a port file in the volume): PID 1 is micd as user mic,
#    the HEALTHCHECK passes, an event published with the admin key is
#    stored, `podman stop` (SIGTERM) ends it with exit status 0, and a new
#    container on the same volume still has the event.
# 4. Without keys on the default 0.0.0.0:8080 it exits 2 with the message.
#
# Sandboxes: PODMAN_FLAGS (default: --runtime runc, as crun could not set
# up cgroups in the sandbox this was written in) and RUN_FLAGS (default:
# explicit nofile/nproc ulimits, which that sandbox cannot raise).
# Everything it creates is named mic-ctest-* and removed at the end.
set -eu

cd "$(dirname "$0")/.."
PODMAN_FLAGS=${PODMAN_FLAGS:---runtime runc}
RUN_FLAGS=${RUN_FLAGS:---ulimit nofile=1024:1024 --ulimit nproc=1024:1024}
IMAGE=localhost/mic:ctest
WORK=build/container
NAME=mic-ctest-$$
VOL=mic-ctest-vol-$$
# shellcheck disable=SC2086
pm() { podman $PODMAN_FLAGS "$@"; }
step() { printf '== %s\n' "$*"; }
die() { printf 'container-test: FAILED: %s\n' "$*" >&2; exit 1; }
cleanup() {
    pm rm -f "$NAME" "$NAME-2" "$NAME-refuse" > /dev/null 2>&1 || true
    pm volume rm -f "$VOL" > /dev/null 2>&1 || true
}
trap cleanup EXIT INT TERM

mkdir -p "$WORK"
if ! pm image exists docker.io/library/debian:12-slim; then
    if ! pm pull -q docker.io/library/debian:12-slim > /dev/null 2>&1; then
        step "no registry: a Debian 12 base from Debian's archive (debootstrap)"
        rm -rf "$WORK/rootfs"
        debootstrap --variant=minbase bookworm "$WORK/rootfs" http://deb.debian.org/debian \
            > "$WORK/debootstrap.log" 2>&1 || die "debootstrap (see $WORK/debootstrap.log)"
        tar -C "$WORK/rootfs" -c . | pm import - docker.io/library/debian:12-slim > /dev/null
        rm -rf "$WORK/rootfs"
    fi
fi

step "podman build -f deploy/Containerfile"
t0=$(date +%s)
# shellcheck disable=SC2086
pm build --format docker --network host $RUN_FLAGS \
    --ignorefile deploy/Containerfile.dockerignore -f deploy/Containerfile -t "$IMAGE" . \
    > "$WORK/build.log" 2>&1 || die "build (see $WORK/build.log)"
echo "built in $(( $(date +%s) - t0 )) s; image $(pm image inspect --format '{{.Size}}' "$IMAGE") bytes"

step "keys"
build/mic keys new --id ops --role admin > "$WORK/ops.secret" 2> "$WORK/keys"
chmod 0644 "$WORK/keys"

step "run with keys on 127.0.0.1 (host network)"
# shellcheck disable=SC2086
pm run -d --name "$NAME" --network host $RUN_FLAGS -v "$VOL:/var/lib/mic" \
    -v "$PWD/$WORK/keys:/etc/mic/keys:ro" -e MIC_KEYS=/etc/mic/keys \
    -e MIC_LISTEN=127.0.0.1:0 -e MIC_PORT_FILE=/var/lib/mic/port "$IMAGE" > /dev/null 2>> "$WORK/podman.log"
port=
i=0
while [ $i -lt 300 ]; do
    port=$(pm exec "$NAME" cat /var/lib/mic/port 2> /dev/null || true)
    [ -n "$port" ] && break
    i=$((i + 1))
    sleep 0.1
done
[ -n "$port" ] || { pm logs "$NAME"; die "micd did not write its port file in 30 s"; }
echo "micd listens on 127.0.0.1:$port"
pm top "$NAME" pid user args | tee "$WORK/top.txt"
awk 'NR == 2 && $1 == 1 && $2 == "mic" && $3 ~ /micd$/ { ok = 1 } END { exit !ok }' "$WORK/top.txt" \
    || die "PID 1 is not micd run by mic"
pm healthcheck run "$NAME" 2> /dev/null || die "HEALTHCHECK failed"
pm image inspect "$IMAGE" | grep -A3 '"Healthcheck"' | grep -q 'mic-entrypoint' \
    || die "no HEALTHCHECK in the image"
echo "HEALTHCHECK: healthy"
MIC_URL=http://127.0.0.1:$port MIC_KEY=$(cat "$WORK/ops.secret") \
    build/mic publish --topic ctest --id ctest-1 --payload '{"n":1}' > /dev/null \
    || die "publish with the admin key"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/v1/stats")
[ "$code" = 401 ] || die "a request without a key answered $code, not 401"
echo "published ctest-1 with the key; without a key: 401"

step "podman stop (SIGTERM)"
pm stop -t 30 "$NAME" > /dev/null 2>> "$WORK/podman.log"
status=$(pm inspect --format '{{.State.ExitCode}}' "$NAME")
[ "$status" = 0 ] || { pm logs "$NAME"; die "micd exited $status after SIGTERM"; }
pm logs "$NAME" 2>&1 | grep -q '"msg":"stopping","signal":"SIGTERM"' || die "micd did not log the SIGTERM"
echo "exit status 0"

step "a new container on the same volume"
# shellcheck disable=SC2086
pm run -d --name "$NAME-2" --network host $RUN_FLAGS -v "$VOL:/var/lib/mic" \
    -v "$PWD/$WORK/keys:/etc/mic/keys:ro" -e MIC_KEYS=/etc/mic/keys \
    -e MIC_LISTEN=127.0.0.1:0 -e MIC_PORT_FILE=/var/lib/mic/port2 "$IMAGE" > /dev/null 2>> "$WORK/podman.log"
port=
i=0
while [ $i -lt 300 ]; do
    port=$(pm exec "$NAME-2" cat /var/lib/mic/port2 2> /dev/null || true)
    [ -n "$port" ] && break
    i=$((i + 1))
    sleep 0.1
done
[ -n "$port" ] || die "the second micd did not start"
curl -sf -H "Authorization: Bearer $(cat "$WORK/ops.secret")" \
    "http://127.0.0.1:$port/v1/events/ctest-1" | grep -q '"event_id":"ctest-1"' \
    || die "ctest-1 is not in the store after the restart"
pm stop -t 30 "$NAME-2" > /dev/null 2>> "$WORK/podman.log"
echo "ctest-1 is still there"

step "no keys, default listen: refused"
# shellcheck disable=SC2086
if pm run --name "$NAME-refuse" --network none $RUN_FLAGS "$IMAGE" > "$WORK/refuse.log" 2>&1; then
    die "started without keys on 0.0.0.0"
fi
status=$(pm inspect --format '{{.State.ExitCode}}' "$NAME-refuse")
[ "$status" = 2 ] || die "exit status $status, not 2"
grep -q 'MIC_KEYS' "$WORK/refuse.log" || die "the refusal does not name MIC_KEYS"
echo "exit status 2: $(grep -m1 refusing "$WORK/refuse.log")"
echo "container-test: passed"
