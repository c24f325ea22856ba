# deps/lmdb/lmdb.mk - the copy of Debian's liblmdb.a that micd and the
# tests link, build/liblmdb-journal.a: LMDB's pwrite, writev and lseek
# calls go to the store journal's capture functions (README.md beside this
# file).  Included by the top Makefile; deps/lmdb/check.sh (make check)
# checks the copy.
#
# The copy is made again when Debian's liblmdb.a changes.  Its date is not
# enough to tell: dpkg gives a file the date it has in the package, older
# than a copy made before the upgrade.  So the copy depends on
# build/liblmdb.a.id, the path and SHA-256 of Debian's file, which is
# rewritten (and so newer) only when they change.
LMDB_DEB_A := $(shell pkg-config --variable=libdir lmdb 2>/dev/null)/liblmdb.a
LMDB_A     := build/liblmdb-journal.a
LMDB_ID    := build/liblmdb.a.id
$(LMDB_ID): lmdb-id-always | build/rel
	@[ -f '$(LMDB_DEB_A)' ] || { echo "$(LMDB_DEB_A): no such file (make deps installs liblmdb-dev)"; exit 1; }
	@id="$(LMDB_DEB_A) $$(sha256sum < '$(LMDB_DEB_A)' | cut -d' ' -f1)"; \
	    [ "$$id" = "$$(cat $@ 2>/dev/null)" ] || echo "$$id" > $@
$(LMDB_A): $(LMDB_ID) deps/lmdb/copy.sh | build/rel
	deps/lmdb/copy.sh '$(LMDB_DEB_A)' $@
.PHONY: lmdb-id-always
lmdb-id-always:
