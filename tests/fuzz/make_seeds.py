#!/usr/bin/env python3
"""make_seeds.py - write the hand-made seed corpora of tests/fuzz/corpus/
(event, claim, settle, range, config, keys): valid and invalid inputs taken
from DESIGN section 12, proto/openapi.yaml, proto/event.schema.json and the
unit tests.  Each seed is one file named after what it shows.  The record
seeds are made by build/fuzz/gen_records (gen_records.c: the store's own
encoder).  Run from anywhere; rewrites only the directories it owns."""
import json, os

HERE = os.path.dirname(os.path.abspath(__file__))
TOK = "0123456789abcdef0123456789abcdef"
LEGACY = "0000000700112233445566778899aabbccddeeff"
SHA = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, (dict, list)):
        data = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)

ev = {"event_id": "ord-1001", "topic": "orders.created", "aggregate_type": "order",
      "aggregate_id": "1001", "aggregate_version": 1, "event_type": "OrderCreated",
      "schema_version": 2, "correlation_id": "req-7", "priority": 5,
      "created_at": "2026-09-29T08:00:00.123456Z", "headers": {"trace-id": "abc", "tenant": "t1"},
      "payload": {"total": 12.5, "items": [{"sku": "A-1", "qty": 2}], "note": "caf\u00e9 \u2713", "gift": False, "coupon": None}}
events = {
    "minimal": {"topic": "orders"},
    "full": ev,
    "no_id": {"topic": "t", "payload": [1, 2, 3]},
    "offset_time": {"topic": "t", "created_at": "2026-09-29T10:00:00+02:00", "payload": "x"},
    "deliver_at": {"topic": "t", "deliver_at": "2026-10-01T00:00:00Z", "payload": {}},
    "unversioned_agg": {"topic": "t", "aggregate_type": "cart", "aggregate_id": "c-9"},
    "batch": {"events": [ev, dict(ev, event_id="ord-1002", aggregate_version=2),
                         {"topic": "audit", "payload": {"k": "v"}}]},
    "batch_dup_same": {"events": [{"event_id": "a", "topic": "t"}, {"event_id": "a", "topic": "t"}]},
    "batch_dup_conflict": {"events": [{"event_id": "a", "topic": "t"}, {"event_id": "a", "topic": "u"}]},
    "batch_version_repeat": {"events": [dict(ev), dict(ev, event_id="ord-x")]},
    "batch_mixed_versions": {"events": [{"topic": "t", "aggregate_type": "o", "aggregate_id": "1", "aggregate_version": 1},
                                        {"topic": "t", "aggregate_type": "o", "aggregate_id": "1"}]},
    "bad_no_topic": {"payload": 1},
    "bad_topic_chars": {"topic": "orders/created"},
    "bad_agg_half": {"topic": "t", "aggregate_type": "order"},
    "bad_version_zero": {"topic": "t", "aggregate_type": "o", "aggregate_id": "1", "aggregate_version": 0},
    "bad_version_no_agg": {"topic": "t", "aggregate_version": 3},
    "bad_future": {"topic": "t", "created_at": "2999-01-01T00:00:00Z"},
    "bad_time": {"topic": "t", "created_at": "2026-02-30T00:00:00Z"},
    "bad_header_key": {"topic": "t", "headers": {"bad key": "v"}},
    "bad_header_value": {"topic": "t", "headers": {"k": 1}},
    "bad_unknown_field": {"topic": "t", "colour": "red"},
    "bad_priority": {"topic": "t", "priority": 256},
    "bad_event_id": {"event_id": "a/b", "topic": "t"},
    "bad_empty_batch": {"events": []},
    "bad_batch_extra": {"events": [{"topic": "t"}], "topic": "t"},
    "bad_not_object": [{"topic": "t"}],
}
for k, v in events.items():
    write("event", k, v)
write("event", "version_huge", '{"topic":"t","aggregate_type":"o","aggregate_id":"1","aggregate_version":92233720368547758080}')
write("event", "version_max", '{"topic":"t","aggregate_type":"o","aggregate_id":"1","aggregate_version":9223372036854775807}')
write("event", "surrogates", '{"topic":"t","payload":"\\ud83d\\ude00 \\udc00","event_type":"\\u0041"}')
write("event", "dup_key", '{"topic":"t","topic":"u"}')
write("event", "nul_escape", '{"topic":"t","payload":"a\\u0000b"}')
write("event", "reals", '{"topic":"t","payload":[1e308,-0.0,1.5e-300,12345678901234567890,1E400]}')
write("event", "deep", '{"topic":"t","payload":' + "[" * 40 + "]" * 40 + "}")
write("event", "bad_json", '{"topic":"t",}')
write("event", "bad_utf8", b'{"topic":"t","payload":"\xff\xfe"}')
write("event", "empty", "")

claims = {
    "empty_object": {}, "max": {"max": 10},
    "all": {"max": 100, "lease_ttl_s": 30, "wait_s": 1.5, "worker": "worker-1"},
    "max_bounds": {"max": 1000, "lease_ttl_s": 43200, "wait_s": 60},
    "bad_max_zero": {"max": 0}, "bad_max_big": {"max": 1001}, "bad_max_real": {"max": 2.5},
    "bad_wait": {"wait_s": 61}, "bad_worker": {"worker": 5}, "bad_worker_long": {"worker": "w" * 65},
    "bad_unknown": {"maxx": 1}, "bad_array": [], "real_int": {"max": 1e3},
}
for k, v in claims.items():
    write("claim", k, v)
write("claim", "no_body", "")
write("claim", "bad_json", "{max:1}")

item = {"seq": 1, "lease_token": TOK}
settle = {
    "ack": {"deliveries": [item]},
    "ack_many": {"deliveries": [item, {"seq": 2, "lease_token": TOK}, {"seq": 3, "lease_token": "zz"}]},
    "ack_legacy_token": {"deliveries": [{"seq": 4, "lease_token": LEGACY}]},
    "nack": {"deliveries": [item], "error": "timeout talking to billing", "retry_after_s": 30},
    "nack_item_retry": {"deliveries": [dict(item, retry_after_s=0), dict(item, seq=2, retry_after_s=86400)]},
    "nack_dead_letter": {"deliveries": [item], "dead_letter": True, "error": "poison"},
    "nack_long_error": {"deliveries": [item], "error": "\u00e9" * 700},
    "extend": {"deliveries": [item], "lease_ttl_s": 120},
    "requeue": {"seqs": [1, 2, 3]}, "requeue_all": {"all": True}, "skip": {"seqs": [7]},
    "bad_empty": {"deliveries": []}, "bad_seq_zero": {"deliveries": [{"seq": 0, "lease_token": TOK}]},
    "bad_seq_str": {"deliveries": [{"seq": "1", "lease_token": TOK}]},
    "bad_token_type": {"deliveries": [{"seq": 1, "lease_token": 5}]},
    "bad_retry": {"deliveries": [item], "retry_after_s": -1},
    "bad_all_false": {"all": False}, "bad_all_and_seqs": {"all": True, "seqs": [1]},
    "bad_unknown": {"deliveries": [item], "bogus": 1}, "bad_items": {"deliveries": [1, 2]},
}
for k, v in settle.items():
    write("settle", k, v)
write("settle", "bad_json", '{"deliveries":[')

ranges = {
    "from_to_limit": "from=2026-01-01T00:00:00Z&to=2026-02-01T00:00:00.5%2B01:00&limit=10",
    "after": "after=1767225600000000:ord-1001&limit=100",
    "after_from": "from=2026-01-01T00:00:00Z&after=1767225600000000:e.1:x",
    "limits": "limit=1000", "limit_zero": "limit=0", "limit_text": "limit=ten", "limit_neg": "limit=-5",
    "before_epoch": "from=1969-12-31T23:59:59Z", "leap_day": "from=2028-02-29T23:59:59.999999Z",
    "bad_leap": "to=2026-02-29T00:00:00Z", "far": "to=9999-12-31T23:59:59.999999Z",
    "offset": "from=2026-01-01T00:00:00-23:59", "bad_offset": "from=2026-01-01T00:00:00+24:00",
    "after_neg": "after=-1:x", "after_no_id": "after=5:", "after_no_colon": "after=5",
    "after_long_id": "after=1:" + "a" * 129, "after_huge": "after=99999999999999999999:x",
    "lower_t": "from=2026-01-01t00:00:00z", "plus_space": "from=2026-01-01T00:00:00+01:00",
    "repeat": "limit=5&limit=500&from=2026-01-01T00:00:00Z&from=x", "empty": "",
    "nul": "from=2026-01-01T00:00:00Z%00junk",
}
for k, v in ranges.items():
    write("range", k, v)

