# mpa-xdp — see README.md. Every target works on a fresh Debian 12 machine as root.
SHELL := /bin/bash
CARGO ?= cargo
FUZZ_SECONDS ?= 30
FUZZ_TARGETS := startup decoder locator ddp flow sender control frame

# Debian packages: to build (clang, llvm, libelf-dev, zlib1g-dev, m4, pkg-config) and to run
# the namespace tests and tools (iproute2, ethtool, nftables, bpftool, tcpdump, tshark), to check
# the install tree (systemd for systemd-analyze, man-db for man), and the
# font the bench's plots are drawn with (fonts-dejavu-core), and python3 for tools/dev/.
DEB_PACKAGES := clang llvm libelf-dev zlib1g-dev m4 pkg-config iproute2 ethtool nftables \
	bpftool tcpdump tshark fonts-dejavu-core python3 systemd man-db

.PHONY: all deps build check test demo compare hostile fuzz bench bench-quick microbench header soak clean \
	install install-c-library deb check-install

all: build

deps:
	@missing=""; for p in $(DEB_PACKAGES); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "deps: installing$$missing"; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing; \
	else echo "deps: all Debian packages present"; fi

# The cargo profile `make build`, `make install` and `make deb` use. `make test` checks the
# install tree with BUILD_PROFILE=test, the binaries its tests ran (the same sources; built as
# the workspace's binaries and examples, the set the tests build, so nothing builds twice).
BUILD_PROFILE ?= release
PROFILE_DIR := target/$(if $(filter dev test,$(BUILD_PROFILE)),debug,$(if $(filter bench,$(BUILD_PROFILE)),release,$(BUILD_PROFILE)))
# The examples too: `mpa-bench lat --pingpong --modes rust-app` runs one.
build:
	$(CARGO) build --workspace --profile $(BUILD_PROFILE) --lib --bins --examples

# The demo: builds, makes a namespace bed, runs the datapath and the hand-over listener in b
# and `mpa-peer connect` in a (256 MiB as 4 KiB ULPDUs, markers and CRC), checks the digest.
# LOSS=5 puts a lossy bridge between them; MTU=9000 uses jumbo frames (AF_XDP multi-buffer);
# XDP_MODE=generic attaches XDP in skb mode (for drivers without native XDP).
LOSS ?= 0
MTU ?= 1500
XDP_MODE ?= native
demo: deps build
	./target/release/mpa-bench demo --loss $(LOSS) --mtu $(MTU) --xdp-mode $(XDP_MODE)

# Goodput and CPU per octet, datapath vs the blocking kernel-TCP Responder, same bed, same run.
compare: deps build
	./target/release/mpa-bench bw --mtu 1500
	./target/release/mpa-bench bw --mtu 9000

# Hostile-input classes against the live datapath, each with its expected outcome (dropped and
# counted, challenge ACK, Terminate with the exact RFC code, connection closed), beside a
# bystander connection that must finish octet-exact. Last line:
# `hostile: N/N classes as specified; bystander octet-exact`. ONLY=name runs a subset.
ONLY ?=
hostile: deps build
	./target/release/mpa-bench hostile $(if $(ONLY),--only $(ONLY))

# The quick tier for every change: fmt check, clippy and rustdoc with warnings as errors, the
# layout rules, and every test that needs no bed (unit, property and in-memory tests; the whole-system tests
# skip quietly, as root too). No root, no namespaces; `make test` is the whole suite.
check:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --workspace --no-deps --quiet
	python3 tools/dev/check-layout
	python3 tools/dev/check-citations
	MPA_QUICK=1 $(CARGO) test --workspace

