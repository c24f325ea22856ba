#!/bin/sh
# check-layers.sh - the rules of server/'s layout that a compiler does not
# check (run by make check; exits non-zero on a breach):
#   1. only the delivery engine (server/engine/delivery.c) calls the store's
#      delivery-index functions (store.h "Deliveries", "Ordered groups",
#      "Per-group figures"), and only store.c calls LMDB;
#   2. no two server files include each other's headers (no circle);
#   3. only the sink relay (server/relay/sink.c) calls libnats (nats*_, js_*).
cd "$(dirname "$0")/.." || exit 2
status=0
idx='mic_store_\(dlv\|ready\|timer\|dlq\|aq\|ags\|gstat\|unh\|poison\|oldest\|drop_step\)_*[a-z_]*('
for f in server/*.c; do
    case "$f" in server/engine/delivery.c|server/store/store.c) continue ;; esac
    if grep -n "$idx" "$f"; then
        echo "check-layers: $f calls a delivery index of the store (only server/engine/delivery.c may)"
        status=1
    fi
    if grep -n '\bmdb_[a-z_]*(' "$f"; then
        echo "check-layers: $f calls LMDB (only server/store/store.c may)"
        status=1
    fi
    if [ "$f" != server/relay/sink.c ] &&
       grep -n '\b\(nats[A-Za-z]*_[A-Za-z]*\|js_[A-Za-z]*\|jsCtx_[A-Za-z]*\)(' "$f"; then
        echo "check-layers: $f calls libnats (only server/relay/sink.c may)"
        status=1
    fi
done
for f in server/*.c; do
    a=$(basename "$f" .c)
    for h in $(sed -n 's/^#include "\([a-z_]*\)\.h"/\1/p' "$f"); do
        [ "$h" = "$a" ] && continue
        [ -f "server/$h.c" ] || continue
        if grep -q "^#include \"$a.h\"" "server/$h.c" 2>/dev/null; then
            echo "check-layers: server/$a.c and server/$h.c include each other's headers"
            status=1
        fi
    done
done
[ $status = 0 ] && echo "check-layers: ok (delivery indexes only in delivery.c, LMDB only in store.c, libnats only in sink.c, no include circles)"
exit $status