configs = {
    "all": "".join("%s = %s\n" % kv for kv in [
        ("listen", "0.0.0.0:7000"), ("data", "/srv/mic data"), ("port-file", "/run/mic.port"),
        ("archive-dir", "/srv/archive"), ("keys", "/etc/mic/keys"), ("tls-cert", "/etc/mic/cert.pem"),
        ("tls-key", "/etc/mic/key.pem"), ("audit-log", "/var/log/mic-audit"), ("map-size", "128M"),
        ("map-max", "2T"), ("journal-size", "64k"), ("durability", "none"), ("max-body", "1G"),
        ("max-batch", "100000"), ("max-depth", "2"), ("max-connections", "1"),
        ("per-ip-connections", "1000000"), ("idle-timeout", "86400"), ("head-timeout", "1"),
        ("http-threads", "64"), ("writer-queue", "1"), ("writer-batch", "1000000"),
        ("writer-delay-ms", "10000"), ("no-auto-topics", "true"), ("log-level", "debug")]),
    "test_config": "# MIC settings\n\n   \t\n  listen = 0.0.0.0:7000\nmax-batch=50\n\t# an indented comment\n"
                   "data   =   /srv/mic data  \ndurability = none\nno-auto-topics = true\nmap-size = 128M\r\nidle-timeout = 9",
    "bad_unknown": "# ok\nbogus = 1\n", "bad_no_eq": "listen 0.0.0.0:1\n", "bad_bound": "max-batch = 0\n",
    "bad_enum": "durability = maybe\n", "bad_suffix": "map-size = 1P\n", "bad_overflow": "map-size = 99999999999999999999T\n",
    "bad_long_value": "data = " + "d" * 600 + "\n", "long_comment": "#" + "x" * 3000 + " listen = 0.0.0.0:1\n",
    "flag_forms": "no-auto-topics = 0\nno-auto-topics = false\nno-auto-topics = 1\n",
    "levels": "log-level = warn\nlog-level = error\nlog-level = info\n", "empty": "",
    "nul": "max-batch = 3\nlisten = a\0b\n", "only_eq": "=\n = \n",
}
for k, v in configs.items():
    write("config", k, v)

keys = {
    "four_roles": "# id role sha256 scopes\nadmin-1 admin %s *\nprod.a producer %s topic:orders.*,topic:audit\n"
                  "cons_b consumer %s group:billing-*,topic:orders.*\nmon monitor %s *\n" % (SHA, SHA, SHA, SHA),
    "crlf_tabs": "k1\tadmin\t%s\t*\r\n\n   # comment\r\n" % SHA,
    "empty": "", "comments_only": "# nothing\n\n#\n",
    "bad_fields": "k1 admin %s\n" % SHA, "bad_role": "k1 root %s *\n" % SHA,
    "bad_hash_upper": "k1 admin %s *\n" % SHA.upper(), "bad_hash_short": "k1 admin abcd *\n",
    "bad_dup": "k1 admin %s *\nk1 monitor %s *\n" % (SHA, SHA),
    "bad_scope": "k1 admin %s queue:x\n" % SHA, "bad_scope_comma": "k1 admin %s topic:a,\n" % SHA,
    "bad_glob": "k1 admin %s topic:a/b\n" % SHA, "bad_id": "k/1 admin %s *\n" % SHA,
    "bad_ctrl": "k1 admin %s *\x01\n" % SHA, "long_id": "%s admin %s *\n" % ("i" * 65, SHA),
    "star_globs": "k1 consumer %s topic:*,group:**,topic:a*b*c\n" % SHA,
}
for k, v in keys.items():
    write("keys", k, v)