# fmt check, clippy and rustdoc with warnings as errors, the layout rules
# (tools/dev/check-layout: no import circle, the sans-I/O stack without AF_XDP or libbpf, no
# development vocabulary), the citations (tools/dev/check-citations: every cited docs page,
# heading, link and path exists; the dependency table is cargo's), then every test. MPA_REQUIRE_PRIVILEGED=1 makes tests that need root
# and namespaces fail instead of skipping.
test:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --workspace --no-deps --quiet
	python3 tools/dev/check-layout
	python3 tools/dev/check-citations
	MPA_REQUIRE_PRIVILEGED=1 $(CARGO) test --workspace --no-fail-fast
	$(MAKE) check-install BUILD_PROFILE=test

# Each fuzz target for FUZZ_SECONDS. Uses the nightly toolchain when present, else stable
# with RUSTC_BOOTSTRAP and no sanitizer.
fuzz:
	@command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz --locked
	@if rustup toolchain list 2>/dev/null | grep -q nightly; then tc="+nightly"; san=""; \
	else tc=""; san="-s none"; export RUSTC_BOOTSTRAP=1; fi; \
	cd fuzz && for t in $(FUZZ_TARGETS); do \
		echo "fuzz: $$t for $(FUZZ_SECONDS)s"; \
		$(CARGO) $$tc fuzz run $$san $$t -- -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048 || exit 1; \
	done

# The standard benchmark set (mpa-bench suite, a few minutes): pipeline, latency, goodput with
# and without loss, connection setup, datapath vs kernel TCP side by side. Writes
# $(BENCH_OUT)/{summary.md,results.json,*.png,*.hgrm}, and regenerates docs/performance.md and
# README.md's headline figures from the run.
BENCH_OUT ?= bench/results/latest
bench: deps build
	./target/release/mpa-bench suite --out $(BENCH_OUT) --performance-page docs/performance.md \
		--readme README.md

# The same set, small: checks the harness end to end in a minute, numbers not to quote.
bench-quick: deps build
	./target/release/mpa-bench suite --quick --out $(BENCH_OUT)

# One datapath for SOAK_MINUTES under waves of connections (5 % loss), every octet checked,
# memory and descriptors bounded after the warm-up.
SOAK_MINUTES ?= 10
soak: deps build
	./target/release/mpa-bench soak --minutes $(SOAK_MINUTES) --loss 5

# Criterion micro-benchmarks (CRC kernels, wire views, locator).
# libmpaxdp's header written again from capi/src (make check fails while it is stale).
header:
	MPAXDP_WRITE_HEADER=1 $(CARGO) test -p mpa-capi --test header

microbench:
	$(CARGO) bench -p mpa
	$(CARGO) bench -p mpa-stack

