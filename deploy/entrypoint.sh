#!/bin/sh
# entrypoint.sh - the container's entrypoint (installed as
# /usr/local/bin/mic-entrypoint by deploy/Containerfile).
#
#   mic-entrypoint [--FLAG=VALUE]...   start micd: MIC_* variables become
#                                      flags, then the arguments given (they win)
#   mic-entrypoint micd [--FLAG=VALUE]...   the same
#   mic-entrypoint healthcheck         exit 0 if micd's /readyz answers 200, else 1
#   mic-entrypoint COMMAND [ARGS]...   run another command (mic, sh, ...)
#
# Each micd flag --NAME has a variable MIC_NAME (upper case, '-' as '_'):
# MIC_LISTEN, MIC_DATA, MIC_KEYS, MIC_TLS_CERT, MIC_TLS_KEY, MIC_AUDIT_LOG,
# MIC_MAP_MAX, MIC_DURABILITY, MIC_LOG_LEVEL, ... (the list is FLAGS below;
# deploy/README.md "Container").  MIC_CONFIG names a config file.  Without
# MIC_CONFIG, MIC_LISTEN defaults to 0.0.0.0:8080 and MIC_DATA to
# /var/lib/mic (the volume); with it, the file's values hold unless a
# variable is set.  (MIC_URL and MIC_KEY are the mic client's, not micd's.)
#
# micd is started with exec: it replaces this shell and keeps its PID (1 in
# the container), so SIGTERM reaches micd itself and it stops cleanly.
#
# Refusals, before micd starts, with what to do (exit status as micd's):
#   2  a non-loopback MIC_LISTEN without MIC_KEYS (micd would refuse it too,
#      with less help); a MIC_KEYS file that cannot be read
#   3  a MIC_DATA directory this user cannot write (a volume owned by root)
# MIC_MICD names the micd binary (default /usr/local/bin/micd; tests use it).
set -eu

MICD=${MIC_MICD:-/usr/local/bin/micd}
FLAGS="listen data port-file archive-dir keys tls-cert tls-key audit-log map-size map-max
journal-size durability max-body max-batch max-depth max-connections per-ip-connections
idle-timeout head-timeout http-threads writer-queue writer-batch backup-rate backup-stall-timeout
replay-select-share no-auto-topics log-level"

say() {
    printf 'mic-entrypoint: %s\n' "$*" >&2
}

# The value of variable MIC_<NAME> for flag NAME, or "" (sets $val; returns 1 if unset).
env_of() {
    var=MIC_$(printf '%s' "$1" | tr 'a-z-' 'A-Z_')
    isset=
    eval "isset=\${$var+y}"
    eval "val=\${$var-}"
    [ "$isset" = y ]
}

# A setting as micd will see it: the variable, else the config file's
# "NAME = VALUE" line, else the default $2 (sets $val).
setting() {
    if env_of "$1"; then
        return 0
    fi
    val=$2
    if [ -n "${MIC_CONFIG:-}" ] && [ -r "$MIC_CONFIG" ]; then
        line=$(sed -n "s/^[[:space:]]*$1[[:space:]]*=[[:space:]]*//p" "$MIC_CONFIG" | tail -n 1)
        [ -n "$line" ] && val=$(printf '%s' "$line" | sed 's/[[:space:]]*$//')
    fi
    return 0
}

# Host and port of a HOST:PORT or [V6]:PORT address (sets $host, $port).
split_listen() {
    port=${1##*:}
    host=${1%:*}
    host=${host#[}
    host=${host%]}
}

is_loopback() {
    case $1 in
        127.*|::1|localhost|::ffff:127.*) return 0 ;;
        *) return 1 ;;
    esac
}

healthcheck() {
    setting listen 127.0.0.1:8080
    [ -n "${MIC_CONFIG:-}" ] || env_of listen || val=0.0.0.0:8080
    split_listen "$val"
    if env_of port-file && [ -n "$val" ] && [ -s "$val" ]; then
        port=$(tr -dc 0-9 < "$val")
    fi
    case $host in
        ''|0.0.0.0) host=127.0.0.1 ;;
        ::) host='::1' ;;
    esac
    case $host in *:*) host="[$host]" ;; esac
    setting tls-cert ''
    scheme=http
    insecure=
    # The certificate names the public host, not 127.0.0.1: this only asks
    # whether micd is ready, over TLS, without checking who answers.
    [ -n "$val" ] && scheme=https && insecure=--insecure
    if curl --silent --show-error --fail --max-time 4 --output /dev/null $insecure \
        "$scheme://$host:$port/readyz"; then
        exit 0
    fi
    exit 1
}

start_micd() {
    if [ -z "${MIC_CONFIG:-}" ]; then
        : "${MIC_LISTEN:=0.0.0.0:8080}"
        : "${MIC_DATA:=/var/lib/mic}"
        export MIC_LISTEN MIC_DATA
    fi

    setting listen 127.0.0.1:8080
    listen=$val
    split_listen "$listen"
    setting keys ''
    keys=$val
    if [ -z "$keys" ] && ! is_loopback "$host"; then
        say "refusing to start: MIC_LISTEN=$listen accepts connections from outside the"
        say "container, and no API keys are set (MIC_KEYS).  Without keys micd answers"
        say "anyone who can reach it, so it listens only on a loopback address."
        say "Either create keys and mount them:"
        say "  mic keys new --id ops --role admin > ops.secret 2>> keys   (secret to the"
        say "  file ops.secret, its keys-file line to keys), then run the container with"
        say "  -v \$PWD/keys:/etc/mic/keys:ro -e MIC_KEYS=/etc/mic/keys"
        say "or, to try micd inside the container only, set MIC_LISTEN=127.0.0.1:8080."
        exit 2
    fi
    if [ -n "$keys" ] && ! [ -r "$keys" ]; then
        say "refusing to start: the keys file MIC_KEYS=$keys cannot be read by user"
        say "$(id -un 2>/dev/null || id -u) (uid $(id -u)): is it mounted, and readable by that user?"
        exit 2
    fi
    setting data ./var
    data=$val
    if [ -d "$data" ] && ! [ -w "$data" ]; then
        say "refusing to start: the store directory MIC_DATA=$data is not writable by user"
        say "$(id -un 2>/dev/null || id -u) (uid $(id -u)).  For a host directory mounted there:"
        say "  chown $(id -u):$(id -g) DIR   (or use a named volume, which takes the image's owner)"
        exit 3
    fi

    # Flags from the variables first, then the arguments: rotate the $#
    # arguments given behind the flags built here.
    n=$#
    for flag in $FLAGS; do
        if env_of "$flag"; then
            set -- "$@" "--$flag=$val"
        fi
    done
    if [ -n "${MIC_CONFIG:-}" ]; then
        set -- "$@" --config "$MIC_CONFIG"
    fi
    while [ "$n" -gt 0 ]; do
        a=$1
        shift
        set -- "$@" "$a"
        n=$((n - 1))
    done
    exec "$MICD" "$@"
}

case ${1:-} in
    healthcheck)
        healthcheck
        ;;
    micd)
        shift
        start_micd "$@"
        ;;
    ''|-*)
        start_micd "$@"
        ;;
    *)
        exec "$@"
        ;;
esac
