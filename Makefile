# PGXS build of the outbox extension (C++17). `make && make install` builds and
# installs outbox.so, outbox.control and the install/upgrade scripts.
# `make installcheck` runs the pg_regress and isolation suites, each against a
# throwaway server of its own (test/lib/private_server.sh; as root it runs as
# the `postgres` OS user); `make installcheck OUTBOX_SERVER=existing` runs them
# against the server PGHOST/PGPORT name instead. The other targets
# (test-fast, test, test-tap) run test/run_all.sh's suites: see test/README.md.

EXTENSION = outbox
MODULE_big = outbox
# outbox--0.1.0--0.2.0.sql, as released, stays in the tree but is not
# installed: 0.1.0 updates straight to the current version
# (outbox--0.1.0--0.3.0.sql), whose check keeps planted code from running as
# the superuser who updates.
DATA = $(filter-out sql/outbox--0.1.0--0.2.0.sql,$(wildcard sql/outbox--*.sql)) outbox--0.1.0.control

# One source list, derived from the folders (src/README.md): src/ and its
# folders emit/, shmem/, catalog/, hooks/ and publisher/ use PostgreSQL;
# src/core/ and src/sinks/ never include a PostgreSQL header (CMake builds
# them alone for the unit tests).
PG_DIRS = src src/emit src/shmem src/catalog src/hooks src/publisher
FREE_DIRS = src/core src/sinks
PG_SRCS = $(sort $(wildcard $(addsuffix /*.cpp,$(PG_DIRS))))
FREE_SRCS = $(sort $(wildcard $(addsuffix /*.cpp,$(FREE_DIRS))))

# The optional sinks (AMQP for RabbitMQ, NATS, MQTT, HTTP webhooks) are
# built when pkg-config finds their client libraries (librabbitmq-dev,
# libnats-dev, libmosquitto-dev, libcurl4-openssl-dev); without one, its
# src/sinks/<kind>_*.cpp are left out and create_sink() of that kind says the
# build lacks it. OUTBOX_SINKS=all makes a missing library an error (CI and
# the Debian package). Each entry is kind:pkg-config module.
OPTIONAL_SINKS = amqp:librabbitmq nats:libnats mqtt:libmosquitto http:libcurl
sink_kind = $(word 1,$(subst :, ,$(1)))
sink_module = $(word 2,$(subst :, ,$(1)))
FOUND_SINKS := $(foreach s,$(OPTIONAL_SINKS),$(if $(shell pkg-config --exists $(call sink_module,$(s)) && echo yes),$(s)))
MISSING_SINKS := $(filter-out $(FOUND_SINKS),$(OPTIONAL_SINKS))
ifeq ($(OUTBOX_SINKS),all)
ifneq ($(MISSING_SINKS),)
$(error OUTBOX_SINKS=all: pkg-config finds no $(foreach s,$(MISSING_SINKS),$(call sink_module,$(s))))
endif
endif
SINK_DEFINES = $(foreach s,$(FOUND_SINKS),-DOUTBOX_WITH_$(shell echo $(call sink_kind,$(s)) | tr a-z A-Z))
SINK_LIBS = $(if $(FOUND_SINKS),$(shell pkg-config --libs $(foreach s,$(FOUND_SINKS),$(call sink_module,$(s)))))
# The HTTP sink signs webhooks with HMAC-SHA256 from OpenSSL's libcrypto
# (which libcurl's OpenSSL flavour loads anyway).
SINK_LIBS += $(if $(filter http:%,$(FOUND_SINKS)),$(shell pkg-config --libs libcrypto))
FREE_SRCS := $(filter-out $(foreach s,$(MISSING_SINKS),src/sinks/$(call sink_kind,$(s))_%),$(FREE_SRCS))
OBJS = $(PG_SRCS:.cpp=.o) $(FREE_SRCS:.cpp=.o)

REGRESS = setup emit tracing sinks sink_kinds routes controls stats partitions privileges emit_runs_only_built_in_code emit_writes_like_insert extension writer_role
REGRESS_OPTS = --inputdir=. --outputdir=test/results
ISOLATION = maintain_never_blocks_emit concurrent_claims_never_overlap emit_follows_concurrent_ddl maintain_keeps_pending_events_at_any_isolation \
            update_waits_for_a_publishers_transaction
ISOLATION_OPTS = --inputdir=test/isolation --outputdir=test/results/isolation

PG_CONFIG ?= pg_config

# Headers are included by their path under src/ ("core/dispatch.hpp").
PG_CPPFLAGS = -I$(srcdir)/src $(SINK_DEFINES)
# -Wno-cast-function-type: from 16 on, PGXS passes -Wcast-function-type, and
# nodeFuncs.h's walker casts from `bool (*)()`, which C calls unprototyped and
# C++ calls a function of no arguments.
PG_CXXFLAGS = -std=c++17 -Wall -Wextra -Wno-unused-parameter \
              -Wno-missing-field-initializers -Wno-register -Wno-cast-function-type
ifeq ($(WERROR),1)
PG_CXXFLAGS += -Werror
endif
# Debian's pg_buildext hands the package's compiler flags (dpkg-buildflags:
# the hardening options, -O0 under DEB_BUILD_OPTIONS=noopt) to PGXS as COPT,
# which PGXS adds to the C flags only: the C++ sources get them too (less
# the one C-only warning option newer dpkg versions add).
ifdef COPT
PG_CXXFLAGS += $(filter-out -Werror=implicit-function-declaration,$(COPT))
endif
SHLIB_LINK = -lrdkafka -lhiredis $(SINK_LIBS) -lstdc++

# Track header dependencies in every build (.deps/): a header change, such as
# a new member in a class another file allocates, must rebuild every file
# that includes it, or the objects disagree about the layout. PGXS names each
# dependency file after its source's file name alone: file names are unique
# across src/'s folders.
override autodepend = yes

# No LLVM bitcode: the JIT never inlines our functions, and this keeps clang
# out of the build requirements.
override with_llvm = no

PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

EXTRA_CLEAN = test/results build

# PGXS's commands read `echo "+++ ... +++" && pg_regress ...`: the server
# wrapper goes in front of pg_regress (or of the whole command, should a
# version lack the echo).
PRIVATE_SERVER = bash test/lib/private_server.sh
with_private_server = $(if $(findstring && ,$(1)),$(subst && ,&& $(PRIVATE_SERVER) ,$(1)),$(PRIVATE_SERVER) $(1))
ifneq ($(OUTBOX_SERVER),existing)
pg_regress_installcheck := $(call with_private_server,$(pg_regress_installcheck))
pg_isolation_regress_installcheck := $(call with_private_server,$(pg_isolation_regress_installcheck))
endif

# The test tiers (test/README.md). Each installs what is missing, builds and
# ends with "N passed, N failed"; they need root (apt-get, make install).
.PHONY: test test-fast test-tap
test-fast: # minutes: format, unit, regression, isolation
	OUTBOX_SUITES="format unit regression isolation" bash test/run_all.sh
test-tap: # the TAP suites on this machine's PostgreSQL
	OUTBOX_SUITES="TAP" bash test/run_all.sh
test: # everything, the other majors in chroots included (what CI runs)
	bash test/run_all.sh