# Installs the programs, systemd units, sample configurations (kept when present), man pages,
# shell completions and licences under $(DESTDIR)$(PREFIX) (docs/operations.md).
PREFIX ?= /usr/local
DESTDIR ?=
BINDIR ?= $(PREFIX)/bin
SYSCONFDIR ?= $(if $(filter /usr,$(PREFIX)),/etc,$(PREFIX)/etc)
UNITDIR ?= $(if $(filter /usr,$(PREFIX)),/usr/lib/systemd/system,$(PREFIX)/lib/systemd/system)
MANDIR ?= $(PREFIX)/share/man
DATADIR ?= $(PREFIX)/share
DOCDIR ?= $(DATADIR)/doc/mpa-xdp
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
# libmpaxdp's version; its soname carries the major (capi/build.rs).
C_LIB_VERSION := 0.1.0
PROGRAMS := mpa-datapath mpa-control mpa-peer mpa-bench
DAEMONS := mpa-datapath mpa-control
install: build
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(UNITDIR) $(DESTDIR)$(SYSCONFDIR)/mpa-xdp \
		$(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(DOCDIR) \
		$(DESTDIR)$(DATADIR)/bash-completion/completions \
		$(DESTDIR)$(DATADIR)/zsh/vendor-completions $(DESTDIR)$(DATADIR)/fish/vendor_completions.d
	install -m 755 $(addprefix $(PROFILE_DIR)/,$(PROGRAMS)) $(DESTDIR)$(BINDIR)/
	for u in packaging/systemd/*.service.in; do \
		sed -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' $$u \
			> $(DESTDIR)$(UNITDIR)/$$(basename $$u .in) && chmod 644 $(DESTDIR)$(UNITDIR)/$$(basename $$u .in); \
	done
	for c in packaging/config/*.toml; do \
		t=$(DESTDIR)$(SYSCONFDIR)/mpa-xdp/$$(basename $$c); \
		if [ -e $$t ]; then echo "install: $$t kept"; else install -m 644 $$c $$t; fi; \
	done
	set -e; tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; \
	for p in $(PROGRAMS); do \
		sec=1; case " $(DAEMONS) " in *" $$p "*) sec=8;; esac; \
		$(PROFILE_DIR)/$$p --generate man $(DESTDIR)$(MANDIR)/man$$sec; \
		$(PROFILE_DIR)/$$p --generate bash $$tmp; \
		install -m 644 $$tmp/$$p.bash $(DESTDIR)$(DATADIR)/bash-completion/completions/$$p; \
		$(PROFILE_DIR)/$$p --generate zsh $(DESTDIR)$(DATADIR)/zsh/vendor-completions; \
		$(PROFILE_DIR)/$$p --generate fish $(DESTDIR)$(DATADIR)/fish/vendor_completions.d; \
	done
	gzip -9nf $(DESTDIR)$(MANDIR)/man1/mpa-*.1 $(DESTDIR)$(MANDIR)/man8/mpa-*.8
	install -m 644 README.md LICENSE-MIT LICENSE-APACHE packaging/copyright $(DESTDIR)$(DOCDIR)/
	$(MAKE) --no-print-directory install-c-library

# libmpaxdp alone as built in $(PROFILE_DIR) (part of install; the tests of the C programs
# build them against a tree it makes): both libraries, the header, mpa-xdp.pc and the C
# examples' sources.
install-c-library:
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(PKGCONFIGDIR) \
		$(DESTDIR)$(DOCDIR)/examples/c
	install -m 644 examples/c/*.c examples/c/*.h $(DESTDIR)$(DOCDIR)/examples/c/
	install -m 644 $(PROFILE_DIR)/libmpaxdp.so $(DESTDIR)$(LIBDIR)/libmpaxdp.so.$(C_LIB_VERSION)
	ln -sf libmpaxdp.so.$(C_LIB_VERSION) $(DESTDIR)$(LIBDIR)/libmpaxdp.so.0
	ln -sf libmpaxdp.so.0 $(DESTDIR)$(LIBDIR)/libmpaxdp.so
	install -m 644 $(PROFILE_DIR)/libmpaxdp.a $(DESTDIR)$(LIBDIR)/
	install -m 644 capi/include/mpaxdp.h $(DESTDIR)$(INCLUDEDIR)/
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' \
		-e 's|@INCLUDEDIR@|$(INCLUDEDIR)|g' -e 's|@VERSION@|$(C_LIB_VERSION)|g' \
		packaging/mpa-xdp.pc.in > $(DESTDIR)$(PKGCONFIGDIR)/mpa-xdp.pc

# A Debian package of the same tree (cargo-deb; `cargo install cargo-deb` once), in
# target/debian/.
DEB_ROOT := target/deb-root
deb: build
	@command -v cargo-deb >/dev/null || $(CARGO) install cargo-deb --locked
	rm -rf $(DEB_ROOT)
	$(MAKE) install DESTDIR=$(CURDIR)/$(DEB_ROOT) PREFIX=/usr
	$(CARGO) deb -p mpa-datapath --no-build --no-strip

# The install tree and the package checked: every file there, units verified by
# systemd-analyze, every man page rendered by man, the package listing equal to the tree.
check-install: build
	python3 tools/dev/check-install

clean:
	$(CARGO) clean
