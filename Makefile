# MIC - build, run and test.
#
#   make          build build/micd, build/mic, build/mic-events-replay and build/mic-relay (optimised)
#   make run      install what micd needs (RUN_DEBS) if missing, build micd and mic, start micd in
#                 the foreground on 127.0.0.1:8080 with its store in ./var; PORT=9090 changes the
#                 port, LISTEN=HOST:PORT the whole address, DATA=DIR the store directory
#   make test     install what is missing (RUN_DEBS, TEST_DEBS, PEER_DEBS), build with ASan+UBSan,
#                 run every test, each fuzz target for a few seconds and the peer benchmark at
#                 tiny sizes (SMOKE=1)
#   make bench    MIC's own benchmarks: publish (against Redis Streams), claims, ordered, range
#   make bench-pages  pages written and fdatasyncs per commit for W3 and W4 (strace)
#   make bench-peers  MIC and Redis, PostgreSQL, NATS, beanstalkd side by side -> bench/RESULTS.md
#                 (RUNS=N runs per cell, default 3; BIG=1 adds the 10M backlog)
#   make bench-hostile  publish/claim p99 with 2,000 idle, 300 slow connections and a malformed
#                 flood at once (RUNS=N runs, default 3) -> bench/RESULTS.md
#   make bench-workerloop  W3 drained by bench/workers' raw driver, by libmic and by its worker loop
#   make bench-sink   micd's NATS sink: publish to JetStream events/s, unordered and ordered, vs JetStream alone
#   make bench-backup  GET /v1/backup's MiB/s alone and under publishes, the publishes' rate and p99
#                 with and without a backup running, the copy restored
#   make bench-replay-select  publish and claim p99 while 2M-event replay selections run, vs none
#   make bench-relay  the outbox: rows/s through 1, 2, 4 mic-relays vs a marking-only poller, relay lag
#   make fuzz     each libFuzzer target of tests/fuzz/ for FUZZ_SECONDS (default 60); make check
#                 runs them FUZZ_CHECK_SECONDS (default 8) each
#   make deps     install the Debian packages micd and the tools need (RUN_DEBS; apt-get update
#                 only when something is missing); make test-deps those only the tests need
#   make fault-crash  T1 of tests/fault: 20 SIGKILL/restart cycles under load, then the checker
#   make fault-power  T2/T3: 49 power cuts rebuilt from the recorded syncs (24 at journal
#                 boundaries), I/O error scenarios
#   make fault-full   a full disk at each journal boundary (6 scenarios, tests/fault/fullcut.c)
#   make soak     the long profile of the reliability suite (tests/fault/README.md): 500 crash
#                 cycles (soak-crash), 640 power cuts (soak-power), 102 full-disk scenarios
#                 (soak-full), the fuzz targets (fuzz)

CC      ?= cc
PKGS    := libmicrohttpd lmdb jansson yajl openssl libnats
# libpq: tests/kit/pgfx.c runs a real PostgreSQL; libpq-dev and postgresql come
# with PEER_DEBS, which make test installs (peer-deps) before make check.
TPKGS   := cmocka libnats libpq
RPKGS   := jansson libcrypto libnats
# Debian packages.  RUN_DEBS: what building micd, mic, mic-events-replay,
# mic-relay and libmic needs (make run, make deps), with curl and jq for the
# README's tour.  TEST_DEBS: what only the tests need (make test, make
# test-deps): cmocka, nats-server, ClickHouse, Prometheus's promtool,
# libfaketime, clang's libFuzzer, the full-disk test's mkfs and mount.
RUN_DEBS  := build-essential pkg-config libmicrohttpd-dev liblmdb-dev lmdb-utils libjansson-dev \
             libyajl-dev libssl-dev libcurl4-openssl-dev libnats-dev libpq-dev openssl curl jq
TEST_DEBS := libcmocka-dev e2fsprogs mount util-linux procps nats-server clickhouse-server \
             clickhouse-client prometheus python3 faketime clang libclang-rt-14-dev
DEBS    := $(RUN_DEBS) $(TEST_DEBS)
WARN    := -std=c11 -Wall -Wextra -Werror -Wformat=2 -g
SAN     := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
PKGCFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
# LMDB is linked from a copy of Debian's liblmdb.a whose pwrite, writev and
# lseek calls go to the store journal's capture functions (server/store/journal.h):
# everything LMDB writes to data.mdb is also copied into the journal.  The
# copy, $(LMDB_A), is made by deps/lmdb/lmdb.mk (included below) and its
# README.md says why.
PKGLIBS   = $(LMDB_A) $(shell pkg-config --libs $(filter-out lmdb,$(PKGS)) 2>/dev/null) -lpthread -lm
TCFLAGS   = $(shell pkg-config --cflags $(TPKGS) 2>/dev/null)
TLIBS     = $(shell pkg-config --libs $(TPKGS) 2>/dev/null)
RCFLAGS   = $(shell pkg-config --cflags $(RPKGS) 2>/dev/null)
RLIBS     = $(shell pkg-config --libs $(RPKGS) 2>/dev/null)

# The peers of bench/peers.py (make bench-peers; make test runs its smoke mode):
# bench/peers/NAME.c on the skeleton bench/peers/driver.c is built as
# build/peer_NAME, the name peers.py runs.
PEER_SKEL    := bench/peers/driver.c bench/peerlib.c
PEER_DRIVERS := $(patsubst bench/peers/%.c,build/peer_%,$(filter-out $(PEER_SKEL),$(wildcard bench/peers/*.c)))
# tests/system/test_deploy.c: systemd-analyze verify of deploy/micd.service, and the
# compose and Grafana provisioning YAML read with python3-yaml.
DEPLOY_TEST_DEBS := systemd python3-yaml
PEER_DEBS := redis-server libhiredis-dev postgresql libpq-dev nats-server libnats-dev beanstalkd \
             gnuplot-nox python3 curl $(DEPLOY_TEST_DEBS)

# server/'s layers, from the bottom (DESIGN section 8): each folder is an
# archive, build/{rel,san}/libmicd-LAYER.a; micd links them from the top
# down, and a unit test of a layer only its own and the lower ones', so a
# call upward does not link (tests/check-layers.sh checks the rest).
LAYERS  := core store engine ops http relay
SRV_SRC := $(foreach l,$(LAYERS),$(wildcard server/$(l)/*.c))
SRV_HDR := $(wildcard server/*/*.h)
REL_OBJ := $(SRV_SRC:server/%.c=build/rel/%.o)
SAN_OBJ := $(SRV_SRC:server/%.c=build/san/%.o)
define layer_rules
build/rel/libmicd-$(1).a: $$(patsubst server/%.c,build/rel/%.o,$$(wildcard server/$(1)/*.c))
	rm -f $$@ && ar rcs $$@ $$^
build/san/libmicd-$(1).a: $$(patsubst server/%.c,build/san/%.o,$$(wildcard server/$(1)/*.c))
	rm -f $$@ && ar rcs $$@ $$^
endef
$(foreach l,$(LAYERS),$(eval $(call layer_rules,$(l))))
# The archives of layer L and below, top first (the order the linker needs).
layers_upto = $(foreach l,$(call reverse,$(wordlist 1,$(call layer_index,$(2)),$(LAYERS))),build/$(1)/libmicd-$(l).a)
layer_index = $(words $(call upto_list,$(1),$(LAYERS)))
upto_list = $(if $(filter $(1),$(firstword $(2))),$(firstword $(2)),$(firstword $(2)) $(call upto_list,$(1),$(wordlist 2,$(words $(2)),$(2))))
reverse = $(if $(1),$(call reverse,$(wordlist 2,$(words $(1)),$(1))) $(firstword $(1)))
# LMDB's copy calls the journal's capture functions (store layer): a test
# links the archives and it as one group, so either may pull the other.
link_group = -Wl,--start-group $(1) $(LMDB_A) -Wl,--end-group
REL_ARCH := $(call layers_upto,rel,relay)
SAN_ARCH := $(call layers_upto,san,relay)
# The tests (tests/README.md): unit tests per layer, system tests against a
# running micd, the fixtures of tests/kit/ as one archive.
UNIT_LAYERS  := core store engine http
UNIT_TESTS   := $(foreach l,$(UNIT_LAYERS),$(patsubst tests/%.c,build/san/%,$(wildcard tests/unit/$(l)/test_*.c)))
SYSTEM_TESTS := $(patsubst tests/%.c,build/san/%,$(wildcard tests/system/test_*.c))
UNIT    := $(UNIT_TESTS) $(SYSTEM_TESTS) build/san/fault/test_crashcheck
KIT_HDR := $(wildcard tests/kit/*.h)
KIT_OBJ := $(patsubst tests/%.c,build/san/%.o,$(wildcard tests/kit/*.c))
KIT     := build/san/libkit.a

.PHONY: all examples install check-install run test check deps test-deps fault-crash soak-crash fuzz fuzz-seeds bench bench-claims bench-ordered bench-range bench-replay-select bench-hostile bench-pages bench-peers bench-smoke bench-workerloop bench-relay bench-sink bench-backup peer-deps ui-deps clean
all: build/micd build/mic-events-replay build/mic build/mic-relay build/libmic.a build/libmic.so

# $(call apt_install,PACKAGES): apt-get install those not installed yet.
apt_install = @missing=""; for p in $(1); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    --no-install-recommends $$missing >/dev/null; \
	fi
deps:
	$(call apt_install,$(RUN_DEBS))
test-deps:
	$(call apt_install,$(TEST_DEBS))

build/rel/%.o: server/%.c $(SRV_HDR) | build/rel
	@mkdir -p $(dir $@)
	$(CC) $(WARN) -O2 $(PKGCFLAGS) -Iserver -c $< -o $@
build/san/%.o: server/%.c $(SRV_HDR) | build/san
	@mkdir -p $(dir $@)
	$(CC) $(WARN) -O1 $(SAN) $(PKGCFLAGS) -Iserver -c $< -o $@
build/rel build/san:
	mkdir -p $@
include deps/lmdb/lmdb.mk

build/micd: build/rel/main.o $(REL_ARCH) $(LMDB_A)
	$(CC) $(WARN) -O2 build/rel/main.o $(REL_ARCH) -o $@ $(PKGLIBS)
build/san/micd: build/san/main.o $(SAN_ARCH) $(LMDB_A)
	$(CC) $(WARN) $(SAN) build/san/main.o $(SAN_ARCH) -o $@ $(PKGLIBS)

# The admin page (GET /ui; server/http/ui/README.md): server/http/ui/embed.c turns
# its files into build/ui_files.h, which server/http/ui.c includes, so every
# build of micd (release, sanitizers, fuzz) carries them.
UI_FILES := server/http/ui/index.html server/http/ui/app.js server/http/ui/app.css
build/ui-embed: server/http/ui/embed.c | build/rel
	$(CC) $(WARN) -O2 $< -o $@
build/ui_files.h: build/ui-embed $(UI_FILES)
	build/ui-embed $(UI_FILES) > $@.tmp && mv $@.tmp $@
build/rel/http/ui.o build/san/http/ui.o build/fuzz/obj/http/ui.o: build/ui_files.h

build/san/kit/%.o: tests/kit/%.c $(KIT_HDR) client/mic.h $(SRV_HDR) | build/san
	@mkdir -p $(dir $@)
	$(CC) $(WARN) -O1 $(SAN) $(PKGCFLAGS) $(TCFLAGS) -Iserver -Iclient -c $< -o $@
$(KIT): $(KIT_OBJ)
	rm -f $@ && ar rcs $@ $^
# A unit test of layer L (tests/unit/L/) links the kit and the archives of
# L and below only: a call to a higher layer is an undefined symbol.
# test_oom fails allocations: micd's objects are linked with their malloc,
# calloc, realloc, free, strdup and strndup going to the test's wrappers
# (tests/unit/http/test_oom.c says how jansson's are routed there too).
OOM_WRAP := -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=free,--wrap=strdup,--wrap=strndup
define unit_rules
build/san/unit/$(1)/test_%: tests/unit/$(1)/test_%.c $(KIT) $$(call layers_upto,san,$(1)) $$(KIT_HDR) $$(LMDB_A)
	@mkdir -p $$(dir $$@)
	$$(CC) $$(WARN) -O1 $$(SAN) $$(PKGCFLAGS) $$(TCFLAGS) -Iserver -Itests/kit $$< $(KIT) $$(call link_group,$$(call layers_upto,san,$(1))) -o $$@ $$(if $$(filter %/test_oom,$$@),$$(OOM_WRAP)) $$(PKGLIBS) $$(TLIBS)
endef
$(foreach l,$(UNIT_LAYERS),$(eval $(call unit_rules,$(l))))
# System tests (tests/system/) drive a real micd through the kit's harness
# (libmic); the server's archives give what some of them read directly.
build/san/system/test_%: tests/system/test_%.c $(KIT) $(SAN_ARCH) $(KIT_HDR) $(LMDB_A) build/san/libmic.a
	@mkdir -p $(dir $@)
	$(CC) $(WARN) -O1 $(SAN) $(PKGCFLAGS) $(TCFLAGS) -Iserver -Iclient -Itests/kit $< $(KIT) $(call link_group,$(SAN_ARCH)) build/san/libmic.a -o $@ $(PKGLIBS) $(TLIBS) $(LIBMIC_LIBS)

# The fault suite (tests/fault/README.md).  T1, crash cycles: the program
# and its checker with the sanitizers, driving build/san/micd (its memory
# errors are caught too).  A cycle is 0.2-1.5 s of load plus a restart of
# about 0.2 s, so 20 cycles take about 30 s and 500 about 10 min; the
# release micd does not make it faster (the load is bounded by the
# ordered group's per-aggregate chains, not by micd's CPU).
# FAULT_MICD=build/micd runs them against the release build.
FAULT_MICD ?= build/san/micd
CRASH_SRC := tests/fault/crashloop.c tests/fault/crashcheck.c
build/san/crashloop: $(CRASH_SRC) tests/fault/crashcheck.h client/mic.h server/core/clock.h build/san/libmic.a | build/san
	$(CC) $(WARN) -O1 $(SAN) $(LIBMIC_CFLAGS) -Iclient -Iserver -Itests/fault $(CRASH_SRC) build/san/libmic.a -o $@ $(LIBMIC_LIBS)
# The checker's self-test links the checker alone.
build/san/fault/test_crashcheck: tests/fault/test_crashcheck.c tests/fault/crashcheck.c tests/fault/crashcheck.h | build/san
	@mkdir -p $(dir $@)
	$(CC) $(WARN) -O1 $(SAN) $(shell pkg-config --cflags cmocka) -Itests/fault $< tests/fault/crashcheck.c -o $@ $(shell pkg-config --libs cmocka)
fault-crash: build/san/crashloop $(FAULT_MICD)
	build/san/crashloop --micd $(FAULT_MICD) --cycles 20 --log-dir build/fault/crash
soak-crash: build/san/crashloop $(FAULT_MICD)
	build/san/crashloop --micd $(FAULT_MICD) --cycles 500 --log-dir build/fault/soak-crash

# Fuzzing (tests/fuzz/README.md): libFuzzer targets built with clang.
# micd's objects are compiled again into build/fuzz/obj with coverage for
# the fuzzer (fuzzer-no-link) and ASan+UBSan; each target links them and
# the libFuzzer runtime.  tests/fuzz/run.sh writes what it finds under
# build/fuzz/ only (the committed seeds in tests/fuzz/corpus/ are read).
FUZZ_CC       ?= clang
FUZZ_SAN      := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
# clang's -Wformat=2 also flags the vsnprintf of libmicrohttpd's logger
# callback (routes.c: the format is MHD's), which gcc accepts.
FUZZ_WARN     := $(WARN) -Wno-format-nonliteral
FUZZ_OBJ      := $(SRV_SRC:server/%.c=build/fuzz/obj/%.o)
FUZZ_TARGETS  := $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_BINS     := $(FUZZ_TARGETS:%=build/fuzz/fuzz_%)
FUZZ_SECONDS  ?= 60
FUZZ_CHECK_SECONDS ?= 8
# (named only by a pattern rule, they would be deleted as intermediates)
.SECONDARY: $(FUZZ_OBJ)
build/fuzz/obj/%.o: server/%.c $(SRV_HDR)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_WARN) -O1 -fsanitize=fuzzer-no-link $(FUZZ_SAN) $(PKGCFLAGS) -Iserver -c $< -o $@
build/fuzz/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz.h $(FUZZ_OBJ) $(LMDB_A)
	$(FUZZ_CC) $(FUZZ_WARN) -O1 -fsanitize=fuzzer $(FUZZ_SAN) $(PKGCFLAGS) -Iserver $< $(FUZZ_OBJ) -o $@ $(PKGLIBS)
fuzz: deps test-deps $(FUZZ_BINS)
	tests/fuzz/run.sh $(FUZZ_SECONDS) $(FUZZ_TARGETS)
# The seed corpora: tests/fuzz/make_seeds.py writes the hand-made ones,
# gen_records the record target's (records made by the store's encoder).
build/fuzz/gen_records: tests/fuzz/gen_records.c $(SAN_OBJ) $(LMDB_A)
	@mkdir -p build/fuzz
	$(CC) $(WARN) -O1 $(SAN) $(PKGCFLAGS) -Iserver $< $(SAN_OBJ) -o $@ $(PKGLIBS)
fuzz-seeds: build/fuzz/gen_records
	tests/fuzz/make_seeds.py
	mkdir -p tests/fuzz/corpus/record
	build/fuzz/gen_records tests/fuzz/corpus/record

# libmic (client/mic.h): the one HTTP/JSON client.  build/libmic.a and
# build/libmic.so (position-independent objects), build/san/libmic.a for
# the sanitizer builds; build/libmic.pc for pkg-config.
LIBMIC_SRC := client/libmic.c client/mic_worker.c client/mic_consumer.c
# micd's growable buffer and time formatting serve libmic too (one copy).
LIBMIC_SHARED := server/core/buf.c server/core/clock.c
LIBMIC_PKGS := libcurl jansson lmdb libcrypto
# mic.h's own types come from these: a program using libmic links them too
LIBMIC_PUBLIC := jansson lmdb
LIBMIC_CFLAGS = $(shell pkg-config --cflags $(LIBMIC_PKGS) 2>/dev/null)
LIBMIC_LIBS = $(shell pkg-config --libs $(LIBMIC_PKGS) 2>/dev/null) -lpthread
LIBMIC_REL := $(LIBMIC_SRC:client/%.c=build/rel/lib/%.o) $(LIBMIC_SHARED:server/%.c=build/rel/lib/%.o)
LIBMIC_SAN := $(LIBMIC_SRC:client/%.c=build/san/lib/%.o) $(LIBMIC_SHARED:server/%.c=build/san/lib/%.o)
LIBMIC_VERSION := 1.0.0
build/rel/lib/%.o: client/%.c client/mic.h server/core/buf.h | build/rel
	@mkdir -p build/rel/lib
	$(CC) $(WARN) -O2 -fPIC $(LIBMIC_CFLAGS) -Iserver -c $< -o $@
build/san/lib/%.o: client/%.c client/mic.h server/core/buf.h | build/san
	@mkdir -p build/san/lib
	$(CC) $(WARN) -O1 $(SAN) $(LIBMIC_CFLAGS) -Iserver -c $< -o $@
build/rel/lib/%.o: server/%.c $(SRV_HDR) | build/rel
	@mkdir -p $(dir $@)
	$(CC) $(WARN) -O2 -fPIC $(PKGCFLAGS) -Iserver -c $< -o $@
build/san/lib/%.o: server/%.c $(SRV_HDR) | build/san
	@mkdir -p $(dir $@)
	$(CC) $(WARN) -O1 $(SAN) $(PKGCFLAGS) -Iserver -c $< -o $@
build/libmic.a: $(LIBMIC_REL)
	rm -f $@ && ar rcs $@ $^
# Only mic.h's functions are exported (client/libmic.map, a version script;
# tests/check-exports.sh checks it): micd's buf.c and clock.c stay inside.
build/libmic.so: $(LIBMIC_REL) client/libmic.map
	$(CC) -shared -Wl,-soname,libmic.so.1 -Wl,--version-script=client/libmic.map \
	    $(LIBMIC_REL) -o $@ $(LIBMIC_LIBS)
build/san/libmic.a: $(LIBMIC_SAN)
	rm -f $@ && ar rcs $@ $^
build/libmic.pc: Makefile | build/rel
	printf 'prefix=%s\nlibdir=$${prefix}/lib\nincludedir=$${prefix}/include\n\nName: libmic\nDescription: C client of the MIC outbox broker\nVersion: %s\nRequires: %s\nRequires.private: %s\nLibs: -L$${libdir} -lmic\nLibs.private: -lpthread\nCflags: -I$${includedir}\n' \
	    '$(PREFIX)' '$(LIBMIC_VERSION)' '$(LIBMIC_PUBLIC)' '$(filter-out $(LIBMIC_PUBLIC),$(LIBMIC_PKGS))' > $@

# The tools link libmic (static; it carries micd's buffer and clock).
CLI_REL := build/libmic.a build/rel/http/auth.o build/rel/core/key.o build/rel/core/glob.o build/rel/core/err.o
CLI_SAN := build/san/libmic.a build/san/http/auth.o build/san/core/key.o build/san/core/glob.o build/san/core/err.o
CLI_LIBS = $(RLIBS) $(LIBMIC_LIBS)
build/mic-events-replay: client/mic-events-replay.c client/mic.h $(CLI_REL) | build/rel
	$(CC) $(WARN) -O2 $(RCFLAGS) -Iserver -Iclient $< $(filter %.o,$(CLI_REL)) build/libmic.a -o $@ $(CLI_LIBS)
build/san/mic-events-replay: client/mic-events-replay.c client/mic.h $(CLI_SAN) | build/san
	$(CC) $(WARN) -O1 $(SAN) $(RCFLAGS) -Iserver -Iclient $< $(filter %.o,$(CLI_SAN)) build/san/libmic.a -o $@ $(CLI_LIBS)

build/mic: client/mic.c client/mic.h $(CLI_REL) | build/rel
	$(CC) $(WARN) -O2 $(RCFLAGS) -Iserver -Iclient $< $(filter %.o,$(CLI_REL)) build/libmic.a -o $@ $(CLI_LIBS)
build/san/mic: client/mic.c client/mic.h $(CLI_SAN) | build/san
	$(CC) $(WARN) -O1 $(SAN) $(RCFLAGS) -Iserver -Iclient $< $(filter %.o,$(CLI_SAN)) build/san/libmic.a -o $@ $(CLI_LIBS)

# mic-relay (DESIGN section 14): libmic, libpq and libmicrohttpd (its /metrics).
RELAY_PKGS := libpq libmicrohttpd jansson
RELAY_CFLAGS = $(shell pkg-config --cflags $(RELAY_PKGS) 2>/dev/null)
RELAY_LIBS = $(shell pkg-config --libs $(RELAY_PKGS) 2>/dev/null)
build/mic-relay: client/mic-relay.c client/mic.h server/core/clock.h build/libmic.a | build/rel
	$(CC) $(WARN) -O2 $(RELAY_CFLAGS) -Iserver -Iclient $< build/libmic.a -o $@ $(RELAY_LIBS) $(LIBMIC_LIBS)
build/san/mic-relay: client/mic-relay.c client/mic.h server/core/clock.h build/san/libmic.a | build/san
	$(CC) $(WARN) -O1 $(SAN) $(RELAY_CFLAGS) -Iserver -Iclient $< build/san/libmic.a -o $@ $(RELAY_LIBS) $(LIBMIC_LIBS)

# make install PREFIX=DIR: the binaries, libmic (static and shared), its
# header and pkg-config file.
PREFIX ?= /usr/local
install: build/micd build/mic build/mic-events-replay build/mic-relay build/libmic.a build/libmic.so
	rm -f build/libmic.pc && $(MAKE) --no-print-directory build/libmic.pc PREFIX='$(PREFIX)'
	install -d '$(DESTDIR)$(PREFIX)/bin' '$(DESTDIR)$(PREFIX)/lib/pkgconfig' '$(DESTDIR)$(PREFIX)/include'
	install -m 755 build/micd build/mic build/mic-events-replay build/mic-relay '$(DESTDIR)$(PREFIX)/bin/'
	install -m 644 build/libmic.a '$(DESTDIR)$(PREFIX)/lib/'
	install -m 755 build/libmic.so '$(DESTDIR)$(PREFIX)/lib/libmic.so.$(LIBMIC_VERSION)'
	ln -sf libmic.so.$(LIBMIC_VERSION) '$(DESTDIR)$(PREFIX)/lib/libmic.so.1'
	ln -sf libmic.so.1 '$(DESTDIR)$(PREFIX)/lib/libmic.so'
	install -m 644 client/mic.h '$(DESTDIR)$(PREFIX)/include/'
	install -m 644 build/libmic.pc '$(DESTDIR)$(PREFIX)/lib/pkgconfig/'

# The bench clients: their measured requests go over their own HTTP/1.1
# (OpenSSL for https), their side requests and the workers' libmic and loop
# drivers through libmic (bench/README.md).
build/loadgen: bench/loadgen.c bench/peerlib.c bench/peerlib.h client/mic.h build/libmic.a | build/rel
	$(CC) $(WARN) -O2 -Iclient $(LIBMIC_CFLAGS) $< bench/peerlib.c build/libmic.a -o $@ -lm -lssl $(LIBMIC_LIBS)
build/workers: bench/workers.c client/mic.h build/libmic.a | build/rel
	$(CC) $(WARN) -O2 -Iclient $(LIBMIC_CFLAGS) $< build/libmic.a -o $@ -lssl $(LIBMIC_LIBS)
# The NATS sink bench's JetStream side (bench/sink.sh): libnats only.
build/sink_watch: bench/sink_watch.c | build/rel
	$(CC) $(WARN) -O2 $(shell pkg-config --cflags libnats) $< -o $@ $(shell pkg-config --libs libnats)
# The outbox relay bench's database side (bench/relay.sh): libpq only.
build/outbox_poller: bench/outbox_poller.c | build/rel
	$(CC) $(WARN) -O2 $(shell pkg-config --cflags libpq) $< -o $@ $(shell pkg-config --libs libpq) -lpthread

# examples/ (README there): small programs on libmic, built against the
# release library as a user would (make examples) and with the sanitizers
# for tests/system/test_examples.c.
EXAMPLES := $(patsubst examples/%.c,%,$(wildcard examples/*.c))
examples: $(EXAMPLES:%=build/examples/%)
# (order_service.c talks to PostgreSQL through libpq: every example links it.)
EXAMPLE_CFLAGS = $(LIBMIC_CFLAGS) $(shell pkg-config --cflags libpq 2>/dev/null)
EXAMPLE_LIBS = $(LIBMIC_LIBS) $(shell pkg-config --libs libpq 2>/dev/null)
build/examples/%: examples/%.c examples/example.h client/mic.h build/libmic.a
	@mkdir -p build/examples
	$(CC) $(WARN) -O2 -Iclient $(EXAMPLE_CFLAGS) $< build/libmic.a -o $@ $(EXAMPLE_LIBS)
build/san/examples/%: examples/%.c examples/example.h client/mic.h build/san/libmic.a
	@mkdir -p build/san/examples
	$(CC) $(WARN) -O1 $(SAN) -Iclient $(EXAMPLE_CFLAGS) $< build/san/libmic.a -o $@ $(EXAMPLE_LIBS)
build/rangeread: bench/rangeread.c client/mic.h build/libmic.a | build/rel
	$(CC) $(WARN) -O2 -Iclient $(LIBMIC_CFLAGS) $< build/libmic.a -o $@ $(LIBMIC_LIBS)
build/bench_parse: bench/bench_parse.c $(REL_OBJ) $(LMDB_A)
	$(CC) $(WARN) -O2 $(PKGCFLAGS) -Iserver $< $(REL_OBJ) -o $@ $(PKGLIBS)

# make run [PORT=8080] [LISTEN=127.0.0.1:$(PORT)] [DATA=./var]: micd in the
# foreground (Ctrl-C stops it cleanly); build/mic is built too, for the tour.
PORT   = 8080
LISTEN = 127.0.0.1:$(PORT)
DATA   = ./var
run: deps build/micd build/mic
	mkdir -p '$(DATA)'
	./build/micd --listen '$(LISTEN)' --data '$(DATA)'

# make install as a user runs it, into build/prefix: a program outside the
# tree builds against the installed mic.h and libmic.so through pkg-config
# alone, and runs.
check-install: all build/libmic.pc
	rm -rf build/prefix
	$(MAKE) --no-print-directory install PREFIX="$(CURDIR)/build/prefix" > /dev/null
	PKG_CONFIG_PATH="$(CURDIR)/build/prefix/lib/pkgconfig" sh -c \
	    '$(CC) $(WARN) examples/producer.c $$(pkg-config --cflags --libs libmic) -o build/prefix/producer'
	LD_LIBRARY_PATH="$(CURDIR)/build/prefix/lib" build/prefix/producer --help > /dev/null
	LD_LIBRARY_PATH="$(CURDIR)/build/prefix/lib" ldd build/prefix/producer | grep -q 'build/prefix/lib/libmic.so.1'
	@echo "check-install: libmic installed, found by pkg-config, linked and run"

check: check-install build/san/micd build/san/mic-events-replay build/san/mic build/san/mic-relay $(UNIT) \
       $(EXAMPLES:%=build/san/examples/%) $(EXAMPLES:%=build/examples/%) \
       build/micd build/loadgen build/workers build/rangeread $(PEER_DRIVERS) \
       build/mic-relay build/outbox_poller build/san/crashloop $(FUZZ_BINS) build/sink_watch build/mic
	tests/check-layers.sh
	deps/lmdb/check.sh $(LMDB_A)
	tests/check-links.sh
	tests/check-exports.sh build/libmic.so client/mic.h $(LIBMIC_SRC:client/%.c=build/rel/lib/%.o)
	MICD=build/san/micd MIC_REPLAY=build/san/mic-events-replay MIC_CLI=build/san/mic \
	    tests/run.sh $(UNIT)
	@# README.md's tour, run as pasted against a fresh micd (tests/readme-tour.sh)
	MICD=build/san/micd MIC_CLI=build/san/mic tests/readme-tour.sh
	@# T1 of the fault suite: 20 kill -9 cycles under load and the checker
	$(MAKE) --no-print-directory fault-crash
	@# T2 and T3: power cuts rebuilt from the recorded syncs, injected I/O errors
	$(MAKE) --no-print-directory fault-power
	@# A full disk at each boundary of the journal (switch, first record,
	@# zero-ahead, checkpoint start and end)
	$(MAKE) --no-print-directory fault-full
	@# T7: each fuzz target for FUZZ_CHECK_SECONDS (make fuzz runs them longer);
	@# a crash, leak or sanitizer report fails the build
	tests/fuzz/run.sh $(FUZZ_CHECK_SECONDS) $(FUZZ_TARGETS)
	@# the peer harness at tiny sizes (make bench-smoke), against MIC and
	@# real redis-server, postgres, nats-server and beanstalkd
	SMOKE=1 OUT=build/RESULTS-smoke.md bench/peers.py > build/bench-smoke.log 2>&1 || \
	    { cat build/bench-smoke.log; echo "bench smoke: FAILED"; exit 1; }
	@echo "bench smoke: MIC and 4 peers ran W1-W5, the scaling rows and the charts (build/RESULTS-smoke.md)"
	@# W3 at 1,000 events through each driver of build/workers (make bench-workerloop)
	SMOKE=1 OUT=build/workerloop-smoke.jsonl bench/workerloop.sh > build/workerloop-smoke.log 2>&1 || \
	    { cat build/workerloop-smoke.log; echo "workerloop smoke: FAILED"; exit 1; }
	@echo "workerloop smoke: raw, libmic and loop drivers drained W3 (build/workerloop-smoke.log)"
	@# the outbox relay bench at 2,000 rows, about 10 s (make bench-relay)
	SMOKE=1 OUT=build/relay-smoke.jsonl bench/relay.sh > build/relay-smoke.log 2>&1 || \
	    { cat build/relay-smoke.log; echo "relay smoke: FAILED"; exit 1; }
	@echo "relay smoke: pollers and mic-relays drained the outbox into micd, lag measured (build/relay-smoke.log)"
	@# the NATS sink bench at 2,000 events, about 15 s (make bench-sink)
	SMOKE=1 OUT=build/sink-smoke.jsonl bench/sink.sh > build/sink-smoke.log 2>&1 || \
	    { cat build/sink-smoke.log; echo "sink smoke: FAILED"; exit 1; }
	@echo "sink smoke: sink groups relayed to JetStream, unordered and ordered, next to JetStream alone (build/sink-smoke.log)"
	@# the backup bench at 5,000 events, about 15 s (make bench-backup)
	SMOKE=1 OUT=build/backup-smoke.jsonl bench/backup.sh > build/backup-smoke.log 2>&1 || \
	    { cat build/backup-smoke.log; echo "backup smoke: FAILED"; exit 1; }
	@echo "backup smoke: backups alone and under publishes, the copy restored (build/backup-smoke.log)"
	@# the replay selection bench at 20,000 events, about 5 s (make bench-replay-select)
	SMOKE=1 OUT=build/replaysel-smoke.jsonl bench/replaysel.sh > build/replaysel-smoke.log 2>&1 || \
	    { cat build/replaysel-smoke.log; echo "replay selection smoke: FAILED"; exit 1; }
	@echo "replay selection smoke: publishes and claims beside selections, none, a busy loop (build/replaysel-smoke.log)"

test: deps test-deps peer-deps ui-deps
	$(MAKE) check
	@# deploy/Containerfile built with podman and run (about 2 min; its base
	@# is made from Debian's archive with debootstrap when no image is there)
	$(MAKE) --no-print-directory container-test

# The admin page's browser test (tests/system/test_ui.c) needs Debian's chromium,
# node and npm (puppeteer-core, pinned by tests/ui/package-lock.json, into
# tests/ui/node_modules).  nodejs and npm come from Debian only when
# missing: a nodesource nodejs carries its own npm, which Debian's npm
# package would conflict with.
UI_DEBS := chromium
ui-deps:
	@missing=""; for p in $(UI_DEBS); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	command -v node > /dev/null || missing="$$missing nodejs"; \
	command -v npm > /dev/null || missing="$$missing npm"; \
	if [ -n "$$missing" ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	  --no-install-recommends $$missing >/dev/null; fi
	@[ tests/ui/node_modules/.package-lock.json -nt tests/ui/package-lock.json ] || \
	  (cd tests/ui && npm ci --no-audit --no-fund --loglevel=error)

BENCH_DEBS := redis-server redis-tools python3

bench-backup: deps build/micd build/mic build/loadgen
	bench/backup.sh

bench: deps build/micd build/loadgen build/workers build/rangeread build/bench_parse
	@missing=""; for p in $(BENCH_DEBS); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; fi
	bench/publish.sh
	@echo; echo "handler-side parse+validate cost (no HTTP, no store):"; ./build/bench_parse 100 2000
	@echo; bench/claims.sh
	@echo; bench/ordered.sh
	@echo; bench/range.sh

bench-claims: deps build/micd build/loadgen build/workers
	bench/claims.sh

bench-ordered: deps build/micd build/loadgen build/workers
	bench/ordered.sh

bench-range: deps build/micd build/loadgen build/rangeread
	bench/range.sh

# Publish and claim p99 while replay selections of 2M events run back to
# back, against none (bench/replaysel.sh; SMOKE=1: tiny).
bench-replay-select: deps build/micd build/loadgen build/workers
	bench/replaysel.sh

# Pages written and fdatasyncs per commit, W3 and W4 (strace on the writer).
bench-hostile: deps build/micd build/loadgen build/workers
	OUT=bench/RESULTS.md bench/hostile.py

bench-pages: deps build/micd build/loadgen build/workers
	@command -v strace > /dev/null || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq strace > /dev/null; }
	bench/pages.sh

# What libmic and its worker loop cost on W3, against the raw driver, in one
# run (bench/workerloop.sh; the table goes into bench/RESULTS.md by hand,
# section "Worker loop overhead").  SMOKE=1: tiny (make check runs it).
bench-workerloop: deps build/micd build/loadgen build/workers
	bench/workerloop.sh

# The transactional outbox end to end (bench/relay.sh; issue 15): rows/s
# from mic_outbox_append commits to events in micd with 1, 2 and 4
# mic-relays, against a SKIP LOCKED poller that only marks rows, and the
# relay lag (the table goes into bench/RESULTS.md by hand, between the
# <!-- relay --> markers, which bench/peers.py keeps).
bench-relay: build/micd build/mic-relay build/outbox_poller
	bench/relay.sh

# micd's NATS sink (bench/sink.sh; issue 17): events/s from a publish to
# micd to the message in JetStream, unordered and ordered, next to
# JetStream alone, and the latency (the table goes into bench/RESULTS.md
# by hand, between the <!-- sink --> markers, which bench/peers.py keeps).
bench-sink: build/micd build/loadgen build/sink_watch build/peer_nats
	bench/sink.sh

build/peer_%: bench/peers/%.c $(PEER_SKEL) bench/peers/driver.h bench/peerlib.h | build/rel
	$(CC) $(WARN) -O2 -Ibench $(PEER_CFLAGS_$*) $< $(PEER_SKEL) -o $@ $(PEER_LIBS_$*) -lpthread -lm
PEER_CFLAGS_redis    = $(shell pkg-config --cflags hiredis)
PEER_LIBS_redis      = $(shell pkg-config --libs hiredis)
PEER_CFLAGS_postgres = $(shell pkg-config --cflags libpq)
PEER_LIBS_postgres   = $(shell pkg-config --libs libpq)
PEER_CFLAGS_nats     = $(shell pkg-config --cflags libnats)
PEER_LIBS_nats       = $(shell pkg-config --libs libnats)

# deploy/container-test.sh: build deploy/Containerfile with podman and run
# the image (downloads from Debian's archive: not part of make check).
CONTAINER_DEBS := podman runc debootstrap
container-test: build/mic
	@missing=""; for p in $(CONTAINER_DEBS); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	  --no-install-recommends $$missing >/dev/null; fi
	deploy/container-test.sh
.PHONY: container-test

peer-deps:
	@missing=""; for p in $(PEER_DEBS); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	  --no-install-recommends $$missing >/dev/null; fi

# MIC and its peers side by side (bench/peers.py writes bench/RESULTS.md).
bench-peers: deps peer-deps build/micd build/loadgen build/workers build/rangeread
	$(MAKE) $(PEER_DRIVERS)
	bench/peers.py

# The same harness at tiny sizes, so it cannot rot.
bench-smoke: deps peer-deps build/micd build/loadgen build/workers build/rangeread
	$(MAKE) $(PEER_DRIVERS)
	SMOKE=1 bench/peers.py

clean:
	rm -rf build

# ---- Power loss and I/O errors (issue 16, T2 and T3; tests/fault/README.md) ----
# build/fault/iofault.so: the LD_PRELOAD interposer (no sanitizer: it is
# preloaded into the release build/micd).  powercut and ioerr are the
# checkers (sanitized; they start micd themselves).
FAULT_KIT := tests/fault/powerkit.c tests/fault/powerkit.h tests/fault/iofault.h
build/fault/iofault.so: tests/fault/iofault.c tests/fault/iofault.h
	@mkdir -p build/fault
	$(CC) $(WARN) -O2 -fPIC -shared $< -o $@ -ldl -lpthread
build/fault/powercut build/fault/ioerr build/fault/fullcut: build/fault/%: tests/fault/%.c $(FAULT_KIT) client/mic.h \
                                        build/san/libmic.a
	@mkdir -p build/fault
	$(CC) $(WARN) -O1 $(SAN) $(LIBMIC_CFLAGS) -Iclient -Itests/fault $< tests/fault/powerkit.c \
	    build/san/libmic.a -o $@ $(LIBMIC_LIBS)
FAULT_POWER := build/micd build/san/micd build/fault/iofault.so build/fault/powercut build/fault/ioerr
# make check: 25 random cuts and 24 at the journal's boundaries of one
# recording (--journal-size 64K) + the --durability none proof, and the I/O
# error scenarios (about 1-2 minutes).
fault-power: $(FAULT_POWER)
	build/fault/powercut --cuts 25 --boundary-cuts 24
	build/fault/ioerr
# make soak: 240 random cuts and 400 at boundaries.
soak-power: $(FAULT_POWER)
	build/fault/powercut --cuts 240 --boundary-cuts 400 --ms 6000 --none-cuts 10
# A full disk at each journal boundary (tests/fault/fullcut.c): make check
# runs each of the 6 scenarios once (about 30 s), make soak 17 times (102).
FAULT_FULL := build/micd build/san/micd build/fault/iofault.so build/fault/fullcut
fault-full: $(FAULT_FULL)
	build/fault/fullcut
soak-full: $(FAULT_FULL)
	build/fault/fullcut --rounds 17
soak: soak-crash soak-power soak-full fuzz
.PHONY: fault-power soak-power fault-full soak-full soak
